//! The whole command tree, declared once: `main` parses it and hands each task its own flags, so
//! no task parses arguments again and `--help` at every level shows every option.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", about = "tracelab: prove the Linux diagnostics pipeline for .NET with real runs", after_help = judge::exit::TABLE)]
pub struct Flags {
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand, Debug)]
pub enum Task {
    /// Run a scenario (scenarios/NAME.toml, or a path to your own TOML) and write results/.
    Scenario(Scenario),
    /// List the scenarios with their collectors and default target.
    List,
    /// Check this machine: kernel, perf, tracefs, capabilities, docker, LTTng, .NET, images, tools; each
    /// row not ok names its fix. Exit 4 when a prerequisite of the default scenario is missing.
    Doctor(Doctor),
    /// Print (and as root install) what a scenario or the test suite needs: packages, tracefs, Docker, .NET, images.
    Setup(Setup),
    /// The test suite: its set-up, then `cargo nextest run --workspace` (profile ci when CI=true).
    Test(Test),
    /// Benchmarks that time tracelab against the peer tool on the same input.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// Build the offline container images (debootstrap rootfs + .NET runtime + workloads).
    Images(Images),
    /// Remove what runs whose tracelab process is gone (killed, crashed) left; every run does the same when it starts and lists what it removed. Live runs are left alone.
    ///
    /// Removes: their staging folders under results/ (`.staging-NAME-PID-RANDOM`; finished runs are never touched); an app such a run started that still runs (SIGKILL); that app's files in /tmp (perf-PID.map, perfinfo-PID.map, jit-PID.dump, dotnet-diagnostic-PID-*-socket, clr-debug-pipe-PID-*-in/out); the build scratch folders /tmp/tracelab-PID-STARTTIME of dead processes; in /tmp, the diagnostics sockets and debugger pipes of any .NET process that no longer runs (dotnet-diagnostic-PID-KEY-socket, clr-debug-pipe-PID-KEY-in/out whose PID does not run with start time KEY and whose socket refuses connections: no runtime listens); Docker containers labelled `tracelab` whose owner process (label `tracelab.owner`) is dead or not named (app, sidecar and tool containers, with everything running in them), and `tracelab` volumes no container uses; podman pods labelled `tracelab` whose owner (label `tracelab.owner`) is dead, with their containers and emptyDir volumes. Nothing else: no other files, processes or containers.
    Sweep,
    /// Run a slice of the compatibility matrix: caps | kernels | dotnet | lttng, --list, --all.
    Matrix(Matrix),
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
    /// Generate (or check) the nightly CI workflow under ci/; boot one matrix kernel by hand.
    Ci {
        #[command(subcommand)]
        what: Ci,
    },
    /// Regenerate the event tables (eventpipe's manifest.rs from the runtime's manifest, LTTng's events.rs from what its provider declares).
    Codegen(Codegen),
    /// Fuzz one decoder (libFuzzer via cargo-fuzz on nightly) from its committed seed corpus for N seconds; prints executions per second and exits 1 with the crashing input's path on a crash.
    Fuzz(Fuzz),
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
    /// Where the trial runs and the table go (default results/check-image-STAMP/).
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
    /// Where the soak folder (its runs, soak.md, soak.json) goes (default results/).
    #[arg(long)]
    pub results: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct Fuzz {
    /// The target: ctf-stream, ctf-metadata, elfcore-core-file, eventpipe-decode-stream, eventpipe-counters, perfdata-decode, r2r-parse-image, or `all` (each in turn); `--list` shows them with their seed folders.
    #[arg(required_unless_present = "list")]
    pub target: Option<String>,
    /// How long each target runs.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Largest input the fuzzer makes, bytes (default per target: 16 KiB for metadata and nettrace, else 64 KiB).
    #[arg(long)]
    pub max_len: Option<usize>,
    /// List the targets with their seed folders.
    #[arg(long)]
    pub list: bool,
}

#[derive(Args, Debug)]
pub struct Codegen {
    /// Only compare the committed files with what the generator writes; exit 2 and name them when they differ.
    #[arg(long)]
    pub check: bool,
    /// First record again what the runtime's LTTng provider declares (`lttng list -u -f` in the bullseye image) into harness/data/runtime-events/lttng-provider.txt.
    #[arg(long, conflicts_with = "check")]
    pub record: bool,
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
pub struct Test {
    /// Skip the prerequisite step.
    #[arg(long)]
    pub no_setup: bool,
    /// Passed to `cargo nextest run --workspace` (after `--`).
    #[arg(last = true, value_name = "NEXTEST_ARGS")]
    pub nextest_args: Vec<String>,
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
    /// Where result folders go (default results/).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Do not check or install prerequisites first (`cargo xtask setup --scenario NAME`).
    #[arg(long)]
    pub no_setup: bool,
    /// Collect from this running process (a host pid) instead of launching the app: the
    /// scenario's collectors and checks for `seconds`, the app left running as found.
    #[arg(long, value_name = "PID", conflicts_with_all = ["target", "image", "shape"])]
    pub attach: Option<u32>,
}

#[derive(Subcommand, Debug)]
pub enum Bench {
    /// perf.data → folded stacks: tracelab against `perf script | inferno-collapse-perf` and `samply import`.
    Perf {
        /// Recorded inputs to run (default all): framework-3s, framework-30s, framework-150s, web.
        #[arg(long = "input", value_delimiter = ',')]
        inputs: Vec<String>,
        /// Sampling frequency of the recordings.
        #[arg(long, default_value_t = 999)]
        frequency: u32,
        /// Interleaved rounds (tracelab, inferno pipeline, samply).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Record the inputs again even if cached recordings exist.
        #[arg(long, alias = "rerecord")]
        record: bool,
    },
    /// Decoding a large .nettrace: tracelab's eventpipe against TraceEvent (TraceDump).
    Nettrace {
        /// A .nettrace file to decode (default: the recorded benchmark traces, one per size).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Sizes of the recorded traces, MB (.build/bench/nettrace/SIZEMB.nettrace).
        #[arg(long, value_delimiter = ',', default_values_t = [5, 50, 250])]
        sizes: Vec<u32>,
        /// Interleaved rounds (ours parse-only, ours full decode, TraceEvent).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Record the default traces again.
        #[arg(long)]
        record: bool,
    },
    /// Decoding a large LTTng trace: tracelab's CTF reader against babeltrace2.
    Ctf {
        /// A CTF trace folder (or a session output holding several).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Interleaved rounds of each reader.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Record the default trace again.
        #[arg(long)]
        record: bool,
        /// FixtureApp runs in a recording.
        #[arg(long, default_value_t = 25)]
        record_runs: u32,
        /// The trace repeated N times for the memory table (peak RSS by input size).
        #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 50])]
        scales: Vec<u32>,
    },
    /// What naming ReadyToRun frames costs per 1 M frames (no peer tool names them).
    R2r(R2r),
    /// Unwinding perf's sampled user stacks: tracelab against `perf script`.
    Unwind {
        /// Timed runs per tool (the median is reported).
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// The app's throughput with no collector and with each, interleaved, with 95 % intervals.
    Overhead {
        /// Rounds over all configurations.
        #[arg(long, default_value_t = 5)]
        repeats: usize,
        /// Seconds of workload per run (gc-heavy, unpaced allocation).
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
}

#[derive(Args, Debug)]
pub struct R2r {
    /// Which stream(s) to name.
    #[arg(long, value_enum, default_value_t = R2rStream::Both)]
    pub stream: R2rStream,
    /// Frames per stream.
    #[arg(long, default_value_t = 1_000_000)]
    pub frames: usize,
    /// Share of the constructed stream's offsets placed outside any method's code.
    #[arg(long, default_value_t = 0.1)]
    pub gap_fraction: f64,
    /// Seed of the constructed stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Framework assemblies the constructed stream draws from (repeatable; default: CoreLib,
    /// System.Text.Json, System.Text.RegularExpressions, System.Linq, System.Collections).
    #[arg(long = "image")]
    pub images: Vec<String>,
    /// Timed runs per stream (the median is reported); each opens the images afresh.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Record the framework workload again even if a cached recording exists.
    #[arg(long)]
    pub rerecord: bool,
    /// Seconds the framework workload runs while recorded.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    /// Sampling frequency of the recording.
    #[arg(long, default_value_t = 999)]
    pub frequency: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum R2rStream {
    Constructed,
    Recorded,
    Both,
}

#[derive(Args, Debug)]
pub struct Images {
    /// Comma-separated Debian suites, built in this order (bullseye first: LTTng and the
    /// perf-in-container cases need it).
    #[arg(long, value_delimiter = ',', default_value = "bullseye,bookworm,trixie")]
    pub suite: Vec<String>,
}

/// `matrix AXIS [options]`, or `--list` / `--all`; `matrix --kernels 5.10,6.1 --scenario X` and
/// `matrix --dotnet 10.0` name their axis by its flag.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Matrix {
    #[command(subcommand)]
    pub axis: Option<MatrixAxis>,
    /// List the axes with what each one varies.
    #[arg(long)]
    pub list: bool,
    /// Run every axis with its defaults, in the order --list shows.
    #[arg(long)]
    pub all: bool,
    /// Shorthand for `matrix kernels --kernels …` (with --list: print its cells).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Shorthand for `matrix dotnet --dotnet …`.
    #[arg(long, value_delimiter = ',')]
    pub dotnet: Vec<String>,
    /// Scenarios of the --kernels / --dotnet shorthand (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
}

/// Declared in the order `--all` runs them.
#[derive(Subcommand, Debug)]
pub enum MatrixAxis {
    /// Container (and sidecar) capability sets × collectors: which least set works, with the exact error of each failure.
    Caps {
        /// Debian suite of the image the probes run in.
        #[arg(long, default_value = harness::host::image::DEFAULT_SUITE)]
        suite: String,
        /// Collectors to probe (comma-separated); default all.
        #[arg(long, value_delimiter = ',')]
        collectors: Vec<String>,
        /// Capability sets to probe (comma-separated, e.g. none,SYS_ADMIN); default all.
        #[arg(long, value_delimiter = ',')]
        caps: Vec<String>,
        /// Probe on this target only: container (tool in the app's container) or sidecar (tool in its
        /// own container, the app's with no capability). Default: containers for every collector,
        /// sidecars for perf-offwake and perf-syscalls.
        #[arg(long, value_parser = ["container", "sidecar"])]
        target: Option<String>,
        /// Print the cells without probing anything.
        #[arg(long)]
        list: bool,
    },
    /// Debian kernels (qemu guests) × scenarios: each scenario's verdict per kernel.
    Kernels {
        /// Kernels (comma-separated labels such as 5.10,6.1,6.12); default all.
        #[arg(long, value_delimiter = ',')]
        kernels: Vec<String>,
        /// Scenarios (comma-separated or repeated); default all.
        #[arg(long, value_delimiter = ',')]
        scenario: Vec<String>,
        /// Print the cells without booting anything.
        #[arg(long)]
        list: bool,
    },
    /// .NET runtimes × scenarios on the host: each scenario's verdict per installed runtime.
    Dotnet {
        /// Runtime versions or prefixes (comma-separated, e.g. 10.0); default every installed one.
        #[arg(long, value_delimiter = ',')]
        dotnet: Vec<String>,
        /// Scenarios (comma-separated or repeated); default all.
        #[arg(long, value_delimiter = ',')]
        scenario: Vec<String>,
        /// Print the cells of a default run without running anything.
        #[arg(long)]
        list: bool,
    },
    /// Debian suites (LTTng 2.12 / 2.13 / newer) × the LTTng scenarios: PASS, or SKIPPED with the soname reason.
    Lttng {
        /// Debian suites (comma-separated); default bullseye,bookworm,trixie.
        #[arg(long, value_delimiter = ',')]
        suites: Vec<String>,
        /// Scenarios to run in each suite; default the LTTng scenarios.
        #[arg(long)]
        scenario: Vec<String>,
        /// Print the cells of a default run without running anything.
        #[arg(long)]
        list: bool,
    },
    /// Pod shapes (podman kube play) × collectors: expected vs got per cell, the tools' capabilities, the reason of each SKIP.
    Pods {
        /// Shapes (comma-separated: sidecar, debug, hardened, limited, listen); default all.
        #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(harness::run::pod::PodShape::ALL.map(|s| s.as_str())))]
        shapes: Vec<String>,
        /// Print the cells without running anything.
        #[arg(long)]
        list: bool,
    },
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
    /// (default: the project's results/latest).
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
    /// Folders holding result folders (default: results/).
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

#[derive(Subcommand, Debug)]
pub enum Ci {
    /// Write ci/nightly.yml from the scenarios and the matrix axes (`--check`: only compare).
    Workflow {
        #[arg(long)]
        check: bool,
    },
    /// Boot one kernel of the matrix and run a shell script in it; prints the job's output.
    Boot {
        /// 5.10 | 6.1 | 6.12 (or the suite name)
        #[arg(long, default_value = "6.1")]
        kernel: String,
        /// The script to run in the guest (its output is in out/job.log).
        script: PathBuf,
        /// Files to place in the guest: HOST=GUEST (absolute guest path).
        #[arg(long = "file")]
        files: Vec<String>,
        /// Where to keep the console log and the results (default: .build/vm/boot-KERNEL).
        #[arg(long)]
        work_dir: Option<PathBuf>,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every command's path from the root, e.g. `["bench", "r2r"]`.
    fn paths(cmd: &clap::Command, prefix: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
        out.push((prefix.clone(), cmd.clone()));
        for sub in cmd.get_subcommands() {
            let mut p = prefix.clone();
            p.push(sub.get_name().to_string());
            paths(sub, p, out);
        }
    }

    #[test]
    fn tree_is_consistent() {
        Flags::command().debug_assert();
    }

    #[test]
    fn every_help_lists_every_option_and_exits_0() {
        let mut all = Vec::new();
        paths(&Flags::command(), vec![], &mut all);
        assert!(all.len() >= 25, "{} commands", all.len());
        for (path, cmd) in all {
            let argv = std::iter::once("xtask".to_string()).chain(path.iter().cloned()).chain(["--help".into()]);
            let err = Flags::try_parse_from(argv).expect_err("--help stops parsing");
            assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{path:?}");
            assert_eq!(err.exit_code(), 0, "{path:?}");
            let help = err.render().to_string();
            assert!(!help.contains("[ARGS]..."), "{path:?} still takes raw arguments:\n{help}");
            for arg in cmd.get_arguments() {
                if let Some(long) = arg.get_long() {
                    assert!(help.contains(&format!("--{long}")), "{path:?} help lacks --{long}:\n{help}");
                }
            }
        }
    }

    #[test]
    fn usage_errors_exit_2() {
        for argv in [&["xtask", "matrix", "nosuchaxis"][..], &["xtask", "bench", "nosuchbench"], &["xtask", "images", "--nope"]] {
            let err = Flags::try_parse_from(argv).expect_err("a usage error");
            assert_eq!(err.exit_code(), 2, "{argv:?}");
        }
        // A wrong image or target is a usage error naming the valid values, not a scenario FAIL.
        for (argv, valid) in [
            (&["xtask", "scenario", "cpu-bound", "--image", "sid"][..], "bullseye, bookworm, trixie"),
            (&["xtask", "scenario", "cpu-bound", "--target", "vm"], "host, container, sidecar"),
        ] {
            let err = Flags::try_parse_from(argv).expect_err("a usage error");
            assert_eq!(err.exit_code(), 2, "{argv:?}");
            assert!(err.render().to_string().contains(valid), "{argv:?}: {}", err.render());
        }
    }
}
