//! Runs one scenario end to end: build → launch → collect → stop → decode → judge → report
//! (shared/DESIGN.md §2). The engine only sequences stages; each stage lives in its own module.
//! This file chooses the target and runs the attempts; `app` is one launch of the app with its
//! collectors, in phases; `judging` turns the collections into checks and a verdict.

mod app;
mod judging;

pub use judging::{last_gc_heap_stats, run_metrics};
use judging::{data_quality, judge, slug};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use judge::Verdict;
use crate::collect;
use crate::collect::Collector;
use model::Collection;
use crate::report::{Manifest, ResultsDir};
use crate::scenario::Scenario;
use crate::run::{Target, TargetKind};

/// How to run a scenario (command-line overrides of the scenario file).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub target: Option<TargetKind>,
    pub image: Option<String>,
    /// Where result folders go (default `<root>/results`).
    pub results_root: Option<PathBuf>,
    /// `--symbols DIR`: folders with separate debug files (`libcoreclr.so.dbg` …).
    pub symbol_dirs: Vec<PathBuf>,
    /// `--attach PID`: collect from this running process (host pid) instead of launching the app.
    pub attach: Option<u32>,
    /// `--shape`: the pod's shape on the pod target (else the scenario's, else `sidecar`).
    pub shape: Option<crate::run::pod::PodShape>,
}

