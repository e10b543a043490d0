//! A real run whose check cannot reach its sample floor ends `inconclusive` with the reason and
//! exit code 3, through the built `cargo xtask` binary as a user or CI meets it: the cpu-bound app
//! on the host under perf at 49 Hz for 2 s (about a hundred samples) against a share check that
//! asks for 100000. Needs root, perf and .NET; skips with the reason otherwise (fails under CI).
//! Beside it, the other exit codes a run can end with that are not verdicts on the pipeline:
//! an unknown image is a usage error (2) and an unreachable Docker daemon an infrastructure
//! error (5), never a FAIL.

use std::process::Command;

use harness::collect::perf::detect_perf_binary;
use tracelab_fixtures::{prerequisites, require_root};

const SCENARIO: &str = r#"
name = "thin-data"
description = "cpu-bound sampled too slowly for its share check's floor"
workload = "cpu-bound"
args = ["--seconds", "2"]
target = "host"

[[collector]]
kind = "perf-cpu"
frequency = 49

[[expect]]
kind = "share"
name = "HotLoop share, held to a floor no 2 s run at 49 Hz reaches"
method = "::HotLoop\\b"
among = ["::HotLoop\\b", "::ColdLoop\\b"]
truth = "shares.cpu.HotLoop"
min_samples = 100000
"#;

