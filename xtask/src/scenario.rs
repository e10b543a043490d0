//! `cargo xtask scenario NAME`: run one scenario, print its verdict, exit 0 only on PASS (and on
//! SKIP with `--allow-skip`).

use std::path::PathBuf;
use std::process::ExitCode;

use harness::assert::Verdict;
use harness::engine::{self, RunOptions};
use harness::scenario::Scenario;
use harness::run::TargetKind;
use xshell::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario name (scenarios/NAME.toml) or a path to your own TOML file.
    pub name: String,
    /// host | container | sidecar (default: the scenario's, else container when Docker answers).
    #[arg(long)]
    pub target: Option<String>,
    /// Base image for container targets: bullseye | bookworm | trixie.
    #[arg(long)]
    pub image: Option<String>,
    /// Exit 0 on SKIP too (a skip is a verdict about the environment, not the tool).
    #[arg(long)]
    pub allow_skip: bool,
    /// Folder with separate debug files (libcoreclr.so.dbg …), as dotnet-symbol fetches them.
    #[arg(long = "symbols")]
    pub symbols: Vec<PathBuf>,
    /// Where result folders go (default results/).
    #[arg(long)]
    pub results: Option<PathBuf>,
}

pub fn run(_sh: &Shell, args: Args) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: Args) -> anyhow::Result<ExitCode> {
    let scenario = Scenario::find(&args.name)?;
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
        println!("  {:4}  {}  (expected {}; measured {})", c.verdict.upper(), c.name, c.expected, c.measured);
    }
    for f in &m.findings {
        println!("  note: {f}");
    }
    println!("\n{} {}{}", scenario.name, outcome.verdict.upper(), outcome.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default());
    println!("results: {}", outcome.dir.display());
    Ok(match outcome.verdict {
        Verdict::Pass => ExitCode::SUCCESS,
        Verdict::Skip if args.allow_skip => ExitCode::SUCCESS,
        Verdict::Skip => ExitCode::from(3),
        Verdict::Fail => ExitCode::from(1),
    })
}
