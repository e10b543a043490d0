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

fn attach(toml: &str, dir: &Path, pid: u32) -> (RunOutcome, tempfile::TempDir) {
    let path = dir.join("attach.toml");
    std::fs::write(&path, toml).unwrap();
    let scenario = Scenario::load(&path).unwrap_or_else(|e| panic!("{e:#}"));
    let results = tempfile::tempdir().unwrap();
    let opts = RunOptions { results_root: Some(results.path().to_path_buf()), attach: Some(pid), ..Default::default() };
    let outcome = harness::engine::run(&scenario, &opts).unwrap_or_else(|e| panic!("{e:#}"));
    (outcome, results)
}

fn web_toml(url: &str) -> String {
    format!(
        "name = \"web-api-attached\"\nworkload = {{ dll = \"bin/web-api.dll\" }}\n\n\
         [load]\nurl = \"{url}\"\nroutes = [\"/cpu\", \"/blocked\"]\nconnections_per_route = 4\nseconds = 4\n\n\
         [[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\n\
         [[expect]]\nkind = \"share_at_least\"\nname = \"perf cpu-clock on the CPU route\"\ncollector = \"perf-cpu\"\n\
         method = \"::CpuRoute\\\\b\"\namong = [\"::CpuRoute\\\\b\", \"::BlockedRoute\\\\b\"]\nmin = 0.9\nmin_samples = 100\n\n\
         [[expect]]\nkind = \"resolved\"\ncollector = \"perf-cpu\"\nclass = \"jit\"\nmin = 0.99\nmin_samples = 100\n"
    )
}

/// A web API started from a shell, W^X on and no perf map: attached by pid, its perf map switched
/// on over IPC (the rundown names what was compiled before) and off after, the CPU route's share
/// and ≥ 99 % of JIT leaf frames named — and the app serves on, its map gone as before.
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
