//! One launch of the app with its collectors, in phases: [`launch`] (start it), [`collect`]
//! (start every collector, release the app, wait until it is ready and warmed up, then apply the
//! load or let the measured window pass), [`stop`] (stop the collectors and the app, in the order
//! the app's kind needs, then read the exit code and the truth) and [`decode`] (every collector's
//! artifacts into the model).
//!
//! An app as it is (no tracelab protocol) starts held in the runtime — the diagnostics port's
//! startup suspension, `DOTNET_DefaultDiagnosticPortSuspend=1` — and is resumed over its
//! diagnostics socket once every collector records, so each collector sees it from its first
//! managed code; the runtime stays held until every suspending port has resumed (an EventPipe
//! startup session's own port too). Samples are then judged from ready + `warmup_s` to the stop
//! ([`Window`]): start-up is recorded, not judged. Where the runtime cannot be held (diagnostics
//! disabled, not a .NET process) collectors start after ready, and a collector that missed part
//! of the window makes the checks reading it inconclusive with the seconds missed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use stacks::DecodeContext;

use super::{RunOptions, RunState};
use crate::collect::Collector;
use crate::host::errors::{Infrastructure, Undecided};
use crate::run::{AppLaunch, Target};
use crate::scenario::{Protocol, Ready, Scenario, Stop};

/// One launch: the app with `collectors`, from start to decoded collections in `state`.
pub(super) fn run_app(
    scenario: &Scenario,
    opts: &RunOptions,
    built: &crate::workload::PreparedApp,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    artifacts: &Path,
    state: &mut RunState,
) -> Result<()> {
    let mut launched = launch(scenario, built, target, collectors, artifacts, state)?;
    let collecting = collect(scenario, built, target, collectors, &mut launched, state)?;
    stop(scenario, target, collectors, &mut launched, collecting, state)?;
    decode(opts, target, collectors, &launched, state)?;
    launched.app.keep_runtime_files(&launched.artifacts)?;
    // What was collected is decoded and kept (flame graphs, viewers); nothing is judged on it.
    if let Some(why) = state.cut_short.take() {
        return Err(anyhow::Error::new(Undecided(why)));
    }
    Ok(())
}

/// `--attach PID`: the collectors on a process tracelab did not start, for `seconds` (or the
/// load's), without stopping it. The measured window opens when the last collector records. A
/// perf map the runtime does not write is switched on over the diagnostics IPC (EnablePerfMap,
/// whose rundown names the methods compiled before) and off again after, leaving the app as found.
pub(super) fn attach_app(
    scenario: &Scenario,
    opts: &RunOptions,
    pid: u32,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    artifacts: &Path,
    state: &mut RunState,
) -> Result<()> {
    let ns_pid = crate::host::proc::nspid(pid).ok().and_then(|ns| ns.last().copied()).unwrap_or(pid);
    let mut app = crate::run::RunningApp::attached(pid, ns_pid, artifacts.to_path_buf());
    state.window = super::Window { launched_ns: crate::host::proc::monotonic_ns(), attached: true, ..Default::default() };
    state.window.ready_ns = Some(state.window.launched_ns);
    state.load.insert("app.pid".into(), f64::from(pid));
    // The runtime names its map by its pid as it sees it (its NSpid in a container).
    let map = app.tmp_dir_host.join(format!("perf-{ns_pid}.map"));
    let enabled_map = switch_perf_map_on(&app, collectors, state)?;
    let (started, mut start_error) = start_collectors(collectors, target, &app, artifacts, state);
    state.window.from_ns = Some(crate::host::proc::monotonic_ns());
    let seconds = scenario.load.as_ref().map(|l| l.seconds).or(scenario.seconds).unwrap_or(DEFAULT_WINDOW_S);
    let mut gone = false;
    if start_error.is_none() {
        let spinner = crate::host::progress::timed_step("collect", format!("pid {pid}"), Duration::from_secs_f64(seconds));
        spinner.watch(artifacts);
        match &scenario.load {
            // A load goes where the scenario says: nothing of an attached app's output is seen.
            Some(load) => {
                let applied = load
                    .url
                    .as_deref()
                    .context("an attached run's `[load]` needs `url = \"http://127.0.0.1:PORT\"`: the app's output is not seen")
                    .and_then(|u| apply_load(load, u, false, state));
                if let Err(e) = applied {
                    start_error = Some(e);
                }
                gone = !app.is_alive();
            }
            None => gone = !crate::run::ready::run_for(&mut app, seconds),
        }
        if gone || start_error.is_some() { spinner.failed() } else { spinner.done("window over; the app runs on") }
    }
    state.window.to_ns = Some(crate::host::proc::monotonic_ns());
    stop_collectors(collectors, &started, target, &app, state, &mut start_error);
    if enabled_map {
        switch_perf_map_off(&app, state);
    }
    if let Some(e) = start_error {
        return Err(e);
    }
    if gone {
        return Err(anyhow::Error::new(Undecided(format!("process {pid} ended during the {seconds} s window: what was recorded covers part of it"))));
    }
    let launched = Launched {
        app,
        artifacts: artifacts.to_path_buf(),
        truth_path: artifacts.join("truth.json"),
        go_path: artifacts.join(".go"),
        protocol: Protocol::None,
        held: false,
        url: None,
        t_run: Instant::now(),
        perf_map_switched_on: false,
    };
    decode(opts, target, collectors, &launched, state)?;
    if enabled_map {
        // The map tracelab had the runtime write goes with the run (its copy is in the artifacts).
        let _ = std::fs::remove_file(&map);
    }
    state.truth = match &scenario.truth {
        Some(spec) => {
            let cwd = scenario.cwd.clone().unwrap_or_else(|| PathBuf::from(format!("/proc/{pid}/cwd")));
            if spec.file(&cwd).exists() { spec.read(&cwd)? } else { serde_json::Value::Null }
        }
        None => serde_json::Value::Null,
    };
    Ok(())
}

