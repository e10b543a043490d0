//! Integration tests: containers (real Docker daemon, real images, real perf).
//! nextest runs these one at a time (test group `containers`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::host::docker::Docker;
use harness::run::container::{ContainerOptions, ContainerTarget};
use harness::run::{AppLaunch, Target, TargetKind};
use tracelab_fixtures::{prerequisites, require_root};
use harness::host::environment::require_program;

fn docker_available() -> Result<(), String> {
    Docker::available()
}

fn debootstrap_available() -> Result<(), String> {
    if Path::new("/usr/sbin/debootstrap").exists() { Ok(()) } else { require_program("debootstrap") }
}

fn ready(test: &str) -> bool {
    prerequisites(test, &[&require_root, &docker_available, &debootstrap_available, &|| require_program("tar")])
}

fn dotnet() -> harness::host::dotnet::Dotnet {
    harness::host::dotnet::Dotnet::locate_or_install().expect(".NET SDK")
}

fn built(name: &str) -> harness::workload::BuiltWorkload {
    harness::workload::build_named(&dotnet(), name, false).expect("workload builds")
}

/// A fresh work dir under target/ (bind-mounted into containers at the same path).
fn work_dir(test: &str) -> tempfile::TempDir {
    let base = harness::project_root().join("target").join("tracelab-it");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new().prefix(test).tempdir_in(base).unwrap()
}

