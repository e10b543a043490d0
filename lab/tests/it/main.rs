//! One integration-test binary (ripgrep's layout: one link, many modules). Tests here run the
//! real thing (dotnet, perf, docker, LTTng); each skips with a printed reason when a prerequisite
//! is absent locally and fails in CI (see `tracelab_fixtures::prerequisites`).

mod attach;
mod containers;
mod corpus;
mod eventpipe;
mod interrupt;
mod lttng;
mod layouts;
mod matrix;
mod names;
mod perf;
mod perfcollect;
mod pods;
mod progress;
mod r2r;
mod report;
mod scenarios;
mod unwind;
mod verbatim;
mod viewers;
mod workloads;
mod your_app;

/// Runs a scenario until its verdict is decided: the engine already collects again once
/// (`[sufficiency] attempts`); a run still inconclusive after that (too few samples, lost
/// events, a starved sampler — a busy machine, not a wrong pipeline) is started up to twice more
/// here, each time once the machine is quiet again ([`wait_for_quiet_machine`]), printed with
/// its reason, before the test holds it against its expected verdict.
pub fn until_decided<T>(what: &str, mut run: impl FnMut() -> (harness::engine::RunOutcome, T)) -> (harness::engine::RunOutcome, T) {
    let mut attempt = 1;
    loop {
        let (outcome, keep) = run();
        if outcome.verdict != judge::Verdict::Inconclusive || attempt == 3 {
            return (outcome, keep);
        }
        eprintln!("{what}: attempt {attempt} inconclusive ({}); running again", outcome.reason.as_deref().unwrap_or("no reason"));
        wait_for_quiet_machine(what);
        attempt += 1;
    }
}

/// Before a starved run is started again: waits (at most a minute) until the machine's CPUs
/// were at least three quarters idle over a second, and prints what it saw. Another tenant of
/// the host (steal time) or a process a previous test left finishing starves the app's threads
/// and perf's sampler alike, for tens of seconds at a time (seen in CI: all four collections of
/// one test sampled a spinning thread at 13–33 % of the asked rate; alone, it passed at once).
/// A run that is starved whatever the load stays inconclusive and the test fails.
pub fn wait_for_quiet_machine(what: &str) {
    // (idle, all) jiffies of all CPUs; steal counts as busy.
    let jiffies = || -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let v: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).take(8).filter_map(|x| x.parse().ok()).collect();
        Some((v.get(3)? + v.get(4)?, v.iter().sum()))
    };
    let started = std::time::Instant::now();
    loop {
        let Some((idle0, all0)) = jiffies() else { return };
        std::thread::sleep(std::time::Duration::from_secs(1));
        let Some((idle1, all1)) = jiffies() else { return };
        let busy = 1.0 - (idle1 - idle0) as f64 / (all1 - all0).max(1) as f64;
        let waited = started.elapsed().as_secs();
        if busy < 0.25 || waited >= 60 {
            eprintln!("{what}: the machine was {:.0} % busy over the last second (waited {waited} s for it to be quiet)", busy * 100.0);
            return;
        }
    }
}

/// One run of `scenario` on `target` into a temporary results root; every junit.xml a scenario
/// writes must pass the strict JUnit schema.
pub fn run_scenario(scenario: &harness::scenario::Scenario, target: harness::run::TargetKind) -> (harness::engine::RunOutcome, tempfile::TempDir) {
    let results = tempfile::tempdir().unwrap();
    let opts = harness::engine::RunOptions { target: Some(target), results_root: Some(results.path().to_path_buf()), ..Default::default() };
    let outcome = harness::engine::run(scenario, &opts).unwrap_or_else(|e| panic!("{}: {e:#}", scenario.name));
    report::assert_junit_valid(&outcome.dir);
    (outcome, results)
}

/// A run's verdict and every check, for assertion messages.
pub fn describe(o: &harness::engine::RunOutcome) -> String {
    let checks: Vec<String> = o
        .manifest
        .checks
        .iter()
        .map(|c| format!("{} {}: expected {}; measured {}", c.verdict.upper(), c.name, c.expected, c.measured))
        .collect();
    format!("{:?} {:?}\n{}", o.verdict, o.reason, checks.join("\n"))
}

/// Builds a TraceEvent 4.0.0 reader project (`lab/tests/<dir>`: `Program.cs` and
/// `<name>.csproj`, from the offline feed) into target/<dir>, from a copy so the checkout gets no
/// bin/ or obj/; rebuilt only when its sources changed. Returns its dll.
pub fn build_traceevent_reader(dir: &str, name: &str) -> Result<std::path::PathBuf, String> {
    let out_dir = harness::project_root().join("target").join(dir);
    let dll = out_dir.join("out").join(format!("{name}.dll"));
    let src = harness::project_root().join("lab/tests").join(dir);
    let copy = out_dir.join("src");
    std::fs::create_dir_all(&copy).map_err(|e| e.to_string())?;
    let mut changed = !dll.is_file();
    for f in ["Program.cs".to_string(), format!("{name}.csproj")] {
        let text = std::fs::read(src.join(&f)).map_err(|e| format!("{}: {e}", src.join(&f).display()))?;
        if std::fs::read(copy.join(&f)).ok().as_deref() != Some(text.as_slice()) {
            std::fs::write(copy.join(&f), &text).map_err(|e| e.to_string())?;
            changed = true;
        }
    }
    if !changed {
        return Ok(dll);
    }
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().map_err(|e| format!("{e:#}"))?;
    let out = dotnet
        .command()
        .args(["build", "-c", "Release", "-o"])
        .arg(out_dir.join("out"))
        .arg("--source")
        .arg(harness::host::dotnet::Dotnet::feed())
        .arg(&copy)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        panic!("building the TraceEvent reader {dir} failed:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(dll)
}
