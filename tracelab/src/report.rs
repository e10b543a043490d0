//! `tracelab report [DIR…] [--out DIR] [--baseline DIR]`: merges result folders into one HTML
//! page and one markdown file (harness::report::merge).

use anyhow::{Result, bail};
use harness::report::merge;
use harness::report::merge::Thresholds;
use crate::Invocation;
use crate::flags::Report;

pub fn run(a: Report, at: &Invocation) -> Result<()> {
    let dirs = if a.dirs.is_empty() { vec![at.results.clone()] } else { a.dirs };
    let out = a.out.unwrap_or_else(|| at.results.join("report"));
    let baseline = (!a.baseline.is_empty()).then_some(a.baseline.as_slice());
    let step = harness::host::progress::step("report", format!("merging {} folder(s)", dirs.len()));
    let report = merge::merge(&dirs, baseline, Thresholds { ratio_drop: a.ratio_drop, rate_drop: a.rate_drop })?;
    let (html, md) = report.write(&out)?;
    step.done("written");
    print!("{}", report.markdown());
    println!("\nwrote {} and {}", html.display(), md.display());
    if a.fail_on_regression && !report.regressions.is_empty() {
        bail!("{} regression(s) against the baseline", report.regressions.len());
    }
    Ok(())
}
