//! Helpers for tests that need real tools (dotnet, perf, docker, LTTng, qemu).
//!
//! Locally a test whose prerequisite is absent skips with a printed reason; under `CI=true` the
//! same absence fails the test, because `.ci/run` is responsible for installing it
//! (shared/DESIGN.md §4). Every skip is appended to `target/tracelab-skips.txt`, which `.ci/run`
//! counts into its summary, so a skip is never silent.

use std::io::Write;

/// True when running under CI, where prerequisites are mandatory.
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// Records a skip (or, in CI, fails). Call as `if let Err(why) = check() { return skip(test, why) }`.
#[track_caller]
pub fn skip(test: &str, reason: impl std::fmt::Display) {
    let line = format!("SKIP {test}: {reason}");
    if in_ci() {
        panic!("{line} (CI=true: .ci/run must provide this prerequisite)");
    }
    eprintln!("{line}");
    let path = crate::project_root().join("target").join("tracelab-skips.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// `Err(reason)` when `program` is not on PATH.
pub fn require_program(program: &str) -> Result<(), String> {
    crate::environment::which(program).map(|_| ()).ok_or_else(|| format!("`{program}` is not on PATH"))
}


pub fn require_root() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } == 0 { Ok(()) } else { Err("needs root".into()) }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// A prerequisite check for tests: runs each check, skipping on the first failure.
/// Returns true when the test may go on.
#[track_caller]
pub fn prerequisites(test: &str, checks: &[&dyn Fn() -> Result<(), String>]) -> bool {
    for check in checks {
        if let Err(why) = check() {
            skip(test, why);
            return false;
        }
    }
    true
}