fn run_label() -> String {
    format!("it-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos())
}

#[test]
fn image_build_is_cached() {
    if !ready("containers::image_build_is_cached") {
        return;
    }
    let docker = Docker::connect().unwrap();
    let suite = harness::host::image::suite("bullseye").unwrap();
    let root = dotnet().root;
    let first = harness::host::image::build(&docker, suite, &root).unwrap();
    eprintln!("first build: {:.1} s", first.duration.as_secs_f64());
    let second = harness::host::image::build(&docker, suite, &root).unwrap();
    eprintln!("second build: {:.1} s", second.duration.as_secs_f64());
    assert!(second.rootfs_reused && second.base.reused && second.runtime.reused, "{second:?}");
    assert_eq!(first.runtime.id, second.runtime.id);
    assert_eq!(first.base.id, second.base.id);
    assert!(second.duration < Duration::from_secs(15), "cached build took {:?}", second.duration);
    let info = docker.inspect_image(&second.runtime.tag).unwrap().unwrap();
    assert_eq!(info.labels.get(harness::host::docker::LABEL).map(String::as_str), Some("1"));
    assert!(info.labels.contains_key(harness::host::image::LABEL_INPUTS));
}

fn launch_cpu_bound(target: &mut ContainerTarget, work: &Path, seconds: u32) -> harness::run::RunningApp {
    let app = built("cpu-bound");
    let launch = AppLaunch {
        program: harness::run::Program::Dll(app.dll.clone()),
        cwd: None,
        cwd_writable: false,
        args: vec![
            "--seconds".into(),
            seconds.to_string(),
            "--truth".into(),
            work.join("truth.json").display().to_string(),
            "--go-file".into(),
            work.join("go").display().to_string(),
        ],
        // What the perf collector asks for: a perf map, and W^X off (with it on, JIT code runs
        // from /memfd:doublemapper and perf cannot name it).
        env: [("DOTNET_PerfMapEnabled", "1"), ("DOTNET_EnableWriteXorExecute", "0")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        work_dir: work.to_path_buf(),
    };
    target.launch(&launch).expect("the app starts in a container")
}

fn labelled(docker: &Docker, run: &str) -> usize {
    docker.containers_with_label(&format!("{}={run}", harness::host::docker::LABEL_RUN)).unwrap().len()
}

/// Runs `perf script` where the target runs tools and returns its output.
fn perf_script(target: &mut ContainerTarget, app: &harness::run::RunningApp, data: &Path) -> String {
    let argv: Vec<String> = ["perf", "script", "-F", "comm,tid,ip,sym,dso", "-i"].iter().map(|s| s.to_string()).chain([data.display().to_string()]).collect();
    let tool = target.spawn_tool(app, &argv, &[]).expect("perf script starts");
    let out = tool.child.wait_with_output().unwrap();
    assert!(out.status.success(), "perf script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// perf record of the app where the target runs tools, JIT frames resolved from the perf map in
/// the shared /tmp. With `interrupt`, perf is stopped with SIGINT while the app still runs.
fn perf_resolves_jit_frames(test: &str, kind: TargetKind, interrupt: bool) {
    if !ready(test) {
        return;
    }
    let run = run_label();
    let mut options = ContainerOptions::new("bullseye", vec!["SYS_ADMIN".into()]).unwrap();
    options.run_label = Some(run.clone());
    let mut target = ContainerTarget::new(kind, options).unwrap();
    let work = work_dir(test.trim_start_matches("containers::"));
    let mut app = launch_cpu_bound(&mut target, work.path(), if interrupt { 4 } else { 2 });
    app.wait_for_line("TRACELAB READY", Duration::from_secs(60)).unwrap();
    assert_eq!(harness::host::proc::nspid(app.host_pid).unwrap(), vec![app.host_pid, app.target_pid]);
    assert_ne!(app.host_pid, app.target_pid);
    let map = app.tmp_dir_host.join(format!("perf-{}.map", app.target_pid));
    assert!(map.is_file(), "{} is visible on the host", map.display());

    let data = app.work_dir_in_target.join("perf.data");
    let argv: Vec<String> = ["perf", "record", "--no-buildid-cache", "-k", "1", "-g", "-e", "cpu-clock", "-F", "999", "-o"]
        .iter()
        .map(|s| s.to_string())
        .chain([data.display().to_string(), "-p".into(), app.target_pid.to_string()])
        .collect();
    let mut perf = target.spawn_tool(&app, &argv, &[]).expect("perf starts");
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(work.path().join("go"), b"").unwrap();
    if interrupt {
        std::thread::sleep(Duration::from_secs(2));
        perf.interrupt().unwrap();
        let status = perf.wait(Duration::from_secs(30)).unwrap();
        // perf record re-raises the SIGINT it handled once its data is written (record__sig_exit):
        // the docker client reports that as 130.
        assert!(status.success() || status.code() == Some(130), "perf after SIGINT: {status}");
    }
    assert_eq!(target.wait_app(&mut app, Duration::from_secs(60)).unwrap(), 0, "{}", app.transcript.join("\n"));
    if !interrupt {
        let status = perf.wait(Duration::from_secs(30)).unwrap();
        assert!(status.success(), "perf: {status}");
    }
    assert!(work.path().join("truth.json").is_file());
    let script = perf_script(&mut target, &app, &data);
    let samples = script.lines().filter(|l| l.trim_start().starts_with("dotnet") || l.contains(" 1/")).count();
    let hot = script.lines().filter(|l| l.contains("Tracelab.Workloads.CpuBound::HotLoop")).count();
    eprintln!("{test}: {} lines, HotLoop frames {hot}", script.lines().count());
    assert!(samples > 0, "no samples of the app:\n{}", &script[..script.len().min(2000)]);
    let jit: Vec<&str> = script.lines().filter(|l| l.contains("perf-") || l.contains("memfd")).take(20).collect();
    assert!(hot > 100, "JIT frames not resolved: {hot} HotLoop frames\n{}", jit.join("\n"));

    target.cleanup().unwrap();
    assert_eq!(labelled(target.docker(), &run), 0, "containers left after cleanup");
}

#[test]
fn container_perf_with_sys_admin_resolves_jit_frames() {
    perf_resolves_jit_frames("containers::container_perf_with_sys_admin_resolves_jit_frames", TargetKind::Container, false);
}

#[test]
fn sidecar_perf_resolves_jit_frames_and_stops_on_sigint() {
    perf_resolves_jit_frames("containers::sidecar_perf_resolves_jit_frames_and_stops_on_sigint", TargetKind::Sidecar, true);
}

#[test]
fn nspid_is_read_from_a_containerised_process() {
    let test = "containers::nspid_is_read_from_a_containerised_process";
    if !ready(test) {
        return;
    }
    let run = run_label();
    let mut options = ContainerOptions::new("bullseye", vec![]).unwrap();
    options.run_label = Some(run.clone());
    let mut target = ContainerTarget::new(TargetKind::Container, options).unwrap();
    let work = work_dir("nspid");
    let mut app = launch_cpu_bound(&mut target, work.path(), 1);
    app.wait_for_line("TRACELAB READY", Duration::from_secs(60)).unwrap();
    let ns = harness::host::proc::nspid(app.host_pid).unwrap();
    assert_eq!(ns.len(), 2, "{ns:?}");
    assert_eq!(ns, vec![app.host_pid, app.target_pid]);
    assert!(app.target_pid < 100, "a fresh namespace numbers from 1: {}", app.target_pid);
    assert_eq!(harness::host::proc::host_pid_in_namespace_of(app.host_pid, app.target_pid).unwrap(), app.host_pid);
    // The diagnostics socket is named with the pid inside the namespace.
    let prefix = format!("dotnet-diagnostic-{}-", app.target_pid);
    let socket = std::fs::read_dir(&app.tmp_dir_host)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix));
    assert!(socket.is_some(), "no {prefix}*-socket in {}", app.tmp_dir_host.display());
    // Files of the image map to the rootfs the image was made from; the runtime to the host's.
    let libc = target.path_map(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
    assert!(libc.starts_with(harness::host::image::rootfs_dir(harness::host::image::suite("bullseye").unwrap())));
    let coreclr = std::fs::read_dir(target.path_map(Path::new("/usr/share/dotnet/shared/Microsoft.NETCore.App")).unwrap()).unwrap().count();
    assert!(coreclr > 0);
    std::fs::write(work.path().join("go"), b"").unwrap();
    assert_eq!(target.wait_app(&mut app, Duration::from_secs(60)).unwrap(), 0);
    drop(target);
    assert_eq!(labelled(&Docker::connect().unwrap(), &run), 0, "containers left after drop");
}

#[test]
fn a_dead_daemon_is_named() {
    // A socket path nobody listens on: the error must say what to do, not panic.
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "containers::connect_helper", "--nocapture", "--include-ignored"])
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .env("TRACELAB_CONNECT_HELPER", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("CONNECT-ERROR no Docker daemon answers at unix://"), "{text}");
    assert!(text.contains("--target host"), "{text}");
}

#[test]
#[ignore = "helper run by a_dead_daemon_is_named in a child process"]
fn connect_helper() {
    if std::env::var("TRACELAB_CONNECT_HELPER").is_err() {
        return;
    }
    match Docker::connect() {
        Ok(_) => println!("CONNECT-OK"),
        Err(e) => println!("CONNECT-ERROR {e:#}"),
    }
}

/// Phases at which the kill test signals the helper.
const PHASES: &[&str] = &["connected", "launched", "tool"];

#[test]
#[ignore = "helper run by kill_at_any_phase_leaves_nothing_after_sweep in a child process"]
fn kill_helper() {
    let Ok(run) = std::env::var("TRACELAB_KILL_HELPER") else { return };
    let work = PathBuf::from(std::env::var("TRACELAB_KILL_WORK").unwrap());
    let mut options = ContainerOptions::new("bullseye", vec!["SYS_ADMIN".into()]).unwrap();
    options.run_label = Some(run);
    let mut target = ContainerTarget::new(TargetKind::Sidecar, options).unwrap();
    println!("PHASE connected");
    std::thread::sleep(Duration::from_millis(300));
    let mut app = launch_cpu_bound(&mut target, &work, 30);
    app.wait_for_line("TRACELAB READY", Duration::from_secs(60)).unwrap();
    println!("PHASE launched");
    let argv: Vec<String> = ["sleep", "60"].iter().map(|s| s.to_string()).collect();
    let _tool = target.spawn_tool(&app, &argv, &[]).unwrap();
    println!("PHASE tool");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn kill_at_any_phase_leaves_nothing_after_sweep() {
    let test = "containers::kill_at_any_phase_leaves_nothing_after_sweep";
    if !ready(test) {
        return;
    }
    use std::io::BufRead;
    built("cpu-bound");
    let docker = Docker::connect().unwrap();
    let dangling_before = docker.dangling_volumes().unwrap();
    for (signal, name) in [(2, "SIGINT"), (15, "SIGTERM"), (9, "SIGKILL")] {
        for phase in PHASES {
            let run = run_label();
            let work = work_dir("kill");
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "containers::kill_helper", "--nocapture", "--include-ignored", "--test-threads", "1"])
                .env("TRACELAB_KILL_HELPER", &run)
                .env("TRACELAB_KILL_WORK", work.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut reached = false;
            for line in std::io::BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if line.ends_with(&format!("PHASE {phase}")) {
                    reached = true;
                    break;
                }
            }
            assert!(reached, "{name}/{phase}: the helper never reached the phase");
            if *phase != "connected" {
                assert!(labelled(&docker, &run) > 0, "{name}/{phase}: no container to leave behind");
            }
            harness::host::proc::signal(child.id(), signal).unwrap();
            let status = child.wait().unwrap();
            eprintln!("{name} at {phase}: helper ended with {status}; {} containers left", labelled(&docker, &run));
            if signal != 9 {
                assert_eq!(labelled(&docker, &run), 0, "{name}/{phase}: the handler left containers");
            }
            if signal == 9 {
                // A create the helper had sent when it died still completes in the daemon: sweep
                // once that settled, as a user's later `cargo xtask sweep` would.
                std::thread::sleep(Duration::from_secs(1));
            }
            let swept = docker.sweep(false).unwrap();
            eprintln!("  sweep removed {}", swept.containers.len());
            assert_eq!(labelled(&docker, &run), 0, "{name}/{phase}: containers left after sweep");
        }
    }
    assert!(docker.volumes_with_label(harness::host::docker::LABEL).unwrap().is_empty());
    assert!(docker.dangling_volumes().unwrap() <= dangling_before, "dangling volumes appeared");
}

