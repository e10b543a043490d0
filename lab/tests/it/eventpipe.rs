//! Integration tests: our EventPipe client and the real dotnet-trace against a real .NET app
//! (../shared/fixtures/FixtureApp, built into a temp dir). Skips locally without .NET; fails
//! under CI=true.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use eventpipe::ipc::{DiagnosticsClient, IpcError, Provider, SessionConfig};
use harness::collect::Collector;
use stacks::DecodeContext;
use lab::apps::fixture_app;
use harness::host::dotnet::Dotnet;
use model::Collection;
use harness::scenario::CollectorSpec;
use harness::run::{AppLaunch, HostTarget, RunningApp, Target};
use tracelab_fixtures::prerequisites;

/// A built FixtureApp in a temp dir, or `None` after recording a skip.
struct Fixture {
    dotnet: Dotnet,
    dll: PathBuf,
    dir: tempfile::TempDir,
}

fn fixture(test: &str) -> Option<Fixture> {
    let dotnet = std::cell::OnceCell::new();
    let locate = || match Dotnet::locate_or_install() {
        Ok(d) => {
            let _ = dotnet.set(d);
            Ok(())
        }
        Err(e) => Err(format!("no .NET SDK: {e:#}")),
    };
    if !prerequisites(test, &[&locate]) {
        return None;
    }
    let dotnet = dotnet.into_inner().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dll = fixture_app::build(&dotnet, &dir.path().join("fixture-app")).expect("build FixtureApp");
    Some(Fixture { dotnet, dll, dir })
}

fn spec(text: &str) -> CollectorSpec {
    toml::from_str(text).unwrap()
}

impl Fixture {
    fn artifacts(&self) -> PathBuf {
        let a = self.dir.path().join("artifacts");
        std::fs::create_dir_all(&a).unwrap();
        a
    }

    fn launch(&self, target: &mut HostTarget, args: &[&str], env: Vec<(String, String)>) -> RunningApp {
        let launch = AppLaunch {
            program: harness::run::Program::Dll(self.dll.clone()),
            cwd: None,
            cwd_writable: false,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env.into_iter().collect(),
            work_dir: self.artifacts(),
        };
        let mut app = target.launch(&launch).unwrap();
        app.wait_for_line("FIXTURE READY", Duration::from_secs(60)).unwrap();
        app
    }

    /// Runs the app under `collector` the way the engine does and decodes the result.
    fn run(&self, collector: &mut dyn Collector, args: &[&str]) -> Collection {
        let artifacts = self.artifacts();
        let mut target = HostTarget::new(self.dotnet.dotnet.clone());
        let mut app = self.launch(&mut target, args, collector.app_env());
        collector.start(&mut target, &app, &artifacts).unwrap();
        let code = target.wait_app(&mut app, Duration::from_secs(120)).unwrap();
        assert_eq!(code, 0, "app output:\n{}", app.transcript.join("\n"));
        collector.stop(&mut target, &app).unwrap();
        let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
        let ctx = DecodeContext {
            artifacts: &artifacts,
            app_tmp_dir: &app.tmp_dir_host,
            host_pid: app.host_pid,
            target_pid: app.target_pid,
            path_map: &identity,
            symbol_dirs: &[],
        };
        collector.decode(&ctx).unwrap()
    }
}

fn count(coll: &Collection, name: &str) -> usize {
    coll.events.iter().filter(|e| e.name == name).count()
}

/// What the app did: 1000 FixtureExceptions, messages `fixture 0|1|2` = 334 / 333 / 333.
fn assert_exceptions_match_the_app(coll: &Collection) {
    let mut by_message = std::collections::BTreeMap::new();
    for e in coll.events.iter().filter(|e| e.name == "ExceptionThrown") {
        let t = e.fields["ExceptionType"].as_str().unwrap();
        let m = e.fields["ExceptionMessage"].as_str().unwrap();
        if t == "Fixture.FixtureException" {
            *by_message.entry(m.to_string()).or_insert(0) += 1;
        }
    }
    let expected: std::collections::BTreeMap<String, i32> =
        [("fixture 0", 334), ("fixture 1", 333), ("fixture 2", 333)].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(by_message, expected);
}

#[test]
fn eventpipe_process_info_of_a_live_app() {
    let Some(fx) = fixture("eventpipe::eventpipe_process_info_of_a_live_app") else { return };
    let mut target = HostTarget::new(fx.dotnet.dotnet.clone());
    let mut app = fx.launch(&mut target, &["sleep", "4"], Vec::new());
    let client = DiagnosticsClient::for_pid(app.host_pid).unwrap();
    let info = client.process_info().unwrap();
    assert_eq!(info.pid, u64::from(app.target_pid));
    assert!(info.command_line.contains("FixtureApp.dll"), "{info:?}");
    assert_eq!(info.os, "Linux");
    assert!(!info.arch.is_empty());
    target.wait_app(&mut app, Duration::from_secs(60)).unwrap();
}

