//! A user's app as it is (corpus: no tracelab code in them): started with its own
//! argv, awaited by readiness, stopped its own way, judged by checks that need no truth — or by
//! a truth file in its own format — on the host, in a container and from a user's own image.

use std::path::{Path, PathBuf};

use judge::Verdict;
use harness::engine::RunOutcome;
use crate::describe;
use harness::run::TargetKind;
use harness::scenario::Scenario;
use tracelab_fixtures::{prerequisites, require_root};

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

fn docker_available() -> Result<(), String> {
    harness::host::docker::Docker::available()
}

fn build_app(name: &str, dir: &Path) -> PathBuf {
    lab::apps::user_app::build(name, dir).unwrap_or_else(|e| panic!("{e:#}"))
}

fn run(scenario_toml: &Path, target: TargetKind) -> (RunOutcome, tempfile::TempDir) {
    crate::until_decided(&scenario_toml.display().to_string(), || run_once(scenario_toml, target))
}

/// A run that holds a negative twin ends FAIL whatever else happened, so the engine's own
/// "collect again" on an inconclusive run never starts: here the run is repeated (up to three in
/// all) until the named checks are decided, each retry printed with its reason.
fn run_until_decided(scenario_toml: &Path, target: TargetKind, checks: &[&str]) -> (RunOutcome, tempfile::TempDir) {
    let mut attempt = 1;
    loop {
        let (o, results) = run_once(scenario_toml, target);
        let undecided: Vec<&str> = checks.iter().copied().filter(|c| verdict_of(&o, c) == Verdict::Inconclusive).collect();
        if undecided.is_empty() || attempt == 3 {
            return (o, results);
        }
        eprintln!("{}: attempt {attempt}: {undecided:?} inconclusive; running again\n{}", scenario_toml.display(), describe(&o));
        crate::wait_for_quiet_machine(&scenario_toml.display().to_string());
        attempt += 1;
    }
}

fn run_once(scenario_toml: &Path, target: TargetKind) -> (RunOutcome, tempfile::TempDir) {
    crate::run_scenario(&Scenario::load(scenario_toml).unwrap_or_else(|e| panic!("{e:#}")), target)
}


fn verdict_of(o: &RunOutcome, check: &str) -> Verdict {
    o.manifest.checks.iter().find(|c| c.name == check).unwrap_or_else(|| panic!("no check `{check}`: {}", describe(o))).verdict
}

/// The console app's scenario: paths relative to the TOML, its own argv, its own truth format.
const SPIN_TOML: &str = r#"
name = "spin-two"
workload = { dll = "bin/spin-two.dll" }
# The app's own arguments, exactly as written: its output file (in its run folder) and seconds.
args = ["spin.json", "5"]
stop = "exit"
truth = { path = "spin.json", map = { "shares.cpu.Alpha" = "{/alpha_s} / ({/alpha_s} + {/beta_s})" } }

[[collector]]
kind = "perf-cpu"
frequency = 499

[[collector]]
kind = "eventpipe"
profile = "thread-time"

[[expect]]
kind = "agree_share"
name = "Alpha's share agrees across perf and EventPipe"
method = "::Alpha\\b"
among = ["::Alpha\\b", "::Beta\\b"]
collectors = ["perf-cpu", "eventpipe"]
tolerance_pts = 10
min_samples = 200

[[expect]]
kind = "resolved"
collector = "perf-cpu"
class = "jit"
min = 0.9

[[expect]]
kind = "share"
name = "Alpha's share against the app's own numbers"
collector = "perf-cpu"
method = "::Alpha\\b"
among = ["::Alpha\\b", "::Beta\\b"]
truth = "shares.cpu.Alpha"
tolerance_pts = 10
min_samples = 200
"#;

/// The negative twin: a share expectation on the wrong method must fail.
const WRONG_METHOD: &str = r#"
[[expect]]
kind = "share"
name = "twin: Beta held to Alpha's share"
collector = "perf-cpu"
method = "::Beta\\b"
among = ["::Alpha\\b", "::Beta\\b"]
truth = "shares.cpu.Alpha"
tolerance_pts = 10
min_samples = 200
"#;

fn spin_scenario(dir: &Path, extra: &str) -> PathBuf {
    build_app("spin-two", dir);
    let toml = dir.join("spin.toml");
    std::fs::write(&toml, format!("{SPIN_TOML}{extra}")).unwrap();
    toml
}

