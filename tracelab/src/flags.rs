//! The user's commands, declared once: the `tracelab` binary parses them as its whole tree and
//! `cargo xtask` flattens them into its own beside the maintenance tasks, so both spell every
//! command and option alike and `--help` at every level shows every option.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// A command a user runs (the maintenance tasks are xtask's own).
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a scenario (scenarios/NAME.toml, or a path to your own TOML) and write results/.
    Scenario(Scenario),
    /// List the scenarios with their collectors and default target.
    List,
    /// Check this machine: kernel, perf, tracefs, capabilities, docker, LTTng, .NET, images, tools; each
    /// row not ok names its fix. Exit 4 when a prerequisite of the default scenario is missing.
    Doctor(Doctor),
    /// Print (and as root install) what a scenario or the test suite needs: packages, tracefs, Docker, .NET, images.
    Setup(Setup),
    /// Remove what runs whose tracelab process is gone (killed, crashed) left; every run does the same when it starts and lists what it removed. Live runs are left alone.
    ///
    /// Removes: their staging folders under results/ (`.staging-NAME-PID-RANDOM`; finished runs are never touched); an app such a run started that still runs (SIGKILL); that app's files in /tmp (perf-PID.map, perfinfo-PID.map, jit-PID.dump, dotnet-diagnostic-PID-*-socket, clr-debug-pipe-PID-*-in/out); the build scratch folders /tmp/tracelab-PID-STARTTIME of dead processes; in /tmp, the diagnostics sockets and debugger pipes of any .NET process that no longer runs (dotnet-diagnostic-PID-KEY-socket, clr-debug-pipe-PID-KEY-in/out whose PID does not run with start time KEY and whose socket refuses connections: no runtime listens); Docker containers labelled `tracelab` whose owner process (label `tracelab.owner`) is dead or not named (app, sidecar and tool containers, with everything running in them), and `tracelab` volumes no container uses; podman pods labelled `tracelab` whose owner (label `tracelab.owner`) is dead, with their containers and emptyDir volumes. Nothing else: no other files, processes or containers.
    Sweep,
    /// Inspect a trace file: summarise a .nettrace, fold a perf.data.
    Trace {
        #[command(subcommand)]
        what: Trace,
    },
    /// Merge result folders into one HTML page and one markdown file.
    Report(Report),
    /// Serve a run's Firefox Profiler profile on 127.0.0.1 and print the address that opens it in
    /// the profiler (its from-url form); runs until interrupted.
    Open(Open),
    /// Repeat scenarios N times (interleaved), optionally beside a CPU hog; count verdicts per scenario and check.
    Soak(Soak),
    /// Write a starter scenario for your own app (a dll, a project or an image), defaults commented.
    Init(Init),
    /// Does tracing work for your image? Its .NET, LTTng, settings, and each collector tried against it (least capabilities).
    CheckImage(CheckImage),
}

#[derive(Args, Debug)]
pub struct CheckImage {
    /// Your image (repo:tag); never pulled.
    pub image: String,
    /// Arguments that replace the image's cmd for the trial runs (as `docker run IMAGE ARGS`).
    #[arg(long = "app-cmd", num_args = 1.., allow_hyphen_values = true)]
    pub app_cmd: Vec<String>,
    /// Where the trial runs and the table go (default results/check-image-STAMP/, results/ as for `scenario`).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Also run it in real pods (podman kube play) of these shapes (default with a bare --pod:
    /// sidecar, debug, hardened): which shapes work, with which securityContext, and their YAML.
    #[arg(long, num_args = 0.., value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(harness::run::pod::PodShape::ALL.map(|s| s.as_str())))]
    pub pod: Option<Vec<String>>,
}

#[derive(Args, Debug)]
pub struct Init {
    /// The scenario file to write (refused if it exists).
    pub toml: PathBuf,
    /// Your built app: `dotnet build` output, e.g. bin/Release/net10.0/App.dll.
    #[arg(long, group = "app")]
    pub dll: Option<PathBuf>,
    /// Your project folder or .csproj (tracelab builds it into ~/.cache/tracelab).
    #[arg(long, group = "app")]
    pub project: Option<PathBuf>,
    /// Your Docker image, run with its own entrypoint (tools run in a sidecar).
    #[arg(long, group = "app")]
    pub image: Option<String>,
    /// An ASP.NET Core app: ready on its `Now listening on:` line, with loopback load.
    #[arg(long)]
    pub web: bool,
}

