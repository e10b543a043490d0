//! The files a .NET process leaves in its temporary folder (perf map, jitdump, diagnostics
//! socket, debugger pipes, crash dump), and where the host's temporary folder is.

use std::path::{Path, PathBuf};

/// The host's temporary folder, where a host app's runtime files go (an empty TMPDIR is unset,
/// as the runtime reads it).
pub(crate) fn host_tmp() -> PathBuf {
    std::env::var_os("TMPDIR").filter(|t| !t.is_empty()).map(PathBuf::from).unwrap_or_else(|| "/tmp".into())
}

/// The files a .NET process (or perf's JIT support) leaves in `tmp` when it is killed.
pub fn runtime_files(pid: u32, tmp: &Path) -> Vec<PathBuf> {
    let exact = [
        format!("perf-{pid}.map"),
        format!("perfinfo-{pid}.map"),
        format!("jit-{pid}.dump"),
        crate::host::runtime_files::crash_dump_file(pid),
    ];
    // `dotnet-diagnostic-PID-DISAMBIGUATION-socket`, `clr-debug-pipe-PID-DISAMBIGUATION-in|out`.
    let socket_prefix = format!("dotnet-diagnostic-{pid}-");
    let pipe_prefix = format!("clr-debug-pipe-{pid}-");
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            exact.iter().any(|x| *x == name)
                || (name.starts_with(&socket_prefix) && name.ends_with("-socket"))
                || (name.starts_with(&pipe_prefix) && (name.ends_with("-in") || name.ends_with("-out")))
        })
        .map(|e| e.path())
        .collect()
}

/// The file a crash dump of the process `ns_pid` is written to (what `%p` becomes).
pub(crate) fn crash_dump_file(ns_pid: u32) -> String {
    format!("tracelab-crash-{ns_pid}.core")
}

