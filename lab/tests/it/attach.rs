//! `--attach PID`: a scenario's collectors and checks on a process tracelab did not start — an app
//! of the corpus started the way its user starts it, with no diagnostics variable — left running
//! as it was found; and the processes it cannot attach to, each refused with its reason.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use harness::engine::{RunOptions, RunOutcome};
use harness::host::dotnet::Dotnet;
use harness::scenario::Scenario;
use judge::Verdict;
use tracelab_fixtures::{prerequisites, require_root};

use crate::describe;

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

/// The corpus web API, started as its user would (`dotnet web-api.dll --urls …`, nothing else
/// in its environment from us), dying with this test; its URL from its own listening line.
fn start_web_api(dir: &Path) -> (Child, String) {
    let dll = lab::apps::user_app::build("web-api", dir).unwrap_or_else(|e| panic!("{e:#}"));
    let dotnet = Dotnet::locate_or_install().unwrap();
    let mut cmd = Command::new(&dotnet.dotnet);
    cmd.arg(&dll).args(["--urls", "http://127.0.0.1:0"]).current_dir(dir).stdout(Stdio::piped()).stderr(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("DOTNET_") && k != "DOTNET_ROOT" {
            cmd.env_remove(k);
        }
    }
    harness::host::proc::die_with_owner(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the web API ended before it listened");
        if let Some(at) = line.find("Now listening on: ") {
            break line[at + "Now listening on: ".len()..].trim().to_string();
        }
    };
    // Its further output goes nowhere, as a service's would.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (child, url)
}

/// `GET path` on `url` (http://127.0.0.1:PORT): the status line's code.
fn get(url: &str, path: &str) -> Option<u16> {
    let addr = url.strip_prefix("http://")?;
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.split_whitespace().nth(1)?.parse().ok()
}

