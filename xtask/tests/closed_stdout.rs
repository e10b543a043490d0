//! `cargo xtask trace inspect F | head`: when whoever reads the output goes away, the command stops
//! quietly with the status a shell shows for SIGPIPE (141), as `cat` does; not a panic with a
//! backtrace.

use std::path::Path;
use std::process::Command;

#[test]
fn a_closed_stdout_ends_a_command_quietly_with_141() {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/eventpipe/tests/data/system-runtime-counters.nettrace");
    let out_dir = tempfile::tempdir().expect("a scratch folder");
    // The reading end is closed before the command starts: its first print fails, every time.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["trace", "inspect"])
        .arg(&trace)
        .arg("--out")
        .arg(out_dir.path())
        .stdout(writer)
        .output()
        .expect("the xtask binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "a closed stdout printed: {stderr}");
    // The same command with somewhere to write succeeds: the 141 was the closed pipe.
    let ok = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["trace", "inspect"]).arg(&trace).arg("--out").arg(out_dir.path()).output().unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
}
