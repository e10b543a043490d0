//! Names precompiled (ReadyToRun) code in file-mapped managed assemblies, through the `r2r` crate.
//!
//! perf with a perf map names JIT code only: framework code (System.Private.CoreLib, ASP.NET Core,
//! System.Text.Json …) runs precompiled from the file-mapped `*.dll`, which is neither in the map
//! nor an ELF file. A sample's (mapping, pgoff) gives a file offset; the image does the rest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
pub use r2r::MethodInfo;

/// Resolves (assembly file, file offset) to a method name; caches parsed images (and failures,
/// so a bad file is read once and reported once).
#[derive(Default)]
pub struct R2rResolver {
    images: HashMap<PathBuf, Result<r2r::R2rImage, String>>,
    modules: Arc<r2r::ModuleCache>,
}

impl R2rResolver {
    pub fn new() -> Self {
        R2rResolver::default()
    }

    /// The method whose code contains `file_offset` of the PE file at `path`, if known.
    pub fn name(&mut self, path: &Path, file_offset: u64) -> Option<String> {
        self.method(path, file_offset).ok().flatten().map(|m| m.name.to_string())
    }

    /// The method (entry RVA, code length, name) at `file_offset`; an error names the file and
    /// what is wrong with it (unreadable, not ReadyToRun, malformed at a byte offset).
    pub fn method(&mut self, path: &Path, file_offset: u64) -> Result<Option<MethodInfo>> {
        let image = self.image(path)?;
        Ok(image.method_at_file_offset(file_offset))
    }

    /// The parsed image at `path` (parsed once).
    pub fn image(&mut self, path: &Path) -> Result<&r2r::R2rImage> {
        if !self.images.contains_key(path) {
            let loaded = match r2r::R2rImage::open(path, self.modules.clone()) {
                Ok(Ok(image)) => Ok(image),
                Ok(Err(e)) => Err(format!("{}: {e}", path.display())),
                Err(e) => Err(format!("cannot read {}: {e}", path.display())),
            };
            self.images.insert(path.to_path_buf(), loaded);
        }
        match self.images.get(path).context("image cache")? {
            Ok(image) => Ok(image),
            Err(e) => Err(anyhow!("{e}")),
        }
    }

    /// Images that could not be used, with the reason (for the run's warnings).
    pub fn failures(&self) -> Vec<String> {
        let mut v: Vec<String> = self.images.values().filter_map(|r| r.as_ref().err().cloned()).collect();
        v.sort();
        v
    }

    /// How many images were parsed successfully.
    pub fn images_loaded(&self) -> usize {
        self.images.values().filter(|r| r.is_ok()).count()
    }
}