/// Waits (at most a minute) until the web API at `url` serves `/cpu`.
fn await_serving(url: &str, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while get(url, "/cpu") != Some(200) {
        assert!(std::time::Instant::now() < deadline, "{what} never served {url}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn attach(toml: &str, dir: &Path, pid: u32) -> (RunOutcome, tempfile::TempDir) {
    let path = dir.join("attach.toml");
    std::fs::write(&path, toml).unwrap();
    let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    let results = tempfile::tempdir().unwrap();
    let opts = RunOptions { results_root: Some(results.path().to_path_buf()), attach: Some(pid), ..Default::default() };
    let outcome = harness::engine::run(&scenario, &opts).unwrap_or_else(|e| panic!("{e:#}"));
    (outcome, results)
}

/// The attached web API's scenario: its CPU route's share of on-CPU samples (the promise of an
/// attach: a share PASSes) and its JIT frames named, ≥ 96 %: code the runtime made before the
/// perf map was switched on and that its rundown does not list (stubs, most likely; not yet
/// proven) stays unnamed — 24 of 2,212 leaf frames (1.1 %) in one CI run while the stubs the map
/// did name counted as JIT frames; since they are class `stub`, 40 of 1,477 and 31 of 1,336 JIT
/// leaf frames (2.7 %, 2.3 %, load ~3.7).
fn web_toml(url: &str) -> String {
    format!(
        "name = \"web-api-attached\"\nworkload = {{ dll = \"bin/web-api.dll\" }}\n\n\
         [load]\nurl = \"{url}\"\nroutes = [\"/cpu\", \"/blocked\"]\nconnections_per_route = 4\nseconds = 4\n\n\
         [[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\n\
         [[expect]]\nkind = \"share_at_least\"\nname = \"perf cpu-clock on the CPU route\"\ncollector = \"perf-cpu\"\n\
         method = \"::CpuRoute\\\\b\"\namong = [\"::CpuRoute\\\\b\", \"::BlockedRoute\\\\b\"]\nmin = 0.9\nmin_samples = 100\n\n\
         [[expect]]\nkind = \"resolved\"\ncollector = \"perf-cpu\"\nclass = \"jit\"\nmin = 0.96\nmin_samples = 100\n"
    )
}

/// A web API started from a shell, W^X on and no perf map: attached by pid, its perf map switched
/// on over IPC (the rundown names what was compiled before) and off after, the CPU route's share
/// and ≥ 96 % of JIT leaf frames named (see `web_toml`) — and the app serves on, its map gone as before.
#[test]
fn attach_to_a_web_api_started_from_a_shell() {
    let test = "attach::attach_to_a_web_api_started_from_a_shell";
    if !prerequisites(test, &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut app, url) = start_web_api(dir.path());
    let pid = app.id();
    let map = Path::new("/tmp").join(format!("perf-{pid}.map"));
    assert!(!map.exists(), "the app writes no perf map of its own");
    let (o, _results) = crate::until_decided(test, || attach(&web_toml(&url), dir.path(), pid));
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert!(o.manifest.metrics.get("attach.perf_map_rundown_methods").is_some_and(|n| *n > 100.0), "{:?}", o.manifest.metrics);
    assert!(o.manifest.commands.iter().any(|c| c.starts_with("DisablePerfMap")), "{:?}", o.manifest.commands);
    assert!(app.try_wait().unwrap().is_none(), "the app was stopped");
    assert_eq!(get(&url, "/cpu"), Some(200), "the app serves after the run");
    assert!(!map.exists(), "the perf map tracelab switched on is left behind");
    let _ = app.kill();
    let _ = app.wait();
}

/// What cannot be attached to says why: a pid that is gone (infrastructure, 5), a process that is
/// not .NET, and a .NET app whose diagnostics are off (skip, 4).
#[test]
fn attach_refuses_what_it_cannot_reach_with_the_reason() {
    let test = "attach::attach_refuses_what_it_cannot_reach_with_the_reason";
    if !prerequisites(test, &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The scenario names an app that exists (the validator checks), which is not the one attached to.
    let dll = lab::apps::user_app::build("spin-two", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let toml = web_toml("http://127.0.0.1:9").replace("bin/web-api.dll", "bin/spin-two.dll");
    // Gone.
    let mut ended = Command::new("true").spawn().unwrap();
    let gone = ended.id();
    ended.wait().unwrap();
    let (o, _r) = attach(&toml, dir.path(), gone);
    assert_eq!((o.verdict, o.verdict.exit_code()), (Verdict::Error, 5), "{}", describe(&o));
    assert!(o.reason.as_deref().unwrap_or("").contains(&format!("process {gone} does not exist")), "{:?}", o.reason);
    // Not .NET.
    let mut cmd = Command::new("sleep");
    cmd.arg("60");
    harness::host::proc::die_with_owner(&mut cmd);
    let mut sleep = cmd.spawn().unwrap();
    let (o, _r) = attach(&toml, dir.path(), sleep.id());
    assert_eq!((o.verdict, o.verdict.exit_code()), (Verdict::Skip, 4), "{}", describe(&o));
    assert!(o.reason.as_deref().unwrap_or("").contains("is not a .NET app"), "{:?}", o.reason);
    let _ = sleep.kill();
    let _ = sleep.wait();
    // .NET with its diagnostics off.
    let dotnet = Dotnet::locate_or_install().unwrap();
    let mut cmd = Command::new(&dotnet.dotnet);
    cmd.arg(&dll).args(["spin.json", "60"]).current_dir(dir.path()).env("DOTNET_EnableDiagnostics", "0").stdout(Stdio::null());
    harness::host::proc::die_with_owner(&mut cmd);
    let mut off = cmd.spawn().unwrap();
    // Its runtime is loaded within a second or two.
    let loaded = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libcoreclr.so"));
    for _ in 0..100 {
        if loaded(off.id()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (o, _r) = attach(&toml, dir.path(), off.id());
    assert_eq!((o.verdict, o.verdict.exit_code()), (Verdict::Skip, 4), "{}", describe(&o));
    assert!(o.reason.as_deref().unwrap_or("").contains("diagnostics are off"), "{:?}", o.reason);
    let _ = off.kill();
    let _ = off.wait();
}

/// The user's own container (`docker run` of the runtime image, the corpus web API as pid 1, no
/// diagnostics variable), removed when the test ends however it ends.
struct UsersContainer(String);

impl Drop for UsersContainer {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// The same web API in a container a user started with `docker run`: attached by its host pid
/// (its pid inside is 1), its socket and perf map reached through /proc/PID/root — the map
/// switched on over IPC in the container's own /tmp and off again, the app serving on.
#[test]
fn attach_to_a_web_api_in_a_users_container_by_its_host_pid() {
    let test = "attach::attach_to_a_web_api_in_a_users_container_by_its_host_pid";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dll = lab::apps::user_app::build("web-api", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let docker = harness::host::docker::Docker::connect().unwrap();
    let image = harness::host::image::ensure(&docker, harness::host::image::DEFAULT_SUITE).unwrap_or_else(|e| panic!("{e:#}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let folder = dir.path().display().to_string();
    let out = Command::new("docker")
        // Not labelled as tracelab's: a user's container, which tracelab's sweep must leave alone.
        .args(["run", "-d", "--rm", "--network", "host", "-v", &format!("{folder}:{folder}:ro"), "-w", &folder, &image, "dotnet"])
        .arg(&dll)
        .args(["--urls", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "docker run: {}", String::from_utf8_lossy(&out.stderr));
    let container = UsersContainer(String::from_utf8_lossy(&out.stdout).trim().to_string());
    await_serving(&url, "the containerised web API");
    let inspect = Command::new("docker").args(["inspect", "-f", "{{.State.Pid}}", &container.0]).output().unwrap();
    let pid: u32 = String::from_utf8_lossy(&inspect.stdout).trim().parse().unwrap();
    assert_eq!(harness::host::proc::nspid(pid).unwrap(), vec![pid, 1], "the app is pid 1 of its own namespace");
    let map = Path::new(&format!("/proc/{pid}/root/tmp")).join("perf-1.map");
    assert!(!map.exists(), "the app writes no perf map of its own");
    let (o, _results) = crate::until_decided(test, || attach(&web_toml(&url), dir.path(), pid));
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert!(o.manifest.commands.iter().any(|c| c.contains("(pid 1 in its container)")), "{:?}", o.manifest.commands);
    assert!(o.manifest.metrics.get("attach.perf_map_rundown_methods").is_some_and(|n| *n > 100.0), "{:?}", o.manifest.metrics);
    assert!(o.manifest.commands.iter().any(|c| c.starts_with("DisablePerfMap")), "{:?}", o.manifest.commands);
    assert!(o.dir.join("artifacts/perf-1.map").is_file(), "the run keeps the map it had written");
    assert_eq!(get(&url, "/cpu"), Some(200), "the app serves after the run");
    assert!(!map.exists(), "the perf map tracelab switched on is left in the container");
}

/// The corpus console app spin-two as an `attach = true` scenario: perf-cpu, its JIT frames named
/// and its hot method's share against its own numbers.
fn spin_two_attached_toml() -> &'static str {
    "name = \"spin-two-attached\"\nworkload = { dll = \"bin/spin-two.dll\" }\nargs = [\"spin.json\", \"5\"]\nstop = \"exit\"\nattach = true\n\
     truth = { path = \"spin.json\", map = { \"shares.cpu.Alpha\" = \"{/alpha_s} / ({/alpha_s} + {/beta_s})\" } }\n\n\
     [[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\n\
     [[expect]]\nkind = \"resolved\"\ncollector = \"perf-cpu\"\nclass = \"jit\"\nmin = 0.99\nmin_samples = 200\n\n\
     [[expect]]\nkind = \"share\"\nname = \"Alpha's share\"\ncollector = \"perf-cpu\"\nmethod = \"::Alpha\\\\b\"\n\
     among = [\"::Alpha\\\\b\", \"::Beta\\\\b\"]\ntruth = \"shares.cpu.Alpha\"\ntolerance_pts = 5\nmin_samples = 200\n"
}

/// `attach = true`: the corpus console app started by tracelab in the production shape — no
/// diagnostics variable, not held, W^X on, no perf map — its collectors attached once it is
/// ready, the map switched on over IPC: on every target its JIT leaf frames ≥ 99 % named and its
/// hot method's share within 5 pts of the app's own numbers.
#[test]
fn attach_true_launches_the_app_without_variables_on_every_target() {
    let test = "attach::attach_true_launches_the_app_without_variables_on_every_target";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    lab::apps::user_app::build("spin-two", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let path = dir.path().join("spin.toml");
    std::fs::write(&path, spin_two_attached_toml()).unwrap();
    let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    for target in [harness::run::TargetKind::Host, harness::run::TargetKind::Container, harness::run::TargetKind::Sidecar] {
        let (o, _results) = crate::until_decided(&format!("{test} on {target:?}"), || crate::run_scenario(&scenario, target));
        assert_eq!(o.verdict, Verdict::Pass, "{target:?}: {}", describe(&o));
        let launch = o.manifest.commands.iter().find(|c| c.contains("spin-two.dll")).unwrap();
        for var in ["DOTNET_PerfMapEnabled", "DOTNET_DefaultDiagnosticPortSuspend", "DOTNET_EnableWriteXorExecute"] {
            assert!(!launch.contains(var), "{target:?}: the app was started with {var}: {launch}");
        }
        assert!(o.manifest.commands.iter().any(|c| c.starts_with("EnablePerfMap")), "{target:?}: {:?}", o.manifest.commands);
        assert!(o.manifest.metrics.get("attach.perf_map_rundown_methods").is_some_and(|n| *n > 10.0), "{target:?}: {:?}", o.manifest.metrics);
    }
}

/// A user's pod (removed with the test), played from the user's own YAML.
struct UsersPod(String);

impl Drop for UsersPod {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["pod", "rm", "-f", "-t", "0", &self.0]).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// The web API in a pod a user played (`podman kube play` of their own YAML: a shared process
/// namespace, a tools sidecar, the app not pid 1): attached by its host pid, its socket and perf
/// map reached through /proc/PID/root and NSpid, the app serving on.
#[test]
#[ignore = "nightly (job pod_attach): ~35 s of CI; CI attaches to the same app in a user's container"]
fn attach_to_a_web_api_in_a_users_pod_by_its_host_pid() {
    let test = "attach::attach_to_a_web_api_in_a_users_pod_by_its_host_pid";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available, &crate::pods::pods_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dll = lab::apps::user_app::build("web-api", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let docker = harness::host::docker::Docker::connect().unwrap();
    let image = harness::host::image::ensure(&docker, harness::host::image::DEFAULT_SUITE).unwrap_or_else(|e| panic!("{e:#}"));
    let image = harness::host::podman::image_from_docker(&image).unwrap_or_else(|e| panic!("{e:#}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let folder = dir.path().display().to_string();
    let name = format!("users-web-{}", std::process::id());
    let yaml = [
        "apiVersion: v1".to_string(),
        "kind: Pod".into(),
        format!("metadata: {{name: {name}}}"),
        "spec:".into(),
        "  shareProcessNamespace: true".into(),
        "  hostNetwork: true".into(),
        "  containers:".into(),
        "  - name: web".into(),
        format!("    image: {image}"),
        format!("    command: [dotnet, {}, --urls, \"{url}\"]", dll.display()),
        format!("    workingDir: {folder}"),
        format!("    volumeMounts: [{{name: app, mountPath: {folder}, readOnly: true}}]"),
        "  - name: shell".into(),
        format!("    image: {image}"),
        "    command: [sleep, infinity]".into(),
        format!("  volumes: [{{name: app, hostPath: {{path: {folder}, type: Directory}}}}]"),
    ]
    .join("\n");
    let yaml_path = dir.path().join("pod.yaml");
    std::fs::write(&yaml_path, yaml).unwrap();
    let out = Command::new("podman").args(["kube", "play", "--log-driver", "k8s-file"]).arg(&yaml_path).output().unwrap();
    assert!(out.status.success(), "podman kube play: {}", String::from_utf8_lossy(&out.stderr));
    let _pod = UsersPod(name.clone());
    await_serving(&url, "the web API in the pod");
    let inspect = Command::new("podman").args(["inspect", "-f", "{{.State.Pid}}", &format!("{name}-web")]).output().unwrap();
    let pid: u32 = String::from_utf8_lossy(&inspect.stdout).trim().parse().unwrap();
    let ns = harness::host::proc::nspid(pid).unwrap();
    assert!(ns.len() == 2 && ns[1] != 1, "the app shares its pod's pid namespace, not pid 1: {ns:?}");
    let (o, _results) = crate::until_decided(test, || attach(&web_toml(&url), dir.path(), pid));
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert!(o.manifest.commands.iter().any(|c| c.contains(&format!("(pid {} in its container)", ns[1]))), "{:?}", o.manifest.commands);
    assert!(o.manifest.commands.iter().any(|c| c.starts_with("DisablePerfMap")), "{:?}", o.manifest.commands);
    assert_eq!(get(&url, "/cpu"), Some(200), "the app serves after the run");
}

/// `attach = true` in pods: the app started with no diagnostics variable in a sidecar pod and
/// in a debug-container pod (its socket and perf map reached through /proc/PID/root/tmp), the
/// perf map switched on over IPC: JIT leaf frames ≥ 99 % named, the share within 5 pts.
#[test]
#[ignore = "nightly (job pod_attach): ~25 s of CI; CI runs attach = true on the host, in a container and a sidecar"]
fn attach_true_in_a_sidecar_pod_and_a_debug_pod() {
    let test = "attach::attach_true_in_a_sidecar_pod_and_a_debug_pod";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available, &crate::pods::pods_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    lab::apps::user_app::build("spin-two", dir.path()).unwrap_or_else(|e| panic!("{e:#}"));
    let path = dir.path().join("spin.toml");
    std::fs::write(&path, spin_two_attached_toml()).unwrap();
    let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    for shape in [harness::run::pod::PodShape::Sidecar, harness::run::pod::PodShape::Debug] {
        let (o, _results) = crate::until_decided(&format!("{test} {shape:?}"), || crate::pods::run_in_pod(&scenario, shape));
        assert_eq!(o.verdict, Verdict::Pass, "{shape:?}: {}", describe(&o));
        let pod = crate::pods::played_pod(&o.dir);
        let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
        for var in ["DOTNET_PerfMapEnabled", "DOTNET_DefaultDiagnosticPortSuspend", "DOTNET_EnableWriteXorExecute"] {
            assert!(!env.iter().any(|e| e["name"] == var), "{shape:?}: the app was started with {var}: {env:?}");
        }
        assert!(o.manifest.commands.iter().any(|c| c.starts_with("EnablePerfMap")), "{shape:?}: {:?}", o.manifest.commands);
    }
}

/// A collector that only works from launch is refused at load, naming it and the fix.
#[test]
fn attach_true_refuses_a_collector_that_needs_launch_variables() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("bin")).unwrap();
    std::fs::write(dir.path().join("bin/app.dll"), b"").unwrap();
    let path = dir.path().join("a.toml");
    std::fs::write(&path, "name = \"a\"\nworkload = { dll = \"bin/app.dll\" }\nattach = true\n\n[[collector]]\nkind = \"perf-cpu\"\n\n[[collector]]\nkind = \"lttng\"\n").unwrap();
    let e = format!("{:#}", Scenario::load(&path).unwrap_err());
    assert!(e.contains("a.toml:8:1") || e.contains("collector[1]") || e.contains(":8:"), "{e}");
    assert!(e.contains("collector `lttng` cannot attach to a running app (LTTng needs DOTNET_LTTng=1 at launch)"), "{e}");
}
