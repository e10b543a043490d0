//! Interrupted runs (issue: killed, interrupted or run twice at once). A real run of a user's
//! project (corpus/spin-two, no tracelab code) is started in a child process and sent
//! SIGINT or SIGKILL when its progress reaches each phase — build, launch, collect, decode — on
//! each target. Afterwards nothing may look finished, no process of the run may live on, no
//! container may outlive the lease, and after SIGINT no file of the run may be left in /tmp. The
//! next run then passes and says what it removed; after it, nothing any interruption left remains.
//!
//! Each test prints its table (target × phase × signal → leftovers) and writes it to
//! `target/tmp/interrupt-TARGET.md`. CI runs a few cells on the host and in a container (every
//! phase and both signals among them, and SIGTERM → 143 once, on the host also with the run's
//! stdout and stderr closed first; 20–30 s a target); the nightly workflow's `interrupt` job runs
//! the whole grid on every target (`*_full_grid`, ignored here, as are the sidecar's and pod's
//! CI-sized cells it holds):
//!
//!     cargo xtask test -- -p lab --test it --run-ignored all -E 'test(/^interrupt::/)'

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::run::TargetKind;
use tracelab_fixtures::{prerequisites, require_root};

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

fn docker_available() -> Result<(), String> {
    harness::host::docker::Docker::available()
}