/// Switches the perf map of an app that writes none on over its diagnostics IPC (EnablePerfMap,
/// .NET 8+, whose rundown names the methods compiled before) when a perf collector will read it;
/// whether it did.
fn switch_perf_map_on(app: &crate::run::RunningApp, collectors: &[Box<dyn Collector>], state: &mut RunState) -> Result<bool> {
    let map = app.tmp_dir_host.join(format!("perf-{}.map", app.target_pid));
    let needs_map = collectors.iter().any(|c| c.name().starts_with("perf"));
    let enabled = needs_map && !map.is_file();
    if enabled {
        let socket = crate::run::ready::enable_perf_map(app).map_err(|e| {
            Infrastructure::wrap(e.context(format!(
                "switching on the perf map of pid {} over its diagnostics socket (EnablePerfMap, .NET 8+)",
                app.host_pid
            )))
        })?;
        state.commands.push(format!("EnablePerfMap (perf-PID.map) over {}", socket.display()));
        // The rundown of the methods already compiled is written as the command returns.
        std::thread::sleep(Duration::from_millis(300));
        let rundown = std::fs::read(&map).map(|b| b.split(|c| *c == b'\n').filter(|l| !l.is_empty()).count()).unwrap_or(0);
        state.load.insert("attach.perf_map_rundown_methods".into(), rundown as f64);
        crate::host::progress::note("launch", &format!("perf map switched on over IPC: its rundown named {rundown} methods compiled before"));
    }
    state.load.insert("attach.perf_map_enabled_by_tracelab".into(), if enabled { 1.0 } else { 0.0 });
    Ok(enabled)
}

/// Switches the perf map tracelab switched on off again (DisablePerfMap), leaving the app as found.
fn switch_perf_map_off(app: &crate::run::RunningApp, state: &mut RunState) {
    match crate::run::ready::disable_perf_map(app) {
        Ok(()) => state.commands.push(format!("DisablePerfMap over the diagnostics socket of pid {}", app.host_pid)),
        Err(e) if app.is_alive() => {
            crate::host::progress::note("report", &format!("could not switch the perf map of pid {} off again: {e:#}", app.host_pid))
        }
        Err(_) => {}
    }
}

/// The app, started: held in the runtime until its collectors record, or already ready.
struct Launched {
    app: crate::run::RunningApp,
    artifacts: PathBuf,
    truth_path: PathBuf,
    go_path: PathBuf,
    protocol: Protocol,
    /// Held at start in the runtime, to be resumed over its diagnostics socket.
    held: bool,
    /// Where `[load]` goes: the scenario's, else the ready line's capture, else the app's own word.
    url: Option<String>,
    t_run: Instant,
    /// `attach = true`: tracelab switched the app's perf map on over IPC (and switches it off).
    perf_map_switched_on: bool,
}

/// The variable that holds a .NET runtime at start until a tool resumes it over its default
/// diagnostics port (the startup suspension dotnet-monitor and `dotnet-trace --resume-runtime` use).
pub(crate) const SUSPEND_VAR: &str = "DOTNET_DefaultDiagnosticPortSuspend";

/// How long a held app may take to open its diagnostics socket.
const HELD_SOCKET_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether an app launched with `env` can be held at start: the runtime's diagnostics server is on.
fn holdable(env: &BTreeMap<String, String>) -> bool {
    diagnostics_off(env).is_none()
}

