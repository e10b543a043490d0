//! Runs one scenario end to end: build → launch → collect → decode → assert → report
//! (shared/DESIGN.md §2). The engine only sequences stages; each stage lives in its own module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::assert::{self, Check, Evidence, Verdict};
use crate::collect::{self, Collector};
use crate::symbolize::DecodeContext;
use crate::model::{Collection, DsoClass};
use crate::report::{Manifest, ResultsDir};
use crate::scenario::{Protocol, Ready, Scenario, Stop};
use crate::run::{AppLaunch, Target, TargetKind};

/// How to run a scenario (command-line overrides of the scenario file).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub target: Option<TargetKind>,
    pub image: Option<String>,
    /// Where result folders go (default `<root>/results`).
    pub results_root: Option<PathBuf>,
    /// `--symbols DIR`: folders with separate debug files (`libcoreclr.so.dbg` …).
    pub symbol_dirs: Vec<PathBuf>,
}

/// What a run ended as.
pub struct RunOutcome {
    pub verdict: Verdict,
    pub reason: Option<String>,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The target a run uses and why: an explicit choice, else the scenario's, else `container`
/// when a Docker daemon answers and `host` otherwise.
pub fn choose_target(scenario: &Scenario, opts: &RunOptions) -> Result<(TargetKind, Option<String>)> {
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

/// Whether the container target can be the default here: a daemon answers.
fn container_default_available() -> bool {
    crate::environment::docker_version().is_some()
}

/// Builds the target a run uses. Container targets default to the least capability set the
/// capability matrix measured to work for the scenario's collectors.
fn make_target(
    kind: TargetKind,
    dotnet: &crate::dotnet::Dotnet,
    scenario: &Scenario,
    image: Option<&str>,
) -> Result<Box<dyn Target>> {
    match kind {
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
/// SKIP for an [`collect::Unsupported`] environment, an ERROR for a [`crate::infra::Infrastructure`]
/// failure) with its reason.
///
/// A run whose data cannot decide it (inconclusive: lost events, a starved sampler, too few
/// samples — a busy machine, not a wrong pipeline) collects again, as a whole new run, up to
/// `[sufficiency] attempts` in all; the deciding run's manifest lists the earlier ones.
pub fn run(scenario: &Scenario, opts: &RunOptions) -> Result<RunOutcome> {
    crate::owner::install();
    let attempts = scenario.sufficiency.attempts.max(1);
    let mut earlier: Vec<crate::report::EarlierAttempt> = Vec::new();
    loop {
        let outcome = run_attempt(scenario, opts, &earlier);
        // An interrupted run ends with the signal's exit code, from the handler.
        crate::owner::await_signal_exit();
        let outcome = outcome?;
        if outcome.verdict != Verdict::Inconclusive || earlier.len() + 1 >= attempts as usize {
            return Ok(outcome);
        }
        let reason = outcome.reason.clone().unwrap_or_default();
        crate::progress::note(
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
        crate::progress::note("launch", note);
    }
    let image = opts.image.clone().or_else(|| scenario.image.clone());
    let label = crate::environment::short_label(
        target_kind.as_str(),
        if target_kind == TargetKind::Host { None } else { Some(image.as_deref().unwrap_or("bullseye")) },
    );
    let run_id = format!("{}-{}-{}", crate::report::utc_stamp(), scenario.name, label);
    let results_root = opts.results_root.clone().unwrap_or_else(|| crate::project_root().join("results"));
    // What runs killed before this one left (SIGKILL cannot be caught): removed, and said.
    let swept = crate::owner::sweep_dead(&results_root, true)
        .map(|s| s.lines())
        .unwrap_or_else(|e| vec![format!("the start-up sweep failed: {e:#}")]);
    for line in &swept {
        crate::progress::note("launch", &format!("removed {line}"));
    }
    let dir = ResultsDir::create(&results_root, &run_id)?;

    let mut state = RunState {
        durations: BTreeMap::new(),
        commands: Vec::new(),
        collections: Vec::new(),
        truth: serde_json::Value::Null,
        truths: BTreeMap::new(),
        environment: crate::environment::collect(),
        completeness: BTreeMap::new(),
        workload: None,
        load_report: None,
        load: BTreeMap::new(),
    };
    state.environment.target = target_kind.as_str().to_string();
    state.environment.image =
        if target_kind == TargetKind::Host { None } else { Some(image.clone().unwrap_or_else(|| "bullseye".into())) };

    let outcome = execute(scenario, opts, target_kind, image.as_deref(), &dir, &mut state);
    // What the run's host processes left in /tmp (a diagnostics socket and debugger pipes when
    // the app was stopped by a signal; the maps of a run that failed before decoding).
    for left in crate::owner::release_ended_processes() {
        crate::progress::note("report", &format!("could not remove {left}"));
    }
    crate::owner::remove_scratch_dir();
    let report_step = crate::progress::step("report", "checks, stacks, flame graphs, summary");
    let (verdict, reason, mut checks) = match outcome {
        Ok(()) => judge(scenario, &state),
        Err(e) => match collect::unsupported_reason(&e) {
            Some(why) => (Verdict::Skip, Some(why), Vec::new()),
            None if crate::infra::is_infrastructure(&e) => (Verdict::Error, Some(format!("infrastructure: {e:#}")), Vec::new()),
            None => (Verdict::Fail, Some(format!("{e:#}")), Vec::new()),
        },
    };
    let mut metrics = run_metrics(&state.collections);
    for q in data_quality(scenario, &state.collections) {
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
    let viewer_files = write_stacks(&dir, scenario, &state.collections);
    let findings = diagnose(&state.collections);
    let resolution = state
        .collections
        .iter()
        .filter(|c| !c.samples.is_empty())
        .map(|c| (c.collector.clone(), resolution_json(c)))
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
            ("share_pts".to_string(), assert::SHARE_TOLERANCE_PTS),
            ("share_min_samples".to_string(), assert::SHARE_MIN_SAMPLES as f64),
            ("event_count".to_string(), assert::EVENT_COUNT_TOLERANCE as f64),
        ]
        .into(),
        workload: state.workload.clone(),
        collectors: scenario.collectors.iter().map(|c| c.name().to_string()).collect(),
        started_utc: started,
        run_id: run_id.clone(),
        resolution,
        completeness: state.completeness.clone(),
        findings,
        notes: scenario.notes.clone(),
        share_tables: share_tables(scenario, &state),
        load: state.load_report.clone(),
        earlier_attempts: earlier.to_vec(),
        swept_at_start: swept,
        viewer_files,
    };
    let final_dir = dir.finish(&manifest)?;
    let mut manifest = manifest;
    // Another run may have taken the name: the folder's own name is the id.
    manifest.run_id = final_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(run_id);
    report_step.done(&format!("{} in {}", verdict.upper(), final_dir.display()));
    Ok(RunOutcome { verdict, reason, dir: final_dir, manifest })
}

struct RunState {
    durations: BTreeMap<String, f64>,
    commands: Vec<String>,
    collections: Vec<Collection>,
    truth: serde_json::Value,
    /// Collector name → the truth of the run it observed (scenarios with separate runs).
    truths: BTreeMap<String, serde_json::Value>,
    environment: crate::environment::Environment,
    completeness: BTreeMap<String, serde_json::Value>,
    workload: Option<String>,
    load_report: Option<serde_json::Value>,
    /// Machine load while the app ran (`load.*` metrics; the worst of several runs).
    load: BTreeMap<String, f64>,
}

fn timed<T>(state: &mut RunState, name: &str, f: impl FnOnce(&mut RunState) -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let r = f(state);
    *state.durations.entry(name.to_string()).or_default() += t.elapsed().as_secs_f64();
    r
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
    let mut collectors: Vec<Box<dyn Collector>> =
        scenario.collectors.iter().map(collect::from_spec).collect::<Result<_>>()?;
    let groups = scenario.run_groups();

    crate::progress::note("build", &format!("workload for `{}`", scenario.name));
    let dotnet = timed(state, "dotnet", |_| crate::dotnet::Dotnet::locate_or_install())?;
    if state.environment.dotnet_runtimes.is_empty() {
        state.environment.dotnet_runtimes = crate::environment::dotnet_runtimes(&dotnet.dotnet);
    }
    let built = timed(state, "build", |_| crate::workload::prepare(&scenario.workload))?;
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
            crate::progress::note("launch", &format!("run {} of {}: {}", i + 1, groups.len(), group.join(", ")));
        }
        let mut target: Box<dyn Target> =
            timed(state, "target", |_| make_target(target_kind, &dotnet, scenario, image))?;
        state.environment.target_capabilities = target.capabilities();
        let first_collection = state.collections.len();
        let result = run_app(scenario, opts, &built, target.as_mut(), &mut members, &artifacts, state);
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

fn run_app(
    scenario: &Scenario,
    opts: &RunOptions,
    built: &crate::workload::PreparedApp,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    artifacts: &Path,
    state: &mut RunState,
) -> Result<()> {
    let artifacts = artifacts.to_path_buf();
    let truth_path = artifacts.join("truth.json");
    let go_path = artifacts.join(".go");
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for c in collectors.iter() {
        env.extend(c.app_env());
    }
    // The scenario's and this run's collectors' own `env` override what collectors ask for.
    let names: Vec<String> = collectors.iter().map(|c| c.name().to_string()).collect();
    env.extend(scenario.run_env(&names)?);
    let protocol = scenario.protocol();
    let mut args = Vec::new();
    if protocol == Protocol::Tracelab {
        args.extend(["--truth".to_string(), truth_path.display().to_string(), "--go-file".to_string(), go_path.display().to_string()]);
    }
    args.extend(scenario.args.iter().cloned());
    let launch = AppLaunch { program: built.program.clone(), args, env: env.clone(), work_dir: artifacts.clone(), cwd: scenario.cwd.clone() };
    state.commands.push(
        [
            crate::run::quoted(env.iter().map(|(k, v)| format!("{k}={v}"))),
            built.program.describe(),
            crate::run::quoted(&launch.args),
        ]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" "),
    );

    crate::progress::note("launch", &format!("starting `{}` on the {} target", built.name, target.label()));
    let t_run = Instant::now();
    let mut app = target.launch(&launch)?;
    let awaited = match protocol {
        Protocol::Tracelab => app.wait_for_line("TRACELAB READY", Duration::from_secs(90)).map(|_| None),
        Protocol::None => {
            let ready = scenario.ready.clone().unwrap_or_else(|| default_ready(scenario, built));
            crate::progress::note("launch", &format!("waiting for {}", ready.describe()));
            let timeout = Duration::from_secs(scenario.timeout_s.min(90));
            crate::run::ready::await_ready(&mut app, &ready, timeout).and_then(|url| {
                let warmup = scenario.warmup_s.unwrap_or(1.0);
                crate::progress::note("launch", &format!("ready; warm-up {warmup} s before measuring"));
                if crate::run::ready::run_for(&mut app, warmup) {
                    Ok(url)
                } else {
                    app.drain_output();
                    bail!("the app exited during its {warmup} s warm-up; its last lines:\n{}", app.last_lines(15))
                }
            })
        }
    };
    state.load.insert("app.pid".into(), f64::from(app.target_pid));
    let url = match awaited {
        Ok(url) => url,
        Err(e) => {
            let code = target.wait_app(&mut app, Duration::from_secs(1));
            let _ = std::fs::write(artifacts.join("app-output.txt"), app.transcript.join("\n"));
            let e = match code {
                Ok(code) => e.context(format!("the app ended with exit code {code}")),
                Err(_) => e,
            };
            // The app never got to be measured: no answer of the pipeline was wrong.
            return Err(if protocol == Protocol::None { crate::infra::Infrastructure::wrap(e) } else { e });
        }
    };
    let url = scenario.load.as_ref().and_then(|l| l.url.clone()).or(url).or_else(|| {
        app.transcript.iter().find_map(|l| l.strip_prefix("TRACELAB LISTENING ")).map(|u| u.trim().trim_end_matches('/').to_string())
    });

    // Every collector must be recording before the app is released into its measured phase.
    let mut started: Vec<usize> = Vec::new();
    let mut start_error = None;
    for (i, c) in collectors.iter_mut().enumerate() {
        crate::progress::note("launch", &format!("starting collector `{}`", c.name()));
        match c.start(target, &app, &artifacts) {
            Ok(()) => started.push(i),
            Err(e) => {
                start_error = Some(e.context(format!("collector `{}` could not start", c.name())));
                break;
            }
        }
    }
    let probe = start_error.is_none().then(|| crate::run::load::LoadProbe::start(app.host_pid));
    // The collect step starts when the app is released, before any load: started after the load
    // (as it once was) it showed 1.3 s for a ~10 s collection.
    let mut spinner = None;
    if start_error.is_none() {
        if protocol == Protocol::Tracelab {
            std::fs::write(&go_path, b"go").with_context(|| format!("cannot write {}", go_path.display()))?;
        }
        let what = format!("app `{}`", built.name);
        spinner = Some(match expected_collect_s(scenario) {
            Some(s) => crate::progress::timed_step("collect", what, Duration::from_secs_f64(s)),
            None => crate::progress::step("collect", what),
        });
        if let Some(load) = &scenario.load {
            let applied = url
                .as_deref()
                .context("no URL for `[load]`: give `[load] url`, or a `ready.line` with a (?P<url>…) capture")
                .and_then(|u| apply_load(load, u, protocol == Protocol::Tracelab, state));
            if let Err(e) = applied {
                start_error = Some(e);
            }
        } else if protocol == Protocol::None && scenario.stop != Some(Stop::Exit) {
            crate::run::ready::run_for(&mut app, scenario.seconds.unwrap_or(DEFAULT_WINDOW_S));
        }
    }
    let spinner = spinner.unwrap_or_else(|| crate::progress::step("collect", format!("stopping `{}`", built.name)));
    // An app as it is ends after its collectors (unless it is awaited to exit by itself): a
    // user image is its container's pid 1, whose exit would end the tools beside it unflushed.
    let stop = scenario.stop.clone().unwrap_or(Stop::Sigterm);
    let stop_first = protocol == Protocol::None && stop != Stop::Exit;
    if stop_first {
        stop_collectors(collectors, &started, target, &app, state, &mut start_error);
    }
    let exit = match protocol {
        // Nothing will be measured: the app is not left waiting for a go signal that never comes
        // (it once held the run 120 s after a collector failed to start).
        _ if start_error.is_some() => target.wait_app(&mut app, Duration::from_millis(300)),
        Protocol::None if app.is_alive() => crate::run::ready::stop_app(&app, &stop, url.as_deref()).and_then(|done| {
            state.commands.push(done);
            let limit = if stop == Stop::Exit { scenario.timeout_s } else { STOP_GRACE_S };
            target.wait_app(&mut app, Duration::from_secs(limit)).with_context(|| format!("after {}", describe_stop(&stop)))
        }),
        _ => target.wait_app(&mut app, Duration::from_secs(scenario.timeout_s)),
    };
    match &exit {
        Ok(0) if !scenario.expect_crash => spinner.done("finished"),
        Ok(code) if scenario.expect_crash && *code == SIGABRT_EXIT => spinner.done("crashed, as expected (SIGABRT)"),
        Ok(code) if stop_first => spinner.done(&format!("stopped (exit code {code})")),
        _ => spinner.failed(),
    }
    for (k, v) in probe.map(|p| p.finish()).unwrap_or_default() {
        let worst = state.load.entry(k).or_insert(v);
        *worst = worst.max(v);
    }
    if !stop_first {
        stop_collectors(collectors, &started, target, &app, state, &mut start_error);
    }
    state.durations.insert("run".into(), t_run.elapsed().as_secs_f64());
    std::fs::write(artifacts.join("app-output.txt"), app.transcript.join("\n"))?;
    let _ = std::fs::remove_file(&go_path);
    if let Some(e) = start_error {
        return Err(e);
    }
    let code = exit?;
    state.load.insert("app.exit_code".into(), code as f64);
    // An app stopped by the signal it was asked to stop with ends with that signal's code.
    let by_our_signal = stop_first && matches!((&stop, code), (Stop::Sigterm, 143 | -1) | (Stop::Sigint, 130 | -1));
    if scenario.expect_crash {
        if code != SIGABRT_EXIT {
            bail!(
                "the app was expected to die of an unhandled exception (SIGABRT, exit code {SIGABRT_EXIT}) but exited with code {code}; last lines:\n{}",
                app.last_lines(15)
            );
        }
    } else if code != 0 && !by_our_signal {
        bail!("the app exited with code {code}; last lines:\n{}", app.last_lines(15));
    }
    state.truth = match protocol {
        Protocol::Tracelab => {
            let truth_text = std::fs::read_to_string(&truth_path)
                .with_context(|| format!("the app wrote no {} (its output is in artifacts/app-output.txt)", truth_path.display()))?;
            serde_json::from_str(&truth_text).with_context(|| format!("{} is not JSON", truth_path.display()))?
        }
        Protocol::None => match &scenario.truth {
            Some(spec) => spec.read(scenario.cwd.as_deref().unwrap_or(&artifacts))?,
            None => serde_json::Value::Null,
        },
    };

    let t_decode = Instant::now();
    // Container runs record paths as the container saw them; the target maps them to host files.
    let target_ref: &dyn Target = &*target;
    let map_fn = |p: &Path| target_ref.path_map(p);
    let path_map: &dyn Fn(&Path) -> Option<PathBuf> = &map_fn;
    let ctx = DecodeContext {
        artifacts: &artifacts,
        app_tmp_dir: &app.tmp_dir_host,
        host_pid: app.host_pid,
        target_pid: app.target_pid,
        path_map,
        symbol_dirs: &opts.symbol_dirs,
    };
    // The perf map the runtime wrote in this run (a perf collector copies it into the artifacts)
    // lists every method the JIT compiled, sampled or not: the ground truth of JIT names.
    let perf_map = artifacts.join(format!("perf-{}.map", app.target_pid));
    let perf_map_names = if perf_map.is_file() {
        let bytes = std::fs::read(&perf_map).with_context(|| format!("cannot read {}", perf_map.display()))?;
        let table = crate::symbolize::jit::parse_perf_map(&bytes, &perf_map)?;
        table.names().map(|n| crate::model::merge_code_version(n).to_string()).collect()
    } else {
        std::collections::BTreeSet::new()
    };
    for c in collectors.iter_mut() {
        let decoding = crate::progress::step("decode", c.name());
        let mut collection = c.decode(&ctx).with_context(|| format!("decoding `{}`", c.name()))?;
        decoding.done(&format!("{} samples, {} events", collection.samples.len(), collection.events.len()));
        if collection.method_names.is_empty() {
            collection.method_names = perf_map_names.clone();
        }
        if !collection.samples.is_empty() {
            let report = crate::unwind::completeness_of_collection(&collection);
            report.add_metrics_if_absent(&mut collection.metrics);
            state.completeness.insert(collection.collector.clone(), serde_json::to_value(&report)?);
        }
        state.collections.push(collection);
    }
    state.durations.insert("decode".into(), t_decode.elapsed().as_secs_f64());
    app.keep_runtime_files(&artifacts)?;
    Ok(())
}

/// How a process the runtime aborted on an unhandled exception exits (128 + SIGABRT), as a
/// shell reports it and as the host target reports a death by signal.
const SIGABRT_EXIT: i32 = 134;

/// Seconds a run of an app as it is measures when neither `seconds` nor `[load]` says.
const DEFAULT_WINDOW_S: f64 = 5.0;
/// Seconds an app gets to end after its stop signal or request.
const STOP_GRACE_S: u64 = 30;

fn describe_stop(stop: &Stop) -> String {
    match stop {
        Stop::Sigint => "SIGINT".into(),
        Stop::Sigterm => "SIGTERM".into(),
        Stop::Exit => "waiting for it to exit".into(),
        Stop::Http(p) => format!("GET {p}"),
    }
}

/// Readiness when the scenario names none: ASP.NET Core's own listening line for a web app (its
/// runtimeconfig lists Microsoft.AspNetCore.App) or when load is asked for, else the runtime's
/// diagnostics socket (any .NET app has one).
fn default_ready(scenario: &Scenario, app: &crate::workload::PreparedApp) -> Ready {
    let web = scenario.load.is_some()
        || match &app.program {
            crate::workload::Program::Dll(dll) => crate::scenario::is_aspnetcore(dll),
            crate::workload::Program::Command(argv) => crate::scenario::is_aspnetcore(&Path::new(&argv[0]).with_extension("dll")),
            crate::workload::Program::Image(_) => false,
        };
    if web { Ready::Line(crate::scenario::ASPNETCORE_READY_LINE.into()) } else { Ready::DiagnosticSocket }
}

/// Stops the started collectors (each writes its data); the first failure is kept.
fn stop_collectors(
    collectors: &mut [Box<dyn Collector>],
    started: &[usize],
    target: &mut dyn Target,
    app: &crate::run::RunningApp,
    state: &mut RunState,
    first_error: &mut Option<anyhow::Error>,
) {
    for &i in started {
        if let Err(e) = collectors[i].stop(target, app) {
            // The tool crashed or hung around the app: infrastructure, unless the environment
            // proves the collector cannot work here (a SKIP).
            let e = e.context(format!("collector `{}` failed while stopping", collectors[i].name()));
            let e = if collect::unsupported_reason(&e).is_some() { e } else { crate::infra::Infrastructure::wrap(e) };
            first_error.get_or_insert(e);
        }
        state.commands.extend(collectors[i].commands());
    }
}


/// How long the measured phase should last: the load's seconds (the app is stopped after it),
/// else the app's `--seconds`; None for workloads that run to a count.
fn expected_collect_s(scenario: &Scenario) -> Option<f64> {
    if let Some(load) = &scenario.load {
        return Some(load.seconds);
    }
    if scenario.protocol() == Protocol::None {
        return (scenario.stop != Some(Stop::Exit)).then(|| scenario.seconds.unwrap_or(DEFAULT_WINDOW_S));
    }
    let at = scenario.args.iter().position(|a| a == "--seconds")?;
    scenario.args.get(at + 1)?.parse().ok()
}

/// Drives equal loopback load on each route of `url` for the stated time; a tracelab workload
/// is then asked to end its measured phase (`GET /stop`).
fn apply_load(load: &crate::scenario::LoadSpec, url: &str, tracelab_stop: bool, state: &mut RunState) -> Result<()> {
    crate::progress::note("collect", &format!(
        "load: {} connection(s) per route on {} for {} s",
        load.connections_per_route,
        load.routes.join(", "),
        load.seconds
    ));
    let host_port = crate::run::load::loopback_host_port(url)?;
    let routes = load.routes.iter().map(|r| r.parse()).collect::<Result<Vec<loadgen::Route>, _>>()?;
    let mut config = loadgen::Config::new(&host_port, routes)?;
    config.connections_per_route = load.connections_per_route as usize;
    config.duration = Duration::from_secs_f64(load.seconds);
    let report = loadgen::run(&config).context("the load generator failed")?;
    state.commands.push(format!(
        "loadgen {url} routes={} connections_per_route={} seconds={}",
        load.routes.join(","),
        load.connections_per_route,
        load.seconds
    ));
    state.load_report = Some(serde_json::to_value(&report)?);
    if !tracelab_stop {
        return Ok(());
    }
    // Ends the app's measured phase now rather than at its --seconds.
    let mut stop = loadgen::Config::new(&host_port, vec!["/stop".parse()?])?;
    stop.max_requests_per_route = Some(1);
    stop.duration = Duration::from_secs(5);
    let _ = loadgen::run(&stop);
    Ok(())
}

/// Turns the expectations into checks and the checks into a verdict.
fn judge(scenario: &Scenario, state: &RunState) -> (Verdict, Option<String>, Vec<Check>) {
    let metrics = run_metrics(&state.collections);
    let ev = Evidence { collections: &state.collections, truth: &state.truth, truths: &state.truths, metrics: &metrics };
    let mut checks: Vec<Check> = Vec::new();
    // A scenario never passes on zero samples: every collector must have seen something.
    for c in &state.collections {
        let n = c.samples.len() + c.events.len();
        checks.push(Check {
            name: format!("{} collected data", c.collector),
            verdict: if n > 0 { Verdict::Pass } else { Verdict::Fail },
            expected: "> 0 samples or events".into(),
            measured: format!("{} samples, {} events", c.samples.len(), c.events.len()),
            collector: Some(c.collector.clone()),
            values: BTreeMap::new(),
            details: Vec::new(),
            reason: None,
        });
    }
    // A check on samples too thin to decide (lost events, a starved sampling rate) is
    // inconclusive, whichever way it came out.
    let quality = data_quality(scenario, &state.collections);
    checks.extend(scenario.expectations.iter().map(|e| {
        let check = e.evaluate(&ev);
        if !e.check.judge().sampled() {
            return check;
        }
        let q = quality.iter().find(|q| Some(&q.collector) == check.collector.as_ref());
        assert::sufficiency::apply(check, q, &scenario.sufficiency, e.check.judge().against_wall_clock_truth())
    }));
    let verdict = Verdict::combine(checks.iter().map(|c| c.verdict));
    let reason = checks
        .iter()
        .filter(|c| c.verdict == verdict && verdict != Verdict::Pass)
        .map(|c| match &c.reason {
            Some(why) => format!("{}: {why} (expected {}, measured {})", c.name, c.expected, c.measured),
            None => format!("{}: expected {}, measured {}", c.name, c.expected, c.measured),
        })
        .collect::<Vec<_>>()
        .join("; ");
    (verdict, (!reason.is_empty()).then_some(reason), checks)
}

/// Each collection's data quality: lost events and, for timer samplers, the effective sampling
/// rate of the measured threads against the frequency the scenario asked for.
fn data_quality(scenario: &Scenario, collections: &[Collection]) -> Vec<assert::DataQuality> {
    collections
        .iter()
        .map(|c| {
            let spec = scenario.collectors.iter().find(|s| s.name() == c.collector);
            let asked = spec.and_then(|s| match &s.options {
                collect::CollectorOptions::PerfCpu(o) => Some(o.frequency as f64),
                _ => None,
            });
            assert::DataQuality::measure(c, asked)
        })
        .collect()
}

fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect()
}

/// The flat metrics map: per collector, and the primary collector's figures unprefixed.
pub fn run_metrics(collections: &[Collection]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let primary = collections.iter().find(|c| !c.samples.is_empty());
    for c in collections {
        let p = &c.collector;
        m.insert(format!("{p}.samples_total"), c.samples.len() as f64);
        m.insert(format!("{p}.events_total"), c.events.len() as f64);
        m.insert(format!("{p}.lost_events"), c.lost_events as f64);
        for (k, v) in c.metrics.iter().chain(&last_gc_heap_stats(c)) {
            m.insert(format!("{p}.{k}"), *v);
        }
        let res = assert::resolution(c, true);
        for (class, (total, named)) in &res {
            if *total > 0 {
                m.insert(format!("{p}.resolved_ratio_{}", class.as_str()), *named as f64 / *total as f64);
            }
        }
    }
    m.insert("samples_total".into(), primary.map_or(0, |c| c.samples.len()) as f64);
    if let Some(c) = primary {
        let res = assert::resolution(c, true);
        for class in DsoClass::ALL {
            if let Some((total, named)) = res.get(&class) {
                if *total > 0 {
                    m.insert(format!("resolved_ratio_{}", class.as_str()), *named as f64 / *total as f64);
                }
            }
        }
        let managed = [DsoClass::Jit, DsoClass::R2r]
            .iter()
            .filter_map(|c| res.get(c))
            .fold((0u64, 0u64), |a, (t, n)| (a.0 + t, a.1 + n));
        if managed.0 > 0 {
            m.insert("resolved_ratio_managed".into(), managed.1 as f64 / managed.0 as f64);
        }
    }
    m
}

/// `gc_heap_stats.last.FIELD` for each numeric field of the collection's last GCHeapStats event
/// (any version: GenerationSize0..4, TotalPromotedSize0..3, …) and `gc_heap_stats.last.Count`,
/// the Count of the last GCEnd before it: the GC those sizes are from, so a check can tell the
/// app's last GC from one that came after it. Nothing when the collection has no GCHeapStats.
pub fn last_gc_heap_stats(c: &Collection) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    // Events are in stream order, not time order, across threads: the last is the latest.
    let latest = |name: &str, before: u64| {
        c.events
            .iter()
            .filter(|e| assert::strip_version(&e.name) == name && e.time_ns <= before)
            .max_by_key(|e| e.time_ns)
    };
    let Some(stats) = latest("GCHeapStats", u64::MAX) else { return m };
    for (k, v) in &stats.fields {
        if let Some(n) = v.as_u64() {
            m.insert(format!("gc_heap_stats.last.{k}"), n as f64);
        }
    }
    if let Some(count) = latest("GCEnd", stats.time_ns).and_then(|e| e.fields.get("Count")).and_then(|v| v.as_u64()) {
        m.insert("gc_heap_stats.last.Count".into(), count as f64);
    }
    m
}

fn resolution_json(c: &Collection) -> serde_json::Value {
    let leaf = assert::resolution(c, true);
    let all = assert::resolution(c, false);
    let mut classes = serde_json::Map::new();
    for class in DsoClass::ALL {
        let (lt, ln) = leaf.get(&class).copied().unwrap_or_default();
        let (at, an) = all.get(&class).copied().unwrap_or_default();
        classes.insert(
            class.as_str().into(),
            serde_json::json!({
                "leaf_total": lt, "leaf_named": ln,
                "leaf_ratio": if lt > 0 { Some(ln as f64 / lt as f64) } else { None },
                "all_total": at, "all_named": an,
                "all_ratio": if at > 0 { Some(an as f64 / at as f64) } else { None },
            }),
        );
    }
    serde_json::json!({ "classes": classes })
}

/// One table per distinct set of compared methods in the scenario's share expectations.
fn share_tables(scenario: &Scenario, state: &RunState) -> Vec<crate::report::ShareTable> {
    use crate::scenario::{CheckKind, ShareMode};
    // Per set of compared methods: its mode, the truth path per method, and the sample kind each
    // collector's expectation asked for (off-CPU rows count blocked time, not preemption).
    struct Set {
        among: Vec<String>,
        mode: ShareMode,
        kinds: BTreeMap<String, String>,
        /// Collectors held to truth in this set (others are held to a bound: no error column).
        scored: std::collections::BTreeSet<String>,
    }
    let mut sets: Vec<Set> = Vec::new();
    let mut truths: BTreeMap<String, String> = BTreeMap::new();
    let first = state.collections.first().map(|c| c.collector.clone()).unwrap_or_default();
    for e in &scenario.expectations {
        let collector = &e.collector;
        let (among, mode, kind, scored) = match &e.check {
            CheckKind::Share(s) => {
                truths.insert(s.method.clone(), s.truth.clone());
                (&s.among, &s.mode, &s.sample_kind, true)
            }
            CheckKind::ShareAtLeast(s) => (&s.among, &s.mode, &s.sample_kind, false),
            _ => continue,
        };
        let idx = match sets.iter().position(|s| &s.among == among) {
            Some(i) => i,
            None => {
                sets.push(Set {
                    among: among.clone(),
                    mode: *mode,
                    kinds: BTreeMap::new(),
                    scored: Default::default(),
                });
                sets.len() - 1
            }
        };
        if scored {
            sets[idx].scored.insert(collector.clone().unwrap_or_else(|| first.clone()));
        }
        if let Some(k) = kind {
            sets[idx].kinds.insert(collector.clone().unwrap_or_else(|| first.clone()), k.clone());
        }
    }
    let mut tables = Vec::new();
    for set in sets {
        let truth: Vec<Option<f64>> = set
            .among
            .iter()
            .map(|m| truths.get(m).and_then(|p| assert::truth_value(&state.truth, p)).and_then(|v| v.as_f64()))
            // (the table's truth row is the first run's; each row's error uses its own run's truth)
            .collect();
        let mut rows = Vec::new();
        for c in state.collections.iter().filter(|c| !c.samples.is_empty()) {
            let kind = set.kinds.get(&c.collector).map(String::as_str);
            let mut shares = Vec::new();
            let mut samples = 0;
            for m in &set.among {
                let (v, n, _) = assert::share(c, m, &set.among, set.mode, kind).unwrap_or((0.0, 0, 0));
                shares.push(v);
                samples = n;
            }
            let own_truth = state.truths.get(&c.collector).unwrap_or(&state.truth);
            let error_pts = set
                .among
                .iter()
                .zip(&shares)
                .map(|(m, v)| {
                    if !set.scored.contains(&c.collector) {
                        return None;
                    }
                    let t = truths.get(m).and_then(|p| assert::truth_value(own_truth, p)).and_then(|x| x.as_f64());
                    t.map(|t| (v - t).abs() * 100.0)
                })
                .collect();
            let collector = match kind {
                Some(k) => format!("{} ({k})", c.collector),
                None => c.collector.clone(),
            };
            let kind_of = scenario.collectors.iter().find(|s| s.name() == c.collector).map(|s| s.kind());
            let measures = kind_of.map(crate::report::collector_measures).unwrap_or_default().to_string();
            let truth = set
                .among
                .iter()
                .map(|m| truths.get(m).and_then(|p| assert::truth_value(own_truth, p)).and_then(|x| x.as_f64()))
                .collect();
            rows.push(crate::report::ShareRow { collector, samples, shares, error_pts, measures, truth });
        }
        tables.push(crate::report::ShareTable { columns: set.among, truth, rows });
    }
    tables
}

/// Diagnoses of known pitfalls, from the data itself.
fn diagnose(collections: &[Collection]) -> Vec<String> {
    let mut out = Vec::new();
    for c in collections {
        out.extend(crate::naming::unnamed_dso_hints(c));
        let leaves = c.samples.iter().filter_map(|s| s.frames.first());
        let (mut total, mut doublemapped) = (0u64, 0u64);
        for f in leaves {
            total += 1;
            if f.name.is_none() && f.dso.as_deref().is_some_and(|d| d.contains("doublemapper")) {
                doublemapped += 1;
            }
        }
        if total > 0 && doublemapped * 5 >= total {
            out.push(format!(
                "`{}`: {doublemapped} of {total} leaf frames ({:.1} %) are unnamed JIT code in `/memfd:doublemapper`: \
                 W^X is on, so JIT code runs from a memfd alias the perf map does not describe. \
                 Set DOTNET_EnableWriteXorExecute=0 for named JIT frames.",
                c.collector,
                doublemapped as f64 / total as f64 * 100.0
            ));
        }
    }
    out
}

/// Folded stacks, flame graphs and speedscope files for every collection with samples.
/// Folded stacks, flame graphs and the files viewers open, per collection with samples; returns
/// the viewer files written, per collector (a file that could not be written is a warning: the
/// verdict does not depend on it).
fn write_stacks(dir: &ResultsDir, scenario: &Scenario, collections: &[Collection]) -> BTreeMap<String, Vec<String>> {
    let mut viewer_files: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in collections.iter().filter(|c| !c.samples.is_empty()) {
        if let Err(e) = crate::fold::write_all(c, &scenario.name, dir.path(), &dir.stacks()) {
            eprintln!("warning: could not write stacks for `{}`: {e:#}", c.collector);
        }
        let firefox = crate::fold::firefox::ProfileInput { collection: c, run: collections, product: &scenario.name };
        let written = [
            Ok(dir.path().join(format!("{}.speedscope.json", c.collector))),
            crate::fold::firefox::write(&firefox, dir.path()),
            crate::fold::pprof::write(c, collections, dir.path()),
        ];
        for file in written {
            match file {
                Ok(path) if path.is_file() => viewer_files
                    .entry(c.collector.clone())
                    .or_default()
                    .push(path.file_name().unwrap_or_default().to_string_lossy().into_owned()),
                Ok(_) => {}
                Err(e) => eprintln!("warning: could not write a viewer file for `{}`: {e:#}", c.collector),
            }
        }
    }
    // One perfcollect-style trace.zip per run: perf's on-CPU samples and the LTTng CTF folder.
    let kind_of = |c: &Collection| scenario.collectors.iter().find(|s| s.name() == c.collector).map(|s| s.kind());
    let perf = collections.iter().find(|c| kind_of(c) == Some(crate::collect::CollectorKind::PerfCpu) && !c.samples.is_empty());
    let lttng = collections
        .iter()
        .filter(|c| kind_of(c) == Some(crate::collect::CollectorKind::Lttng))
        .map(|c| dir.artifacts().join(format!("lttng-{}", c.collector)))
        .find(|d| d.is_dir());
    let input = crate::fold::perfcollect::TraceZipInput {
        name: &scenario.name,
        perf,
        run: collections,
        lttng_dir: lttng.as_deref(),
        runtime_files: crate::fold::perfcollect::runtime_files(&dir.artifacts()),
    };
    match crate::fold::perfcollect::write(&input, dir.path()) {
        Ok(Some(path)) => {
            let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            for c in collections.iter().filter(|c| perf.is_some_and(|p| std::ptr::eq(p, *c)) || kind_of(c) == Some(crate::collect::CollectorKind::Lttng)) {
                viewer_files.entry(c.collector.clone()).or_default().push(file.clone());
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("warning: could not write the trace.zip: {e:#}"),
    }
    viewer_files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Frame, Sample};

    /// A run's state holding one perf-cpu collection: thread 1 sampled at the asked 100 Hz for
    /// 4 s, all in `W::Hot()`.
    fn state_with(lost: u64) -> RunState {
        let mut c = Collection::new("perf-cpu");
        for i in 0..400u64 {
            let frame = Frame { name: Some("W::Hot()".into()), dso: None, class: DsoClass::Jit, addr: 0 };
            c.samples.push(Sample { pid: 1, tid: 1, time_ns: i * 10_000_000, weight: 1, frames: vec![frame], kind: None });
        }
        c.lost_events = lost;
        RunState {
            durations: BTreeMap::new(),
            commands: Vec::new(),
            collections: vec![c],
            truth: serde_json::json!({"hot": 1.0}),
            truths: BTreeMap::new(),
            environment: Default::default(),
            completeness: BTreeMap::new(),
            workload: None,
            load_report: None,
            load: BTreeMap::new(),
        }
    }

    /// A run with samples writes the viewer files beside its speedscope file and lists them.
    #[test]
    fn viewer_files_are_written_and_listed_per_collector() {
        let root = tempfile::tempdir().unwrap();
        let dir = ResultsDir::create(root.path(), "s").unwrap();
        let mut state = state_with(0);
        state.collections[0].metrics.insert("frequency_hz".into(), 100.0);
        let files = write_stacks(&dir, &scenario(""), &state.collections);
        let listed = &files["perf-cpu"];
        for f in ["perf-cpu.speedscope.json", "perf-cpu.firefox.json.gz", "perf-cpu.pb.gz", "s.trace.zip"] {
            assert!(listed.iter().any(|l| l == f), "{f} not listed: {listed:?}");
            assert!(dir.path().join(f).is_file(), "{f} not written");
        }
        assert!(!dir.path().join(".s.trace.zip.partial").exists());
    }

    fn scenario(expect: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 100\n{expect}"
        );
        Scenario::from_toml(&text, Path::new("s.toml")).unwrap()
    }

    const SHARE: &str = "[[expect]]\nkind = \"share\"\nname = \"hot\"\nmethod = \"Hot\"\namong = [\"Hot\", \"Cold\"]\ntruth = \"hot\"\n";

    #[test]
    fn a_run_is_inconclusive_when_a_check_lacks_data_and_fails_only_on_a_decided_fail() {
        // 400 samples at the asked rate, nothing lost: decided.
        let (v, reason, _) = judge(&scenario(SHARE), &state_with(0));
        assert_eq!((v, reason), (Verdict::Pass, None));
        // Below the floor: inconclusive, the reason names the floor and what was measured.
        let floored = scenario(&format!("{SHARE}min_samples = 1000\n"));
        let (v, reason, _) = judge(&floored, &state_with(0));
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reason.as_deref().unwrap().starts_with("hot: 400 samples, below the floor of 1000 (min_samples)"), "{reason:?}");
        // 8 lost events of 400 samples is 2 %: above the default bound, within a scenario's 5 %.
        let (v, reason, _) = judge(&scenario(SHARE), &state_with(8));
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reason.as_deref().unwrap().contains("lost 8 events against 400 samples recorded (2.0 %"), "{reason:?}");
        let lenient = scenario(&format!("[sufficiency]\nmax_lost_ratio = 0.05\n{SHARE}"));
        assert_eq!(judge(&lenient, &state_with(8)).0, Verdict::Pass);
        // A FAIL with enough data outweighs an inconclusive check.
        let absent = "[[expect]]\nkind = \"frame\"\npattern = \"Hot\"\npresent = false\n";
        let (v, reason, checks) = judge(&scenario(&format!("{absent}{SHARE}")), &state_with(8));
        assert_eq!(v, Verdict::Fail);
        assert!(reason.as_deref().unwrap().starts_with("frame absent `Hot`"), "{reason:?}");
        assert_eq!(checks.iter().filter(|c| c.verdict == Verdict::Inconclusive).count(), 1);
    }

    /// The last GCHeapStats by time (not stream order) gives the metrics, with the Count of the
    /// GCEnd before it; a later GCEnd (a GC whose stats were not recorded) does not count.
    #[test]
    fn last_gc_heap_stats_are_the_latest_event_and_its_gc() {
        use crate::assert::testing::event;
        use crate::model::Value;
        let at = |name: &str, t: u64, fields: &[(&str, u64)]| {
            let mut e = event(name);
            e.time_ns = t;
            e.fields = fields.iter().map(|(k, v)| (k.to_string(), Value::U64(*v))).collect();
            e
        };
        let mut c = Collection::new("eventpipe");
        assert!(last_gc_heap_stats(&c).is_empty());
        c.events.push(at("GCEnd_V1", 300, &[("Count", 9)]));
        c.events.push(at("GCHeapStats_V2", 200, &[("GenerationSize0", 24), ("GenerationSize2", 4096)]));
        c.events.push(at("GCEnd_V1", 100, &[("Count", 7)]));
        c.events.push(at("GCHeapStats_V2", 110, &[("GenerationSize0", 1), ("GenerationSize2", 1)]));
        c.events.push(at("GCEnd_V1", 190, &[("Count", 8)]));
        let m = last_gc_heap_stats(&c);
        assert_eq!(m["gc_heap_stats.last.GenerationSize0"], 24.0);
        assert_eq!(m["gc_heap_stats.last.GenerationSize2"], 4096.0);
        assert_eq!(m["gc_heap_stats.last.Count"], 8.0);
        assert_eq!(run_metrics(&[c])["eventpipe.gc_heap_stats.last.Count"], 8.0);
    }
}