/// The scenario of each run: the user's project built into `XDG_CACHE_HOME` (fresh for the
/// build phase, so there is a build to interrupt), perf on it for 3 s.
fn scenario_toml(dir: &Path) -> PathBuf {
    let app = harness::project_root().join("corpus/spin-two");
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
    // Ends as `cargo xtask scenario` does: the verdict's exit code (judge::exit).
    match harness::engine::run(&scenario, &opts) {
        Ok(o) => {
            eprintln!("HELPER-DONE {:?} {} reason: {}", o.verdict, o.dir.display(), o.reason.as_deref().unwrap_or("-"));
            std::process::exit(i32::from(o.verdict.exit_code()));
        }
        Err(e) => {
            eprintln!("HELPER-ERROR {e:#}");
            std::process::exit(2);
        }
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

/// The pid a runtime file in /tmp is named after.
fn pid_of(file: &str) -> Option<u32> {
    let rest = ["perf-", "perfinfo-", "jit-", "dotnet-diagnostic-", "clr-debug-pipe-"].iter().find_map(|p| file.strip_prefix(p))?;
    rest.split(['-', '.']).next()?.parse().ok()
}

/// Runtime files that appeared since `before` and whose process is gone. Other engineers'
/// processes share this machine's /tmp: a file of a live process is not a leftover (the run's own
/// processes are dead by now, which [`processes_marked`] checks).
fn new_files_of_dead_processes(before: &BTreeSet<String>) -> Vec<String> {
    tmp_runtime_files()
        .difference(before)
        .filter(|f| pid_of(f).is_none_or(|pid| !Path::new(&format!("/proc/{pid}")).exists()))
        .cloned()
        .collect()
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

/// Pods (podman) whose owner is `owner_pid`.
fn pods_of(owner_pid: u32) -> usize {
    let out = std::process::Command::new("podman")
        .args(["pod", "ps", "--filter", "label=tracelab=1", "--format", "{{index .Labels \"tracelab.owner\"}}"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with(&format!("{owner_pid}."))).count()).unwrap_or(0)
}

fn containers_of(docker: &harness::host::docker::Docker, owner_pid: u32) -> usize {
    docker
        .containers_with_label(harness::host::docker::LABEL)
        .unwrap()
        .iter()
        .filter(|(_, labels)| labels.get(harness::host::docker::LABEL_OWNER).is_some_and(|o| o.starts_with(&format!("{owner_pid}:"))))
        .count()
}

/// What one interruption left.
struct Left {
    finished: Vec<String>,
    staging: Vec<PathBuf>,
    containers: usize,
    /// Seconds from the run's end until its last container was gone (container targets).
    containers_gone_s: Option<f64>,
    tmp_files: Vec<String>,
    processes: Vec<String>,
}

/// Whether the run's output is read to the end, or whoever read it goes away before the signal
/// (stdout and stderr on one pipe, as `… 2>&1 | head` gives them): a closed output must change
/// nothing — the signal thread died printing its note on one, and every later signal was
/// swallowed (issue 41).
#[derive(Clone, Copy, PartialEq)]
enum Output {
    Read,
    Closed,
}

/// One cell of the grid: the phase the signal lands in, the signal, the run's output.
type Cell = (&'static str, i32, Output);

fn interrupt_at(target: TargetKind, (phase, signal, output): Cell, toml: &Path, results: &Path, cache: &Path) -> Left {
    let tmp_before = tmp_runtime_files();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "interrupt::interrupt_helper", "--nocapture", "--include-ignored", "--test-threads", "1"])
        .env("TRACELAB_INTERRUPT_SCENARIO", toml)
        .env("TRACELAB_INTERRUPT_TARGET", target.as_str())
        .env("TRACELAB_INTERRUPT_RESULTS", results)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("TRACELAB_QUIET");
    let (reader, writer) = std::io::pipe().unwrap();
    match output {
        Output::Read => cmd.stdout(std::process::Stdio::null()),
        Output::Closed => cmd.stdout(writer.try_clone().unwrap()),
    };
    let mut child = cmd.stderr(writer).spawn().unwrap();
    // The command holds the pipe's writing ends: without this, reading to the end never ends.
    drop(cmd);
    let stderr = reader;
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
    // Into the phase: the collect window runs for 3 s; a build is watched for below.
    std::thread::sleep(Duration::from_millis(if phase == "collect" { 1000 } else { 0 }));
    if phase == "build" {
        // The signal must land in a build, not before or after it: wait for `dotnet build` (and
        // its nodes) to show, then let it get going. A fixed wait missed a small project's build
        // on a warm machine (it was over in under 3 s).
        let helper = format!("{} ", child.id());
        let building = || -> Vec<String> { processes_marked(&[cache]).into_iter().filter(|p| !p.starts_with(&helper)).collect() };
        let watch = Instant::now();
        let mut found = building();
        while found.is_empty() && watch.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
            found = building();
        }
        assert!(!found.is_empty(), "{target:?}/build: no build ran within 60 s of the build phase; the run said:\n{}", seen.join("\n"));
        std::thread::sleep(Duration::from_millis(500));
        eprintln!("{target:?}/build: signal during the build of {} processes: {found:?}", found.len());
    }
    eprintln!("{target:?}/{phase}: signal {signal} after `{}`", seen.last().map_or("", String::as_str));
    let rest: Vec<String> = if output == Output::Closed {
        // Whoever read the output is gone; the run's next line (a ticker's, the handler's note)
        // finds the pipe closed.
        drop(lines);
        harness::host::proc::signal(child.id(), signal).unwrap();
        Vec::new()
    } else {
        harness::host::proc::signal(child.id(), signal).unwrap();
        // The rest of its output, so the pipe never blocks the handler.
        lines.map_while(Result::ok).collect()
    };
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    // With its output closed, a progress line may find the pipe closed before the signal lands:
    // then the run ends as a closed output does, 141, cleaned up all the same.
    if signal != 9 && output == Output::Closed && status.code() == Some(141) {
        eprintln!("{target:?}/{phase}: the closed output ended the run (141) before {}", signal_name(signal));
    } else if signal != 9 {
        assert_eq!(
            status.code(),
            Some(128 + signal),
            "{target:?}/{phase}: {} must end the run with {}; output after it:\n{}",
            signal_name(signal),
            128 + signal,
            rest.join("\n")
        );
    } else {
        assert_eq!(status.signal(), Some(9), "{target:?}/{phase}");
    }
    let docker = (target != TargetKind::Host).then(|| harness::host::docker::Docker::connect().unwrap());
    // Containers go with the handler (SIGINT) or the guardian (SIGKILL: at most the lease).
    let died = Instant::now();
    let deadline = died + Duration::from_secs(harness::host::docker::LEASE_S + 30);
    let pods = target == TargetKind::Pod;
    let count = || docker.as_ref().map_or(0, |d| containers_of(d, child.id())) + if pods { pods_of(child.id()) } else { 0 };
    let mut containers = count();
    while containers > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        containers = count();
    }
    let containers_gone_s = docker.is_some().then(|| died.elapsed().as_secs_f64());
    // Processes die with their owner (PR_SET_PDEATHSIG, the handler, the removed container).
    let deadline = Instant::now() + Duration::from_secs(10);
    let work = toml.parent().unwrap();
    let mut processes = processes_marked(&[work, cache]);
    while !processes.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        processes = processes_marked(&[work, cache]);
    }
    let mut finished = Vec::new();
    let mut staging = Vec::new();
    for e in std::fs::read_dir(results).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(".staging-") {
            let journal = std::fs::read_to_string(e.path().join(harness::host::owner::JOURNAL)).unwrap_or_default();
            let tree = std::process::Command::new("find").arg(e.path()).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
            eprintln!("{target:?}/{phase}: left {name} with journal:\n{journal}\nholding:\n{tree}");
            staging.push(e.path());
        } else {
            finished.push(name);
        }
    }
    let tmp_files = new_files_of_dead_processes(&tmp_before);
    Left { finished, staging, containers, containers_gone_s, tmp_files, processes }
}