/// The setting in `env` that turns the runtime's diagnostics IPC off (`DOTNET_EnableDiagnostics=0`
/// …), if one does.
fn diagnostics_off(env: &BTreeMap<String, String>) -> Option<String> {
    ["DOTNET_EnableDiagnostics", "DOTNET_EnableDiagnostics_IPC", "COMPlus_EnableDiagnostics"]
        .into_iter()
        .find(|k| env.get(*k).is_some_and(|v| v.trim() == "0"))
        .map(|k| format!("{k}=0"))
}

/// Collectors recording and the app released into its measured phase (or the first failure).
struct Collecting {
    started: Vec<usize>,
    start_error: Option<anyhow::Error>,
    probe: Option<crate::run::load::LoadProbe>,
    spinner: crate::host::progress::Step,
}

/// Starts the app with what its collectors need and waits until it is ready and warmed up.
fn launch(
    scenario: &Scenario,
    built: &crate::workload::PreparedApp,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    artifacts: &Path,
    state: &mut RunState,
) -> Result<Launched> {
    let artifacts = artifacts.to_path_buf();
    let truth_path = artifacts.join("truth.json");
    let go_path = artifacts.join(".go");
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    // `attach = true`: the production shape, nothing of the collectors' in the app's environment.
    if !scenario.attach {
        for c in collectors.iter() {
            env.extend(c.app_env());
        }
    }
    // The scenario's and this run's collectors' own `env` override what collectors ask for.
    let names: Vec<String> = collectors.iter().map(|c| c.name().to_string()).collect();
    env.extend(scenario.run_env(&names)?);
    // A collector that talks to the runtime over its diagnostics IPC cannot work on an app whose
    // IPC is off: said before anything is launched (it was an infrastructure error once the
    // collector found no socket).
    if let Some(setting) = diagnostics_off(&env)
        && let Some(c) = scenario.collectors.iter().find(|c| {
            names.iter().any(|n| n == c.name())
                && matches!(c.kind(), crate::collect::CollectorKind::EventPipe | crate::collect::CollectorKind::DotnetTrace)
        })
    {
        return Err(anyhow::Error::new(crate::host::errors::Unsupported {
            reason: format!(
                "collector `{}` talks to the runtime over its diagnostics IPC, which the app's `{setting}` turns off: remove it from \
                 the app's environment (in a pod: its container's `env`), or keep `DOTNET_EnableDiagnostics=1` and turn off only \
                 what you must (`DOTNET_EnableDiagnostics_Debugger=0`, `DOTNET_EnableDiagnostics_Profiler=0`); perf collectors work without it",
                c.name()
            ),
        }));
    }
    let protocol = scenario.protocol();
    // An app as it is starts held, unless its diagnostics are off (nothing could resume it).
    let held = protocol == Protocol::None && !scenario.attach && holdable(&env);
    if held {
        env.insert(SUSPEND_VAR.into(), "1".into());
    }
    let mut args = Vec::new();
    if protocol == Protocol::Tracelab {
        args.extend(["--truth".to_string(), truth_path.display().to_string(), "--go-file".to_string(), go_path.display().to_string()]);
    }
    args.extend(scenario.args.iter().cloned());
    let launch = AppLaunch { program: built.program.clone(), args, env: env.clone(), work_dir: artifacts.clone(), cwd: scenario.cwd.clone(), cwd_writable: scenario.cwd_writable };
    state.commands.push(
        [
            crate::host::proc::quoted(env.iter().map(|(k, v)| format!("{k}={v}"))),
            built.program.describe(),
            crate::host::proc::quoted(&launch.args),
        ]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" "),
    );

    crate::host::progress::note("launch", &format!("starting `{}` on the {} target", built.name, target.label()));
    let t_run = Instant::now();
    let mut app = if collectors.iter().any(|c| c.prepares_before_launch()) {
        let (app, prepared) = target.launch_prepared(&launch, &mut |at| {
            for c in collectors.iter_mut().filter(|c| c.prepares_before_launch()) {
                crate::host::progress::note("launch", &format!("preparing collector `{}` before the app starts", c.name()));
                c.before_launch(at, &artifacts)?;
            }
            Ok(())
        })?;
        if !prepared {
            let names: Vec<&str> = collectors.iter().filter(|c| c.prepares_before_launch()).map(|c| c.name()).collect();
            crate::host::progress::note(
                "launch",
                &format!(
                    "the {} target cannot hold the app back before it starts: {} start(s) once the app is ready, after its startup",
                    target.label(),
                    names.join(", ")
                ),
            );
        }
        app
    } else {
        target.launch(&launch)?
    };
    app.held_at_start = held;
    state.window = super::Window { launched_ns: crate::host::proc::monotonic_ns(), held, ..Default::default() };
    state.load.insert("app.pid".into(), f64::from(app.target_pid));
    if held {
        // The runtime opens its diagnostics socket and waits there for its collectors.
        crate::host::progress::note("launch", "held at start until every collector records (the runtime's startup suspension)");
        if let Err(e) = crate::run::ready::await_ready(&mut app, &Ready::DiagnosticSocket, HELD_SOCKET_TIMEOUT) {
            let code = target.wait_app(&mut app, Duration::from_secs(1));
            let _ = std::fs::write(artifacts.join("app-output.txt"), app.transcript.join("\n"));
            let e = match code {
                Ok(code) => e.context(format!("the app ended with exit code {code}")),
                Err(_) => e,
            };
            return Err(Infrastructure::wrap(e.context(format!(
                "the app, started with {SUSPEND_VAR}=1, opened no diagnostics socket within {} s: is it a .NET app? \
                 (set `env = {{ DOTNET_EnableDiagnostics = \"0\" }}` for a process tracelab cannot hold)",
                HELD_SOCKET_TIMEOUT.as_secs()
            ))));
        }
        return Ok(Launched { app, artifacts, truth_path, go_path, protocol, held, url: None, t_run, perf_map_switched_on: false });
    }
    let url = await_ready_and_warm_up(scenario, built, target, &mut app, &artifacts, protocol, state)?;
    state.window.from_ns = Some(crate::host::proc::monotonic_ns());
    Ok(Launched { app, artifacts, truth_path, go_path, protocol, held, url, t_run, perf_map_switched_on: false })
}

