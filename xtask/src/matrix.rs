//! `cargo xtask matrix AXIS [options]`: one axis of the compatibility matrix. Every axis lives in
//! `lab::matrix` (its cells, its run, its result folder); this module only dispatches and
//! prints. The axes' flags are `flags::MatrixAxis`; `--list` names every axis of `lab::matrix::AXES`.

use anyhow::{Result, bail};
use xshell::Shell;

use crate::flags::{Matrix, MatrixAxis};
use harness::collect::CollectorKind;
use lab::matrix;

pub fn run(_sh: &Shell, m: Matrix) -> Result<()> {
    // `cargo xtask matrix --kernels 5.10,6.1 --scenario gc-heavy`: the axis named by its flag.
    let axis = match m.axis {
        Some(axis) => axis,
        None if !m.kernels.is_empty() => MatrixAxis::Kernels { kernels: m.kernels, scenario: m.scenario, list: m.list },
        None if !m.dotnet.is_empty() => MatrixAxis::Dotnet { dotnet: m.dotnet, scenario: m.scenario, list: m.list },
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
        "caps" => MatrixAxis::Caps { suite: harness::host::image::DEFAULT_SUITE.into(), collectors: vec![], caps: vec![], target: None, list: false },
        "kernels" => MatrixAxis::Kernels { kernels: vec![], scenario: vec![], list: false },
        "dotnet" => MatrixAxis::Dotnet { dotnet: vec![], scenario: vec![], list: false },
        "lttng" => MatrixAxis::Lttng { suites: vec![], scenario: vec![], list: false },
        "pods" => MatrixAxis::Pods { shapes: vec![], list: false },
        other => unreachable!("lab::matrix::AXES has an axis `{other}` that flags do not declare"),
    }
}

fn run_axis(axis: MatrixAxis) -> Result<()> {
    match axis {
        MatrixAxis::Caps { suite, collectors, caps, target, list } => run_caps(suite, collectors, caps, target, list),
        MatrixAxis::Kernels { kernels, scenario, list } => run_kernels(kernels, scenario, list),
        MatrixAxis::Dotnet { list: true, .. } => print_cells(matrix::dotnet::cells()?),
        MatrixAxis::Lttng { list: true, .. } => print_cells(matrix::lttng::cells()?),
        MatrixAxis::Dotnet { dotnet, scenario, .. } => run_dotnet(dotnet, scenario),
        MatrixAxis::Lttng { suites, scenario, .. } => run_lttng(suites, scenario),
        MatrixAxis::Pods { shapes, list } => {
            let shapes = shapes.iter().map(|s| harness::run::pod::PodShape::parse(s)).collect::<Result<Vec<_>>>()?;
            matrix::pods::run_and_print(&shapes, list)
        }
    }
}

fn print_cells(cells: Vec<String>) -> Result<()> {
    cells.iter().for_each(|c| println!("{c}"));
    Ok(())
}

fn run_caps(suite: String, collectors: Vec<String>, caps: Vec<String>, target: Option<String>, list: bool) -> Result<()> {
    // Only a run over every cell of the default suite may replace the committed table (its test
    // checks coverage; container runs default to that suite); one over every capability set of
    // some collectors (or of one target) replaces their rows.
    let update = match (suite == harness::host::image::DEFAULT_SUITE && caps.is_empty(), collectors.is_empty() && target.is_none()) {
        (true, true) => matrix::caps::TableUpdate::Whole,
        (true, false) => matrix::caps::TableUpdate::Rows,
        (false, _) => matrix::caps::TableUpdate::Keep,
    };
    let mut options = matrix::caps::MatrixOptions { suite, ..Default::default() };
    options.target = target.as_deref().map(harness::run::TargetKind::parse).transpose()?;
    if !collectors.is_empty() {
        options.collectors = collectors.iter().map(|c| CollectorKind::parse(c)).collect::<Result<_>>()?;
    }
    if !caps.is_empty() {
        options.cap_sets = caps;
    }
    if list {
        return print_cells(matrix::caps::cell_names(&options));
    }
    matrix::caps::run_and_print(&options, update)
}

fn run_kernels(kernels: Vec<String>, scenarios: Vec<String>, list: bool) -> Result<()> {
    matrix::kernels::run_and_print(&matrix::kernels::KernelMatrixOptions { kernels, scenarios, ..Default::default() }, list)
}

fn run_dotnet(runtimes: Vec<String>, scenarios: Vec<String>) -> Result<()> {
    matrix::dotnet::run_and_print(&matrix::dotnet::DotnetMatrixOptions { runtimes, scenarios, ..Default::default() })
}

fn run_lttng(suites: Vec<String>, scenarios: Vec<String>) -> Result<()> {
    let mut o = matrix::lttng::MatrixOptions::default();
    if !suites.is_empty() {
        o.suites = suites;
    }
    if !scenarios.is_empty() {
        o.scenarios = scenarios;
    }
    matrix::lttng::run_and_print(&o)
}
