//! `cargo xtask matrix AXIS [options]`: one slice of the compatibility matrix. Each axis is a
//! function of `harness` (`harness::caps` for `caps`); this module only dispatches and prints.
//! The axes, their options and their one-line descriptions (`--list`) are `flags::MatrixAxis`.

use anyhow::{Result, bail};
use clap::CommandFactory;
use xshell::Shell;

use crate::flags::{Flags, Matrix, MatrixAxis};

pub fn run(_sh: &Shell, m: Matrix) -> Result<()> {
    // `cargo xtask matrix --kernels 5.10,6.1 --scenario gc-heavy`: the axis named by its flag.
    let axis = match m.axis {
        Some(axis) => axis,
        None if !m.kernels.is_empty() => MatrixAxis::Kernels { kernels: m.kernels, scenario: m.scenario, list: m.list },
        None if !m.dotnet.is_empty() => MatrixAxis::Dotnet { dotnet: m.dotnet, scenario: m.scenario },
        None if m.list => {
            for (name, what) in axes() {
                println!("{name:<8} {what}");
            }
            return Ok(());
        }
        None if m.all => {
            for (name, _) in axes() {
                println!("== matrix {name}");
                run_axis(default_axis(&name))?;
            }
            return Ok(());
        }
        None => bail!("which axis? `cargo xtask matrix --list` shows them"),
    };
    run_axis(axis)
}

/// Axis names with their one-line help, in declaration order (the order `--all` runs them).
fn axes() -> Vec<(String, String)> {
    let cmd = Flags::command();
    let matrix = cmd.find_subcommand("matrix").expect("flags declare matrix");
    matrix
        .get_subcommands()
        .map(|c| (c.get_name().to_string(), c.get_about().map(|a| a.to_string()).unwrap_or_default()))
        .collect()
}

fn default_axis(name: &str) -> MatrixAxis {
    match name {
        "caps" => MatrixAxis::Caps { suite: harness::image::DEFAULT_SUITE.into(), collectors: vec![], caps: vec![] },
        "kernels" => MatrixAxis::Kernels { kernels: vec![], scenario: vec![], list: false },
        "dotnet" => MatrixAxis::Dotnet { dotnet: vec![], scenario: vec![] },
        "lttng" => MatrixAxis::Lttng { suites: vec![], scenario: vec![] },
        other => unreachable!("flags declare no matrix axis `{other}`"),
    }
}

fn run_axis(axis: MatrixAxis) -> Result<()> {
    match axis {
        MatrixAxis::Caps { suite, collectors, caps } => run_caps(suite, collectors, caps),
        MatrixAxis::Kernels { kernels, scenario, list } => run_kernels(kernels, scenario, list),
        MatrixAxis::Dotnet { dotnet, scenario } => run_dotnet(dotnet, scenario),
        MatrixAxis::Lttng { suites, scenario } => run_lttng(suites, scenario),
    }
}

fn run_caps(suite: String, collectors: Vec<String>, caps: Vec<String>) -> Result<()> {
    let mut options = harness::caps::MatrixOptions { suite, ..Default::default() };
    if !collectors.is_empty() {
        options.collectors = collectors;
    }
    if !caps.is_empty() {
        options.cap_sets = caps;
    }
    let matrix = harness::caps::run_matrix(&options, &mut |p| {
        println!(
            "{:<13} {:<21} {} {}",
            p.collector,
            p.caps,
            if p.works { "works" } else { "FAILS" },
            if p.works { p.detail.clone() } else { p.error.clone().unwrap_or_default() }
        );
    })?;
    let dir = harness::caps::write(&matrix, &harness::project_root().join("results"))?;
    println!("\n{}", matrix.markdown());
    println!("written to {}", dir.display());
    Ok(())
}

fn run_kernels(kernels: Vec<String>, scenario: Vec<String>, list: bool) -> Result<()> {
    let options = harness::vm::KernelMatrixOptions { kernels, scenarios: scenario, ..Default::default() };
    if list {
        for (kernel, scenario) in harness::vm::matrix::list_cells(&options)? {
            println!("{:<6} ({:<8}) {scenario}", kernel.label, kernel.suite);
        }
        return Ok(());
    }
    let cells = harness::vm::run_kernel_matrix(&options)?;
    for c in &cells {
        println!(
            "{:<6} {:<24} {:<5} {}",
            c.kernel,
            c.scenario,
            c.verdict,
            c.reason.clone().unwrap_or_default()
        );
    }
    if cells.iter().any(|c| c.verdict == "fail") {
        bail!("some cells failed");
    }
    Ok(())
}

fn run_dotnet(versions: Vec<String>, scenario: Vec<String>) -> Result<()> {
    let dotnet = harness::dotnet::Dotnet::locate_or_install()?;
    let installed: Vec<String> = dotnet
        .runtime_versions()?
        .into_iter()
        .filter(|r| r.name == "Microsoft.NETCore.App")
        .map(|r| r.version)
        .collect();
    let wanted = if versions.is_empty() { installed.clone() } else { versions };
    let scenarios = if scenario.is_empty() { harness::scenario::list_names()? } else { scenario };
    let mut failed = false;
    for version in &wanted {
        let Some(runtime) = installed.iter().find(|v| v.starts_with(version.as_str())) else {
            // Not a skip of the scenario: the matrix cell cannot exist on this machine.
            println!(".NET {version}: not installed (installed: {}); ../shared/toolchains provides only these", installed.join(", "));
            failed = true;
            continue;
        };
        for name in &scenarios {
            let scenario = harness::scenario::Scenario::find(name)?;
            let opts = harness::engine::RunOptions { target: Some(harness::run::TargetKind::Host), ..Default::default() };
            let outcome = harness::engine::run(&scenario, &opts)?;
            // The runtime the app itself reported: a cell is only labelled with what really ran.
            let ran = outcome.manifest.environment.dotnet_runtimes.join("; ");
            println!(
                ".NET {runtime:<10} {name:<22} {} {} (runtimes present: {ran})",
                outcome.verdict.upper(),
                outcome.reason.as_deref().unwrap_or("")
            );
            failed |= outcome.verdict == harness::assert::Verdict::Fail;
        }
    }
    if failed {
        anyhow::bail!("the .NET matrix has failures");
    }
    Ok(())
}

fn run_lttng(suites: Vec<String>, scenario: Vec<String>) -> Result<()> {
    let mut o = harness::collect::lttng::matrix::MatrixOptions::default();
    if !suites.is_empty() {
        o.suites = suites;
    }
    if !scenario.is_empty() {
        o.scenarios = scenario;
    }
    let report = harness::collect::lttng::matrix::run(&o)?;
    let dir = harness::project_root().join("results").join(format!("{}-matrix-lttng", harness::report::utc_stamp()));
    let (md, json) = harness::collect::lttng::matrix::write(&report, &dir)?;
    print!("{}", harness::collect::lttng::matrix::markdown(&report));
    println!("written: {} and {}", md.display(), json.display());
    Ok(())
}