/// Waits until the app is ready (its line, port, diagnostics socket or delay; a tracelab workload's
/// `TRACELAB READY`), lets an app as it is warm up, and returns the URL `[load]` goes to.
fn await_ready_and_warm_up(
    scenario: &Scenario,
    built: &crate::workload::PreparedApp,
    target: &mut dyn Target,
    app: &mut crate::run::RunningApp,
    artifacts: &Path,
    protocol: Protocol,
    state: &mut RunState,
) -> Result<Option<String>> {
    let awaited = match protocol {
        Protocol::Tracelab => app.wait_for_line("TRACELAB READY", Duration::from_secs(90)).map(|_| None),
        Protocol::None => {
            let ready = scenario.ready.clone().unwrap_or_else(|| default_ready(scenario, built));
            crate::host::progress::note("launch", &format!("waiting for {}", ready.describe()));
            let timeout = Duration::from_secs(scenario.timeout_s.min(90));
            crate::run::ready::await_ready(app, &ready, timeout).and_then(|url| {
                state.window.ready_ns = Some(crate::host::proc::monotonic_ns());
                let warmup = scenario.warmup_s.unwrap_or(1.0);
                crate::host::progress::note("launch", &format!("ready; warm-up {warmup} s before measuring"));
                if crate::run::ready::run_for(app, warmup) {
                    Ok(url)
                } else {
                    app.drain_output();
                    bail!("the app exited during its {warmup} s warm-up; its last lines:\n{}", app.last_lines(15))
                }
            })
        }
    };
    let url = match awaited {
        Ok(url) => url,
        Err(e) => {
            let code = target.wait_app(app, Duration::from_secs(1));
            let _ = std::fs::write(artifacts.join("app-output.txt"), app.transcript.join("\n"));
            let e = match code {
                Ok(code) => e.context(format!("the app ended with exit code {code}")),
                Err(_) => e,
            };
            // The app never got to be measured: no answer of the pipeline was wrong.
            return Err(if protocol == Protocol::None { Infrastructure::wrap(e) } else { e });
        }
    };
    Ok(scenario.load.as_ref().and_then(|l| l.url.clone()).or(url).or_else(|| {
        app.transcript.iter().find_map(|l| l.strip_prefix("TRACELAB LISTENING ")).map(|u| u.trim().trim_end_matches('/').to_string())
    }))
}

