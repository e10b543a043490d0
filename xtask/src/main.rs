//! `cargo xtask …`: tracelab's driver. Each task is one module with a `run` function; the
//! substance lives in `harness` (and the format crates), which tests call without this driver.

mod bench;
mod ci;
mod codegen;
mod doctor;
mod images;
mod list;
mod matrix;
mod report;
mod scenario;
mod sweep;
mod trace;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "tracelab: prove the Linux diagnostics pipeline for .NET with real runs")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run a scenario (scenarios/NAME.toml, or a path to your own TOML) and write results/.
    Scenario(scenario::Args),
    /// List the scenarios with their collectors and default target.
    List,
    /// Check this machine: kernel, perf, tracefs, capabilities, docker, LTTng, .NET.
    Doctor,
    /// Benchmarks that time tracelab against the peer tool on the same input.
    Bench {
        /// perf | nettrace | ctf | r2r | unwind | overhead
        what: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the offline container images (debootstrap rootfs + .NET runtime + workloads).
    Images {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Remove leftover tracelab containers, volumes and LTTng sessions.
    Sweep,
    /// Run a slice of the compatibility matrix: caps | lttng | kernels | dotnet, --list, --all.
    Matrix {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Inspect a trace file: `cargo xtask trace inspect FILE.nettrace`.
    Trace {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Merge result folders into one HTML page and one markdown file.
    Report {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Generate (or check) the nightly CI workflow under ci/.
    Ci {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Regenerate the tables generated from the runtime's event manifest (eventpipe, LTTng).
    Codegen {
        /// Only check that the committed files are what the generator writes.
        #[arg(long)]
        check: bool,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let sh = match xshell::Shell::new() {
        Ok(sh) => sh,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    sh.change_dir(harness::project_root());
    let result = match cli.task {
        Task::Scenario(args) => return scenario::run(&sh, args),
        Task::List => list::run(&sh),
        Task::Doctor => doctor::run(&sh),
        Task::Bench { what, args } => bench::run(&sh, &what, &args),
        Task::Images { args } => images::run(&sh, &args),
        Task::Sweep => sweep::run(&sh),
        Task::Matrix { args } => matrix::run(&sh, &args),
        Task::Trace { args } => trace::run(&sh, &args),
        Task::Report { args } => report::run(&sh, &args),
        Task::Ci { args } => ci::run(&sh, &args),
        Task::Codegen { check } => codegen::run(&sh, check),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
