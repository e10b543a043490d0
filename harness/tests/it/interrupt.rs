//! Interrupted runs (issue: killed, interrupted or run twice at once). A real run of a user's
//! project (harness/tests/apps/spin-two, no tracelab code) is started in a child process and sent
//! SIGINT or SIGKILL when its progress reaches each phase — build, launch, collect, decode — on
//! each target. Afterwards nothing may look finished, no process of the run may live on, no
//! container may outlive the lease, and after SIGINT no file of the run may be left in /tmp. The
//! next run then passes and says what it removed.

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::run::TargetKind;
use harness::testing::{prerequisites, require_root};

const PHASES: &[&str] = &["build", "launch", "collect", "decode"];

fn perf_available() -> Result<(), String> {
    harness::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

fn docker_available() -> Result<(), String> {
    harness::docker::Docker::available()
}

/// The scenario of each run: the user's project built into `XDG_CACHE_HOME` (fresh for the
/// build phase, so there is a build to interrupt), perf on it for 3 s.
fn scenario_toml(dir: &Path) -> PathBuf {
    let app = harness::project_root().join("harness/tests/apps/spin-two");
    let text = format!(
        r#"name = "interrupted"
workload = {{ project = "{}" }}
args = ["spin.json", "60"]
env = {{ TRACELAB_TEST_MARK = "{}" }}
seconds = 3
stop = "sigterm"

[[collector]]
kind = "perf-cpu"
frequency = 99
"#,
        app.display(),
        dir.display()
    );
    let path = dir.join("interrupted.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The child: one engine run, as `cargo xtask scenario` makes it, with progress on stderr.
#[test]
#[ignore = "helper run by the interrupt tests in a child process"]
fn interrupt_helper() {
    let Ok(toml) = std::env::var("TRACELAB_INTERRUPT_SCENARIO") else { return };
    let target = harness::run::TargetKind::parse(&std::env::var("TRACELAB_INTERRUPT_TARGET").unwrap()).unwrap();
    let results = PathBuf::from(std::env::var("TRACELAB_INTERRUPT_RESULTS").unwrap());
    let scenario = harness::scenario::Scenario::load(Path::new(&toml)).unwrap();
    let opts = harness::engine::RunOptions { target: Some(target), results_root: Some(results), ..Default::default() };
    match harness::engine::run(&scenario, &opts) {
        Ok(o) => eprintln!("HELPER-DONE {:?} {}", o.verdict, o.dir.display()),
        Err(e) => eprintln!("HELPER-ERROR {e:#}"),
    }
}

/// Runtime files of .NET processes and perf in /tmp.
fn tmp_runtime_files() -> BTreeSet<String> {
    std::fs::read_dir("/tmp")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    (n.starts_with("perf-") && n.ends_with(".map"))
                        || n.starts_with("perfinfo-")
                        || (n.starts_with("jit-") && n.ends_with(".dump"))
                        || n.starts_with("dotnet-diagnostic-")
                        || n.starts_with("clr-debug-pipe-")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Processes whose command line or environment mentions `marks` (the run's results folder or
/// build cache: the app, perf, dotnet build), the caller excluded.
fn processes_marked(marks: &[&Path]) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) || pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) {
            continue;
        }
        let mut text = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        text.extend(std::fs::read(e.path().join("environ")).unwrap_or_default());
        let text = String::from_utf8_lossy(&text);
        if marks.iter().any(|m| text.contains(&*m.to_string_lossy())) {
            found.push(format!("{pid} {}", text.split('\0').next().unwrap_or("")));
        }
    }
    found
}

fn containers_of(docker: &harness::docker::Docker, owner_pid: u32) -> usize {
    docker
        .containers_with_label(harness::docker::LABEL)
        .unwrap()
        .iter()
        .filter(|(_, labels)| labels.get(harness::docker::LABEL_OWNER).is_some_and(|o| o.starts_with(&format!("{owner_pid}:"))))
        .count()
}

/// What one interruption left.
struct Left {
    finished: Vec<String>,
    staging: usize,
    containers: usize,
    tmp_files: Vec<String>,
    processes: Vec<String>,
}

fn interrupt_at(target: TargetKind, phase: &str, signal: i32, toml: &Path, results: &Path, cache: &Path) -> Left {
    let tmp_before = tmp_runtime_files();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "interrupt::interrupt_helper", "--nocapture", "--include-ignored", "--test-threads", "1"])
        .env("TRACELAB_INTERRUPT_SCENARIO", toml)
        .env("TRACELAB_INTERRUPT_TARGET", target.as_str())
        .env("TRACELAB_INTERRUPT_RESULTS", results)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("TRACELAB_QUIET")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // The line that opens the phase (launch: the app's start, not the start-up sweep's lines).
    let want = if phase == "launch" { "] launch: starting `".to_string() } else { format!("] {phase}:") };
    let mut seen = Vec::new();
    let mut reached = false;
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref().map_while(Result::ok) {
        seen.push(line.clone());
        if line.contains(&want) {
            reached = true;
            break;
        }
    }
    assert!(reached, "{target:?}/{phase}: the run never reached the phase; its output:\n{}", seen.join("\n"));
    // Into the phase: the project's `dotnet build` runs for seconds, the collect window for 3 s.
    std::thread::sleep(Duration::from_millis(match phase {
        "build" => 3000,
        "collect" => 1000,
        _ => 0,
    }));
    harness::run::signal(child.id(), signal).unwrap();
    // The rest of its output, so the pipe never blocks the handler.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    if signal == 2 {
        assert_eq!(status.code(), Some(130), "{target:?}/{phase}: SIGINT must end the run with 130; output after it:\n{}", rest.join("\n"));
    } else {
        assert_eq!(status.signal(), Some(9), "{target:?}/{phase}");
    }
    let docker = (target != TargetKind::Host).then(|| harness::docker::Docker::connect().unwrap());
    // Containers go with the handler (SIGINT) or the guardian (SIGKILL: at most the lease).
    let died = Instant::now();
    let deadline = died + Duration::from_secs(harness::owner::LEASE_S + 30);
    let mut containers = docker.as_ref().map_or(0, |d| containers_of(d, child.id()));
    while containers > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        containers = docker.as_ref().map_or(0, |d| containers_of(d, child.id()));
    }
    if docker.is_some() {
        eprintln!("{target:?}/{phase}: the run's containers were gone {:.1} s after its end", died.elapsed().as_secs_f64());
    }
    // Processes die with their owner (PR_SET_PDEATHSIG, the handler, the removed container).
    let deadline = Instant::now() + Duration::from_secs(10);
    let work = toml.parent().unwrap();
    let mut processes = processes_marked(&[work, cache]);
    while !processes.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        processes = processes_marked(&[work, cache]);
    }
    let mut finished = Vec::new();
    let mut staging = 0;
    for e in std::fs::read_dir(results).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".staging-") {
            let journal = std::fs::read_to_string(e.path().join(harness::owner::JOURNAL)).unwrap_or_default();
            let tree = std::process::Command::new("find").arg(e.path()).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            eprintln!("{target:?}/{phase}: left {name} with journal:\n{journal}\nholding:\n{tree}");
            staging += 1;
        } else {
            finished.push(name);
        }
    }
    let tmp_files = tmp_runtime_files().difference(&tmp_before).cloned().collect::<Vec<_>>();
    Left { finished, staging, containers, tmp_files, processes }
}