fn assert_spin_passed(o: &RunOutcome) {
    // Nothing was injected into argv: the app wrote its file where its first argument said.
    assert!(o.dir.join("artifacts/spin.json").is_file(), "{}", describe(o));
    let truth = o.manifest.checks.iter().find(|c| c.name == "Alpha's share against the app's own numbers").unwrap();
    let share = truth.values["truth"];
    assert!((0.6..0.9).contains(&share), "the app's own split is ~75 %: {share}");
    for check in ["Alpha's share agrees across perf and EventPipe", "Alpha's share against the app's own numbers"] {
        assert_eq!(verdict_of(o, check), Verdict::Pass, "{}", describe(o));
    }
}

#[test]
fn console_app_as_it_is_on_the_host_and_its_twin_fails() {
    if !prerequisites("your_app::console_host", &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (o, _results) = run_until_decided(
        &spin_scenario(dir.path(), WRONG_METHOD),
        TargetKind::Host,
        &["Alpha's share agrees across perf and EventPipe", "Alpha's share against the app's own numbers"],
    );
    assert_spin_passed(&o);
    assert_eq!(verdict_of(&o, "twin: Beta held to Alpha's share"), Verdict::Fail, "{}", describe(&o));
    assert_eq!(o.verdict, Verdict::Fail, "only the twin fails: {}", describe(&o));
    // A finished host run leaves its runtime files in the run, not in /tmp.
    let pid = o.manifest.metrics["app.pid"] as u32;
    for name in [format!("perf-{pid}.map"), format!("jit-{pid}.dump"), format!("perfinfo-{pid}.map")] {
        assert!(!Path::new("/tmp").join(&name).exists(), "/tmp/{name} left behind");
    }
    assert!(o.dir.join(format!("artifacts/perf-{pid}.map")).is_file());
    // Viewer files of an app without tracelab code: perf and EventPipe profiles, trace.zip.
    crate::viewers::assert_viewer_files(&o.dir);
    crate::viewers::assert_trace_zip_opens(&o.dir);
}

/// In a container, started as a `command`: the apphost `dotnet build` writes beside the dll,
/// a path relative to the TOML, which finds the image's runtime through DOTNET_ROOT.
#[test]
fn console_app_as_it_is_in_a_container() {
    if !prerequisites("your_app::console_container", &[&require_root, &docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let toml = spin_scenario(dir.path(), "");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("workload = { dll = \"bin/spin-two.dll\" }\n", "workload = { command = [\"./bin/spin-two\", \"spin.json\", \"5\"] }\n")
        .replace("args = [\"spin.json\", \"5\"]\n", "");
    std::fs::write(&toml, text).unwrap();
    let (o, _results) = run(&toml, TargetKind::Container);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert_spin_passed(&o);
    assert!(o.manifest.commands.iter().any(|c| c.contains("/bin/spin-two spin.json 5")), "{:?}", o.manifest.commands);
}

/// A `project` is built where the user's cache is (XDG), never in the checkout nor beside the
/// sources; readiness by a delay, stop by SIGINT after the window, no truth at all.
#[test]
fn a_users_project_builds_in_the_cache_and_stops_on_sigint() {
    if !prerequisites("your_app::project_host", &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_app("spin-two", dir.path());
    let cache = dir.path().join("cache");
    // SAFETY: nextest runs each test in its own process; nothing else reads the environment here.
    unsafe { std::env::set_var("XDG_CACHE_HOME", &cache) };
    let toml = dir.path().join("project.toml");
    std::fs::write(
        &toml,
        "name = \"spin-project\"\nworkload = { project = \"src\" }\nargs = [\"spin.json\", \"60\"]\n\
         ready = { delay_s = 0.5 }\nseconds = 3\nstop = \"sigint\"\n\
         [[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\
         [[expect]]\nkind = \"frame\"\ncollector = \"perf-cpu\"\npattern = \"::Alpha\\\\b\"\n",
    )
    .unwrap();
    let src_before: Vec<_> = std::fs::read_dir(dir.path().join("src")).unwrap().flatten().map(|e| e.file_name()).collect();
    let (o, _results) = run(&toml, TargetKind::Host);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert!(cache.join("tracelab/build").is_dir(), "no build under {}", cache.display());
    let src_after: Vec<_> = std::fs::read_dir(dir.path().join("src")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(src_before.len(), src_after.len(), "the build wrote beside the sources: {src_after:?}");
    assert!(o.manifest.commands.iter().any(|c| c.contains("kill -INT")), "{:?}", o.manifest.commands);
    let code = o.manifest.metrics["app.exit_code"];
    assert!(code == -1.0 || code == 130.0, "SIGINT ended the app: exit code {code}");
}

/// The web app: ready by ASP.NET Core's own line (its URL feeds the load), stopped by SIGTERM,
/// judged by truth-free bounds; on/off-CPU seen by perf, thread time by EventPipe in its own run.
const WEB_TOML: &str = r#"
name = "web-api"
workload = { dll = "bin/web-api.dll" }
args = ["--urls", "http://127.0.0.1:0"]
runs = [["perf-cpu", "perf-offcpu"], ["eventpipe"]]

[load]
routes = ["/cpu", "/blocked"]
connections_per_route = 4
seconds = 6

[[collector]]
kind = "perf-cpu"
frequency = 499

# 8 KiB of stack per switch-out, as on-vs-off-cpu: under this load 16 KiB loses records.
[[collector]]
kind = "perf-offcpu"
call_graph = "dwarf,8192"

[[collector]]
kind = "eventpipe"
profile = "thread-time"

[[expect]]
kind = "share_at_least"
name = "perf cpu-clock ≈ CPU route only"
collector = "perf-cpu"
method = "::CpuRoute\\b"
among = ["::CpuRoute\\b", "::BlockedRoute\\b"]
min = 0.9
min_samples = 100

[[expect]]
kind = "share_at_least"
name = "perf off-CPU ≈ blocked route only"
collector = "perf-offcpu"
method = "::BlockedRoute\\b"
among = ["::CpuRoute\\b", "::BlockedRoute\\b"]
sample_kind = "blocked"
min = 0.9
min_samples = 50

[[expect]]
kind = "frame"
collector = "eventpipe"
pattern = "::BlockedRoute\\b"

# The negative twin: on the blocked route perf cpu-clock and SampleProfiler truly disagree
# (SampleProfiler samples blocked threads, cpu-clock does not): this check must fail.
[[expect]]
kind = "agree_share"
name = "twin: blocked route's share agrees across perf-cpu and SampleProfiler"
method = "::BlockedRoute\\b"
among = ["::CpuRoute\\b", "::BlockedRoute\\b"]
collectors = ["perf-cpu", "eventpipe"]
tolerance_pts = 10
min_samples = 100
"#;

#[test]
fn web_api_as_it_is_with_load_from_its_listening_line() {
    if !prerequisites("your_app::web_host", &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_app("web-api", dir.path());
    let toml = dir.path().join("web.toml");
    std::fs::write(&toml, WEB_TOML).unwrap();
    let (o, _results) = run_until_decided(&toml, TargetKind::Host, &["perf cpu-clock ≈ CPU route only", "perf off-CPU ≈ blocked route only"]);
    for check in ["perf cpu-clock ≈ CPU route only", "perf off-CPU ≈ blocked route only"] {
        assert_eq!(verdict_of(&o, check), Verdict::Pass, "{}", describe(&o));
    }
    assert_eq!(
        verdict_of(&o, "twin: blocked route's share agrees across perf-cpu and SampleProfiler"),
        Verdict::Fail,
        "{}",
        describe(&o)
    );
    assert_eq!(o.verdict, Verdict::Fail, "only the twin fails: {}", describe(&o));
    // The load used the URL ASP.NET Core printed, and requests were served on both routes.
    let load = o.manifest.load.as_ref().expect("no load report");
    assert!(load.to_string().contains("/blocked"), "{load}");
    // The on/off-CPU table shows each collector's view of the two routes.
    assert!(!o.manifest.share_tables.is_empty(), "{}", describe(&o));
    assert_display_names(&o.dir, "web-api", &["perf-cpu", "eventpipe"], "Routes::CpuRoute(int32)");
}

/// `init --web` on the corpus web API, with only the routes set as its user would (the starter
/// loads `/`, which this app does not serve): the starter's own checks PASS as written — perf names
/// the managed frames, and its default `agree_frames` finds perf and SampleProfiler naming the same
/// hot methods of the app (one of its two routes blocks, so SampleProfiler's managed samples rank
/// one method: all of that list in common).
#[test]
fn web_api_starter_scenario_passes_with_its_own_routes() {
    if !prerequisites("your_app::web_starter", &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dll = build_app("web-api", dir.path());
    let toml = dir.path().join("starter.toml");
    let text = harness::scenario::starter::starter_toml(&toml, harness::scenario::starter::StarterApp::Dll(&dll), true).unwrap();
    assert!(text.contains("kind = \"agree_frames\""), "{text}");
    let text = text.replacen("routes = [\"/\"]", "routes = [\"/cpu\", \"/blocked\"]", 1).replacen("seconds = 10", "seconds = 5", 1);
    std::fs::write(&toml, &text).unwrap();
    let (o, _results) = run(&toml, TargetKind::Host);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    let agree = o.manifest.checks.iter().find(|c| c.name.starts_with("top ") && c.name.contains("agree")).expect("no agree_frames check");
    assert!(agree.measured.contains("in common"), "{}", agree.measured);
}

/// One naming scheme on an app tracelab never saw: every collector's folded stacks label `method`
/// exactly alike (no return type, assembly, code version or MT comment), and each flame graph
/// is titled with the scenario, its collector and sample count and has no `MT: 0x` anywhere.
fn assert_display_names(run_dir: &Path, scenario: &str, collectors: &[&str], method: &str) {
    for c in collectors {
        let folded = std::fs::read_to_string(run_dir.join("stacks").join(format!("{c}.folded")))
            .unwrap_or_else(|e| panic!("{c}: no folded stacks in {}: {e}", run_dir.display()));
        let labels: std::collections::BTreeSet<&str> =
            folded.lines().filter_map(|l| l.rsplit_once(' ')).flat_map(|(stack, _)| stack.split(';')).collect();
        let named: Vec<&&str> = labels.iter().filter(|l| l.contains(method.split('(').next().unwrap())).collect();
        assert_eq!(named, [&method], "{c}: labels of {method}");
        let decorated: Vec<&&str> = labels.iter().filter(|l| l.contains("MT: 0x") || l.contains("[OptimizedTier1]")).collect();
        assert!(decorated.is_empty(), "{c}: labels carry runtime decorations: {decorated:#?}");
        let svg = std::fs::read_to_string(run_dir.join(format!("flamegraph-{c}.svg"))).unwrap();
        assert!(!svg.contains("MT: 0x"), "{c}: flame graph shows an MT pointer");
        assert!(svg.contains(&format!("{scenario} · {c} · ")), "{c}: flame graph title lacks scenario and collector");
    }
}

#[test]
fn web_api_from_a_users_own_image() {
    if !prerequisites("your_app::user_image", &[&require_root, &docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (tag, _remove) = users_web_api_image(dir.path());
    let toml = dir.path().join("image.toml");
    std::fs::write(&toml, users_image_toml(&tag)).unwrap();
    let (o, _results) = run(&toml, TargetKind::Sidecar);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));

    // check-image answers for the same image: its runtime, and each collector tried against it.
    let results = tempfile::tempdir().unwrap();
    let report = lab::check_image::check(&tag, &[], results.path(), &[]).unwrap_or_else(|e| panic!("{e:#}"));
    let table = report.markdown();
    assert_eq!(report.entrypoint, ["dotnet", "/app/web-api.dll", "--urls", "http://127.0.0.1:0"], "{table}");
    assert!(report.files.shared_runtimes.iter().any(|v| v.starts_with("10.")), "{table}");
    let row = |c: &str| report.rows.iter().find(|r| r.collector == c).unwrap_or_else(|| panic!("no {c} row: {table}"));
    // IPC_LOCK: perf's locked-memory budget is shared by every perf session of uid 0.
    assert!(row("perf-cpu").works && row("perf-cpu").capabilities == "SYS_ADMIN+IPC_LOCK", "{table}");
    assert!(row("eventpipe").works && row("eventpipe").capabilities == "none", "{table}");
    // dotnet-trace stops at once on an app that outlives its collectors (SIGINT; it once waited
    // out 60 s for an Enter it never reads from a pipe, then failed).
    assert!(row("dotnet-trace").works, "{table}");
    assert!(table.contains("--pid=container:app") && table.contains("--cap-add SYS_ADMIN --cap-add IPC_LOCK"), "{table}");
}

/// The same user's image as a pod's app (its own entrypoint, tracelab's tools beside it), and
/// `check-image --pod`: which shapes work for it, with which securityContext, and the YAML.
#[test]
#[ignore = "nightly: the pods job; CI runs the pod target on tracelab's own image"]
fn web_api_from_a_users_own_image_in_pods() {
    if !prerequisites("your_app::user_image_in_pods", &[&require_root, &docker_available, &crate::pods::pods_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (tag, _remove) = users_web_api_image(dir.path());
    let toml = dir.path().join("image.toml");
    std::fs::write(&toml, users_image_toml(&tag)).unwrap();
    let (o, _results) = run(&toml, TargetKind::Pod);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    let pod = crate::pods::played_pod(&o.dir);
    assert_eq!(pod["spec"]["containers"][0]["image"], harness::host::podman::podman_name(&tag));
    assert!(pod["spec"]["containers"][0].get("command").is_none(), "the image keeps its entrypoint");

    let results = tempfile::tempdir().unwrap();
    use harness::run::pod::PodShape;
    let report = lab::check_image::check(&tag, &[], results.path(), &[PodShape::Sidecar, PodShape::Debug]).unwrap_or_else(|e| panic!("{e:#}"));
    let table = report.markdown();
    let row = |c: &str, t: &str| report.rows.iter().find(|r| r.collector == c && r.target == t).unwrap_or_else(|| panic!("no {c} {t} row: {table}"));
    for shape in ["pod/sidecar", "pod/debug"] {
        assert!(row("perf-cpu", shape).works && row("eventpipe", shape).works, "{table}");
    }
    assert!(!row("dotnet-trace", "pod/debug").works && row("dotnet-trace", "pod/debug").detail.contains("dotnet/diagnostics#3480"), "{table}");
    assert_eq!(report.pod_yamls.iter().map(|(s, ..)| s.as_str()).collect::<Vec<_>>(), ["sidecar", "debug"], "{table}");
    assert!(report.pod_yamls.iter().all(|(_, y, _)| y.is_file()) && table.contains("pod-sidecar.yaml"), "{table}");
}

/// A user's image of the corpus web API: tracelab's runtime image as a base, the app copied in,
/// its own ENTRYPOINT; removed with the guard.
fn users_web_api_image(dir: &Path) -> (String, RemoveImage) {
    build_app("web-api", dir);
    let docker = harness::host::docker::Docker::connect().unwrap();
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().unwrap();
    let base = harness::host::image::build(&docker, harness::host::image::suite("bullseye").unwrap(), &dotnet.root).unwrap().runtime.tag;
    let context = dir.join("image");
    std::fs::create_dir_all(&context).unwrap();
    let status = std::process::Command::new("cp").arg("-r").arg(dir.join("bin")).arg(context.join("app")).status().unwrap();
    assert!(status.success());
    std::fs::write(
        context.join("Dockerfile"),
        format!("FROM {base}\nCOPY app /app\nWORKDIR /app\nENTRYPOINT [\"dotnet\", \"/app/web-api.dll\", \"--urls\", \"http://127.0.0.1:0\"]\n"),
    )
    .unwrap();
    let tag = format!("tracelab-test/web-api:{}", std::process::id());
    let built = std::process::Command::new("docker").args(["build", "-q", "-t", &tag]).arg(&context).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let remove = RemoveImage(tag.clone());
    (tag, remove)
}

/// A scenario of the user's web API image: perf-cpu and EventPipe agreeing on the CPU route.
fn users_image_toml(tag: &str) -> String {
    format!(
        r#"
name = "web-api-image"
workload = {{ image = "{tag}" }}

[load]
routes = ["/cpu"]
connections_per_route = 4
seconds = 5

[[collector]]
kind = "perf-cpu"
frequency = 499

[[collector]]
kind = "eventpipe"
profile = "thread-time"

[[expect]]
kind = "frame"
collector = "perf-cpu"
pattern = "::CpuRoute\\b"

[[expect]]
kind = "resolved"
collector = "perf-cpu"
class = "jit"
min = 0.9

[[expect]]
kind = "agree_share"
name = "CPU route's share of its request path agrees across perf and EventPipe"
method = "::CpuRoute\\b"
among = ["::CpuRoute\\b", "::BlockedRoute\\b"]
collectors = ["perf-cpu", "eventpipe"]
tolerance_pts = 15
min_samples = 100
"#
    )
}

struct RemoveImage(String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

#[test]
fn mistakes_in_a_users_scenario_name_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let collector = "[[collector]]\nkind = \"perf-cpu\"\n";
    for (body, why) in [
        ("workload = { exe = \"app\" }\n", "unknown workload form `exe`"),
        ("workload = { dll = \"a.dll\" }\nready = { line = \"(oops\" }\n", "`ready.line` is not a valid regex"),
        (
            "workload = { dll = \"a.dll\" }\ntruth = { path = \"t.json\", map = { \"k\" = \"{/a} +\" } }\n",
            "truth.map.\"k\"",
        ),
        ("workload = { image = \"me/app\" }\nstop = \"exit\"\n", "cannot be used with an `image` workload"),
        ("workload = { dll = \"a.dll\" }\n[load]\nurl = \"http://example.com:80\"\nroutes = [\"/\"]\nseconds = 1\n", "loopback only"),
    ] {
        let path = dir.path().join("mine.toml");
        std::fs::write(&path, format!("name = \"x\"\n{body}{collector}")).unwrap();
        let err = format!("{:#}", Scenario::load(&path).unwrap_err());
        assert!(err.contains(why) && err.contains("mine.toml"), "{body}: {err}");
    }
}

#[test]
fn a_missing_image_or_an_app_that_exits_before_it_is_ready_says_so() {
    if !prerequisites("your_app::early_exit", &[&require_root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `false` exits at once with code 1 and never opens a diagnostics socket.
    let toml = dir.path().join("early.toml");
    std::fs::write(&toml, "name = \"early\"\nworkload = { command = [\"sh\", \"-c\", \"echo starting; exit 3\"] }\n[[collector]]\nkind = \"eventpipe\"\nprofile = \"thread-time\"\n").unwrap();
    let (o, _results) = run(&toml, TargetKind::Host);
    let reason = o.reason.clone().unwrap_or_default();
    // Not a wrong answer of the pipeline: the run could not happen.
    assert_eq!(o.verdict, Verdict::Error, "{reason}");
    assert!(reason.contains("exited before it was ready") && reason.contains("exit code 3") && reason.contains("starting"), "{reason}");
    if docker_available().is_err() {
        return;
    }
    std::fs::write(&toml, "name = \"noimage\"\nworkload = { image = \"tracelab-test/does-not-exist:1\" }\n[[collector]]\nkind = \"eventpipe\"\nprofile = \"thread-time\"\n").unwrap();
    let (o, _results) = run(&toml, TargetKind::Sidecar);
    let reason = o.reason.clone().unwrap_or_default();
    assert!(reason.contains("image tracelab-test/does-not-exist:1 does not exist here"), "{reason}");
}

/// The web app under load, watched by the wake-up and the system-call collectors at once, with
/// checks that need no truth: its Thread.Sleep route is woken by the kernel's timer, a waking
/// app thread's stack names a managed method, and the stacks of its system calls (accepting
/// connections, reading and writing) resolve to named managed frames.
const WEB_EVENTS_TOML: &str = r#"
name = "web-api-events"
workload = { dll = "bin/web-api.dll" }
args = ["--urls", "http://127.0.0.1:0"]

[load]
routes = ["/cpu", "/blocked"]
connections_per_route = 2
seconds = 4

[[collector]]
kind = "perf-offwake"
call_graph = "dwarf,8192"

[[collector]]
kind = "perf-syscalls"
call_graph = "dwarf,8192"
syscalls = ["accept4", "read", "write", "openat"]

[[expect]]
kind = "waker"
name = "Thread.Sleep in BlockedRoute woken by the kernel's timer"
collector = "perf-offwake"
blocked = "::BlockedRoute\\b"
waker_kind = "kernel"
min_share = 0.9

[[expect]]
kind = "metric"
name = "wakers from app threads name a managed method"
metric = "perf-offwake.waker_managed_named_ratio"
min = 0.9

[[expect]]
kind = "stack_count"
name = "connections accepted from managed socket code"
collector = "perf-syscalls"
sample_kind = "accept4"
pattern = "System\\.Net\\.Sockets\\."
min = 1

[[expect]]
kind = "resolved"
name = "managed frames of system-call stacks named"
collector = "perf-syscalls"
class = "managed"
leaf_only = false
min = 0.99
"#;

#[test]
fn web_api_as_it_is_wakers_and_system_calls() {
    if !prerequisites("your_app::web_events", &[&require_root, &perf_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_app("web-api", dir.path());
    let toml = dir.path().join("web-events.toml");
    std::fs::write(&toml, WEB_EVENTS_TOML).unwrap();
    let (o, _results) = run(&toml, TargetKind::Host);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
}

/// An app without tracelab code that throws: through our EventPipe client and dotnet-trace, every
/// one of its exceptions has its throwing method as the top managed frame of the event's stack,
/// named as a tracelab workload's throw site is (`Namespace.Type.Method`, from the trace's own
/// method load and rundown events), with no truth file.
#[test]
fn throw_site_of_an_app_as_it_is() {
    if !prerequisites("your_app::throw_site", &[&require_root]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    build_app("throw-catch", dir.path());
    let toml = dir.path().join("throw-catch.toml");
    std::fs::write(
        &toml,
        r#"
name = "throw-catch"
workload = { dll = "bin/throw-catch.dll" }
args = ["4"]
stop = "exit"

[[collector]]
kind = "eventpipe"
profile = "exceptions"

[[collector]]
kind = "dotnet-trace"
providers = ["Microsoft-Windows-DotNETRuntime:0x8000:4"]

# A second EventPipe session without the exception keyword: each collector keeps its own trace.
[[collector]]
kind = "eventpipe"
name = "eventpipe-gc"
profile = "gc"

[[expect]]
kind = "exceptions"
name = "thrown at OrderValidator.Reject (EventPipe)"
collector = "eventpipe"
type_pattern = "^Orders\\.RejectedOrderException$"
throw_method = "OrderValidator.Reject"

[[expect]]
kind = "exceptions"
name = "thrown at OrderValidator.Reject (dotnet-trace)"
collector = "dotnet-trace"
type_pattern = "^Orders\\.RejectedOrderException$"
throw_method = "OrderValidator.Reject"
"#,
    )
    .unwrap();
    let (o, _results) = run(&toml, TargetKind::Host);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    for collector in ["EventPipe", "dotnet-trace"] {
        let c = o.manifest.checks.iter().find(|c| c.name.ends_with(&format!("({collector})"))).unwrap();
        assert!(c.measured.contains("top managed frame: Orders.OrderValidator.Reject ×"), "{}", describe(&o));
        assert!(c.values["count"] >= 50.0, "{collector}: {} exceptions over 4 s: {}", c.values["count"], describe(&o));
    }
    // Two EventPipe collectors, two traces (they shared artifacts/eventpipe.nettrace before).
    let artifacts = o.dir.join("artifacts");
    let (exceptions, gc) = (artifacts.join("eventpipe.nettrace"), artifacts.join("eventpipe-gc.nettrace"));
    assert!(exceptions.is_file() && gc.is_file(), "one trace per EventPipe collector in {}: {}", artifacts.display(), describe(&o));
    let thrown = |path: &std::path::Path| {
        let d = eventpipe::decode(std::fs::File::open(path).unwrap(), &eventpipe::DecodeOptions::default()).unwrap();
        d.count("Microsoft-Windows-DotNETRuntime", 80)
    };
    assert!(thrown(&exceptions) >= 50, "{}", describe(&o));
    assert_eq!(thrown(&gc), 0, "the gc session has no exception keyword: {}", describe(&o));
}

/// On a container target a `cwd` outside the run folder is the app's to read, not to write,
/// unless the scenario says `cwd_writable = true`; the host's system folders are refused as `cwd`
/// when the scenario loads; and a results folder whose path holds `:` and `,` (which once split
/// Docker's `HOST:CONTAINER` binds and perf's control option) works.
#[test]
fn a_containers_cwd_is_read_only_unless_the_scenario_says_so() {
    let test = "your_app::a_containers_cwd_is_read_only_unless_the_scenario_says_so";
    if !prerequisites(test, &[&require_root, &perf_available, &docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    let toml = dir.path().join("writer.toml");
    let write = |extra: &str| {
        std::fs::write(
            &toml,
            format!(
                "name = \"writer\"\nworkload = {{ command = [\"/bin/sh\", \"-c\", \"i=0 && while [ $i -lt 2000000 ]; do i=$((i+1)); done && echo hi > out.txt\"] }}\n\
                 cwd = \"data\"\n{extra}env = {{ DOTNET_EnableDiagnostics = \"0\" }}\nready = {{ delay_s = 0.1 }}\nwarmup_s = 0\nstop = \"exit\"\n\n\
                 [sufficiency]\nattempts = 1\n\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 99\n"
            ),
        )
        .unwrap();
        Scenario::load(&toml).unwrap_or_else(|e| panic!("{e:#}"))
    };
    // Results under a folder named with `:` and `,`.
    let results = tempfile::tempdir().unwrap();
    let root = results.path().join("a:b,c");
    std::fs::create_dir(&root).unwrap();
    let run = |scenario: &Scenario| {
        let opts = harness::engine::RunOptions { target: Some(TargetKind::Container), results_root: Some(root.clone()), ..Default::default() };
        harness::engine::run(scenario, &opts).unwrap_or_else(|e| panic!("{e:#}"))
    };
    let o = run(&write(""));
    assert_eq!(o.verdict, Verdict::Inconclusive, "{}", describe(&o));
    let reason = o.reason.clone().unwrap_or_default();
    assert!(reason.contains("was mounted read-only in its container: `cwd_writable = true`"), "{reason}");
    assert!(!dir.path().join("data/out.txt").exists(), "the app wrote into its read-only cwd");
    let o = run(&write("cwd_writable = true\n"));
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    assert!(o.dir.starts_with(&root), "{}", o.dir.display());
    assert_eq!(std::fs::read_to_string(dir.path().join("data/out.txt")).unwrap(), "hi\n");
    // The host's own folders are refused at load, naming the key.
    std::fs::write(&toml, "name = \"etc\"\nworkload = { command = [\"/bin/true\"] }\ncwd = \"/etc\"\n\n[[collector]]\nkind = \"perf-cpu\"\n").unwrap();
    let e = format!("{:#}", Scenario::load(&toml).unwrap_err());
    assert!(e.contains("writer.toml:3:") && e.contains("`cwd` /etc is the host's own /etc"), "{e}");
}

/// On the container target the tools are exec'd into the app's container with the capabilities
/// they need (perf-cpu: SYS_ADMIN, IPC_LOCK), and the app under test holds none of them: its
/// effective, permitted and bounding sets are empty, and perf still records it.
#[test]
fn the_app_under_test_holds_no_capability_in_a_container_its_tools_use() {
    let test = "your_app::the_app_under_test_holds_no_capability_in_a_container_its_tools_use";
    if !prerequisites(test, &[&require_root, &perf_available, &docker_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("caps.toml");
    std::fs::write(
        &toml,
        "name = \"caps\"\nworkload = { command = [\"/bin/sh\", \"-c\", \"grep ^Cap /proc/self/status > caps.txt && i=0 && while [ $i -lt 2000000 ]; do i=$((i+1)); done\"] }\n\
         env = { DOTNET_EnableDiagnostics = \"0\" }\nready = { delay_s = 0.1 }\nwarmup_s = 0\nstop = \"exit\"\n\n\
         [sufficiency]\nattempts = 1\n\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 99\n",
    )
    .unwrap();
    let scenario = Scenario::load(&toml).unwrap_or_else(|e| panic!("{e:#}"));
    let (o, _results) = crate::run_scenario(&scenario, TargetKind::Container);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    let caps = std::fs::read_to_string(o.dir.join("artifacts/caps.txt")).unwrap();
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = caps.lines().find(|l| l.starts_with(set)).unwrap_or_else(|| panic!("{caps}"));
        assert!(line.ends_with("0000000000000000"), "the app holds capabilities: {line}\n{caps}");
    }
    assert!(o.manifest.environment.target_capabilities.iter().any(|c| c.contains("SYS_ADMIN")), "{:?}", o.manifest.environment.target_capabilities);
}
