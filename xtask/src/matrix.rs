//! `cargo xtask matrix AXIS [options]`: one slice of the compatibility matrix. Each axis is a
//! function of `harness` (`harness::caps` for `caps`); this module only parses flags and prints.
//! Add an axis with one entry in `AXES` and a `run_<axis>` function that calls into harness.

use anyhow::{Result, bail};
use clap::Parser;
use xshell::Shell;

type AxisFn = fn(&[String]) -> Result<()>;

/// Axes by name, with a one-line description (`--list`). `--all` runs them in this order.
const AXES: &[(&str, &str, AxisFn)] = &[
    (
        "caps",
        "container capability sets × collectors: which least set works, with the exact error of each failure",
        run_caps,
    ),
    ("kernels", "Debian kernels (qemu guests) × scenarios: each scenario's verdict per kernel", run_kernels),
    (
        "dotnet",
        ".NET runtimes × scenarios on the host: each scenario's verdict per installed runtime",
        run_dotnet,
    ),
    (
        "lttng",
        "Debian suites (LTTng 2.12 / 2.13 / newer) × the LTTng scenarios: PASS, or SKIPPED with the soname reason",
        run_lttng,
    ),
];

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
    let mut o = harness::collect::lttng::matrix::MatrixOptions::default();
    if !a.suites.is_empty() {
        o.suites = a.suites;
    }
    if !a.scenario.is_empty() {
        o.scenarios = a.scenario;
    }
    let report = harness::collect::lttng::matrix::run(&o)?;
    let dir = harness::project_root().join("results").join(format!("{}-matrix-lttng", harness::report::utc_stamp()));
    let (md, json) = harness::collect::lttng::matrix::write(&report, &dir)?;
    print!("{}", harness::collect::lttng::matrix::markdown(&report));
    println!("written: {} and {}", md.display(), json.display());
    Ok(())
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
            for (name, what, _) in AXES {
                println!("{name:<8} {what}");
            }
            Ok(())
        }
        "--all" => {
            for (name, _, axis) in AXES {
                println!("== matrix {name}");
                axis(&args[1..])?;
            }
            Ok(())
        }
        name => match AXES.iter().find(|(n, _, _)| *n == name) {
            Some((_, _, axis)) => axis(&args[1..]),
            None => bail!(
                "unknown matrix axis `{name}`: expected one of {} (or --list, --all)",
                AXES.iter().map(|(n, _, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        },
    }
}

#[derive(Parser)]
#[command(name = "cargo xtask matrix caps", about = "Probe each collector under each capability set")]
struct CapsArgs {
    /// Debian suite of the image the probes run in.
    #[arg(long, default_value = harness::image::DEFAULT_SUITE)]
    suite: String,
    /// Collectors to probe (comma-separated); default all.
    #[arg(long, value_delimiter = ',')]
    collectors: Vec<String>,
    /// Capability sets to probe (comma-separated, e.g. none,SYS_ADMIN); default all.
    #[arg(long, value_delimiter = ',')]
    caps: Vec<String>,
}

fn run_caps(args: &[String]) -> Result<()> {
    let args = CapsArgs::try_parse_from(std::iter::once("caps".to_string()).chain(args.iter().cloned()))?;
    let mut options = harness::caps::MatrixOptions { suite: args.suite, ..Default::default() };
    if !args.collectors.is_empty() {
        options.collectors = args.collectors;
    }
    if !args.caps.is_empty() {
        options.cap_sets = args.caps;
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
    let options = harness::vm::KernelMatrixOptions { kernels: args.kernels, scenarios: args.scenario, ..Default::default() };
    if args.list {
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
    let dotnet = harness::dotnet::Dotnet::locate_or_install()?;
    let installed: Vec<String> = dotnet
        .runtime_versions()?
        .into_iter()
        .filter(|r| r.name == "Microsoft.NETCore.App")
        .map(|r| r.version)
        .collect();
    let wanted = if args.dotnet.is_empty() { installed.clone() } else { args.dotnet.clone() };
    let scenarios = if args.scenario.is_empty() { harness::scenario::list_names()? } else { args.scenario.clone() };
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