/// Every phase, both signals.
const FULL_GRID: &[Cell] = &[
    ("build", 2, Output::Read),
    ("build", 9, Output::Read),
    ("launch", 2, Output::Read),
    ("launch", 9, Output::Read),
    ("collect", 2, Output::Read),
    ("collect", 9, Output::Read),
    ("decode", 2, Output::Read),
    ("decode", 9, Output::Read),
    ("launch", 15, Output::Closed),
    ("collect", 2, Output::Closed),
];

fn signal_name(signal: i32) -> &'static str {
    match signal {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "SIGKILL",
    }
}

/// Interrupts a run of `target` at each of `cells` (phase, signal), then runs once more to the
/// end; asserts what the module doc says and writes the table.
fn interrupt_cells(target: TargetKind, cells: &[Cell]) {
    let test = format!("interrupt::{}_runs_interrupted_leave_nothing", target.as_str());
    let checks: Vec<&dyn Fn() -> Result<(), String>> = match target {
        TargetKind::Host => vec![&require_root, &perf_available],
        TargetKind::Pod => vec![&require_root, &perf_available, &docker_available, &crate::pods::pods_available],
        _ => vec![&require_root, &perf_available, &docker_available],
    };
    if !prerequisites(&test, &checks) {
        return;
    }
    let started = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let toml = scenario_toml(work.path());
    let results = work.path().join("results");
    let warm_cache = work.path().join("cache");
    // (cell, what it left: staging folders and /tmp files, looked at again after the next run)
    let mut rows: Vec<(String, Left)> = Vec::new();
    for &(phase, signal, output) in cells {
        let name = match output {
            Output::Read => signal_name(signal).to_string(),
            Output::Closed => format!("{}, output closed", signal_name(signal)),
        };
        // A fresh build cache gives the build phase a build to interrupt.
        let fresh;
        let cache = if phase == "build" {
            fresh = tempfile::tempdir_in(work.path()).unwrap();
            fresh.path().to_path_buf()
        } else {
            warm_cache.clone()
        };
        let left = interrupt_at(target, (phase, signal, output), &toml, &results, &cache);
        eprintln!(
            "{}/{phase}/{name}: finished {:?}, staging {:?}, containers {}, /tmp {:?}, processes {:?}",
            target.as_str(),
            left.finished,
            left.staging,
            left.containers,
            left.tmp_files,
            left.processes
        );
        assert!(left.finished.is_empty(), "{target:?}/{phase}/{name}: a finished-looking folder: {:?}", left.finished);
        assert_eq!(left.containers, 0, "{target:?}/{phase}/{name}: containers outlived the lease");
        assert!(left.processes.is_empty(), "{target:?}/{phase}/{name}: processes outlived the run: {:?}", left.processes);
        if signal != 9 {
            // Its own staging folder is gone, and its start-up sweep removed the one a SIGKILL
            // before it left.
            assert!(left.staging.is_empty(), "{target:?}/{phase}/{name}: a staging folder was left");
            assert!(left.tmp_files.is_empty(), "{target:?}/{phase}/{name}: /tmp files left: {:?}", left.tmp_files);
        }
        rows.push((format!("{phase} | {name}"), left));
    }
    let killed_staging = rows.last().map_or(0, |(_, l)| l.staging.len());
    // The next run cleans what the SIGKILLs left, says so, and passes.
    let tmp_before = tmp_runtime_files();
    let scenario = harness::scenario::Scenario::load(&toml).unwrap();
    let opts = harness::engine::RunOptions { target: Some(target), results_root: Some(results.clone()), ..Default::default() };
    // SAFETY (test process env): the build cache of the warm runs, read by the engine's build.
    unsafe { std::env::set_var("XDG_CACHE_HOME", &warm_cache) };
    let outcome = harness::engine::run(&scenario, &opts).unwrap();
    let now = tmp_runtime_files();
    // Each cell's leftovers after the runs that followed it (their start-up sweeps).
    let mut table = vec![
        "| target | phase | signal | finished folders | staging folders at exit → after the next run | containers (gone after) | /tmp files at exit → after the next run | processes |".to_string(),
        "|---|---|---|---|---|---|---|---|".to_string(),
    ];
    for (cell, left) in &rows {
        let staging_after = left.staging.iter().filter(|p| p.exists()).count();
        let tmp_after = left.tmp_files.iter().filter(|f| now.contains(*f)).count();
        table.push(format!(
            "| {} | {cell} | {} | {} → {staging_after} | {}{} | {} → {tmp_after} | {} |",
            target.as_str(),
            left.finished.len(),
            left.staging.len(),
            left.containers,
            left.containers_gone_s.map(|s| format!(" ({s:.1} s)")).unwrap_or_default(),
            left.tmp_files.len(),
            left.processes.len()
        ));
    }
    table.push(String::new());
    table.push(format!(
        "next run: {:?}; removed at start: {:?}; {} cells and the next run took {:.0} s",
        outcome.verdict,
        outcome.manifest.swept_at_start,
        rows.len(),
        started.elapsed().as_secs_f64()
    ));
    let text = table.join("\n");
    eprintln!("{text}");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("interrupt-{}.md", target.as_str()));
    std::fs::write(&out, format!("{text}\n")).unwrap();
    eprintln!("(written to {})", out.display());
    assert_eq!(outcome.verdict, judge::Verdict::Pass, "{}", crate::describe(&outcome));
    let staging_removed = outcome.manifest.swept_at_start.iter().filter(|l| l.starts_with("staging folder")).count();
    assert_eq!(staging_removed, killed_staging, "{:?}", outcome.manifest.swept_at_start);
    let staging_left = std::fs::read_dir(&results).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".staging-")).count();
    assert_eq!(staging_left, 0);
    let new_tmp = new_files_of_dead_processes(&tmp_before);
    assert!(new_tmp.is_empty(), "the passing run left {new_tmp:?}");
    for (cell, left) in &rows {
        let still: Vec<_> = left.staging.iter().filter(|p| p.exists()).collect();
        assert!(still.is_empty(), "{cell}: staging folders not swept: {still:?}");
        let still: Vec<_> = left.tmp_files.iter().filter(|f| now.contains(*f)).collect();
        assert!(still.is_empty(), "{cell}: /tmp files not swept: {still:?}");
    }
}