#[test]
fn eventpipe_gc_and_exceptions_session_counts_match_the_app() {
    let Some(fx) = fixture("eventpipe::eventpipe_gc_and_exceptions_session_counts_match_the_app") else { return };
    let mut collector = harness::collect::from_spec(&spec("kind = \"eventpipe\"\nprofile = \"gc,exceptions\"")).unwrap();
    // `sleep` first: the session is up well before the measured phases.
    let coll = fx.run(collector.as_mut(), &["sleep,gc,exceptions", "1"]);
    assert_exceptions_match_the_app(&coll);
    // The app induces 10 GCs (reason 1 = Induced) after 200k allocations.
    let induced = coll
        .events
        .iter()
        .filter(|e| e.name == "GCStart" && e.fields["Reason"].as_u64() == Some(1))
        .count();
    assert_eq!(induced, 10, "induced GCStart events");
    let (starts, ends) = (count(&coll, "GCStart"), count(&coll, "GCEnd"));
    assert!(starts >= 10 && starts.abs_diff(ends) <= 2, "GCStart {starts}, GCEnd {ends}");
    assert!(count(&coll, "GCAllocationTick") > 0, "GC at Verbose brings allocation ticks");
    assert_eq!(coll.lost_events, 0);
}

#[test]
fn eventpipe_stop_tracing_ends_a_session_on_a_live_app() {
    let Some(fx) = fixture("eventpipe::eventpipe_stop_tracing_ends_a_session_on_a_live_app") else { return };
    let mut target = HostTarget::new(fx.dotnet.dotnet.clone());
    let mut app = fx.launch(&mut target, &["sleep,cpu", "6"], Vec::new());
    let client = DiagnosticsClient::for_pid(app.host_pid).unwrap();
    let config = SessionConfig {
        providers: vec![
            Provider::new("Microsoft-DotNETCore-SampleProfiler", 0, 5),
            Provider::new("Microsoft-Windows-DotNETRuntime", 0x8000, 4),
        ],
        ..SessionConfig::default()
    };
    let session = client.start_session(&config).unwrap();
    let id = session.id;
    let trace = fx.artifacts().join("live.nettrace");
    let mut drain = session.drain_to(std::fs::File::create(&trace).unwrap());
    std::thread::sleep(Duration::from_millis(1000));
    let asked = Instant::now();
    client.stop_tracing(id).unwrap();
    drain.wait(Duration::from_secs(20)).unwrap();
    let took = asked.elapsed();
    assert!(target_alive(app.host_pid), "the app is still running: the session ended by StopTracing");
    assert!(took < Duration::from_secs(10), "stream ended {took:?} after StopTracing");
    let d = eventpipe::decode(std::fs::File::open(&trace).unwrap(), &Default::default()).unwrap();
    assert!(!d.samples.is_empty(), "SampleProfiler samples");
    assert!(d.count("Microsoft-Windows-DotNETRuntimeRundown", 144) > 0, "rundown MethodDCEndVerbose at stop");
    target.wait_app(&mut app, Duration::from_secs(60)).unwrap();
}

fn target_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn eventpipe_dead_or_foreign_pid_gives_a_clear_error() {
    // A process that exited and was reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let err = DiagnosticsClient::for_pid(pid).unwrap_err();
    assert!(matches!(err, IpcError::NoProcess { .. }), "{err}");
    assert!(err.to_string().contains(&pid.to_string()), "{err}");

    // A live process that is not .NET: no socket, and the message says where we looked.
    let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let err = DiagnosticsClient::for_pid(sleeper.id()).unwrap_err();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(matches!(err, IpcError::NoSocket { .. }), "{err}");
    assert!(err.to_string().contains("/tmp"), "{err}");
}

