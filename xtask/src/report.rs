//! `cargo xtask report [DIR…] [--out DIR] [--baseline DIR]`: merges result folders into one HTML
//! page and one markdown file (harness::report::merge).
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Parser;
use harness::report::merge::{self, Thresholds};
use xshell::Shell;

#[derive(Parser)]
#[command(name = "cargo xtask report")]
struct Args {
    /// Folders holding result folders (default: results/).
    dirs: Vec<PathBuf>,
    /// Where index.html, report.md and the flame graphs go (default: results/report).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Result folders of an earlier run to compare with: lists regressions.
    #[arg(long)]
    baseline: Vec<PathBuf>,
    /// A resolution ratio dropping by more than this (0..1) is a regression.
    #[arg(long, default_value_t = Thresholds::default().ratio_drop)]
    ratio_drop: f64,
    /// A rate dropping by more than this fraction is a regression.
    #[arg(long, default_value_t = Thresholds::default().rate_drop)]
    rate_drop: f64,
    /// Exit non-zero when there are regressions.
    #[arg(long)]
    fail_on_regression: bool,
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let a = Args::try_parse_from(std::iter::once("report".to_string()).chain(args.iter().cloned()))?;
    let root = harness::project_root();
    let dirs = if a.dirs.is_empty() { vec![root.join("results")] } else { a.dirs };
    let out = a.out.unwrap_or_else(|| root.join("results").join("report"));
    let baseline = (!a.baseline.is_empty()).then_some(a.baseline.as_slice());
    let report = merge::merge(&dirs, baseline, Thresholds { ratio_drop: a.ratio_drop, rate_drop: a.rate_drop })?;
    let (html, md) = report.write(&out)?;
    print!("{}", report.markdown());
    println!("\nwrote {} and {}", html.display(), md.display());
    if a.fail_on_regression && !report.regressions.is_empty() {
        bail!("{} regression(s) against the baseline", report.regressions.len());
    }
    Ok(())
}