/// The LTTng collector's shape in a sidecar: `lttng-sessiond` in one tool container, the `lttng`
/// client in others; the app registers through the shared /var/run/lttng and IPC namespace.
#[test]
fn sidecar_lttng_records_runtime_events_without_capabilities() {
    let test = "containers::sidecar_lttng_records_runtime_events_without_capabilities";
    if !ready(test) {
        return;
    }
    let run = run_label();
    let mut options = ContainerOptions::new("bullseye", vec![]).unwrap();
    options.run_label = Some(run.clone());
    let mut target = ContainerTarget::new(TargetKind::Sidecar, options).unwrap();
    let work = work_dir("sidecar-lttng");
    let app_build = built("gc-heavy");
    let launch = AppLaunch {
        program: harness::run::Program::Dll(app_build.dll.clone()),
        cwd: None,
        cwd_writable: false,
        args: ["--seconds", "2", "--induced", "5", "--go-file"]
            .iter()
            .map(|s| s.to_string())
            .chain([work.path().join("go").display().to_string()])
            .collect(),
        env: [("DOTNET_EnableEventLog".to_string(), "1".to_string())].into(),
        work_dir: work.path().to_path_buf(),
    };
    let mut app = target.launch(&launch).unwrap();
    app.wait_for_line("TRACELAB READY", Duration::from_secs(60)).unwrap();
    let sh = |script: String| vec!["sh".to_string(), "-c".to_string(), script];
    let mut sessiond = target.spawn_tool(&app, &["lttng-sessiond".into(), "--no-kernel".into()], &[]).unwrap();
    let trace = work.path().join("lttng");
    let setup = format!(
        "for i in $(seq 50); do lttng list >/dev/null 2>&1 && break; sleep 0.1; done; \
         lttng create s --output={} && lttng enable-event -u 'DotNETRuntime:*' && lttng start",
        trace.display()
    );
    let out = target.spawn_tool(&app, &sh(setup), &[]).unwrap().child.wait_with_output().unwrap();
    assert!(out.status.success(), "lttng setup: {}", String::from_utf8_lossy(&out.stderr));
    // The app's LTTng-UST listener registers once it sees the daemon (it polls the wait shm).
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(work.path().join("go"), b"").unwrap();
    assert_eq!(target.wait_app(&mut app, Duration::from_secs(60)).unwrap(), 0);
    let read = format!("lttng stop s >/dev/null && lttng destroy s >/dev/null && babeltrace {}", trace.display());
    let out = target.spawn_tool(&app, &sh(read), &[]).unwrap().child.wait_with_output().unwrap();
    assert!(out.status.success(), "lttng stop/read: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let gc_start = text.lines().filter(|l| l.contains("DotNETRuntime:GCStart")).count();
    eprintln!("{test}: {} events, {gc_start} GCStart", text.lines().count());
    assert!(gc_start >= 5, "expected ≥ 5 GCStart (5 induced), got {gc_start}");
    sessiond.interrupt().unwrap();
    let _ = sessiond.wait(Duration::from_secs(10));
    target.cleanup().unwrap();
    assert_eq!(labelled(target.docker(), &run), 0);
}
