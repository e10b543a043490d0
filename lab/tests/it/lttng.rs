//! Integration tests: the LTTng collector with real LTTng and a real .NET runtime.
//!
//! - bullseye container (LTTng 2.12, liblttng-ust.so.0): exceptions and gc-heavy recorded through
//!   `DotNETRuntime` tracepoints agree with the workloads' own truth;
//! - bookworm container and this host (LTTng 2.13+, liblttng-ust.so.1): the collector refuses
//!   with an `Unsupported` naming the sonames, which the engine turns into SKIPPED;
//! - a harness killed mid-session leaves no session and no daemon behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harness::collect::lttng::session;
use harness::collect::lttng::session::{Place, Session, Tools};
use harness::collect::lttng::{LttngCollector, preflight};
use harness::collect::Collector;
use harness::host::errors::unsupported_reason;
use stacks::DecodeContext;
use model::Collection;
use harness::collect::{CollectorOptions, CollectorSpec};
use harness::run::container::{ContainerOptions, ContainerTarget};
use harness::run::{AppLaunch, HostTarget, Target, TargetKind};
use tracelab_fixtures::{prerequisites, require_root};
use harness::host::environment::require_program;

fn dotnet() -> harness::host::dotnet::Dotnet {
    harness::host::dotnet::Dotnet::locate_or_install().expect(".NET SDK")
}

pub(crate) fn dotnet_available() -> Result<(), String> {
    harness::host::dotnet::Dotnet::locate_or_install().map(|_| ()).map_err(|e| format!("no .NET SDK: {e:#}"))
}

pub(crate) fn docker_available() -> Result<(), String> {
    harness::host::docker::Docker::available()
}

pub(crate) fn work_dir(test: &str) -> tempfile::TempDir {
    let base = harness::project_root().join("target").join("tracelab-it");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new().prefix(test).tempdir_in(base).unwrap()
}

fn spec(text: &str) -> anyhow::Result<LttngCollector> {
    let spec: CollectorSpec = toml::from_str(text).unwrap();
    match &spec.options {
        CollectorOptions::Lttng(o) => LttngCollector::new(spec.name(), o),
        other => panic!("not an lttng collector: {other:?}"),
    }
}

struct Run {
    collection: Collection,
    truth: serde_json::Value,
}

/// Runs a workload on `target` under the LTTng collector, the way the engine does: with
/// `from_launch`, its session opened before the app starts (what the engine does where the target
/// can hold the app back); else opened once the app is ready (a pod, a user's image).
fn run_workload(target: &mut dyn Target, work: &Path, workload: &str, args: &[&str], collector_spec: &str, from_launch: bool) -> anyhow::Result<Run> {
    let built = harness::workload::build_named(&dotnet(), workload, false)?;
    let mut collector = spec(collector_spec)?;
    let truth_path = work.join("truth.json");
    let go = work.join("go");
    let mut all_args: Vec<String> =
        vec!["--truth".into(), truth_path.display().to_string(), "--go-file".into(), go.display().to_string()];
    all_args.extend(args.iter().map(|s| s.to_string()));
    let env: BTreeMap<String, String> = collector.app_env().into_iter().collect();
    let launch = AppLaunch::dotnet(built.dll.clone(), all_args, env, work.to_path_buf());
    let mut app = if from_launch {
        let (app, prepared) = target.launch_prepared(&launch, &mut |at| collector.before_launch(at, work))?;
        anyhow::ensure!(prepared, "the {} target did not hold the app back", target.label());
        app
    } else {
        target.launch(&launch)?
    };
    app.wait_for_line("TRACELAB READY", Duration::from_secs(90))?;
    let started = collector.start(target, &app, work);
    // Release the app whatever happened, so it exits and the target can be cleaned.
    std::fs::write(&go, b"go")?;
    let exit = target.wait_app(&mut app, Duration::from_secs(120));
    let stopped = collector.stop(target, &app);
    started?;
    stopped?;
    let code = exit?;
    anyhow::ensure!(code == 0, "the app exited with {code}: {}", app.transcript.join("\n"));
    let identity = |p: &Path| Some(p.to_path_buf());
    let ctx = DecodeContext {
        artifacts: work,
        app_tmp_dir: &app.tmp_dir_host,
        host_pid: app.host_pid,
        target_pid: app.target_pid,
        path_map: &identity,
        symbol_dirs: &[],
    };
    let collection = collector.decode(&ctx)?;
    let truth = serde_json::from_str(&std::fs::read_to_string(&truth_path)?)?;
    Ok(Run { collection, truth })
}

