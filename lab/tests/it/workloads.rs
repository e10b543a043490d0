//! Integration tests: workloads. Each builds a workload with the real SDK, runs it briefly with
//! no collector under the engine's protocol (READY line, go-file, truth.json, DONE) and checks its
//! truth is complete and plausible.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harness::host::dotnet::Dotnet;
use harness::scenario::WorkloadRef;
use tracelab_fixtures::skip;
use harness::workload;
use harness::workload::{BuiltWorkload, Truth};

fn dotnet_or_skip(test: &str) -> Option<Dotnet> {
    match Dotnet::locate_or_install() {
        Ok(d) => Some(d),
        Err(e) => {
            skip(test, format!("no .NET SDK: {e:#}"));
            None
        }
    }
}

fn build(dotnet: &Dotnet, name: &str) -> BuiltWorkload {
    workload::build_with(dotnet, &WorkloadRef::Named(name.into()))
        .unwrap_or_else(|e| panic!("building {name}: {e:#}"))
}

/// A workload started under the engine's protocol, stopped at READY.
struct Started {
    child: Child,
    lines: mpsc::Receiver<String>,
    transcript: Vec<String>,
    dir: tempfile::TempDir,
}

impl Started {
    fn truth_path(&self) -> PathBuf {
        self.dir.path().join("truth.json")
    }
    fn go_path(&self) -> PathBuf {
        self.dir.path().join("go")
    }

    fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "no `{prefix}` line within {timeout:?}; output so far:\n{}",
                        self.transcript.join("\n")
                    );
                }
            }
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.transcript.push(line);
                }
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "workload did not exit within {timeout:?}; output:\n{}",
                    self.transcript.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dotnet: &Dotnet, built: &BuiltWorkload, args: &[&str]) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = dotnet.command();
    cmd.arg(&built.dll)
        .args(args)
        .arg("--truth")
        .arg(dir.path().join("truth.json"))
        .arg("--go-file")
        .arg(dir.path().join("go"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", built.dll.display()));
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let mut started = Started {
        child,
        lines: rx,
        transcript: Vec::new(),
        dir,
    };
    let ready = started.wait_line("TRACELAB READY", Duration::from_secs(60));
    let expected = format!(
        "TRACELAB READY pid={} workload={}",
        started.child.id(),
        built.name
    );
    assert_eq!(ready, expected, "readiness line");
    started
}

/// Runs a workload to completion under the protocol and returns its truth.
fn run(dotnet: &Dotnet, built: &BuiltWorkload, args: &[&str]) -> Truth {
    let mut app = start(dotnet, built, args);
    assert!(!app.truth_path().exists(), "truth written before go");
    std::fs::File::create(app.go_path()).unwrap();
    let code = app.wait_exit(Duration::from_secs(90));
    assert_eq!(code, 0, "exit code; output:\n{}", app.transcript.join("\n"));
    assert!(
        app.transcript.iter().any(|l| l == "TRACELAB DONE"),
        "no DONE line:\n{}",
        app.transcript.join("\n")
    );
    let truth = Truth::load(&app.truth_path()).unwrap();
    check_common(&truth, built, app.child.id());
    truth
}

fn check_common(truth: &Truth, built: &BuiltWorkload, pid: u32) {
    assert_eq!(
        truth.get("workload").and_then(|v| v.as_str()),
        Some(built.name.trim_end_matches("-r2r"))
    );
    assert_eq!(truth.u64("pid"), Some(pid as u64));
    let version = truth
        .get("runtime_version")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    assert!(version.starts_with("10."), "runtime_version {version}");
    assert!(truth.f64("wall_ms").is_some_and(|w| w > 0.0));
    assert!(truth.get("args").is_some_and(|a| a.is_array()));
    assert!(truth.u64("gc.collections_total").is_some());
    assert!(truth.u64("gc.allocated_bytes").is_some());
    for phase in truth
        .get("phases")
        .and_then(|p| p.as_array())
        .expect("phases")
    {
        for key in ["name", "method", "thread"] {
            assert!(
                phase.get(key).is_some_and(|v| v.is_string()),
                "phase lacks {key}: {phase}"
            );
        }
        assert!(
            phase
                .get("tid")
                .and_then(|v| v.as_u64())
                .is_some_and(|t| t > 0),
            "{phase}"
        );
        let wall = phase.get("wall_ms").and_then(|v| v.as_f64()).unwrap();
        let cpu = phase.get("cpu_ms").and_then(|v| v.as_f64()).unwrap();
        assert!(
            cpu >= 0.0 && cpu <= wall * 1.05 + 5.0,
            "cpu {cpu} > wall {wall}: {phase}"
        );
    }
}

fn share(truth: &Truth, path: &str) -> f64 {
    truth
        .f64(path)
        .unwrap_or_else(|| panic!("truth lacks {path}: {}", truth.value))
}

#[test]
fn workloads_cpu_bound_truth_is_70_30() {
    let Some(dotnet) = dotnet_or_skip("workloads_cpu_bound_truth_is_70_30") else {
        return;
    };
    let built = build(&dotnet, "cpu-bound");
    assert!(built.dll.ends_with("cpu-bound.dll") && !built.ready_to_run);
    let again = build(&dotnet, "cpu-bound");
    assert!(!again.rebuilt, "an unchanged workload was rebuilt");
    assert_eq!(again.dll, built.dll);

    let truth = run(&dotnet, &built, &["--seconds", "1.5", "--threads", "1"]);
    let hot = share(&truth, "shares.cpu.HotLoop");
    let cold = share(&truth, "shares.cpu.ColdLoop");
    assert!((hot - 0.70).abs() <= 0.05, "HotLoop share {hot}");
    assert!((hot + cold - 1.0).abs() < 1e-9);
    let cpu: f64 = truth
        .get("phases")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cpu_ms"].as_f64().unwrap())
        .sum();
    assert!(cpu > 100.0, "only {cpu} ms of CPU in 1.5 s");
}

#[test]
fn workloads_off_cpu_waits_burn_no_cpu() {
    let Some(dotnet) = dotnet_or_skip("workloads_off_cpu_waits_burn_no_cpu") else {
        return;
    };
    let built = build(&dotnet, "off-cpu");
    let truth = run(&dotnet, &built, &["--seconds", "1.5", "--wait-ms", "40"]);
    for method in ["SleepWait", "LockWait", "PipeReadWait"] {
        let wall = share(&truth, &format!("blocked.methods.{method}.wall_ms"));
        let cpu = share(&truth, &format!("blocked.methods.{method}.cpu_ms"));
        let waits = truth
            .u64(&format!("blocked.methods.{method}.waits"))
            .unwrap();
        assert!(waits >= 3, "{method}: {waits} waits");
        assert!(
            wall >= waits as f64 * 40.0 * 0.9,
            "{method}: {wall} ms for {waits} waits of 40 ms"
        );
        assert!(cpu < wall * 0.2, "{method} burnt {cpu} of {wall} ms");
    }
    let spin_cpu = share(&truth, "spin.cpu_ms");
    assert!(spin_cpu > 50.0, "SpinWork used {spin_cpu} ms");
    assert!(share(&truth, "shares.cpu.SpinWork") > 0.9);
    let offcpu: f64 = ["SleepWait", "LockWait", "PipeReadWait"]
        .iter()
        .map(|m| share(&truth, &format!("shares.offcpu.{m}")))
        .sum();
    assert!((offcpu - 1.0).abs() < 1e-9);
}

#[test]
fn workloads_gc_heavy_counts_induced_collections() {
    let Some(dotnet) = dotnet_or_skip("workloads_gc_heavy_counts_induced_collections") else {
        return;
    };
    let built = build(&dotnet, "gc-heavy");
    let truth = run(&dotnet, &built, &["--seconds", "1.5", "--induced", "7"]);
    assert_eq!(truth.u64("gc.induced"), Some(7));
    let total = truth.u64("gc.collections_total").unwrap();
    let gen2 = truth.u64("gc.collections.gen2").unwrap();
    assert!(total >= 7 && gen2 >= 7, "total {total}, gen2 {gen2}");
    assert!(truth.u64("gc.collections.gen0") == Some(total));
    assert!(
        truth.u64("gc.allocated_bytes").unwrap() > 10_000_000,
        "{}",
        truth.value["gc"]
    );
}

#[test]
fn workloads_exceptions_counts_every_throw() {
    let Some(dotnet) = dotnet_or_skip("workloads_exceptions_counts_every_throw") else {
        return;
    };
    let built = build(&dotnet, "exceptions");
    let truth = run(&dotnet, &built, &["--seconds", "1", "--count", "300"]);
    assert_eq!(truth.u64("exceptions.total"), Some(300));
    let map = truth
        .get("exceptions.by_type_message")
        .and_then(|m| m.as_object())
        .unwrap();
    assert_eq!(map.len(), 3);
    assert_eq!(map.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 300);
    assert_eq!(
        truth.u64("exceptions.by_type_message.Tracelab.Workloads.WorkloadException: boom 0"),
        Some(100)
    );
}

#[test]
fn workloads_framework_split_by_thread_cpu() {
    let Some(dotnet) = dotnet_or_skip("workloads_framework_split_by_thread_cpu") else {
        return;
    };
    let built = build(&dotnet, "framework");
    let truth = run(&dotnet, &built, &["--seconds", "1.5"]);
    for (method, declared) in [("JsonPhase", 0.5), ("RegexPhase", 0.3), ("LinqPhase", 0.2)] {
        let measured = share(&truth, &format!("shares.cpu.{method}"));
        assert!(
            (measured - declared).abs() <= 0.05,
            "{method}: {measured} vs {declared}"
        );
    }
}

#[test]
fn workloads_web_routes_serves_and_counts() {
    let Some(dotnet) = dotnet_or_skip("workloads_web_routes_serves_and_counts") else {
        return;
    };
    let built = build(&dotnet, "web-routes");
    let mut app = start(
        &dotnet,
        &built,
        &[
            "--seconds",
            "30",
            "--port",
            "0",
            "--cpu-ms",
            "20",
            "--blocked-ms",
            "30",
        ],
    );
    let listening = app
        .transcript
        .iter()
        .find(|l| l.starts_with("TRACELAB LISTENING"))
        .cloned()
        .expect("LISTENING line before READY");
    let address = listening
        .rsplit("http://")
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    std::fs::File::create(app.go_path()).unwrap();
    for route in ["/cpu", "/blocked", "/cpu", "/blocked", "/cpu"] {
        let body = http_get(&address, route);
        assert!(body.starts_with("HTTP/1.1 200"), "{route}: {body}");
    }
    http_get(&address, "/stop");
    assert_eq!(
        app.wait_exit(Duration::from_secs(60)),
        0,
        "{}",
        app.transcript.join("\n")
    );
    let truth = Truth::load(&app.truth_path()).unwrap();
    check_common(&truth, &built, app.child.id());
    assert_eq!(truth.u64("routes.cpu.requests"), Some(3));
    assert_eq!(truth.u64("routes.blocked.requests"), Some(2));
    assert!(share(&truth, "routes.cpu.cpu_ms") >= 3.0 * 20.0 * 0.95);
    assert!(share(&truth, "routes.blocked.total_ms") >= 2.0 * 30.0 * 0.9);
    assert!(share(&truth, "routes.blocked.cpu_ms") < 20.0);
    assert_eq!(
        truth.get("stopped_by_request").and_then(|v| v.as_bool()),
        Some(true)
    );
}

fn http_get(address: &str, path: &str) -> String {
    let mut stream =
        std::net::TcpStream::connect(address).unwrap_or_else(|e| panic!("connect {address}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn workloads_go_file_timeout_exits_3() {
    let Some(dotnet) = dotnet_or_skip("workloads_go_file_timeout_exits_3") else {
        return;
    };
    let built = build(&dotnet, "cpu-bound");
    let mut app = start(&dotnet, &built, &["--seconds", "1", "--go-timeout", "0.3"]);
    assert_eq!(app.wait_exit(Duration::from_secs(30)), 3);
    assert!(
        app.transcript.iter().any(|l| l.contains("did not appear")),
        "{}",
        app.transcript.join("\n")
    );
    assert!(!app.truth_path().exists());
}

#[test]
fn workloads_ready_to_run_publish_is_precompiled() {
    let Some(dotnet) = dotnet_or_skip("workloads_ready_to_run_publish_is_precompiled") else {
        return;
    };
    let project = WorkloadRef::Project {
        project: harness::project_root().join("workloads/cpu-bound"),
        ready_to_run: true,
    };
    let built = workload::build_with(&dotnet, &project).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(built.ready_to_run);
    assert_eq!(built.name, "cpu-bound");
    assert!(
        built.dir.ends_with("cpu-bound-r2r"),
        "{}",
        built.dir.display()
    );
    let jit = build(&dotnet, "cpu-bound");
    assert_eq!(
        ready_to_run_header(&jit.dll),
        None,
        "the plain build has a ReadyToRun header"
    );
    let rtr = ready_to_run_header(&built.dll).expect("no ManagedNativeHeader in the R2R publish");
    assert!(rtr.0 >= 9, "ReadyToRun major version {}", rtr.0);
    let truth = run(&dotnet, &built, &["--seconds", "1"]);
    assert!((share(&truth, "shares.cpu.HotLoop") - 0.7).abs() <= 0.05);
}

/// (major, minor) of the READYTORUN_HEADER the CLI header's ManagedNativeHeader points to.
fn ready_to_run_header(dll: &Path) -> Option<(u16, u16)> {
    use object::read::pe::PeFile64;
    let bytes = std::fs::read(dll).unwrap();
    let data: &[u8] = &bytes;
    // Managed dlls built AnyCPU are PE32; a linux-x64 R2R publish is PE32+.
    let (clr_rva, sections) = match PeFile64::parse(data) {
        Ok(pe) => {
            let dir = pe.data_directory(object::pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR)?;
            (
                dir.virtual_address.get(object::LittleEndian),
                pe.section_table(),
            )
        }
        Err(_) => {
            let pe = object::read::pe::PeFile32::parse(data).expect("not a PE file");
            let dir = pe.data_directory(object::pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR)?;
            (
                dir.virtual_address.get(object::LittleEndian),
                pe.section_table(),
            )
        }
    };
    let cor20 = sections
        .pe_data_at(data, clr_rva)
        .expect("CLI header outside the sections");
    // IMAGE_COR20_HEADER: ManagedNativeHeader is the data directory at offset 64.
    let native_rva = u32::from_le_bytes(cor20[64..68].try_into().unwrap());
    if native_rva == 0 {
        return None;
    }
    let header = sections.pe_data_at(data, native_rva)?;
    assert_eq!(
        &header[0..4],
        b"RTR\0",
        "ManagedNativeHeader does not point at a READYTORUN_HEADER"
    );
    Some((
        u16::from_le_bytes([header[4], header[5]]),
        u16::from_le_bytes([header[6], header[7]]),
    ))
}

#[test]
fn workloads_build_failure_shows_compiler_output() {
    let Some(dotnet) = dotnet_or_skip("workloads_build_failure_shows_compiler_output") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken.csproj"),
        r#"<Project Sdk="Microsoft.NET.Sdk"><PropertyGroup><OutputType>Exe</OutputType><TargetFramework>net10.0</TargetFramework></PropertyGroup></Project>"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("Program.cs"),
        "class P { static void Main() { this is not C# } }",
    )
    .unwrap();
    // Restores must stay offline wherever the project lives.
    std::fs::copy(
        harness::project_root().join("nuget.config"),
        dir.path().join("nuget.config"),
    )
    .unwrap();
    let feed = Dotnet::feed();
    let config = std::fs::read_to_string(dir.path().join("nuget.config"))
        .unwrap()
        .replace(
            "../shared/toolchains/nuget-feed",
            &feed.display().to_string(),
        );
    std::fs::write(dir.path().join("nuget.config"), config).unwrap();
    let err = workload::build_with(
        &dotnet,
        &WorkloadRef::Project {
            project: dir.path().into(),
            ready_to_run: false,
        },
    )
    .expect_err("a broken project built");
    let err = format!("{err:#}");
    assert!(
        err.contains("dotnet build") && err.contains("error CS"),
        "{err}"
    );
}

#[test]
fn workloads_missing_dotnet_is_a_clear_error() {
    // Scrubbed search: no DOTNET_ROOT, an empty PATH and HOME, no offline installer.
    let empty = tempfile::tempdir().unwrap();
    let search = harness::host::dotnet::Search {
        dotnet_root: None,
        path: Some(empty.path().into()),
        home: Some(empty.path().into()),
        shared_dir: empty.path().join("shared"),
    };
    let err = format!("{:#}", Dotnet::locate_with(&search).unwrap_err());
    assert!(
        err.contains("no .NET 10 SDK found")
            && err.contains("install-dotnet.sh")
            && err.contains("DOTNET_ROOT"),
        "{err}"
    );
}

#[test]
fn workloads_every_folder_is_in_the_solution_and_readme() {
    let names = workload::names().unwrap();
    for expected in [
        "cpu-bound",
        "off-cpu",
        "gc-heavy",
        "exceptions",
        "framework",
        "web-routes",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "workloads/{expected} missing: {names:?}"
        );
    }
    let slnx = std::fs::read_to_string(workload::workloads_dir().join("Workloads.slnx")).unwrap();
    let readme = std::fs::read_to_string(workload::workloads_dir().join("README.md")).unwrap();
    for name in &names {
        assert!(
            slnx.contains(&format!("\"{name}/{name}.csproj\"")),
            "{name} is not in Workloads.slnx"
        );
        assert!(
            readme.contains(&format!("`{name}`")),
            "{name} has no line in workloads/README.md"
        );
    }
}
