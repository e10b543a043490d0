//! `tracelab scenario NAME` (and `cargo xtask scenario NAME`): run one scenario, print its
//! verdict, and exit with the verdict's code (`judge::exit`: 0 pass, 1 fail, 3 inconclusive, 4
//! skip — 0 with `--allow-skip` —, 5 infrastructure error; a bad scenario file or flag exits 2). Its
//! prerequisites are checked (and as root installed) first, within seconds, so nothing is missing
//! after the workload or an image was built (`--no-setup` skips that).

use std::process::ExitCode;

use judge::Verdict;
use harness::engine;
use harness::engine::RunOptions;
use harness::run::TargetKind;

use crate::Invocation;
use crate::flags::Scenario;

pub fn run(args: Scenario, at: &Invocation) -> anyhow::Result<ExitCode> {
    let scenario = harness::scenario::Scenario::find(&args.name)?;
    let target = args.target.as_deref().map(TargetKind::parse).transpose()?;
    if let Some(image) = &args.image {
        harness::host::image::suite(image)?; // an unknown suite is a usage error (2), not a failed set-up
    }
    // An attached run's tools run on the host, beside the process.
    let target = if args.attach.is_some() { Some(TargetKind::Host) } else { target };
    let plan = (!args.no_setup).then(|| lab::prereq::Plan::for_scenario(&scenario, target, args.image.as_deref()));
    if let Some(code) = plan.and_then(|p| crate::setup::prepare(&p, false)) {
        return Ok(code);
    }
    let opts = RunOptions {
        target,
        image: args.image,
        results_root: Some(args.results.unwrap_or_else(|| at.results.clone())),
        symbol_dirs: args.symbols,
        attach: args.attach,
        shape: args.shape.as_deref().map(harness::run::pod::PodShape::parse).transpose()?,
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
    // The last line says what to open next, not only where the folder is.
    println!("{}", harness::report::open_next(&outcome.dir, &m.viewer_files));
    Ok(match outcome.verdict {
        Verdict::Skip if args.allow_skip => ExitCode::SUCCESS,
        v => ExitCode::from(v.exit_code()),
    })
}