fn container(suite: &str) -> ContainerTarget {
    let mut opts = ContainerOptions::new(suite, Vec::new()).unwrap();
    opts.run_label = Some(format!("it-lttng-{}", std::process::id()));
    ContainerTarget::new(TargetKind::Container, opts).expect("container target (builds the image on first use)")
}

fn count(c: &Collection, name: &str) -> usize {
    c.events.iter().filter(|e| e.name == name && e.provider == "DotNETRuntime").count()
}

#[test]
fn lttng_bullseye_exceptions_match_truth() {
    let test = "lttng::lttng_bullseye_exceptions_match_truth";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available, &|| require_program("nsenter")]) {
        return;
    }
    let work = work_dir("lttng-exc");
    let mut target = container("bullseye");
    let run = run_workload(&mut target, work.path(), "exceptions", &["--count", "600"], "kind = \"lttng\"\nprofile = \"default\"", true)
        .expect("LTTng records the exceptions workload in bullseye");
    target.cleanup().unwrap();
    let c = &run.collection;
    let expected = &run.truth["exceptions"]["by_type_message"];
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for e in c.events.iter().filter(|e| e.name == "ExceptionThrown" && e.provider == "DotNETRuntime") {
        let t = e.fields["ExceptionType"].as_str().unwrap();
        let m = e.fields["ExceptionMessage"].as_str().unwrap();
        if t.starts_with("Tracelab.") {
            *got.entry(format!("{t}: {m}")).or_default() += 1;
        }
        assert_eq!(e.version, Some(1));
        assert_eq!(e.id, Some(80));
    }
    let want: BTreeMap<String, u64> =
        expected.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    assert_eq!(got, want, "ExceptionThrown_V1 by type and message vs truth");
    assert_eq!(want.values().sum::<u64>(), 600);
    assert_eq!(c.lost_events, 0);
    assert_eq!(c.metrics["lttng.provider_loaded"], 1.0);
    // The session recorded from before the app's start: its startup events are in the trace.
    assert_eq!(c.metrics["lttng.recorded_from_launch"], 1.0);
    assert_eq!(count(c, "RuntimeInformationStart"), 1, "the runtime's first event");
    let corelib_loads = c
        .events
        .iter()
        .filter(|e| e.name == "ModuleLoad" && e.fields.get("ModuleILPath").and_then(|v| v.as_str()).is_some_and(|p| p.ends_with("System.Private.CoreLib.dll")))
        .count();
    assert_eq!(corelib_loads, 1, "CoreLib's ModuleLoad, fired as the runtime starts");
    assert_eq!(c.metrics["lttng.payload_errors"], 0.0, "every whole payload laid out by the manifest");
}

#[test]
fn lttng_bullseye_gc_starts_match_truth() {
    let test = "lttng::lttng_bullseye_gc_starts_match_truth";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available, &|| require_program("nsenter")]) {
        return;
    }
    let work = work_dir("lttng-gc");
    let mut target = container("bullseye");
    let run = run_workload(&mut target, work.path(), "gc-heavy", &["--seconds", "2", "--induced", "10"], "kind = \"lttng\"\nprofile = \"gc-collect-only\"", false)
        .expect("LTTng records the gc-heavy workload in bullseye");
    target.cleanup().unwrap();
    let c = &run.collection;
    let truth_total = run.truth["gc"]["collections_total"].as_u64().unwrap() as i64;
    let induced = run.truth["gc"]["induced"].as_u64().unwrap() as i64;
    let starts = count(c, "GCStart") as i64;
    let ends = count(c, "GCEnd") as i64;
    eprintln!("GCStart {starts}, GCEnd {ends}, truth collections {truth_total}, induced {induced}");
    assert!(starts >= induced, "GCStart {starts} < induced {induced}");
    assert!((starts - truth_total).abs() <= 2, "GCStart {starts} vs truth {truth_total} (±2)");
    assert!((starts - ends).abs() <= 2, "GCStart {starts} vs GCEnd {ends}");
    let first = c.events.iter().find(|e| e.name == "GCStart").unwrap();
    assert_eq!(first.version, Some(2));
    assert!(first.fields.contains_key("Depth") && first.fields.contains_key("Reason"));
}

