//! `cargo xtask matrix AXIS [options]`: one axis of the compatibility matrix. Every axis lives in
//! `harness::matrix` (its cells, its run, its result folder); this module only parses each axis's
//! flags and prints. `--list` names every axis of `harness::matrix::AXES`.

use anyhow::{Result, bail};
use clap::Parser;
use xshell::Shell;

use harness::collect::CollectorKind;
use harness::matrix;

type AxisFn = fn(&[String]) -> Result<()>;

/// The flag parser of each axis of `harness::matrix::AXES`, by name.
const PARSERS: &[(&str, AxisFn)] = &[("caps", run_caps), ("kernels", run_kernels), ("dotnet", run_dotnet), ("lttng", run_lttng)];

fn parser(name: &str) -> Result<AxisFn> {
    let axis = matrix::axis(name)?;
    match PARSERS.iter().find(|(n, _)| *n == axis.name) {
        Some((_, f)) => Ok(*f),
        None => bail!("matrix axis `{name}` has no flags in xtask/src/matrix.rs"),
    }
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let Some(first) = args.first() else {
        bail!("which axis? `cargo xtask matrix --list` shows them");
    };
    // `cargo xtask matrix --kernels 5.10,6.1 --scenario gc-heavy`: the axis named by its flag.
    if first.starts_with("--kernels") {
        return run_kernels(args);
    }
    if first.starts_with("--dotnet") {
        return run_dotnet(args);
    }
    match first.as_str() {
        "--list" => {
            for axis in matrix::AXES {
                println!("{:<8} {}", axis.name, axis.description);
            }
            Ok(())
        }
        "--all" => {
            for axis in matrix::AXES {
                println!("== matrix {}", axis.name);
                parser(axis.name)?(&args[1..])?;
            }
            Ok(())
        }
        name => parser(name)?(&args[1..]),
    }
}

#[derive(Parser)]
#[command(name = "cargo xtask matrix lttng")]
struct LttngArgs {
    /// Debian suites (comma-separated); default bullseye,bookworm,trixie.
    #[arg(long, value_delimiter = ',')]
    suites: Vec<String>,
    /// Scenarios to run in each suite; default the LTTng scenarios.
    #[arg(long)]
    scenario: Vec<String>,
}

fn run_lttng(args: &[String]) -> Result<()> {
    let a = LttngArgs::try_parse_from(std::iter::once("lttng".to_string()).chain(args.iter().cloned()))?;
    let mut o = matrix::lttng::MatrixOptions::default();
    if !a.suites.is_empty() {
        o.suites = a.suites;
    }
    if !a.scenario.is_empty() {
        o.scenarios = a.scenario;
    }
    let report = matrix::lttng::run(&o)?;
    let dir = matrix::lttng::write(&report, &matrix::results_root())?;
    print!("{}", matrix::lttng::markdown(&report));
    println!("written to {}", dir.display());
    Ok(())
}

#[derive(Parser)]
#[command(name = "cargo xtask matrix caps", about = "Probe each collector under each capability set")]
struct CapsArgs {
    /// Debian suite of the image the probes run in.
    #[arg(long, default_value = harness::image::DEFAULT_SUITE)]
    suite: String,
    /// Collectors to probe (comma-separated); default all. A full run also rewrites the
    /// committed table harness/data/caps.toml.
    #[arg(long, value_delimiter = ',')]
    collectors: Vec<String>,
    /// Capability sets to probe (comma-separated, e.g. none,SYS_ADMIN); default all.
    #[arg(long, value_delimiter = ',')]
    caps: Vec<String>,
}

fn run_caps(args: &[String]) -> Result<()> {
    let args = CapsArgs::try_parse_from(std::iter::once("caps".to_string()).chain(args.iter().cloned()))?;
    let mut options = matrix::caps::MatrixOptions { suite: args.suite.clone(), ..Default::default() };
    // Only a run over every cell of the default suite may replace the committed table (its test
    // checks coverage; container runs default to that suite).
    let full = args.collectors.is_empty() && args.caps.is_empty() && args.suite == harness::image::DEFAULT_SUITE;
    if !args.collectors.is_empty() {
        options.collectors = args.collectors.iter().map(|c| CollectorKind::parse(c)).collect::<Result<_>>()?;
    }
    if !args.caps.is_empty() {
        options.cap_sets = args.caps;
    }
    let table = matrix::caps::run_matrix(&options, &mut |p| {
        println!(
            "{:<13} {:<21} {} {}",
            p.collector,
            p.caps,
            if p.works { "works" } else { "FAILS" },
            if p.works { p.detail.clone() } else { p.error.clone().unwrap_or_default() }
        );
    })?;
    let dir = matrix::caps::write(&table, &matrix::results_root())?;
    println!("\n{}", table.markdown());
    println!("written to {}", dir.display());
    if full {
        println!("committed table rewritten: {}", matrix::caps::write_table(&table)?.display());
    }
    Ok(())
}

#[derive(Parser)]
#[command(name = "cargo xtask matrix kernels", about = "Run scenarios in a qemu guest per Debian kernel")]
struct KernelArgs {
    /// Kernels (comma-separated labels such as 5.10,6.1,6.12); default all.
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Scenarios (comma-separated or repeated); default all.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Print the cells without booting anything.
    #[arg(long)]
    list: bool,
}

fn run_kernels(args: &[String]) -> Result<()> {
    let args = KernelArgs::try_parse_from(std::iter::once("kernels".to_string()).chain(args.iter().cloned()))?;
    let options = matrix::kernels::KernelMatrixOptions { kernels: args.kernels, scenarios: args.scenario, ..Default::default() };
    if args.list {
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

#[derive(Parser)]
#[command(name = "cargo xtask matrix dotnet", about = "Run scenarios on the host per installed .NET runtime")]
struct DotnetArgs {
    /// Runtime versions or prefixes (comma-separated, e.g. 10.0); default every installed one.
    #[arg(long, value_delimiter = ',')]
    dotnet: Vec<String>,
    /// Scenarios (comma-separated or repeated); default all.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
}

fn run_dotnet(args: &[String]) -> Result<()> {
    let args = DotnetArgs::try_parse_from(std::iter::once("dotnet".to_string()).chain(args.iter().cloned()))?;
    let options = matrix::dotnet::DotnetMatrixOptions { runtimes: args.dotnet, scenarios: args.scenario, ..Default::default() };
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