#[test]
fn eventpipe_session_survives_the_target_dying() {
    let Some(fx) = fixture("eventpipe::eventpipe_session_survives_the_target_dying") else { return };
    let mut target = HostTarget::new(fx.dotnet.dotnet.clone());
    let mut app = fx.launch(&mut target, &["sleep,exceptions", "6"], Vec::new());
    let client = DiagnosticsClient::for_pid(app.host_pid).unwrap();
    let config = SessionConfig { providers: vec![Provider::new("Microsoft-Windows-DotNETRuntime", 0x8000, 4)], ..Default::default() };
    let session = client.start_session(&config).unwrap();
    let trace = fx.artifacts().join("killed.nettrace");
    let mut drain = session.drain_to(std::fs::File::create(&trace).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    harness::host::proc::signal(app.host_pid, 9).unwrap();
    let _ = target.wait_app(&mut app, Duration::from_secs(30));
    drain.wait(Duration::from_secs(20)).expect("the stream ends when the process dies");
    // The file is cut mid-stream: decoding says so, with a byte offset, and does not panic.
    match eventpipe::decode(std::fs::File::open(&trace).unwrap(), &Default::default()) {
        Ok(d) => panic!("a killed session's trace decoded as complete ({} events)", d.stats.events),
        Err(e) => assert!(e.to_string().contains("byte offset"), "{e}"),
    }
    // And a StopTracing to the dead process names the problem.
    assert!(client.stop_tracing(1).is_err());
}

#[test]
fn eventpipe_startup_tracing_sees_the_first_managed_code() {
    let Some(fx) = fixture("eventpipe::eventpipe_startup_tracing_sees_the_first_managed_code") else { return };
    let mut collector = harness::collect::from_spec(&spec(
        "kind = \"eventpipe\"\nstartup = true\nprofile = \"exceptions\"\nproviders = [\"Microsoft-Windows-DotNETRuntime:0x18:5\"]",
    ))
    .unwrap();
    let env = collector.app_env();
    assert!(env.iter().any(|(k, v)| k == "DOTNET_DiagnosticPorts" && v.ends_with(",connect,suspend")), "{env:?}");
    let coll = fx.run(collector.as_mut(), &["exceptions", "1"]);
    // The JIT compiles Main before any of the app's code runs: its load event is in the trace.
    let main_jit = coll.events.iter().any(|e| {
        e.name == "MethodLoadVerbose"
            && e.fields.get("MethodNamespace").and_then(|v| v.as_str()) == Some("Fixture.Program")
            && e.fields.get("MethodName").and_then(|v| v.as_str()) == Some("Main")
    });
    assert!(main_jit, "MethodLoadVerbose of Fixture.Program.Main; {} method loads", count(&coll, "MethodLoadVerbose"));
    assert_exceptions_match_the_app(&coll);
}

#[test]
fn dotnet_trace_exceptions_match_the_app() {
    let Some(fx) = fixture("eventpipe::dotnet_trace_exceptions_match_the_app") else { return };
    let mut collector = harness::collect::from_spec(&spec(
        "kind = \"dotnet-trace\"\nproviders = \"Microsoft-Windows-DotNETRuntime:0x8001:5\"",
    ))
    .unwrap();
    // dotnet-trace is itself a .NET app and takes a second or two to attach: sleep 2 s first.
    let coll = fx.run(collector.as_mut(), &["sleep,gc,exceptions", "4"]);
    assert_exceptions_match_the_app(&coll);
    let induced = coll.events.iter().filter(|e| e.name == "GCStart" && e.fields["Reason"].as_u64() == Some(1)).count();
    assert_eq!(induced, 10);
    assert!(fx.artifacts().join("dotnet-trace.nettrace").is_file());
}

#[test]
fn eventpipe_thread_time_samples_resolve_managed_frames() {
    let Some(fx) = fixture("eventpipe::eventpipe_thread_time_samples_resolve_managed_frames") else { return };
    let mut collector = harness::collect::from_spec(&spec("kind = \"eventpipe\"\nprofile = \"thread-time\"")).unwrap();
    let coll = fx.run(collector.as_mut(), &["sleep,cpu", "2"]);
    let leaf = |name: &str| {
        coll.samples.iter().filter(|s| s.frames.first().and_then(|f| f.name.as_deref()) == Some(name)).count()
    };
    let (hot, cold) = (leaf("Fixture.Phases::CpuHot(int64)"), leaf("Fixture.Phases::CpuCold(int64)"));
    // Truth is 75 / 25; the sampler stops threads at safe points, so only the order is asserted here
    // (scenarios score the share with the design's tolerance).
    assert!(hot > cold && cold > 0, "CpuHot {hot}, CpuCold {cold} leaf samples");
    let external = coll.samples.iter().filter(|s| s.kind.as_deref() == Some("external")).count();
    assert!(external > 0, "the main thread's Thread.Sleep shows as external samples");
    let sleep = coll.samples.iter().filter(|s| s.frames.iter().any(|f| f.name.as_deref() == Some("Fixture.Phases::Sleep(float64)"))).count();
    assert!(sleep > 0, "Sleep frames resolved");
    let frames: Vec<_> = coll.samples.iter().flat_map(|s| s.frames.iter()).collect();
    let named = frames.iter().filter(|f| f.name.is_some()).count();
    assert!(named * 10 >= frames.len() * 9, "{named} of {} frames named", frames.len());
    let hot_frame = coll.samples.iter().flat_map(|s| s.frames.first()).find(|f| f.name.as_deref() == Some("Fixture.Phases::CpuHot(int64)")).unwrap();
    assert_eq!(hot_frame.class, model::DsoClass::Jit);
    assert_eq!(hot_frame.dso.as_deref(), Some("FixtureApp"));
}
