//! Progress without a terminal: `cargo xtask scenario cpu-bound --target host` with stderr piped
//! (as in CI) must print a timestamped line for every phase, in pipeline order, and the collect
//! phase must report its real elapsed time (it once said 1.3 s for a ~10 s collection), and no
//! phase may stay silent for more than 15 s.

use std::process::{Command, Stdio};

use tracelab_fixtures::{prerequisites, require_root};

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

/// The xtask binary, built the way `cargo xtask` builds it (the alias is `run --package xtask`).
fn xtask_binary() -> std::path::PathBuf {
    let root = harness::project_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo).args(["build", "--quiet", "--package", "xtask"]).current_dir(&root).status().unwrap();
    assert!(status.success(), "cargo build --package xtask failed");
    root.join("target").join("debug").join("xtask")
}

#[test]
fn piped_stderr_gets_a_timestamped_line_for_every_phase() {
    if !prerequisites("progress::piped_stderr", &[&require_root, &perf_available]) {
        return;
    }
    let results = tempfile::tempdir().unwrap();
    let out = Command::new(xtask_binary())
        .args(["scenario", "cpu-bound", "--target", "host", "--results"])
        .arg(results.path())
        .env_remove("TRACELAB_QUIET")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = regex::Regex::new(r"^\[\d\d:\d\d:\d\d\] ([a-z]+): (.*)$").unwrap();
    let phases: Vec<(String, String)> = stderr
        .lines()
        .filter_map(|l| line.captures(l).map(|c| (c[1].to_string(), c[2].to_string())))
        .collect();
    let order = ["build", "launch", "collect", "decode", "report"];
    let firsts: Vec<usize> = order
        .iter()
        .map(|p| phases.iter().position(|(q, _)| q == p).unwrap_or_else(|| panic!("no `{p}` line in:\n{stderr}")))
        .collect();
    assert!(firsts.windows(2).all(|w| w[0] < w[1]), "phases out of order {firsts:?}:\n{stderr}");
    // Nothing but timestamped lines on a piped stderr (no spinner frames, no bare notes).
    assert!(stderr.lines().all(|l| line.is_match(l) || l.starts_with("warning:")), "untimestamped lines:\n{stderr}");
    // cpu-bound runs `--seconds 6`: the collect step ends with its real elapsed time.
    let elapsed = regex::Regex::new(r"\((\d+\.\d) s of ~6 s\)$").unwrap();
    let finished: Vec<f64> = phases
        .iter()
        .filter(|(p, _)| p == "collect")
        .filter_map(|(_, m)| elapsed.captures(m).map(|c| c[1].parse().unwrap()))
        .collect();
    assert!(finished.iter().any(|s| *s >= 5.0), "the collect phase did not report ≥ 5 s of a 6 s run: {finished:?}\n{stderr}");
    // A heartbeat at least every 15 s in every phase (a CI log that stays silent longer cannot
    // tell a slow step from a hung one): no two lines further apart.
    let stamp = regex::Regex::new(r"^\[(\d\d):(\d\d):(\d\d)\]").unwrap();
    let secs: Vec<i64> = stderr
        .lines()
        .filter_map(|l| stamp.captures(l).map(|c| c[1].parse::<i64>().unwrap() * 3600 + c[2].parse::<i64>().unwrap() * 60 + c[3].parse::<i64>().unwrap()))
        .collect();
    let longest = secs.windows(2).map(|w| (w[1] - w[0]).rem_euclid(86_400)).max().unwrap_or(0);
    assert!(longest <= 15, "{longest} s between two progress lines:\n{stderr}");
    assert!(matches!(out.status.code(), Some(0 | 1 | 3)), "exit {:?}:\n{stderr}", out.status);
}