/// Starts every collector (each returns once it records), then releases the app into its
/// measured phase and applies the load or lets the window pass.
fn collect(
    scenario: &Scenario,
    built: &crate::workload::PreparedApp,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    launched: &mut Launched,
    state: &mut RunState,
) -> Result<Collecting> {
    let Launched { app, artifacts, go_path, protocol, held, url, perf_map_switched_on, .. } = launched;
    let app = &mut *app;
    let (protocol, held) = (*protocol, *held);
    let switched = if scenario.attach { switch_perf_map_on(app, collectors, state) } else { Ok(false) };
    // Every collector must be recording before the app is released into its measured phase.
    let (started, mut start_error) = match switched {
        Ok(on) => {
            *perf_map_switched_on = on;
            start_collectors(collectors, target, app, artifacts, state)
        }
        Err(e) => (Vec::new(), Some(e)),
    };
    if held && start_error.is_none() {
        // Every collector records: let the runtime go, then wait until the app is ready.
        match crate::run::ready::resume_held(app) {
            Ok(()) => {
                state.commands.push(format!("ResumeRuntime over the diagnostics socket of pid {} ({SUSPEND_VAR}=1)", app.target_pid));
                match await_ready_and_warm_up(scenario, built, target, app, artifacts, protocol, state) {
                    Ok(u) => *url = u,
                    Err(e) => start_error = Some(e),
                }
            }
            Err(e) => start_error = Some(Infrastructure::wrap(e)),
        }
        state.window.from_ns = Some(crate::host::proc::monotonic_ns());
    }
    let probe = start_error.is_none().then(|| crate::run::load::LoadProbe::start(app.host_pid));
    // The collect step starts when the app is released, before any load: started after the load
    // (as it once was) it showed 1.3 s for a ~10 s collection.
    let mut spinner = None;
    if start_error.is_none() {
        if protocol == Protocol::Tracelab {
            std::fs::write(&go_path, b"go").with_context(|| format!("cannot write {}", go_path.display()))?;
            state.window.from_ns = Some(crate::host::proc::monotonic_ns());
        }
        let what = format!("app `{}`", built.name);
        let step = match expected_collect_s(scenario) {
            Some(s) => crate::host::progress::timed_step("collect", what, Duration::from_secs_f64(s)),
            None => crate::host::progress::step("collect", what),
        };
        // The recordings growing (perf.data, a .nettrace, an LTTng trace), as dotnet-trace shows
        // its file's size: a collection that records nothing shows it before the verdict.
        step.watch(artifacts);
        spinner = Some(step);
        // An app that is not held measures what comes after its collectors: the load, or the
        // window of `seconds` (an app awaited to exit by itself measures from ready + warm-up,
        // which its collectors may have missed).
        // An attached app's window opens when its last collector attached, whatever ends it.
        let measured_after_collectors =
            !held && protocol == Protocol::None && (scenario.attach || scenario.load.is_some() || scenario.stop != Some(Stop::Exit));
        if measured_after_collectors {
            state.window.from_ns = Some(crate::host::proc::monotonic_ns());
        }
        if let Some(load) = &scenario.load {
            let applied = url
                .as_deref()
                .context("no URL for `[load]`: give `[load] url`, or a `ready.line` with a (?P<url>…) capture")
                .and_then(|u| apply_load(load, u, protocol == Protocol::Tracelab, state));
            if let Err(e) = applied {
                start_error = Some(e);
            } else if protocol == Protocol::None && !app.is_alive() {
                state.cut_short = Some(ended_in_window("its load"));
            }
        } else if protocol == Protocol::None && scenario.stop != Some(Stop::Exit) {
            let seconds = scenario.seconds.unwrap_or(DEFAULT_WINDOW_S);
            if !crate::run::ready::run_for(app, seconds) {
                state.cut_short = Some(ended_in_window(&format!("its {seconds} s window")));
            }
        }
    }
    let spinner = spinner.unwrap_or_else(|| crate::host::progress::step("collect", format!("stopping `{}`", built.name)));
    Ok(Collecting { started, start_error, probe, spinner })
}