/// What a run ended as.
pub struct RunOutcome {
    pub verdict: Verdict,
    /// An inconclusive run whose data was too thin (a starved sampler, lost events) may decide
    /// when collected again; one the run itself left undecided (the app did not end in time, wrote
    /// no truth) would only repeat.
    pub collect_again: bool,
    pub reason: Option<String>,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The target a run uses and why: an explicit choice, else the scenario's, else `container`
/// when a Docker daemon answers and `host` otherwise.
pub(crate) fn choose_target(scenario: &Scenario, opts: &RunOptions) -> Result<(TargetKind, Option<String>)> {
    if opts.attach.is_some() {
        // An attached run's tools run on the host, beside the process.
        return Ok((TargetKind::Host, None));
    }
    if let Some(t) = opts.target {
        return Ok((t, None));
    }
    if let Some(t) = scenario.target {
        return Ok((t, None));
    }
    if let crate::scenario::WorkloadRef::Image { .. } = scenario.workload {
        // The user's image has none of the tools: they run beside it.
        return Ok((TargetKind::Sidecar, Some("an `image` workload: tools run in a sidecar beside it".into())));
    }
    if container_default_available() {
        Ok((TargetKind::Container, None))
    } else {
        Ok((TargetKind::Host, Some("no Docker daemon answers: running on the host".into())))
    }
}

/// The pod's shape on the pod target: `--shape`, else the scenario's, else a tools sidecar.
fn pod_shape(scenario: &Scenario, opts: &RunOptions) -> crate::run::pod::PodShape {
    opts.shape.or(scenario.shape).unwrap_or_default()
}

/// Whether the container target can be the default here: a daemon answers.
fn container_default_available() -> bool {
    crate::host::environment::docker_version().is_some()
}

/// Builds the target a run uses. Container targets default to the least capability set the
/// capability matrix measured to work for the scenario's collectors.
fn make_target(
    kind: TargetKind,
    dotnet: &crate::host::dotnet::Dotnet,
    scenario: &Scenario,
    image: Option<&str>,
    shape: crate::run::pod::PodShape,
) -> Result<Box<dyn Target>> {
    match kind {
        TargetKind::Pod => {
            let kinds: Vec<_> = scenario.collectors.iter().map(|c| c.kind()).collect();
            // The tools container is a sidecar: the capabilities measured for sidecars.
            let caps = match &scenario.capabilities {
                Some(c) => c.clone(),
                None => crate::collect::caps::least_working_for_on(TargetKind::Sidecar, &kinds).unwrap_or_default(),
            };
            let mut options = crate::run::pod::PodOptions::new(shape, image.unwrap_or("bullseye"), caps)?;
            options.host_network = scenario.load.is_some();
            if let Some(r) = &scenario.pod_resources {
                options.cpu_limit = r.cpu.clone();
                options.memory_limit = r.memory.clone();
            }
            Ok(Box::new(crate::run::pod::PodTarget::new(options)?))
        }
        TargetKind::Host => Ok(Box::new(crate::run::HostTarget::new(dotnet.dotnet.clone()))),
        TargetKind::Container | TargetKind::Sidecar => {
            let kinds: Vec<_> = scenario.collectors.iter().map(|c| c.kind()).collect();
            let caps = match &scenario.capabilities {
                Some(c) => c.clone(),
                None => crate::collect::caps::least_working_for_on(kind, &kinds).unwrap_or_default(),
            };
            let mut options = crate::run::container::ContainerOptions::new(image.unwrap_or("bullseye"), caps)?;
            if scenario.load.is_some() {
                // The only case for the host network: a loopback load generator on the host.
                options.network = "host".into();
            }
            Ok(Box::new(crate::run::container::ContainerTarget::new(kind, options)?))
        }
    }
}

/// Runs `scenario` and writes its results folder. Errors are returned only when not even a
/// results folder could be written; anything that goes wrong inside the run becomes a FAIL (a
/// SKIP for an [`collect::Unsupported`] environment, an ERROR for a [`crate::host::errors::Infrastructure`]
/// failure) with its reason.
///
/// A run whose data cannot decide it (inconclusive: lost events, a starved sampler, too few
/// samples — a busy machine, not a wrong pipeline) collects again, as a whole new run, up to
/// `[sufficiency] attempts` in all; the deciding run's manifest lists the earlier ones.
pub fn run(scenario: &Scenario, opts: &RunOptions) -> Result<RunOutcome> {
    crate::host::owner::install();
    let attempts = scenario.sufficiency.attempts.max(1);
    let mut earlier: Vec<crate::report::EarlierAttempt> = Vec::new();
    loop {
        let outcome = run_attempt(scenario, opts, &earlier);
        // An interrupted run ends with the signal's exit code, from the handler.
        crate::host::owner::await_signal_exit();
        let outcome = outcome?;
        if outcome.verdict != Verdict::Inconclusive || !outcome.collect_again || earlier.len() + 1 >= attempts as usize {
            return Ok(outcome);
        }
        let reason = outcome.reason.clone().unwrap_or_default();
        crate::host::progress::note(
            "report",
            &format!("inconclusive ({reason}): collecting again, attempt {} of {attempts}", earlier.len() + 2),
        );
        earlier.push(crate::report::EarlierAttempt { run_id: outcome.manifest.run_id.clone(), reason });
    }
}

fn run_attempt(scenario: &Scenario, opts: &RunOptions, earlier: &[crate::report::EarlierAttempt]) -> Result<RunOutcome> {
    let started = crate::report::utc_rfc3339();
    let (target_kind, target_note) = choose_target(scenario, opts)?;
    if let Some(note) = &target_note {
        crate::host::progress::note("launch", note);
    }
    let image = opts.image.clone().or_else(|| scenario.image.clone());
    let target_name = match target_kind {
        TargetKind::Pod => format!("pod-{}", pod_shape(scenario, opts).as_str()),
        other => other.as_str().to_string(),
    };
    let label = crate::host::environment::short_label(
        &target_name,
        if target_kind == TargetKind::Host { None } else { Some(image.as_deref().unwrap_or("bullseye")) },
    );
    let run_id = format!("{}-{}-{}", crate::report::utc_stamp(), scenario.name, label);
    let results_root = opts.results_root.clone().unwrap_or_else(|| crate::project_root().join("results"));
    // What runs killed before this one left (SIGKILL cannot be caught): removed, and said.
    let swept = crate::host::sweep::sweep_dead(&results_root, true)
        .map(|s| s.lines())
        .unwrap_or_else(|e| vec![format!("the start-up sweep failed: {e:#}")]);
    for line in &swept {
        crate::host::progress::note("launch", &format!("removed {line}"));
    }
    let dir = ResultsDir::create(&results_root, &run_id)?;

    let mut state = RunState {
        durations: BTreeMap::new(),
        commands: Vec::new(),
        collections: Vec::new(),
        truth: serde_json::Value::Null,
        truths: BTreeMap::new(),
        environment: crate::host::environment::collect(),
        completeness: BTreeMap::new(),
        workload: None,
        load_report: None,
        load: BTreeMap::new(),
        other_load: None,
        window: Window::default(),
        windows: Vec::new(),
        cut_short: None,
    };
    state.environment.target = target_kind.as_str().to_string();
    state.environment.pod_shape = (target_kind == TargetKind::Pod).then(|| pod_shape(scenario, opts).as_str().to_string());
    state.environment.image =
        if target_kind == TargetKind::Host { None } else { Some(image.clone().unwrap_or_else(|| "bullseye".into())) };

    let warnings = scenario.setup_warnings();
    for w in &warnings {
        crate::host::progress::note("launch", &format!("warning: {w}"));
    }
    let outcome = execute(scenario, opts, target_kind, image.as_deref(), &dir, &mut state);
    // What the run's host processes left in /tmp (a diagnostics socket and debugger pipes when
    // the app was stopped by a signal; the maps of a run that failed before decoding).
    for left in crate::host::owner::release_ended_processes() {
        crate::host::progress::note("report", &format!("could not remove {left}"));
    }
    crate::host::owner::remove_scratch_dir();
    let report_step = crate::host::progress::step("report", "verdict and files");
    report_step.sub_step("judging the checks");
    let undecided = matches!(&outcome, Err(e) if crate::host::errors::undecided_reason(e).is_some());
    let (verdict, reason, mut checks) = match outcome {
        Ok(()) => judge(scenario, &state),
        Err(e) => match (crate::host::errors::unsupported_reason(&e), crate::host::errors::undecided_reason(&e)) {
            (Some(why), _) => (Verdict::Skip, Some(why), Vec::new()),
            (None, Some(why)) => (Verdict::Inconclusive, Some(why), Vec::new()),
            _ if crate::host::errors::is_infrastructure(&e) => (Verdict::Error, Some(format!("infrastructure: {e:#}")), Vec::new()),
            _ => (Verdict::Fail, Some(format!("{e:#}")), Vec::new()),
        },
    };
    let mut metrics = run_metrics(&state.collections);
    for q in data_quality(scenario, &state.collections, &state.load, state.other_load.as_ref()) {
        q.metrics(&mut metrics);
    }
    metrics.extend(state.load.clone());
    let share_err = checks.iter().filter_map(|c| c.values.get("error_pts")).cloned().fold(f64::NAN, f64::max);
    if !share_err.is_nan() {
        metrics.insert("share_error_pts_max".into(), share_err);
    }
    for c in &mut checks {
        if let Some(col) = &c.collector {
            for (k, v) in &c.values {
                metrics.entry(format!("{col}.check.{}.{k}", slug(&c.name))).or_insert(*v);
            }
        }
    }
    let t_report = Instant::now();
    report_step.sub_step("folded stacks, flame graphs and viewer files");
    let viewer_files = crate::report::write_stacks(&dir, scenario, &state.collections);
    report_step.sub_step("resolution, findings, summary");
    let mut findings = warnings;
    findings.extend(crate::report::diagnose(&state.collections));
    let resolution = state
        .collections
        .iter()
        .filter(|c| !c.samples.is_empty())
        .map(|c| (c.collector.clone(), crate::report::resolution_json(c)))
        .collect();
    state.durations.insert("report".into(), t_report.elapsed().as_secs_f64());
    let manifest = Manifest {
        scenario: scenario.name.clone(),
        verdict,
        reason: reason.clone(),
        checks,
        metrics,
        environment: state.environment.clone(),
        commands: state.commands.clone(),
        durations_s: state.durations.clone(),
        default_tolerances: [
            ("share_pts".to_string(), judge::SHARE_TOLERANCE_PTS),
            ("share_min_samples".to_string(), judge::SHARE_MIN_SAMPLES as f64),
            ("event_count".to_string(), judge::EVENT_COUNT_TOLERANCE as f64),
        ]
        .into(),
        workload: state.workload.clone(),
        collectors: scenario.collectors.iter().map(|c| c.name().to_string()).collect(),
        started_utc: started,
        run_id: run_id.clone(),
        resolution,
        completeness: state.completeness.clone(),
        findings,
        notes: crate::report::capped_notes(&scenario.notes),
        share_tables: crate::report::share_tables(scenario, &state.collections, &state.truth, &state.truths),
        load: state.load_report.clone(),
        earlier_attempts: earlier.to_vec(),
        swept_at_start: swept,
        viewer_files,
        windows: state.windows.iter().map(Window::report).collect(),
    };
    let final_dir = dir.finish(&manifest)?;
    let mut manifest = manifest;
    // Another run may have taken the name: the folder's own name is the id.
    manifest.run_id = final_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(run_id);
    report_step.done(&format!("{} in {}", verdict.upper(), final_dir.display()));
    Ok(RunOutcome { verdict, collect_again: !undecided, reason, dir: final_dir, manifest })
}

pub(crate) struct RunState {
    durations: BTreeMap<String, f64>,
    commands: Vec<String>,
    collections: Vec<Collection>,
    truth: serde_json::Value,
    /// Collector name → the truth of the run it observed (scenarios with separate runs).
    truths: BTreeMap<String, serde_json::Value>,
    environment: crate::host::environment::Environment,
    completeness: BTreeMap<String, serde_json::Value>,
    workload: Option<String>,
    load_report: Option<serde_json::Value>,
    /// Machine load while the app ran (`load.*` metrics; the worst of several runs).
    load: BTreeMap<String, f64>,
    /// The busiest other processes while the app ran (of the busiest launch).
    other_load: Option<crate::run::load::OtherLoad>,
    /// When the app and each collector ran, in the launch under way, CLOCK_MONOTONIC.
    window: Window,
    /// The windows of every launch, in order.
    windows: Vec<Window>,
    /// Why the launch under way cannot be judged although its data is decoded: the app ended
    /// during its measured window, or would not stop (an undecided outcome, never a FAIL).
    cut_short: Option<String>,
}

/// The moments of one launch, in CLOCK_MONOTONIC ns (the clock the collectors stamp samples with).
#[derive(Clone, Debug, Default)]
pub(crate) struct Window {
    pub(crate) launched_ns: u64,
    pub(crate) ready_ns: Option<u64>,
    /// Held at start until every collector recorded.
    pub(crate) held: bool,
    /// `--attach PID`: the app ran already; `launched_ns` is the attach.
    pub(crate) attached: bool,
    /// The measured window: from ready + `warmup_s` (or the load's start, or the release of a
    /// tracelab workload) to the stop.
    pub(crate) from_ns: Option<u64>,
    pub(crate) to_ns: Option<u64>,
    /// Collector → (recording from, stopped at).
    pub(crate) collectors: BTreeMap<String, (Option<u64>, Option<u64>)>,
}

impl RunState {
    /// The window of the launch collector `name` recorded in.
    fn window_of(&self, name: &str) -> Option<&Window> {
        self.windows.iter().find(|w| w.collectors.contains_key(name))
    }
}

impl Window {
    /// Seconds from the launch.
    fn offset(&self, ns: Option<u64>) -> Option<f64> {
        ns.map(|t| (t as f64 - self.launched_ns as f64) / 1e9)
    }

