//! `cargo xtask scenario NAME`: run one scenario, print its verdict, and exit with the verdict's
//! code (`harness::assert::exit`: 0 pass, 1 fail, 3 inconclusive, 4 skip — 0 with
//! `--allow-skip` —, 5 infrastructure error; a bad scenario file or flag exits 2).

use std::process::ExitCode;

use harness::assert::Verdict;
use harness::engine::{self, RunOptions};
use harness::run::TargetKind;
use xshell::Shell;

use crate::flags::Scenario;

pub fn run(_sh: &Shell, args: Scenario) -> anyhow::Result<ExitCode> {
    let scenario = harness::scenario::Scenario::find(&args.name)?;
    let opts = RunOptions {
        target: args.target.as_deref().map(TargetKind::parse).transpose()?,
        image: args.image,
        results_root: args.results,
        symbol_dirs: args.symbols,
    };
    let outcome = engine::run(&scenario, &opts)?;
    let m = &outcome.manifest;
    println!();
    for c in &m.checks {
        let why = c.reason.as_deref().map(|r| format!(" — {r}")).unwrap_or_default();
        println!("  {:4}  {}  (expected {}; measured {}){why}", c.verdict.upper(), c.name, c.expected, c.measured);
    }
    for f in &m.findings {
        println!("  note: {f}");
    }
    println!("\n{} {}{}", scenario.name, outcome.verdict.upper(), outcome.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default());
    println!("results: {}", outcome.dir.display());
    Ok(match outcome.verdict {
        Verdict::Skip if args.allow_skip => ExitCode::SUCCESS,
        v => ExitCode::from(v.exit_code()),
    })
}
