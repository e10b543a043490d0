//! Names precompiled (ReadyToRun) code in .NET assemblies.
//!
//! On Linux the runtime maps each PE section of an assembly from its file, so a profiler's
//! (mapping start, file offset) pair leads from a sample address to a file offset; the PE section
//! table turns that into an RVA; the ReadyToRun header's RuntimeFunctions say which compiled
//! function holds it; MethodDefEntryPoints and InstanceMethodEntryPoints say which method that
//! function belongs to; and the ECMA-335 metadata in the same file names it.
//!
//! ```no_run
//! let image = r2r::R2rImage::parse(std::fs::read("System.Private.CoreLib.dll").unwrap()).unwrap();
//! if let Some(m) = image.method_at_file_offset(0x56a4a7) {
//!     println!("{} (+{:#x})", m.name, m.len);
//! }
//! ```

mod error;
mod image;
mod metadata;
mod native;
mod pe;
mod sig;

pub use error::{Error, Result};
pub use image::{MethodInfo, Module, ModuleCache, R2rImage, Stats};

#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_common;
