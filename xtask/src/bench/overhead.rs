//! `cargo xtask bench overhead [--repeats N] [--seconds S]`: the app's throughput with no collector
//! and with each collector, interleaved, with 95 % confidence intervals.

use anyhow::Result;
use clap::Parser;
use harness::overhead::{self, Options};
use xshell::Shell;

#[derive(Parser)]
#[command(name = "cargo xtask bench overhead")]
struct Args {
    /// Rounds over all configurations.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Seconds of workload per run (gc-heavy, unpaced allocation).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let args = Args::try_parse_from(std::iter::once("overhead".to_string()).chain(args.iter().cloned()))?;
    let configs = overhead::default_configs();
    let opts = Options {
        repeats: args.repeats,
        seconds: args.seconds,
        configs: configs.clone(),
        results_root: harness::project_root().join("target/bench/overhead-runs"),
    };
    let measured = overhead::run(&opts, |msg| eprintln!("==> {msg}"))?;
    println!("\nCollector overhead on gc-heavy (unpaced allocation, {} s per run, {} rounds, interleaved):\n", args.seconds, args.repeats);
    println!("{}", overhead::table(&measured, &configs)?);
    Ok(())
}