fn interrupt_everywhere(target: TargetKind) {
    let test = format!("interrupt::{}_runs_interrupted_at_any_phase_leave_nothing", target.as_str());
    let needs_docker = target != TargetKind::Host;
    let checks: Vec<&dyn Fn() -> Result<(), String>> =
        if needs_docker { vec![&require_root, &perf_available, &docker_available] } else { vec![&require_root, &perf_available] };
    if !prerequisites(&test, &checks) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let toml = scenario_toml(work.path());
    let results = work.path().join("results");
    let warm_cache = work.path().join("cache");
    let mut table = Vec::new();
    let mut killed_staging = 0;
    let mut killed_tmp = BTreeSet::new();
    for phase in PHASES {
        for (signal, name) in [(2, "SIGINT"), (9, "SIGKILL")] {
            // A fresh build cache gives the build phase a build to interrupt.
            let fresh;
            let cache = if *phase == "build" {
                fresh = tempfile::tempdir_in(work.path()).unwrap();
                fresh.path().to_path_buf()
            } else {
                warm_cache.clone()
            };
            let left = interrupt_at(target, phase, signal, &toml, &results, &cache);
            let row = format!(
                "| {} | {phase} | {name} | {} | {} | {} | {} | {} |",
                target.as_str(),
                left.finished.len(),
                left.staging,
                left.containers,
                left.tmp_files.len(),
                left.processes.len()
            );
            eprintln!("{row}");
            table.push(row);
            assert!(left.finished.is_empty(), "{target:?}/{phase}/{name}: a finished-looking folder: {:?}", left.finished);
            assert_eq!(left.containers, 0, "{target:?}/{phase}/{name}: containers outlived the lease");
            assert!(left.processes.is_empty(), "{target:?}/{phase}/{name}: processes outlived the run: {:?}", left.processes);
            if signal == 2 {
                // Its own staging folder is gone, and its start-up sweep removed the one the
                // SIGKILL before it left.
                assert_eq!(left.staging, 0, "{target:?}/{phase}/{name}: a staging folder was left");
                assert!(left.tmp_files.is_empty(), "{target:?}/{phase}/{name}: /tmp files left: {:?}", left.tmp_files);
            }
            killed_staging = left.staging;
            if signal == 9 {
                killed_tmp.extend(left.tmp_files);
            }
        }
    }
    // The next run cleans what the SIGKILLs left, says so, and passes.
    let tmp_before = tmp_runtime_files();
    let scenario = harness::scenario::Scenario::load(&toml).unwrap();
    let opts = harness::engine::RunOptions { target: Some(target), results_root: Some(results.clone()), ..Default::default() };
    // SAFETY (test process env): the build cache of the warm runs, read by the engine's build.
    unsafe { std::env::set_var("XDG_CACHE_HOME", &warm_cache) };
    let outcome = harness::engine::run(&scenario, &opts).unwrap();
    eprintln!("| target | phase | signal | finished folders | staging folders | containers | /tmp files | processes |");
    for row in &table {
        eprintln!("{row}");
    }
    eprintln!("next run: {:?}; removed at start: {:#?}", outcome.verdict, outcome.manifest.swept_at_start);
    assert_eq!(outcome.verdict, harness::assert::Verdict::Pass, "{}", crate::describe(&outcome));
    let staging_removed = outcome.manifest.swept_at_start.iter().filter(|l| l.starts_with("staging folder")).count();
    assert_eq!(staging_removed, killed_staging, "{:?}", outcome.manifest.swept_at_start);
    let staging_left = std::fs::read_dir(&results).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".staging-")).count();
    assert_eq!(staging_left, 0);
    let now = tmp_runtime_files();
    let new_tmp: Vec<_> = now.difference(&tmp_before).cloned().collect();
    assert!(new_tmp.is_empty(), "the passing run left {new_tmp:?}");
    let still: Vec<_> = killed_tmp.intersection(&now).cloned().collect();
    assert!(still.is_empty(), "the killed runs' /tmp files were not swept: {still:?}");
}