// CI: two cells on the host and in a container (and SIGTERM once), every phase and both signals
// among them; a SIGKILL last, so the run after it has something to sweep and say. The sidecar and
// pod cells run nightly, with their full grids.

#[test]
fn host_runs_interrupted_leave_nothing() {
    interrupt_cells(
        TargetKind::Host,
        &[("build", 2, Output::Read), ("collect", 15, Output::Read), ("collect", 15, Output::Closed), ("decode", 9, Output::Read)],
    );
}

#[test]
fn container_runs_interrupted_leave_nothing() {
    interrupt_cells(TargetKind::Container, &[("collect", 2, Output::Read), ("launch", 9, Output::Read)]);
}

/// CI time: the nightly `interrupt` job's full sidecar and pod grids hold these cells and more
/// (40 s and 29 s of a 41-minute CI run on a fresh two-core machine).
#[test]
#[ignore = "nightly: the sidecar grid (ci/nightly.yml `interrupt`) holds these cells"]
fn sidecar_runs_interrupted_leave_nothing() {
    interrupt_cells(TargetKind::Sidecar, &[("decode", 2, Output::Read), ("collect", 9, Output::Read)]);
}

#[test]
#[ignore = "nightly: the pod grid (ci/nightly.yml `interrupt`) holds these cells"]
fn pod_runs_interrupted_leave_nothing() {
    interrupt_cells(TargetKind::Pod, &[("collect", 2, Output::Read), ("launch", 9, Output::Read)]);
}

