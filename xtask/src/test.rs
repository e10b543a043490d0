//! `cargo xtask test [-- NEXTEST ARGS]`: the README's test command. The test suite's prerequisites
//! first (lab::prereq), then `cargo nextest run --workspace` (profile `ci` when CI=true, so a
//! missing prerequisite fails instead of skipping); nextest's exit code is passed through.

use std::process::ExitCode;

use lab::prereq::Plan;
use xshell::{Shell, cmd};

use crate::flags::Test;

pub fn run(sh: &Shell, args: Test) -> anyhow::Result<ExitCode> {
    if !args.no_setup {
        if let Some(code) = tracelab::prepare(&Plan::for_tests(), false) {
            return Ok(code);
        }
    }
    if cmd!(sh, "cargo nextest --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        anyhow::bail!("cargo-nextest is not installed: `cargo install --locked cargo-nextest`");
    }
    let nextest_args = args.nextest_args;
    // `--workspace` beside `-p X` runs every package: leave it out when a package is named.
    let named = nextest_args.iter().any(|a| a == "-p" || a.starts_with("--package") || (a.starts_with("-p") && a.len() > 2));
    let workspace = (!named).then_some("--workspace");
    let mut c = cmd!(sh, "cargo nextest run {workspace...} {nextest_args...}");
    // Tests that start `dotnet` themselves find the same SDK the harness uses (as .ci/run's
    // `eval install-dotnet.sh --env` did).
    if let Ok(dotnet) = harness::host::dotnet::Dotnet::locate_or_install() {
        let path = std::env::join_paths(std::iter::once(dotnet.root.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())))?;
        c = c.env("DOTNET_ROOT", &dotnet.root).env("PATH", path);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") && std::env::var_os("NEXTEST_PROFILE").is_none() {
        c = c.env("NEXTEST_PROFILE", "ci");
    }
    eprintln!("$ {c}");
    // Not `.run()`: its error would turn nextest's exit code (100 = tests failed) into ours.
    let status = std::process::Command::from(c).status()?;
    Ok(ExitCode::from(status.code().map(|c| c as u8).unwrap_or(1)))
}