#[derive(Args, Debug)]
pub struct Soak {
    /// Scenario names (scenarios/NAME.toml) or paths; run in turn, A B C A B C …
    #[arg(required = true)]
    pub scenarios: Vec<String>,
    /// Runs of each scenario.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Run beside a CPU hog on every core (stress-ng --cpu 0; Debian package stress-ng).
    #[arg(long)]
    pub hog: bool,
    /// host | container | sidecar (default: each scenario's, else container when Docker answers).
    #[arg(long)]
    pub target: Option<String>,
    /// Base image for container targets: bullseye | bookworm | trixie.
    #[arg(long)]
    pub image: Option<String>,
    /// Where the soak folder (its runs, soak.md, soak.json) goes (default results/, as for `scenario`).
    #[arg(long)]
    pub results: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct Doctor {
    /// Print the rows as JSON: name, value, status, detail, fix.
    #[arg(long)]
    pub json: bool,
    /// Symbol folders to check (as `scenario --symbols` takes them).
    #[arg(long = "symbols")]
    pub symbols: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct Setup {
    /// Plan for this scenario (name or TOML path) instead of the test suite.
    #[arg(long, conflicts_with = "tests")]
    pub scenario: Option<String>,
    /// Plan for the test suite (the default).
    #[arg(long)]
    pub tests: bool,
    /// With --scenario: host | container | sidecar | pod.
    #[arg(long, requires = "scenario")]
    pub target: Option<String>,
    /// With --scenario: base image suite for container targets.
    #[arg(long, requires = "scenario")]
    pub image: Option<String>,
    /// Print the plan only; exit 4 when something is missing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct Scenario {
    /// Scenario name (scenarios/NAME.toml) or a path to your own TOML file.
    pub name: String,
    /// host | container | sidecar | pod (default: the scenario's, else container when Docker answers).
    // Checked by clap: a wrong value is a usage error (exit 2) naming the valid ones, never a FAIL.
    #[arg(long, value_parser = ["host", "container", "sidecar", "pod"])]
    pub target: Option<String>,
    /// Base image for container targets: bullseye | bookworm | trixie.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(harness::host::image::SUITES.iter().map(|s| s.name)))]
    pub image: Option<String>,
    /// The pod's shape on the pod target: sidecar | debug | hardened | limited | listen (default:
    /// the scenario's `shape`, else sidecar).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(harness::run::pod::PodShape::ALL.map(|s| s.as_str())))]
    pub shape: Option<String>,
    /// Exit 0 on SKIP too (a skip is a verdict about the environment, not the tool).
    #[arg(long)]
    pub allow_skip: bool,
    /// Folder with separate debug files (libcoreclr.so.dbg …), as dotnet-symbol fetches them.
    #[arg(long = "symbols")]
    pub symbols: Vec<PathBuf>,
    /// Where result folders go (default: results/ in the working folder; for `cargo xtask`, the checkout's).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Do not check or install prerequisites first (what `setup --scenario NAME` does).
    #[arg(long)]
    pub no_setup: bool,
    /// Collect from this running process (a host pid) instead of launching the app: the
    /// scenario's collectors and checks for `seconds`, the app left running as found.
    #[arg(long, value_name = "PID", conflicts_with_all = ["target", "image", "shape"])]
    pub attach: Option<u32>,
}

#[derive(Subcommand, Debug)]
pub enum Trace {
    /// Summarise a .nettrace file and write its stacks (folded, speedscope).
    Inspect {
        file: PathBuf,
        /// Where to write FILE.folded and FILE.speedscope.json (default: beside FILE; where that
        /// folder cannot be written, a new target/inspect/STEM-XXXXXX/, said on stderr).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Decode every event's payload too (GCs, exceptions, payload errors), streaming: memory
        /// stays bounded at any file size.
        #[arg(long)]
        full: bool,
    },
    /// Fold a perf.data recording into stacks (JIT frames from /tmp/perf-PID.map or a perf map
    /// beside the file, ReadyToRun frames from the mapped assemblies, kernel from kallsyms).
    Fold {
        file: PathBuf,
        /// Write the folded stacks here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Symbol folders (.dbg files, kallsyms copies).
        #[arg(long)]
        symbols: Vec<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct Open {
    /// A run folder (results/NAME), a folder of runs (its `latest`), or a profile file
    /// (default: results/latest, results/ as for `scenario`).
    pub result: Option<PathBuf>,
    /// Which collector's profile (default: the first, by name).
    #[arg(long)]
    pub collector: Option<String>,
    /// The loopback port to serve on (default: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

#[derive(Args, Debug)]
pub struct Report {
    /// Folders holding result folders (default: results/, as for `scenario`).
    pub dirs: Vec<PathBuf>,
    /// Where index.html, report.md, junit.xml (all runs) and the flame graphs go (default: results/report).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Result folders of an earlier run to compare with: lists regressions.
    #[arg(long)]
    pub baseline: Vec<PathBuf>,
    /// A resolution ratio dropping by more than this (0..1) is a regression.
    #[arg(long, default_value_t = harness::report::merge::Thresholds::default().ratio_drop)]
    pub ratio_drop: f64,
    /// A rate dropping by more than this fraction is a regression.
    #[arg(long, default_value_t = harness::report::merge::Thresholds::default().rate_drop)]
    pub rate_drop: f64,
    /// Exit non-zero when there are regressions.
    #[arg(long)]
    pub fail_on_regression: bool,
}

