//! `tracelab soak SCENARIO… --runs N [--hog]`: repeat scenarios and print the verdict table
//! (lab::soak); exit 1 when any run FAILed, else 0.

use std::process::ExitCode;

use harness::engine::RunOptions;
use harness::run::TargetKind;
use lab::soak;
use lab::soak::SoakOptions;
use crate::Invocation;
use crate::flags::Soak;

pub fn run(args: Soak, at: &Invocation) -> anyhow::Result<ExitCode> {
    // A missing hog is a missing prerequisite (exit 4), said before any run starts.
    if args.hog && let Err(why) = soak::hog_available() {
        eprintln!("error: {why}");
        return Ok(ExitCode::from(judge::exit::SKIP));
    }
    let opts = SoakOptions {
        scenarios: args.scenarios,
        runs: args.runs,
        hog: args.hog,
        run: RunOptions {
            target: args.target.as_deref().map(TargetKind::parse).transpose()?,
            image: args.image,
            results_root: Some(args.results.unwrap_or_else(|| at.results.clone())),
            symbol_dirs: Vec::new(),
            attach: None,
            shape: None,
        },
    };
    let (table, dir) = soak::run(&opts)?;
    println!("\n{}", table.markdown());
    println!("soak: {}", dir.display());
    Ok(ExitCode::from(table.exit_code()))
}