#[test]
#[ignore = "nightly (job other_images): builds the bookworm image, ~2 min of CI; CI checks the same soname refusal on the host"]
fn lttng_bookworm_container_is_unsupported_by_soname() {
    let test = "lttng::lttng_bookworm_container_is_unsupported_by_soname";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available, &|| require_program("nsenter")]) {
        return;
    }
    let work = work_dir("lttng-bookworm");
    let mut target = container("bookworm");
    let err = match run_workload(&mut target, work.path(), "exceptions", &["--count", "10"], "kind = \"lttng\"", true) {
        Ok(_) => panic!("LTTng cannot record .NET events on bookworm (liblttng-ust.so.1), yet the run passed"),
        Err(e) => e,
    };
    target.cleanup().unwrap();
    let reason = unsupported_reason(&err).unwrap_or_else(|| panic!("not an Unsupported: {err:#}"));
    assert!(reason.contains("liblttng-ust.so.0") && reason.contains("liblttng-ust.so.1"), "{reason}");
}

#[test]
fn lttng_host_with_ust_2_13_is_unsupported_by_soname() {
    let test = "lttng::lttng_host_with_ust_2_13_is_unsupported_by_soname";
    if !prerequisites(test, &[&dotnet_available]) {
        return;
    }
    let root = Path::new("/");
    let present = preflight::ust_sonames(root);
    let dn = dotnet();
    let work = work_dir("lttng-host");
    let mut target = HostTarget::new(dn.dotnet.clone());
    let result = run_workload(&mut target, work.path(), "exceptions", &["--count", "10"], "kind = \"lttng\"", true);
    if present.iter().any(|s| s == "liblttng-ust.so.0") {
        // A host with LTTng 2.12's library loads the provider: then the preflight must not refuse.
        if let Err(e) = &result {
            assert!(unsupported_reason(e).is_none(), "refused although liblttng-ust.so.0 is present: {e:#}");
        }
        return;
    }
    let err = match result {
        Ok(_) => panic!("the host has {present:?}, no liblttng-ust.so.0, yet the LTTng run passed"),
        Err(e) => e,
    };
    let reason = unsupported_reason(&err).unwrap_or_else(|| panic!("not an Unsupported: {err:#}"));
    assert!(reason.contains("needs liblttng-ust.so.0"), "{reason}");
    assert!(reason.contains("libcoreclrtraceptprovider.so"), "{reason}");
}

/// The provider of the SDK's runtime names LTTng-UST 2.12's soname (read from its ELF header).
#[test]
fn lttng_runtime_provider_needs_ust_so_0() {
    if !prerequisites("lttng::lttng_runtime_provider_needs_ust_so_0", &[&dotnet_available]) {
        return;
    }
    let shared = dotnet().root.join("shared/Microsoft.NETCore.App");
    let runtime = std::fs::read_dir(&shared).unwrap().flatten().map(|e| e.path()).find(|p| p.join(preflight::PROVIDER_FILE).exists());
    let runtime = runtime.expect("a runtime folder with libcoreclrtraceptprovider.so");
    let check = preflight::check_runtime_dir(Path::new("/"), &runtime).unwrap();
    assert!(check.ust_needed.contains(&"liblttng-ust.so.0".to_string()), "{:?}", check.needed);
}

fn lttng_tools() -> Result<(), String> {
    require_program("lttng")?;
    require_program("lttng-sessiond")
}

const KILL_CHILD_ENV: &str = "TRACELAB_LTTNG_KILL_CHILD";

