//! `tracelab setup [--scenario X | --tests] [--dry-run]`: print (and as root carry out) what a
//! scenario or the test suite needs from this machine (lab::prereq). `scenario` and xtask's `test` call
//! [`prepare`] first, so a missing prerequisite shows within seconds, before any build.

use std::process::ExitCode;

use lab::prereq;
use lab::prereq::{Outcome, Plan};
use harness::run::TargetKind;

use crate::flags::Setup;

/// Runs the plan; `Some(code)` when the caller must stop: 4 when something is missing and was
/// not installed (not root, dry run), 5 when installing failed.
pub fn prepare(plan: &Plan, dry_run: bool) -> Option<ExitCode> {
    match prereq::run(plan, dry_run) {
        Ok(Outcome::Ready) => None,
        Ok(Outcome::Missing) => Some(ExitCode::from(4)),
        Err(e) => {
            eprintln!("error: {e:#}");
            Some(ExitCode::from(5))
        }
    }
}

pub fn run(args: Setup) -> anyhow::Result<ExitCode> {
    let plan = match &args.scenario {
        Some(name) => {
            let scenario = harness::scenario::Scenario::find(name)?;
            let target = args.target.as_deref().map(TargetKind::parse).transpose()?;
            Plan::for_scenario(&scenario, target, args.image.as_deref())
        }
        None => Plan::for_tests(),
    };
    Ok(prepare(&plan, args.dry_run).unwrap_or(ExitCode::SUCCESS))
}