/// Stops the collectors and the app (an app as it is after its collectors, unless it is awaited
/// to exit by itself), then reads its exit code and its truth.
fn stop(
    scenario: &Scenario,
    target: &mut dyn Target,
    collectors: &mut [Box<dyn Collector>],
    launched: &mut Launched,
    collecting: Collecting,
    state: &mut RunState,
) -> Result<()> {
    let Collecting { started, mut start_error, probe, spinner } = collecting;
    let Launched { app, artifacts, truth_path, go_path, protocol, url, t_run, perf_map_switched_on, .. } = launched;
    let app = &mut *app;
    let protocol = *protocol;
    // An app as it is ends after its collectors (unless it is awaited to exit by itself): a
    // user image is its container's pid 1, whose exit would end the tools beside it unflushed.
    let stop = scenario.stop.clone().unwrap_or(Stop::Sigterm);
    let stop_first = protocol == Protocol::None && stop != Stop::Exit;
    if stop_first {
        state.window.to_ns = Some(crate::host::proc::monotonic_ns());
        stop_collectors(collectors, &started, target, app, state, &mut start_error);
        if *perf_map_switched_on {
            switch_perf_map_off(app, state);
        }
    }
    let exit = match protocol {
        // Nothing will be measured: the app is not left waiting for a go signal that never comes
        // (it once held the run 120 s after a collector failed to start).
        _ if start_error.is_some() => target.wait_app(app, Duration::from_millis(300)),
        Protocol::None if app.is_alive() => crate::run::ready::stop_app(app, &stop, url.as_deref()).and_then(|done| {
            state.commands.push(done);
            // `timeout_s` bounds the whole run, the stop grace too.
            let limit = if stop == Stop::Exit { scenario.timeout_s } else { STOP_GRACE_S.min(scenario.timeout_s) };
            target.wait_app(app, Duration::from_secs(limit)).with_context(|| format!("after {}", describe_stop(&stop)))
        }),
        _ => target.wait_app(app, Duration::from_secs(scenario.timeout_s)),
    };
    if !stop_first {
        // The app ended (or was given up on): the window closes when it did.
        state.window.to_ns = Some(crate::host::proc::monotonic_ns());
    }
    match &exit {
        Ok(0) if !scenario.expect_crash => spinner.done("finished"),
        Ok(code) if scenario.expect_crash && *code == SIGABRT_EXIT => spinner.done("crashed, as expected (SIGABRT)"),
        Ok(code) if stop_first => spinner.done(&format!("stopped (exit code {code})")),
        _ => spinner.failed(),
    }
    let (load, other) = probe.map(|p| p.finish()).unwrap_or_default();
    // Of several launches, the busiest machine names the load.
    if load.get("load.other_busy_share") >= state.load.get("load.other_busy_share") {
        state.other_load = Some(other);
    }
    for (k, v) in load {
        let worst = state.load.entry(k).or_insert(v);
        *worst = worst.max(v);
    }
    if !stop_first {
        stop_collectors(collectors, &started, target, app, state, &mut start_error);
    }
    state.durations.insert("run".into(), t_run.elapsed().as_secs_f64());
    std::fs::write(artifacts.join("app-output.txt"), app.transcript.join("\n"))?;
    let _ = std::fs::remove_file(&go_path);
    if let Some(e) = start_error {
        return Err(e);
    }
    let code = match exit {
        // An app meant to end by itself that did not: nothing it measured can be trusted whole.
        Err(e) if stop == Stop::Exit && crate::run::still_running(&e) => {
            return Err(anyhow::Error::new(Undecided(format!(
                "the app did not end by itself within {} s (`timeout_s`) and was stopped: set `stop = \"sigterm\"` and `seconds` \
                 (the measured window) for an app that runs until it is stopped, or a larger `timeout_s`; its last lines:\n{}",
                scenario.timeout_s,
                app.last_lines(10)
            ))));
        }
        // An app that ignores its stop signal or request: killed, its data kept, undecided.
        Err(e) if crate::run::still_running(&e) => {
            state.cut_short = Some(format!(
                "the app did not end within {} s of {} and was killed: the data collected is decoded in the run folder, but \
                 nothing is judged on a run that did not end as the scenario says; an app that needs longer to stop takes a \
                 larger `timeout_s` (it bounds the stop too), or another `stop`; its last lines:\n{}",
                STOP_GRACE_S.min(scenario.timeout_s),
                describe_stop(&stop),
                app.last_lines(10)
            ));
            return Ok(());
        }
        other => other?,
    };
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
        // A crash or a kill is the app's, not a wrong answer of the pipeline: undecided, with
        // what was collected decoded (a FAIL once said the pipeline was wrong here).
        let when = if state.cut_short.is_some() { "during its measured window" } else { "before it was stopped" };
        let read_only = match (&scenario.cwd, target.kind()) {
            (Some(cwd), kind) if kind != crate::run::TargetKind::Host && !scenario.cwd_writable => format!(
                " (its `cwd` {} was mounted read-only in its container: `cwd_writable = true` lets it write there)",
                cwd.display()
            ),
            _ => String::new(),
        };
        state.cut_short = Some(format!(
            "the app exited with code {code}{} {when}{read_only}: a run cut short is not judged (its data is decoded in \
             the run folder); its last lines:\n{}",
            signal_name(code),
            app.last_lines(15)
        ));
        return Ok(());
    }
    state.truth = match protocol {
        Protocol::Tracelab => {
            let truth_text = std::fs::read_to_string(&truth_path)
                .with_context(|| format!("the app wrote no {} (its output is in artifacts/app-output.txt)", truth_path.display()))?;
            serde_json::from_str(&truth_text).with_context(|| format!("{} is not JSON", truth_path.display()))?
        }
        Protocol::None => match &scenario.truth {
            Some(spec) => {
                let cwd = scenario.cwd.as_deref().unwrap_or(artifacts);
                let file = spec.file(cwd);
                if !file.exists() {
                    // Without its truth nothing is held against it: never a PASS, never a FAIL.
                    let why = if by_our_signal {
                        format!(
                            "tracelab stopped it ({} after the measured window) before it wrote it: an app that ends by itself \
                             takes `stop = \"exit\"`, else give it a longer `seconds`",
                            describe_stop(&stop)
                        )
                    } else {
                        format!("it exited with code {code} without writing it")
                    };
                    return Err(anyhow::Error::new(Undecided(format!(
                        "the app wrote no truth file {} (`truth.path`): {why}",
                        file.display()
                    ))));
                }
                spec.read(cwd)?
            }
            None => serde_json::Value::Null,
        },
    };
    Ok(())
}

