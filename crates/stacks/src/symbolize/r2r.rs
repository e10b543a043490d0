//! Names precompiled (ReadyToRun) code in file-mapped managed assemblies, through the `r2r` crate.
//!
//! perf with a perf map names JIT code only: framework code (System.Private.CoreLib, ASP.NET Core,
//! System.Text.Json …) runs precompiled from the file-mapped `*.dll`, which is neither in the map
//! nor an ELF file. A sample's (mapping, pgoff) gives a file offset; the image does the rest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Result, anyhow};
pub use r2r::MethodInfo;

/// A parsed image, or why the file could not be used.
type Parsed = Arc<Result<r2r::R2rImage, String>>;

/// A file as the image cache knows it: path, size, modification time (a rebuilt assembly is
/// parsed anew).
type FileKey = (PathBuf, u64, Option<std::time::SystemTime>);
type ImageCache = Mutex<HashMap<FileKey, Arc<OnceLock<Parsed>>>>;

/// Images parsed in this process, by file. Each is parsed once even when a prefetch thread and a decode ask at once:
/// the second waits on the first's `OnceLock`. Images are file mappings, cheap to keep.
fn shared_images() -> &'static ImageCache {
    static IMAGES: OnceLock<ImageCache> = OnceLock::new();
    IMAGES.get_or_init(Default::default)
}

/// Assemblies that generic instantiations name, shared by every image of the process.
fn shared_modules() -> Arc<r2r::ModuleCache> {
    static MODULES: OnceLock<Arc<r2r::ModuleCache>> = OnceLock::new();
    MODULES.get_or_init(Default::default).clone()
}

/// The image at `path`, parsed once per process; the error names the file and what is wrong.
fn shared_image(path: &Path) -> Parsed {
    let meta = std::fs::metadata(path);
    let key = (
        path.to_path_buf(),
        meta.as_ref().map(|m| m.len()).unwrap_or(0),
        meta.as_ref().ok().and_then(|m| m.modified().ok()),
    );
    let cell = shared_images().lock().unwrap_or_else(|p| p.into_inner()).entry(key).or_default().clone();
    cell.get_or_init(|| {
        let saved = meta.as_ref().ok().and_then(|m| index_cache_path(path, m));
        let index = saved.as_deref().and_then(|p| std::fs::read(p).ok());
        Arc::new(match r2r::R2rImage::open_indexed(path, shared_modules(), index.as_deref()) {
            Ok(Ok(image)) => {
                if let Some(saved) = &saved {
                    if image.index_reused() {
                        keep_fresh(saved);
                    } else {
                        // Best effort, as the kernel's symbols: a read-only home costs the next run a parse.
                        let _ = super::elf::write_atomically(saved, &image.index_bytes());
                        prune_index_cache(saved.parent().unwrap_or(Path::new(".")), INDEX_CACHE_FILES);
                    }
                }
                Ok(image)
            }
            Ok(Err(e)) => Err(format!("{}: {e}", path.display())),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        })
    })
    .clone()
}

/// `<cache>/r2r-<key>.bin`: where the method index of the image at `path` is kept across runs
/// (see [`r2r::R2rImage::index_bytes`]), keyed by the file's path, device, inode, size and
/// modification time: a replaced or rebuilt assembly gets a key of its own, and the index read
/// back is checked against the image before use. `None` when no cache folder can be named.
fn index_cache_path(path: &Path, meta: &std::fs::Metadata) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let dir = super::elf::cache_dir()?;
    let mut key = Sha256::new();
    key.update(path.as_os_str().as_bytes());
    for n in [meta.dev(), meta.ino(), meta.size(), meta.mtime() as u64, meta.mtime_nsec() as u64] {
        key.update(n.to_le_bytes());
    }
    Some(dir.join(format!("r2r-{}.bin", super::elf::hex(&key.finalize()[..12]))))
}

/// Saved method indexes kept at most: each installed runtime, app and container image rebuilt
/// adds its assemblies' (a test run adds ~150, 9 MB); the least recently used go first.
const INDEX_CACHE_FILES: usize = 512;

