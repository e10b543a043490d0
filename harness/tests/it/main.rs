//! One integration-test binary (ripgrep's layout: one link, many modules). Tests here run the
//! real thing (dotnet, perf, docker, LTTng); each skips with a printed reason when a prerequisite
//! is absent locally and fails in CI (see `harness::testing`).

mod containers;
mod eventpipe;
mod interrupt;
mod lttng;
mod matrix;
mod perf;
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
/// events, a starved sampler — a busy machine, not a wrong pipeline) is started once more here,
/// printed with its reason, before the test holds it against its expected verdict.
pub fn until_decided<T>(what: &str, mut run: impl FnMut() -> (harness::engine::RunOutcome, T)) -> (harness::engine::RunOutcome, T) {
    let mut attempt = 1;
    loop {
        let (outcome, keep) = run();
        if outcome.verdict != harness::assert::Verdict::Inconclusive || attempt == 2 {
            return (outcome, keep);
        }
        eprintln!("{what}: attempt {attempt} inconclusive ({}); running again", outcome.reason.as_deref().unwrap_or("no reason"));
        attempt += 1;
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