/// Every collector's artifacts into the model, with each collection's stack completeness.
fn decode(opts: &RunOptions, target: &mut dyn Target, collectors: &mut [Box<dyn Collector>], launched: &Launched, state: &mut RunState) -> Result<()> {
    let Launched { app, artifacts, .. } = launched;
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
    let mut map_entries = 0u64;
    let mut map_damage = stacks::PerfMapDamage::default();
    let perf_map_names = if perf_map.is_file() {
        let bytes = std::fs::read(&perf_map).with_context(|| format!("cannot read {}", perf_map.display()))?;
        let (table, damage) = stacks::parse_perf_map(&bytes, &perf_map)?;
        map_entries = table.names().count() as u64;
        map_damage = damage;
        table.names().map(|n| model::merge_code_version(n).to_string()).collect()
    } else {
        std::collections::BTreeSet::new()
    };
    // The runtime wrote the same methods into a jitdump too (DOTNET_PerfMapEnabled=1): whether it
    // holds them is whether jitdump readers (`perf inject --jit`, samply) can name this runtime's
    // JIT code — counted for each perf collection, said in the findings when it cannot.
    let jitdump = artifacts.join(format!("jit-{}.dump", app.target_pid));
    let census = if map_entries > 0 && jitdump.is_file() { stacks::jitdump_census(&jitdump).ok() } else { None };
    let mut decoded = Vec::with_capacity(collectors.len());
    for c in collectors.iter_mut() {
        let decoding = crate::host::progress::step("decode", c.name());
        let mut collection = c.decode(&ctx).with_context(|| format!("decoding `{}`", c.name()))?;
        decoding.done(&format!("{} samples, {} events", collection.samples.len(), collection.events.len()));
        if collection.method_names.is_empty() {
            collection.method_names = perf_map_names.clone();
        }
        if let Some((Some(from), Some(to))) = state.window.collectors.get(c.name()) {
            collection.recorded_ns = Some((*from, *to));
        }
        if let (Some(from), Some(to)) = (state.window.from_ns, state.window.to_ns) {
            collection.measured_ns = Some((from, to));
        }
        if map_damage.lines > 0 && collection.collector.starts_with("perf") {
            // Said once in the findings (see `report::findings`); counted per perf collection.
            collection.metrics.insert("jit_perf_map_damaged_lines".into(), map_damage.lines as f64);
            collection.metrics.insert("jit_perf_map_recovered_records".into(), map_damage.recovered as f64);
            collection.metrics.insert("jit_perf_map_damaged_from_byte".into(), map_damage.first_at.unwrap_or(0) as f64);
            collection.metrics.insert("jit_perf_map_damaged_non_ascii".into(), f64::from(u8::from(map_damage.non_ascii)));
            collection.metrics.insert("jit_perf_map_pid".into(), f64::from(app.target_pid));
        }
        if let (Some(census), true) = (census, collection.collector.starts_with("perf")) {
            collection.metrics.insert("jit_perf_map_entries".into(), map_entries as f64);
            collection.metrics.insert("jitdump_code_loads".into(), census.code_loads as f64);
        }
        decoded.push(collection);
    }
    // A perf map names a generic method's code by its definition; an EventPipe trace of the same
    // run says which instantiation each code range is: perf frames take it by address. (An
    // EventPipe collection names its own frames so: the traces are read again only for perf.)
    let instantiations = if decoded.iter().any(|c| c.collector.starts_with("perf") && !c.samples.is_empty()) {
        generic_instantiations(artifacts)
    } else {
        stacks::Instantiations::default()
    };
    for mut collection in decoded {
        let n = instantiations.apply(&mut collection);
        if n.instantiated + n.uninstantiated > 0 {
            collection.metrics.insert("generic_frames_instantiated".into(), n.instantiated as f64);
            collection.metrics.insert("generic_frames_uninstantiated".into(), n.uninstantiated as f64);
        }
        // A frame-pointer walk out of an OSR frame loses its caller: put back from the thread's
        // whole stacks where they show it, else marked; both counted.
        let osr = stacks::complete_osr_callers(&mut collection);
        if osr.recovered + osr.lost > 0 {
            crate::host::progress::note(
                "decode",
                &format!(
                    "{}: {} samples lost a caller to on-stack replacement: {} put back from the thread's whole stacks, {} marked `{}`",
                    collection.collector,
                    osr.recovered + osr.lost,
                    osr.recovered,
                    osr.lost,
                    stacks::LOST_CALLER
                ),
            );
        }
        if !collection.samples.is_empty() {
            let report = stacks::completeness_of_collection(&collection);
            report.add_metrics_if_absent(&mut collection.metrics);
            state.completeness.insert(collection.collector.clone(), serde_json::to_value(&report)?);
        }
        state.collections.push(collection);
    }
    state.durations.insert("decode".into(), t_decode.elapsed().as_secs_f64());
    state.windows.push(state.window.clone());
    Ok(())
}