/// Not a test: the child of `lttng_killed_run_leaves_no_session_or_daemon`, which runs it with
/// `--ignored` and then kills it with SIGKILL.
#[test]
#[ignore = "helper process of lttng_killed_run_leaves_no_session_or_daemon"]
fn lttng_kill_child() {
    let Some(dir) = std::env::var_os(KILL_CHILD_ENV).map(PathBuf::from) else { return };
    let tools = Tools { place: Place::Host, lttng_home: dir.join("home") };
    std::fs::create_dir_all(&tools.lttng_home).unwrap();
    let mut s = Session::open(tools, &dir.join("trace"), &dir.join("sessiond.log")).unwrap();
    s.enable(&["DotNETRuntime:GCStart_V2".to_string()]).unwrap();
    s.start().unwrap();
    let daemon = s.daemon.as_ref().map(|d| d.pid()).unwrap_or(0);
    std::fs::write(dir.join("state.tmp"), format!("{} {}", s.name, daemon)).unwrap();
    std::fs::rename(dir.join("state.tmp"), dir.join("state")).unwrap();
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn lttng_killed_run_leaves_no_session_or_daemon() {
    let test = "lttng::lttng_killed_run_leaves_no_session_or_daemon";
    if !prerequisites(test, &[&require_root, &lttng_tools]) {
        return;
    }
    let work = work_dir("lttng-kill");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "lttng::lttng_kill_child", "--ignored", "--nocapture"])
        .env(KILL_CHILD_ENV, work.path())
        .spawn()
        .unwrap();
    let state = work.path().join("state");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the child ended before opening its session: {status}");
        }
        assert!(Instant::now() < deadline, "the child opened no session within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&state).unwrap();
    let (name, daemon) = text.split_once(' ').unwrap();
    let daemon: u32 = daemon.parse().unwrap();
    let tools = Tools { place: Place::Host, lttng_home: work.path().join("home") };
    assert!(tools.session_names().unwrap().contains(&name.to_string()), "the child's session {name} is not listed");

    child.kill().unwrap(); // SIGKILL: no destructor, no cleanup code runs in the child.
    child.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(15);
    if daemon != 0 {
        // The child started the daemon: the kernel's parent-death signal must stop it.
        while Path::new(&format!("/proc/{daemon}")).exists() && !is_zombie(daemon) {
            assert!(Instant::now() < deadline, "lttng-sessiond {daemon} of the killed run still runs");
            std::thread::sleep(Duration::from_millis(50));
        }
    } else {
        // A daemon we did not start keeps running; the next session opened sweeps the leftover.
        session::sweep_stale(&tools, &mut Vec::new()).unwrap();
    }
    let left: Vec<String> = tools.session_names().unwrap_or_default().into_iter().filter(|n| n == name).collect();
    assert!(left.is_empty(), "sessions left behind: {left:?}");
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z ")).unwrap_or(true)
}

/// The committed LTTng event table is what the runtime's provider in the bullseye image declares:
/// the same tracepoints with the same fields, compared name by name (not a count).
#[test]
fn lttng_provider_declares_the_committed_table() {
    let test = "lttng::lttng_provider_declares_the_committed_table";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available]) {
        return;
    }
    let docker = harness::host::docker::Docker::connect().expect("docker");
    harness::host::image::ensure(&docker, "bullseye").expect("the bullseye runtime image");
    let text = lab::lttng_provider::record("bullseye").expect("listing the provider's tracepoints in bullseye");
    let live = lab::lttng_provider::parse_recording(&text, Path::new("(live listing)")).unwrap();
    let committed = lab::lttng_provider::committed().unwrap();
    let differences = lab::lttng_provider::differences(&committed, &live);
    assert!(
        differences.is_empty(),
        "{} differs from what the runtime's LTTng provider declares in bullseye:\n  {}\nrecord again and regenerate with `cargo xtask codegen --record`",
        lab::lttng_provider::RECORDING,
        differences.join("\n  ")
    );
    // The versions .NET 10 fires are there, and the generated table carries every one.
    for tp in ["DotNETRuntime:ContentionStart_V2", "DotNETRuntime:ContentionStop_V1", "DotNETRuntime:GCHeapStats_V2"] {
        assert!(live.iter().any(|t| t.full_name() == tp), "{tp} not declared");
    }
    let profile = harness::collect::lttng::tracepoints(&harness::collect::lttng::Profile::Default, &[]);
    for tp in ["DotNETRuntime:ContentionStart_V2", "DotNETRuntime:ContentionStop_V1", "DotNETRuntime:ContentionStart_V1"] {
        assert!(profile.iter().any(|t| t == tp), "the default profile lacks {tp}");
    }
}