/// Marks a saved index as used (its modification time, renewed at most daily), so that
/// [`prune_index_cache`] keeps the ones in use.
fn keep_fresh(saved: &Path) {
    let now = std::time::SystemTime::now();
    let stale = std::fs::metadata(saved).and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age.as_secs() > 86_400));
    if stale {
        let _ = std::fs::File::options().write(true).open(saved).and_then(|f| f.set_modified(now));
    }
}

/// Removes the least recently used saved indexes beyond `keep` from `dir`.
fn prune_index_cache(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut saved: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("r2r-") && n.ends_with(".bin")))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if saved.len() <= keep {
        return;
    }
    saved.sort();
    for (_, path) in &saved[..saved.len() - keep] {
        let _ = std::fs::remove_file(path);
    }
}

/// Parses the images at `paths` into the process's cache, so a later [`R2rResolver`] finds them
/// ready: as many threads as cores, each taking the largest image left. A thread per image (a
/// .NET process maps a dozen) started System.Private.CoreLib, the longest, after the others on
/// two cores.
pub fn prefetch(paths: &[PathBuf]) {
    let mut by_size: Vec<(u64, &PathBuf)> = paths.iter().map(|p| (std::fs::metadata(p).map(|m| m.len()).unwrap_or(0), p)).collect();
    by_size.sort_by(|a, b| b.0.cmp(&a.0));
    let queue = Mutex::new(by_size.into_iter().map(|(_, p)| p));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(paths.len());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let Some(path) = queue.lock().unwrap_or_else(|p| p.into_inner()).next() else { break };
                    shared_image(path);
                }
            });
        }
    });
}

/// Resolves (assembly file, file offset) to a method name; caches parsed images (and failures,
/// so a bad file is read once and reported once).
#[derive(Default)]
pub struct R2rResolver {
    images: HashMap<PathBuf, Parsed>,
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
        // Asked once per frame to name: a hit must not allocate the key.
        if !self.images.contains_key(path) {
            self.images.insert(path.to_path_buf(), shared_image(path));
        }
        let parsed: &Result<r2r::R2rImage, String> = &self.images[path];
        match parsed {
            Ok(image) => Ok(image),
            Err(e) => Err(anyhow!("{e}")),
        }
    }

    /// Parses the images at `paths` not parsed yet, each on a thread of its own: the first
    /// lookup in System.Private.CoreLib otherwise waits for a 15 MB image to be read alone.
    pub fn preload(&mut self, paths: &[PathBuf]) {
        let mut todo: Vec<PathBuf> = paths.iter().filter(|p| !self.images.contains_key(p.as_path())).cloned().collect();
        todo.sort();
        todo.dedup();
        prefetch(&todo);
        for path in todo {
            let parsed = shared_image(&path);
            self.images.insert(path, parsed);
        }
    }

    /// Images that could not be used, with the reason (for the run's warnings).
    pub fn failures(&self) -> Vec<String> {
        let mut v: Vec<String> = self.images.values().filter_map(|r| r.as_ref().as_ref().err().cloned()).collect();
        v.sort();
        v
    }

    /// How many images were parsed successfully.
    pub fn images_loaded(&self) -> usize {
        self.images.values().filter(|r| r.is_ok()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pruning keeps the most recently used saved indexes and touches nothing else in the folder.
    #[test]
    fn pruning_removes_the_least_recently_used_indexes_only() {
        let dir = tempfile::tempdir().unwrap();
        let day = std::time::Duration::from_secs(86_400);
        let now = std::time::SystemTime::now();
        for (name, age) in [("r2r-old.bin", 3), ("r2r-mid.bin", 2), ("r2r-new.bin", 1), ("kallsyms-x.bin", 9)] {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").unwrap();
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(now - day * age).unwrap();
        }
        keep_fresh(&dir.path().join("r2r-old.bin"));
        prune_index_cache(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["kallsyms-x.bin", "r2r-new.bin", "r2r-old.bin"], "r2r-old.bin was used now, r2r-mid.bin least recently");
    }
}