    /// The window as the manifest records it: seconds from the launch.
    pub(crate) fn report(&self) -> crate::report::WindowReport {
        crate::report::WindowReport {
            held_at_start: self.held,
            attached: self.attached,
            ready_s: self.offset(self.ready_ns),
            measured_from_s: self.offset(self.from_ns),
            measured_to_s: self.offset(self.to_ns),
            collectors: self
                .collectors
                .iter()
                .map(|(name, (from, to))| (name.clone(), [self.offset(*from), self.offset(*to)]))
                .collect(),
        }
    }

    /// Seconds of the measured window collector `name` did not record (started late, stopped
    /// early), when it ran in this launch.
    pub(crate) fn missed_s(&self, name: &str) -> Option<f64> {
        let (from, to) = (self.from_ns?, self.to_ns?);
        let (start, stop) = self.collectors.get(name)?;
        let late = start.map_or(0, |s| s.saturating_sub(from));
        let early = stop.map_or(0, |s| to.saturating_sub(s));
        Some((late + early) as f64 / 1e9)
    }
}

fn timed<T>(state: &mut RunState, name: &str, f: impl FnOnce(&mut RunState) -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let r = f(state);
    *state.durations.entry(name.to_string()).or_default() += t.elapsed().as_secs_f64();
    r
}

/// `--attach PID`: the scenario's collectors and checks on a running process, its tools run on
/// the host beside it (an app in a container or pod by its host pid). Refused with the reason: a
/// pid that is gone (5), or not a .NET process with its diagnostics on (4).
fn execute_attached(
    scenario: &Scenario,
    opts: &RunOptions,
    pid: u32,
    mut collectors: Vec<Box<dyn Collector>>,
    dir: &ResultsDir,
    state: &mut RunState,
) -> Result<()> {
    let unsupported = |reason: String| anyhow::Error::new(crate::host::errors::Unsupported { reason });
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(crate::host::errors::Infrastructure::wrap(anyhow::anyhow!("process {pid} does not exist (it ended, or the pid is wrong): nothing to attach to")));
    }
    // An app in a container or pod is reached by its host pid: its socket, perf map and files
    // through /proc/PID/root, named by its pid there (the last NSpid).
    let ns = crate::host::proc::nspid(pid).unwrap_or_default();
    let contained = ns.len() > 1;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let dotnet = maps.contains("libcoreclr.so");
    if let Some(e) = crate::run::ready::diagnostics_unreachable(pid) {
        let what = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        return Err(unsupported(if dotnet {
            format!(
                "process {pid} (`{}`) is a .NET app whose diagnostics are off (DOTNET_EnableDiagnostics=0, or its IPC): no tool can \
                 attach to it; restart it without that setting ({e})",
                what.trim()
            )
        } else {
            format!("process {pid} (`{}`) is not a .NET app (no libcoreclr.so in its memory map, no diagnostics socket): nothing to attach to", what.trim())
        }));
    }
    state.workload = Some(format!("pid {pid}"));
    let inside = if contained { format!(" (pid {} in its container)", ns.last().copied().unwrap_or(0)) } else { String::new() };
    state.commands.push(format!(
        "attach to pid {pid}{inside}: {}",
        std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default().replace('\0', " ").trim()
    ));
    let artifacts = dir.artifacts();
    std::fs::create_dir_all(&artifacts)?;
    let dotnet = timed(state, "dotnet", |_| crate::host::dotnet::Dotnet::locate_or_install())?;
    let mut target: Box<dyn Target> = Box::new(if contained {
        crate::run::HostTarget::seen_through(dotnet.dotnet.clone(), PathBuf::from(format!("/proc/{pid}/root")))
    } else {
        crate::run::HostTarget::new(dotnet.dotnet.clone())
    });
    let result = app::attach_app(scenario, opts, pid, target.as_mut(), &mut collectors, &artifacts, state);
    let cleanup = target.cleanup();
    result?;
    cleanup.context("cleaning up the target")?;
    Ok(())
}