// Nightly (the workflow's `interrupt` job): the whole grid on each target.

#[test]
#[ignore = "nightly: the whole grid (ci/nightly.yml `interrupt`); CI runs a few cells on the host and in a container"]
fn host_runs_interrupted_full_grid() {
    interrupt_cells(TargetKind::Host, FULL_GRID);
}

#[test]
#[ignore = "nightly: the whole grid (ci/nightly.yml `interrupt`); CI runs a few cells on the host and in a container"]
fn container_runs_interrupted_full_grid() {
    interrupt_cells(TargetKind::Container, FULL_GRID);
}

#[test]
#[ignore = "nightly: the whole grid (ci/nightly.yml `interrupt`); CI runs a few cells on the host and in a container"]
fn sidecar_runs_interrupted_full_grid() {
    interrupt_cells(TargetKind::Sidecar, FULL_GRID);
}

#[test]
#[ignore = "nightly: the whole grid (ci/nightly.yml `interrupt`); CI runs a few cells on the host and in a container"]
fn pod_runs_interrupted_full_grid() {
    interrupt_cells(TargetKind::Pod, FULL_GRID);
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
    let tmp_before = tmp_runtime_files();
    let (a, b) = (start(), start());
    let mut verdicts = Vec::new();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let done = text.lines().find_map(|l| l.strip_prefix("HELPER-DONE ")).unwrap_or_else(|| panic!("a run did not finish:\n{text}")).to_string();
        // Pass (exit 0), or inconclusive (exit 3) with its reason: never a FAIL or an error
        // caused by the other run.
        let code = out.status.code();
        assert!(
            (done.starts_with("Pass") && code == Some(0)) || (done.starts_with("Inconclusive") && code == Some(3) && !done.ends_with("reason: -")),
            "exit {code:?}: {done}\n{text}"
        );
        verdicts.push(format!("{done} (exit {})", code.unwrap_or(-1)));
    }
    let left = new_files_of_dead_processes(&tmp_before);
    assert!(left.is_empty(), "the two runs left {left:?} in /tmp");
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
    assert_eq!(outcome.verdict, judge::Verdict::Error, "{reason}");
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
    assert_eq!(outcome.verdict, judge::Verdict::Skip, "{reason}");
    assert!(reason.contains("/nonexistent/perf") && reason.contains("not installed"), "{reason}");
    assert!(ran < 10.0, "the app ran {ran} s after its collector failed");
}

/// Stopped is not dead: a run stopped (Ctrl-Z, SIGSTOP) for longer than its guardian's lease keeps
/// its containers — the guardian removes them only once the owner is gone — and, resumed, ends as
/// it would have.
#[test]
fn a_stopped_run_keeps_its_containers_past_the_lease() {
    let test = "interrupt::a_stopped_run_keeps_its_containers_past_the_lease";
    if !prerequisites(test, &[&require_root, &perf_available, &docker_available]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let toml = scenario_toml(work.path());
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "interrupt::interrupt_helper", "--nocapture", "--include-ignored", "--test-threads", "1"])
        .env("TRACELAB_INTERRUPT_SCENARIO", &toml)
        .env("TRACELAB_INTERRUPT_TARGET", "container")
        .env("TRACELAB_INTERRUPT_RESULTS", work.path().join("results"))
        .env("XDG_CACHE_HOME", work.path().join("cache"))
        // A 2 s lease: the stop below outlasts it twice over.
        .env("TRACELAB_LEASE_S", "2")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref().map_while(Result::ok) {
        seen.push(line.clone());
        if line.contains("] collect:") {
            break;
        }
    }
    assert!(seen.last().is_some_and(|l| l.contains("] collect:")), "the run never collected:\n{}", seen.join("\n"));
    let docker = harness::host::docker::Docker::connect().unwrap();
    let before = containers_of(&docker, child.id());
    assert!(before > 0, "the run has no container");
    harness::host::proc::signal(child.id(), libc::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let during = containers_of(&docker, child.id());
    harness::host::proc::signal(child.id(), libc::SIGCONT).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert_eq!(during, before, "the guardian removed a stopped run's containers");
    assert_eq!(status.code(), Some(0), "the resumed run ends as it would have:\n{}", rest.join("\n"));
    assert_eq!(containers_of(&docker, child.id()), 0, "the finished run removed its containers");
}
