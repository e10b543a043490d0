//! `cargo xtask matrix AXIS [options]`: one axis of the compatibility matrix. Every axis lives in
//! `harness::matrix` (its cells, its run, its result folder); this module only dispatches and
//! prints. The axes' flags are `flags::MatrixAxis`; `--list` names every axis of `harness::matrix::AXES`.

use anyhow::{Result, bail};
use xshell::Shell;

use crate::flags::{Matrix, MatrixAxis};
use harness::collect::CollectorKind;
use harness::matrix;

pub fn run(_sh: &Shell, m: Matrix) -> Result<()> {
    // `cargo xtask matrix --kernels 5.10,6.1 --scenario gc-heavy`: the axis named by its flag.
    let axis = match m.axis {
        Some(axis) => axis,
        None if !m.kernels.is_empty() => MatrixAxis::Kernels { kernels: m.kernels, scenario: m.scenario, list: m.list },
        None if !m.dotnet.is_empty() => MatrixAxis::Dotnet { dotnet: m.dotnet, scenario: m.scenario },
        None if m.list => {
            for axis in matrix::AXES {
                println!("{:<8} {}", axis.name, axis.description);
            }
            return Ok(());
        }
        None if m.all => {
            for axis in matrix::AXES {
                println!("== matrix {}", axis.name);
                run_axis(default_axis(axis.name))?;
            }
            return Ok(());
        }
        None => bail!("which axis? `cargo xtask matrix --list` shows them"),
    };
    run_axis(axis)
}

fn default_axis(name: &str) -> MatrixAxis {
    match name {
        "caps" => MatrixAxis::Caps { suite: harness::image::DEFAULT_SUITE.into(), collectors: vec![], caps: vec![] },
        "kernels" => MatrixAxis::Kernels { kernels: vec![], scenario: vec![], list: false },
        "dotnet" => MatrixAxis::Dotnet { dotnet: vec![], scenario: vec![] },
        "lttng" => MatrixAxis::Lttng { suites: vec![], scenario: vec![] },
        other => unreachable!("harness::matrix::AXES has an axis `{other}` that flags do not declare"),
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
    // Only a run over every cell of the default suite may replace the committed table (its test
    // checks coverage; container runs default to that suite).
    let full = collectors.is_empty() && caps.is_empty() && suite == harness::image::DEFAULT_SUITE;
    let mut options = matrix::caps::MatrixOptions { suite, ..Default::default() };
    if !collectors.is_empty() {
        options.collectors = collectors.iter().map(|c| CollectorKind::parse(c)).collect::<Result<_>>()?;
    }
    if !caps.is_empty() {
        options.cap_sets = caps;
    }
    let table = matrix::caps::run_matrix(&options, &mut |p| {
        let what = if p.works { p.detail.clone() } else { p.error.clone().unwrap_or_default() };
        println!("{:<13} {:<21} {} {what}", p.collector, p.caps, if p.works { "works" } else { "FAILS" });
    })?;
    let dir = matrix::caps::write(&table, &matrix::results_root())?;
    println!("\n{}", table.markdown());
    println!("written to {}", dir.display());
    if full {
        println!("committed table rewritten: {}", matrix::caps::write_table(&table)?.display());
    }
    Ok(())
}

fn run_kernels(kernels: Vec<String>, scenarios: Vec<String>, list: bool) -> Result<()> {
    let options = matrix::kernels::KernelMatrixOptions { kernels, scenarios, ..Default::default() };
    if list {
        for (kernel, scenario) in matrix::kernels::list_cells(&options)? {
            println!("{:<6} ({:<8}) {scenario}", kernel.label, kernel.suite);
        }
        return Ok(());
    }
    let cells = matrix::kernels::run_kernel_matrix(&options)?;
    for c in &cells {
        println!("{:<6} {:<24} {:<5} {}", c.kernel, c.scenario, c.verdict, c.reason.clone().unwrap_or_default());
    }
    println!("written to {}", matrix::kernels::write(&cells, &matrix::results_root())?.display());
    if cells.iter().any(|c| c.verdict == "fail") {
        bail!("some cells failed");
    }
    Ok(())
}

fn run_dotnet(runtimes: Vec<String>, scenarios: Vec<String>) -> Result<()> {
    let options = matrix::dotnet::DotnetMatrixOptions { runtimes, scenarios, ..Default::default() };
    let cells = matrix::dotnet::run(&options, &mut |c| match &c.runtime {
        Some(runtime) => println!(
            ".NET {runtime:<10} {:<22} {} {} (runtimes present: {})",
            c.scenario,
            c.verdict.to_uppercase(),
            c.reason.as_deref().unwrap_or(""),
            c.runtimes_present
        ),
        None => println!(".NET {}: {}", c.wanted, c.reason.as_deref().unwrap_or("")),
    })?;
    println!("written to {}", matrix::dotnet::write(&cells, &matrix::results_root())?.display());
    if cells.iter().any(|c| c.failed()) {
        bail!("the .NET matrix has failures");
    }
    Ok(())
}

fn run_lttng(suites: Vec<String>, scenarios: Vec<String>) -> Result<()> {
    let mut o = matrix::lttng::MatrixOptions::default();
    if !suites.is_empty() {
        o.suites = suites;
    }
    if !scenarios.is_empty() {
        o.scenarios = scenarios;
    }
    let report = matrix::lttng::run(&o)?;
    let dir = matrix::lttng::write(&report, &matrix::results_root())?;
    print!("{}", matrix::lttng::markdown(&report));
    println!("written to {}", dir.display());
    Ok(())
}
