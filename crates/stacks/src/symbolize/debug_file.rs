//! Where an ELF binary's separate debug file is: the one lookup the symbolizer and the unwinder
//! share, so that a frame one of them names the other names too.
//!
//! Places, in the order tried (GDB's and perf's conventions):
//! 1. the system debug folder `/usr/lib/debug` by build id, `.build-id/xx/yyyy.debug` (what
//!    Debian's `-dbg` / `-dbgsym` packages install, e.g. libc6-dbg),
//! 2. the system debug folder by path: `/usr/lib/debug<path>` and `/usr/lib/debug<path>.debug`,
//! 3. each `--symbols DIR`: `NAME.dbg` (as dotnet-symbol fetches `libcoreclr.so.dbg`),
//!    `NAME.debug`, `NAME`, `.build-id/xx/yyyy.debug`.
//!
//! A candidate is used only when its build id equals the binary's (when the binary has one):
//! a debug file of another build names the wrong functions.

use std::path::{Path, PathBuf};

use object::Object;

/// The system-wide debug folder of Debian and most distributions.
pub const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";

/// Debug-file places: system folders first, then the user's symbol folders.
#[derive(Clone, Debug)]
pub struct DebugFiles {
    system_dirs: Vec<PathBuf>,
    symbol_dirs: Vec<PathBuf>,
}

impl DebugFiles {
    /// `/usr/lib/debug`, then `symbol_dirs` (`--symbols DIR`).
    pub fn new(symbol_dirs: &[PathBuf]) -> DebugFiles {
        DebugFiles::with_system_dirs(vec![PathBuf::from(SYSTEM_DEBUG_DIR)], symbol_dirs)
    }

    /// As [`DebugFiles::new`] with other system folders (tests point it at a folder of their own).
    pub fn with_system_dirs(system_dirs: Vec<PathBuf>, symbol_dirs: &[PathBuf]) -> DebugFiles {
        DebugFiles { system_dirs, symbol_dirs: symbol_dirs.to_vec() }
    }

    /// The places to look for the debug file of the binary at `path` (as the process saw it)
    /// with `build_id`, in order; they need not exist.
    pub fn candidates(&self, path: &Path, build_id: Option<&[u8]>) -> Vec<PathBuf> {
        let by_build_id = build_id.filter(|id| id.len() >= 2).map(|id| {
            let hex = super::elf::hex(id);
            Path::new(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]))
        });
        let mut out = Vec::new();
        for dir in &self.system_dirs {
            if let Some(rel) = &by_build_id {
                out.push(dir.join(rel));
            }
            if path.is_absolute() {
                let under = dir.join(path.strip_prefix("/").unwrap_or(path));
                out.push(under.clone());
                let mut with_suffix = under.into_os_string();
                with_suffix.push(".debug");
                out.push(with_suffix.into());
            }
        }
        let base = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for dir in &self.symbol_dirs {
            if !base.is_empty() {
                out.push(dir.join(format!("{base}.dbg")));
                out.push(dir.join(format!("{base}.debug")));
                out.push(dir.join(&base));
            }
            if let Some(rel) = &by_build_id {
                out.push(dir.join(rel));
            }
        }
        out
    }

    /// Reads the first existing candidate whose build id matches `build_id` (any, when the
    /// binary has none) and that `read` accepts (e.g. "has a full symbol table"): its path and
    /// what `read` made of its bytes.
    pub fn find<T>(
        &self,
        path: &Path,
        build_id: Option<&[u8]>,
        mut read: impl FnMut(&Path, &[u8]) -> Option<T>,
    ) -> Option<(PathBuf, T)> {
        self.candidates(path, build_id).into_iter().find_map(|candidate| {
            if !candidate.is_file() {
                return None;
            }
            let data = super::map_file(&candidate).ok()?;
            let file = object::File::parse(&*data).ok()?;
            let same_build = match (build_id, file.build_id().ok().flatten()) {
                (Some(want), Some(got)) => want == got,
                (Some(_), None) => false,
                (None, _) => true,
            };
            if !same_build {
                return None;
            }
            let made = read(&candidate, &data)?;
            Some((candidate, made))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_folder_comes_first_by_build_id_then_by_path_then_symbol_folders() {
        let files = DebugFiles::with_system_dirs(vec!["/sys-debug".into()], &["/syms".into()]);
        let got = files.candidates(Path::new("/usr/lib/libc.so.6"), Some(&[0x93, 0xac, 0x61]));
        let want: Vec<PathBuf> = [
            "/sys-debug/.build-id/93/ac61.debug",
            "/sys-debug/usr/lib/libc.so.6",
            "/sys-debug/usr/lib/libc.so.6.debug",
            "/syms/libc.so.6.dbg",
            "/syms/libc.so.6.debug",
            "/syms/libc.so.6",
            "/syms/.build-id/93/ac61.debug",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }

    /// This machine's libc and its debug file (Debian's libc6-dbg, which the test suite's set-up
    /// installs): found by build id, and refused for any other build id.
    #[test]
    fn installed_debug_file_is_found_by_build_id_and_refused_for_another_build() {
        let test = "symbolize::debug_file::installed_debug_file_is_found_by_build_id_and_refused_for_another_build";
        let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        let Some(build_id) = super::super::elf::ElfSymbols::read(libc).ok().and_then(|e| e.build_id) else {
            return tracelab_fixtures::skip(test, format!("{} is absent or has no build id", libc.display()));
        };
        let files = DebugFiles::new(&[]);
        let by_id = files.candidates(libc, Some(&build_id))[0].clone();
        if !by_id.is_file() {
            return tracelab_fixtures::skip(test, format!("{} is absent: install Debian's libc6-dbg", by_id.display()));
        }
        let found = files.find(libc, Some(&build_id), |_, data| Some(data.len()));
        assert_eq!(found.map(|(path, _)| path), Some(by_id));
        let mut other = build_id.clone();
        other[0] ^= 0xff;
        assert_eq!(files.find(libc, Some(&other), |_, _| Some(())), None);
    }
}