#[test]
fn host_runs_interrupted_at_any_phase_leave_nothing() {
    interrupt_everywhere(TargetKind::Host);
}

#[test]
fn container_runs_interrupted_at_any_phase_leave_nothing() {
    interrupt_everywhere(TargetKind::Container);
}

#[test]
fn sidecar_runs_interrupted_at_any_phase_leave_nothing() {
    interrupt_everywhere(TargetKind::Sidecar);
}

/// Two runs of one scenario started together into one results folder: each gets its own folder
/// with its own artifacts and a verdict (seen before: 3 of 5 such pairs broke each other).
#[test]
fn two_runs_started_together_both_complete() {
    let test = "interrupt::two_runs_started_together_both_complete";
    if !prerequisites(test, &[&require_root, &perf_available]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let toml = scenario_toml(work.path());
    let results = work.path().join("results");
    let cache = work.path().join("cache");
    // Built once first, so both runs start their apps together rather than queue on one build.
    harness::workload::prepare(&harness::scenario::Scenario::load(&toml).unwrap().workload).ok();
    let start = || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "interrupt::interrupt_helper", "--nocapture", "--include-ignored", "--test-threads", "1"])
            .env("TRACELAB_INTERRUPT_SCENARIO", &toml)
            .env("TRACELAB_INTERRUPT_TARGET", "host")
            .env("TRACELAB_INTERRUPT_RESULTS", &results)
            .env("XDG_CACHE_HOME", &cache)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let mut verdicts = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let done = text.lines().find_map(|l| l.strip_prefix("HELPER-DONE ")).unwrap_or_else(|| panic!("a run did not finish:\n{text}")).to_string();
        assert!(done.starts_with("Pass") || done.starts_with("Inconclusive"), "{done}\n{text}");
        verdicts.push(done);
    }
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    folders.sort();
    assert_eq!(folders.len(), 2, "two finished folders, no staging: {folders:?}");
    for f in &folders {
        let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(m["run_id"].as_str(), f.file_name().and_then(|n| n.to_str()));
        assert!(f.join("artifacts/perf-cpu.data").metadata().is_ok_and(|m| m.len() > 0), "{}", f.display());
        assert!(f.join("artifacts/app-output.txt").is_file());
    }
    eprintln!("two runs: {verdicts:?} in {folders:?}");
}