/// The instantiations the run's EventPipe traces (`*.nettrace` in the artifacts: ours,
/// dotnet-trace's) give generic methods' code; none where the run has no trace or one cannot be
/// read (said, and the frames keep their definitions' names).
fn generic_instantiations(artifacts: &Path) -> stacks::Instantiations {
    let mut out = stacks::Instantiations::default();
    let Ok(dir) = std::fs::read_dir(artifacts) else { return out };
    let mut traces: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.extension().is_some_and(|e| e == "nettrace")).collect();
    traces.sort();
    for trace in traces {
        match stacks::Instantiations::from_nettrace(&trace) {
            Ok(found) if !found.is_empty() => out.merge(found),
            Ok(_) => {}
            Err(e) => crate::host::progress::note("decode", &format!("generic instantiations not read from {}: {e:#}", trace.display())),
        }
    }
    out
}

/// How a process the runtime aborted on an unhandled exception exits (128 + SIGABRT), as a
/// shell reports it and as the host target reports a death by signal.
const SIGABRT_EXIT: i32 = 134;

/// Seconds a run of an app as it is measures when neither `seconds` nor `[load]` says.
const DEFAULT_WINDOW_S: f64 = 5.0;

/// Why a run whose app ended before its window did is not judged.
fn ended_in_window(during: &str) -> String {
    format!(
        "the app ended during {during}, before tracelab stopped it: a run cut short is not judged (its data is decoded in \
         the run folder); an app that ends by itself takes `stop = \"exit\"`"
    )
}

/// " (SIGKILL …)" for an exit code 128 + a signal's number, as a shell reports a killed process.
fn signal_name(code: i32) -> &'static str {
    match code {
        134 => " (SIGABRT: an unhandled exception or an abort)",
        137 => " (SIGKILL: killed, by the OOM killer or a user)",
        139 => " (SIGSEGV: a crash)",
        143 => " (SIGTERM: stopped by someone else)",
        130 => " (SIGINT)",
        _ => "",
    }
}

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
/// Starts the collectors one after another until one cannot: the indexes that record, and the
/// first error. A collector that cannot start is no wrong answer of the pipeline: SKIP where the
/// environment proves it cannot work here, else an infrastructure error.
fn start_collectors(
    collectors: &mut [Box<dyn Collector>],
    target: &mut dyn Target,
    app: &crate::run::RunningApp,
    artifacts: &Path,
    state: &mut RunState,
) -> (Vec<usize>, Option<anyhow::Error>) {
    let mut started = Vec::new();
    for (i, c) in collectors.iter_mut().enumerate() {
        crate::host::progress::note("launch", &format!("starting collector `{}`", c.name()));
        if let Err(e) = c.start(target, app, artifacts) {
            let e = e.context(format!("collector `{}` could not start", c.name()));
            return (started, Some(if crate::host::errors::unsupported_reason(&e).is_some() { e } else { Infrastructure::wrap(e) }));
        }
        started.push(i);
        state.window.collectors.entry(c.name().to_string()).or_default().0 = Some(crate::host::proc::monotonic_ns());
    }
    (started, None)
}

fn stop_collectors(
    collectors: &mut [Box<dyn Collector>],
    started: &[usize],
    target: &mut dyn Target,
    app: &crate::run::RunningApp,
    state: &mut RunState,
    first_error: &mut Option<anyhow::Error>,
) {
    let mut order = started.to_vec();
    order.sort_by_key(|&i| !collectors[i].stops_first());
    for i in order {
        state.window.collectors.entry(collectors[i].name().to_string()).or_default().1 = Some(crate::host::proc::monotonic_ns());
        if let Err(e) = collectors[i].stop(target, app) {
            // The tool crashed or hung around the app: infrastructure, unless the environment
            // proves the collector cannot work here (a SKIP).
            let e = e.context(format!("collector `{}` failed while stopping", collectors[i].name()));
            let e = if crate::host::errors::unsupported_reason(&e).is_some() { e } else { Infrastructure::wrap(e) };
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
    crate::host::progress::note("collect", &format!(
        "load: {} connection(s) per route on {} for {} s",
        load.connections_per_route,
        load.routes.join(", "),
        load.seconds
    ));
    let host_port = crate::run::load::loopback_host_port(url)?;
    let routes = load.routes()?;
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

