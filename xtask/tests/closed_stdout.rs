//! `cargo xtask trace inspect F | head`: when whoever reads the output goes away, the command stops
//! quietly with the status a shell shows for SIGPIPE (141), as `cat` does; not a panic with a
//! backtrace. A closed stderr is a closed output too (`… 2>&1 | head -2`), and a closed output
//! never disables Ctrl-C and SIGTERM (issue 41: the signal thread died printing its note).

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn a_closed_stderr_ends_a_command_with_141_not_an_error() {
    // `trace fold` prints its summary on stderr and the folded stacks on stdout: with both closed
    // (`… 2>&1 | head -0`), each print fails; the first one to fail ends it quietly.
    let data = tracelab_fixtures::fixture("perf/perf-container.data");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["trace", "fold"])
        .arg(&data)
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .output()
        .expect("the xtask binary runs");
    assert_eq!(out.status.code(), Some(141), "trace fold with stdout and stderr closed");
}

#[test]
fn sigterm_ends_a_command_whose_output_was_closed_with_143_and_leaves_nothing() {
    let run = tempfile::tempdir().unwrap();
    std::fs::write(run.path().join("manifest.json"), "{}").unwrap();
    std::fs::write(run.path().join("perf-cpu.firefox.json.gz"), b"\x1f\x8b\x08profile").unwrap();
    // stdout and stderr into one pipe, as `cargo xtask open … 2>&1 | (sleep 1)` gives them.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["open"])
        .arg(run.path())
        .args(["--collector", "perf-cpu"])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .expect("the xtask binary runs");
    // Serving: it printed its address. Then the reader goes away, as `(sleep 1)` does.
    let mut lines = BufReader::new(reader).lines();
    assert!(lines.by_ref().map_while(Result::ok).any(|l| l.contains("Ctrl-C stops")), "`open` did not start serving");
    drop(lines);
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM was swallowed: `open` with its output closed still ran 20 s later");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(143), "{status:?}");
    // Nothing left: no staging folder beside the result, no scratch folder of the process in /tmp.
    let staging: Vec<_> = std::fs::read_dir(run.path()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".staging-")).collect();
    assert!(staging.is_empty(), "{staging:?}");
    let tmp = std::env::var_os("TMPDIR").map(std::path::PathBuf::from).unwrap_or_else(|| "/tmp".into());
    let scratch: Vec<_> = std::fs::read_dir(tmp).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&format!("tracelab-{pid}-"))).collect();
    assert!(scratch.is_empty(), "{scratch:?}");
}
