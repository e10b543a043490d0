//! Fixtures are the SDK's own assemblies (not checked in): the offline SDK beside the project
//! (../shared/toolchains/install-dotnet.sh, idempotent) provides them.

use std::path::PathBuf;

/// System.Private.CoreLib.dll of the installed .NET 10 runtime.
pub fn corelib() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/toolchains/install-dotnet.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let base = root.join("shared/Microsoft.NETCore.App");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(&base).unwrap().flatten().map(|e| e.path()).collect();
    versions.sort();
    versions.pop().expect("a runtime under shared/Microsoft.NETCore.App").join("System.Private.CoreLib.dll")
}