#[test]
fn a_check_below_its_floor_is_inconclusive_with_exit_3() {
    let test = "real_verdicts::a_check_below_its_floor_is_inconclusive_with_exit_3";
    let perf = || detect_perf_binary().map(|_| ()).ok_or_else(|| "no `perf` (or `perf_X.Y`) on PATH".to_string());
    let dotnet = || harness::host::dotnet::Dotnet::locate_or_install().map(|_| ()).map_err(|e| format!("no .NET SDK: {e:#}"));
    if !prerequisites(test, &[&require_root, &perf, &dotnet]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("thin-data.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let results = dir.path().join("results");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("scenario")
        .arg(&scenario)
        .arg("--results")
        .arg(&results)
        .output()
        .expect("the xtask binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("thin-data INCONCLUSIVE"), "{stdout}");

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("latest/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["verdict"], "inconclusive", "{manifest:#}");
    let reason = manifest["reason"].as_str().unwrap();
    assert!(reason.contains("below the floor of 100000 (min_samples)"), "{reason}");
    let check = manifest["checks"].as_array().unwrap().iter().find(|c| c["name"].as_str().unwrap().starts_with("HotLoop share")).unwrap();
    assert_eq!(check["verdict"], "inconclusive", "{check:#}");
    let samples = check["values"]["samples"].as_f64().unwrap();
    assert!(samples > 0.0 && samples < 100000.0, "{check:#}");
    // The data-quality figures of item 2 are recorded, as numbers.
    let metrics = &manifest["metrics"];
    assert_eq!(metrics["perf-cpu.asked_hz"], 49.0, "{metrics:#}");
    assert!(metrics["perf-cpu.lost_ratio"].is_number() && metrics["load.cpu_busy_share"].is_number(), "{metrics:#}");
    let summary = std::fs::read_to_string(results.join("latest/summary.md")).unwrap();
    assert!(summary.starts_with("# thin-data — INCONCLUSIVE"), "{summary}");
    // It collected again once (`[sufficiency] attempts` = 2) before saying so; the first
    // attempt's results stay beside it, named in the deciding run's manifest and summary.
    let earlier = manifest["earlier_attempts"].as_array().expect("earlier_attempts");
    assert_eq!(earlier.len(), 1, "{manifest:#}");
    let first = earlier[0]["run_id"].as_str().unwrap();
    assert!(results.join(first).join("manifest.json").is_file(), "{first}");
    assert!(summary.contains("attempt 1 of this run was inconclusive and ran again"), "{summary}");
}

fn xtask(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).envs(env.iter().copied()).output().expect("the xtask binary runs")
}

#[test]
fn an_unknown_image_is_a_usage_error_naming_the_valid_ones() {
    let out = xtask(&["scenario", "cpu-bound", "--image", "sid"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bullseye, bookworm, trixie"), "{stderr}");
    assert!(!stderr.contains("error: error:"), "{stderr}");
}

#[test]
fn a_docker_daemon_that_does_not_answer_is_an_infrastructure_error_exit_5() {
    let test = "real_verdicts::a_docker_daemon_that_does_not_answer_is_an_infrastructure_error_exit_5";
    let dotnet = || harness::host::dotnet::Dotnet::locate_or_install().map(|_| ()).map_err(|e| format!("no .NET SDK: {e:#}"));
    if !prerequisites(test, &[&dotnet]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    // A real client against a socket nothing listens on: the Docker API fails as it does when
    // the daemon is down.
    let socket = format!("unix://{}", dir.path().join("no-daemon.sock").display());
    let out = xtask(
        // --no-setup: this is the engine's verdict on a daemon that stops answering; set-up
        // itself refuses a dead DOCKER_HOST at once (another test below).
        &["scenario", "cpu-bound", "--target", "container", "--no-setup", "--results", results.to_str().unwrap()],
        &[("DOCKER_HOST", &socket)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("latest/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["verdict"], "error", "{manifest:#}");
    let reason = manifest["reason"].as_str().unwrap();
    assert!(reason.starts_with("infrastructure: ") && reason.contains("no Docker daemon answers"), "{reason}");
}

#[test]
fn set_up_refuses_a_dead_docker_host_at_once_without_starting_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let socket = format!("unix://{}", dir.path().join("no-daemon.sock").display());
    let started = std::time::Instant::now();
    let out = xtask(&["setup", "--scenario", "cpu-bound", "--target", "container"], &[("DOCKER_HOST", &socket)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Not root: missing (4); root: the engine step fails (5) — never a second dockerd, never a wait.
    assert!(matches!(out.status.code(), Some(4) | Some(5)), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "took {:?}:\n{stderr}", started.elapsed());
    if out.status.code() == Some(5) {
        assert!(stderr.contains("DOCKER_HOST=") && stderr.contains("does not answer"), "{stderr}");
    }
}

/// `cargo xtask init mine.toml --dll app.dll`, then `cargo xtask scenario mine.toml`, on a
/// console app written without tracelab code: it passes with the starter's defaults, and the
/// checkout and /tmp are as they were (the app's runtime files moved into its run).
#[test]
fn init_then_scenario_passes_on_an_app_as_it_is_and_leaves_nothing_behind() {
    let test = "real_verdicts::init_then_scenario";
    let perf = || detect_perf_binary().map(|_| ()).ok_or_else(|| "no `perf` (or `perf_X.Y`) on PATH".to_string());
    if !prerequisites(test, &[&require_root, &perf]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dll = lab::apps::user_app::build("spin-two", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let git_status = || {
        let out = Command::new("git").arg("-C").arg(harness::project_root()).args(["status", "--porcelain"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = git_status();
    let toml = dir.path().join("mine.toml");
    let init = xtask(&["init", toml.to_str().unwrap(), "--dll", dll.to_str().unwrap()], &[]);
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(text.contains("workload = { dll = \"bin/spin-two.dll\" }"), "{text}");
    let again = xtask(&["init", toml.to_str().unwrap(), "--dll", dll.to_str().unwrap()], &[]);
    assert_eq!(again.status.code(), Some(2), "init overwrote {}", toml.display());

    let results = dir.path().join("results");
    let run = xtask(&["scenario", toml.to_str().unwrap(), "--target", "host", "--no-setup", "--results", results.to_str().unwrap()], &[]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("mine PASS") || stdout.contains("spin-two PASS"), "{stdout}");
    assert_eq!(git_status(), before, "the run changed the checkout");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("latest/manifest.json")).unwrap()).unwrap();
    let pid = manifest["metrics"]["app.pid"].as_f64().expect("app.pid in the manifest") as u32;
    let tmp: Vec<String> = std::fs::read_dir("/tmp").unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let left: Vec<&String> = tmp.iter().filter(|n| n.contains(&format!("-{pid}.")) || n.contains(&format!("-{pid}-"))).collect();
    assert!(left.is_empty(), "the finished run left {left:?} in /tmp");
}

/// Five runs started together — three in containers and one on the host under perf, one in a
/// container under EventPipe — beside a user's own `perf record -a`, which holds perf's
/// locked-memory budget of uid 0: none ends FAIL or ERROR because of the others (each records:
/// the perf containers hold CAP_IPC_LOCK, from the capability table); each PASSes, or is
/// INCONCLUSIVE with a starvation reason that names the concurrent load.
#[test]
fn runs_started_together_beside_a_users_perf_all_decide() {
    let test = "real_verdicts::runs_started_together_beside_a_users_perf_all_decide";
    let perf = || detect_perf_binary().map(|_| ()).ok_or_else(|| "no `perf` (or `perf_X.Y`) on PATH".to_string());
    let docker = harness::host::docker::Docker::available;
    if !prerequisites(test, &[&require_root, &perf, &docker]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The user's own system-wide recording, with ring buffers past the whole budget.
    let mut user_perf = Command::new(detect_perf_binary().unwrap())
        .args(["record", "--no-buildid-cache", "-a", "-e", "cpu-clock", "-F", "49", "-m", "256", "-o"])
        .arg(dir.path().join("user.data"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let runs = [
        ("cpu-bound", "container"),
        ("cpu-bound", "container"),
        ("cpu-bound", "container"),
        ("cpu-bound", "host"),
        ("cpu-bound-eventpipe", "container"),
    ];
    let children: Vec<(String, std::path::PathBuf, std::process::Child)> = runs
        .iter()
        .enumerate()
        .map(|(i, (scenario, target))| {
            let results = dir.path().join(format!("results-{i}"));
            let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
                .args(["scenario", scenario, "--target", target, "--no-setup", "--results"])
                .arg(&results)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            (format!("{scenario} on {target} (run {i})"), results, child)
        })
        .collect();
    let mut broken = Vec::new();
    for (what, results, child) in children {
        let out = child.wait_with_output().unwrap();
        let manifest: Option<serde_json::Value> =
            std::fs::read_to_string(results.join("latest/manifest.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
        let reason = manifest.as_ref().and_then(|m| m["reason"].as_str().map(String::from)).unwrap_or_default();
        eprintln!("{what}: exit {:?}{}", out.status.code(), if reason.is_empty() { String::new() } else { format!(", {reason}") });
        let ok = match out.status.code() {
            Some(0) => true,
            // Inconclusive only for the load of the other runs, named.
            Some(3) => reason.contains("other processes kept"),
            _ => false,
        };
        if !ok {
            broken.push(format!(
                "{what}: exit {:?}, reason: {reason}\nstderr tail: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).lines().rev().take(8).collect::<Vec<_>>().join(" | ")
            ));
        }
    }
    let _ = harness::host::proc::signal(user_perf.id(), 2);
    let _ = user_perf.wait();
    assert!(broken.is_empty(), "runs started together broke each other:\n{}", broken.join("\n\n"));
}