fn execute(
    scenario: &Scenario,
    opts: &RunOptions,
    target_kind: TargetKind,
    image: Option<&str>,
    dir: &ResultsDir,
    state: &mut RunState,
) -> Result<()> {
    // Build every collector first: a bad option fails before anything runs.
    let mut collectors: Vec<Box<dyn Collector>> = scenario
        .collectors
        .iter()
        .map(|spec| {
            let mut spec = spec.clone();
            if let (true, collect::CollectorOptions::PerfCpu(o)) = (opts.attach.is_some() || scenario.attach, &mut spec.options) {
                // An app tracelab did not start runs with .NET's W^X on: its JIT code executes
                // from a memfd alias, which the perf map names by address.
                o.name_doublemapped = true;
            }
            collect::from_spec(&spec)
        })
        .collect::<Result<_>>()?;
    // A collector the environment rules out SKIPs the run before anything is built.
    let runs_on = if opts.attach.is_some() { TargetKind::Host } else { target_kind };
    for c in &collectors {
        c.preflight()?;
        c.runs_on(runs_on)?;
    }
    let groups = scenario.run_groups();

    if let Some(pid) = opts.attach {
        return execute_attached(scenario, opts, pid, collectors, dir, state);
    }
    crate::host::progress::note("build", &format!("workload for `{}`", scenario.name));
    let dotnet = timed(state, "dotnet", |_| crate::host::dotnet::Dotnet::locate_or_install())?;
    if state.environment.dotnet_runtimes.is_empty() {
        state.environment.dotnet_runtimes = crate::host::environment::dotnet_runtimes(&dotnet.dotnet);
    }
    // An app that cannot be built says nothing about the pipeline: an ERROR (exit 5) naming the
    // compiler's last lines, never a FAIL.
    let built = timed(state, "build", |_| crate::workload::prepare(&scenario.workload).map_err(crate::host::errors::Infrastructure::wrap))?;
    state.workload = Some(built.name.clone());

    for (i, group) in groups.iter().enumerate() {
        let mut members: Vec<Box<dyn Collector>> = Vec::new();
        let mut rest = Vec::new();
        for c in collectors.drain(..) {
            if group.iter().any(|g| g == c.name()) { members.push(c) } else { rest.push(c) }
        }
        collectors = rest;
        let artifacts = if groups.len() > 1 { dir.artifacts().join(format!("run-{}", i + 1)) } else { dir.artifacts() };
        std::fs::create_dir_all(&artifacts)?;
        if groups.len() > 1 {
            crate::host::progress::note("launch", &format!("run {} of {}: {}", i + 1, groups.len(), group.join(", ")));
        }
        let mut target: Box<dyn Target> =
            timed(state, "target", |_| make_target(target_kind, &dotnet, scenario, image, pod_shape(scenario, opts)))?;
        state.environment.target_capabilities = target.capabilities();
        let first_collection = state.collections.len();
        let result = app::run_app(scenario, opts, &built, target.as_mut(), &mut members, &artifacts, state);
        let cleanup = target.cleanup();
        result?;
        cleanup.context("cleaning up the target")?;
        for c in &state.collections[first_collection..] {
            state.truths.insert(c.collector.clone(), state.truth.clone());
        }
    }
    // With separate runs, the manifest-level truth is the first run's.
    if let Some(first) = groups.first().and_then(|g| g.first()).and_then(|c| state.truths.get(c)) {
        state.truth = first.clone();
    }
    Ok(())
}


