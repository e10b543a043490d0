//! One integration-test binary (ripgrep's layout: one link, many modules). Tests here run the
//! real thing (dotnet, perf, docker, LTTng); each skips with a printed reason when a prerequisite
//! is absent locally and fails in CI (see `harness::testing`).

mod containers;
mod eventpipe;
mod lttng;
mod matrix;
mod perf;
mod progress;
mod r2r;
mod report;
mod scenarios;
mod unwind;
mod workloads;
mod your_app;

/// Runs a scenario until its verdict is decided: an inconclusive run (too few samples, lost
/// events, a starved sampler — a busy machine, not a wrong pipeline) is run again, up to three
/// times in all, as a user would "collect more"; each retry is printed with its reason.
pub fn until_decided<T>(what: &str, mut run: impl FnMut() -> (harness::engine::RunOutcome, T)) -> (harness::engine::RunOutcome, T) {
    let mut attempt = 1;
    loop {
        let (outcome, keep) = run();
        if outcome.verdict != harness::assert::Verdict::Inconclusive || attempt == 3 {
            return (outcome, keep);
        }
        eprintln!("{what}: attempt {attempt} inconclusive ({}); running again", outcome.reason.as_deref().unwrap_or("no reason"));
        attempt += 1;
    }
}