/// An app that dies at start in a container is reported at once with its exit code and last
/// output (was: 90 s later, as a missing readiness line).
#[test]
fn an_app_that_crashes_at_start_in_a_container_is_reported_at_once() {
    let test = "interrupt::an_app_that_crashes_at_start_in_a_container_is_reported_at_once";
    if !prerequisites(test, &[&require_root, &perf_available, &docker_available]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let toml = work.path().join("crash.toml");
    std::fs::write(
        &toml,
        "name = \"crash-at-start\"\nworkload = { command = [\"/bin/sh\", \"-c\", \"echo boom: no config >&2; sleep 1; exit 3\"] }\n\n[[collector]]\nkind = \"perf-cpu\"\n",
    )
    .unwrap();
    let scenario = harness::scenario::Scenario::load(&toml).unwrap();
    let opts = harness::engine::RunOptions {
        target: Some(TargetKind::Container),
        results_root: Some(work.path().join("results")),
        ..Default::default()
    };
    let started = Instant::now();
    let outcome = harness::engine::run(&scenario, &opts).unwrap();
    let took = started.elapsed();
    let reason = outcome.reason.clone().unwrap_or_default();
    eprintln!("{:?} after {took:?}: {reason}", outcome.verdict);
    assert_eq!(outcome.verdict, harness::assert::Verdict::Error, "{reason}");
    assert!(reason.contains("exit code 3") && reason.contains("boom: no config"), "{reason}");
    // One attempt is image checks plus a container start; the engine tries twice.
    assert!(took < Duration::from_secs(60), "reported after {took:?}");
}

/// A collector that cannot start (here its tool is missing) ends the run at once, naming the
/// tool (was: 120 s, the app waiting for a go signal that never came).
#[test]
fn a_collector_that_cannot_start_ends_the_run_at_once() {
    let test = "interrupt::a_collector_that_cannot_start_ends_the_run_at_once";
    if !prerequisites(test, &[&require_root, &perf_available]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let toml = work.path().join("too-fast.toml");
    std::fs::write(
        &toml,
        "name = \"no-perf\"\nworkload = \"cpu-bound\"\n\n[[collector]]\nkind = \"perf-cpu\"\nperf_binary = \"/nonexistent/perf\"\n",
    )
    .unwrap();
    let scenario = harness::scenario::Scenario::load(&toml).unwrap();
    let opts = harness::engine::RunOptions { target: Some(TargetKind::Host), results_root: Some(work.path().join("results")), ..Default::default() };
    let outcome = harness::engine::run(&scenario, &opts).unwrap();
    let reason = outcome.reason.clone().unwrap_or_default();
    let ran = outcome.manifest.durations_s.get("run").copied().unwrap_or(f64::NAN);
    eprintln!("{:?}, app run {ran:.1} s: {reason}", outcome.verdict);
    // A missing tool is a missing prerequisite: SKIP, naming it and what installs it.
    assert_eq!(outcome.verdict, harness::assert::Verdict::Skip, "{reason}");
    assert!(reason.contains("/nonexistent/perf") && reason.contains("not installed"), "{reason}");
    assert!(ran < 10.0, "the app ran {ran} s after its collector failed");
}
