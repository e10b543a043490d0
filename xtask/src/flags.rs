//! The whole command tree, declared once: `main` parses it and hands each task its own flags, so
//! no task parses arguments again and `--help` at every level shows every option. The user's
//! commands are `tracelab`'s own tree (`tracelab::Command`), flattened in: `cargo xtask scenario
//! …` and `tracelab scenario …` are one declaration and one code path; the tasks declared here are
//! the maintenance ones (test, bench, matrix, images, codegen, ci, fuzz).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version, about = "tracelab: prove the Linux diagnostics pipeline for .NET with real runs", after_help = judge::exit::TABLE)]
pub struct Flags {
    #[command(subcommand)]
    pub task: Task,
}

#[derive(Subcommand, Debug)]
pub enum Task {
    /// The user's commands (also the installed `tracelab` binary's): scenario, list, doctor, setup,
    /// sweep, trace, report, open, soak, init, check-image.
    #[command(flatten)]
    User(tracelab::Command),
    /// The test suite: its set-up, then `cargo nextest run --workspace` (profile ci when CI=true).
    Test(Test),
    /// Benchmarks that time tracelab against the peer tool on the same input.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// Build the offline container images (debootstrap rootfs + .NET runtime + workloads).
    Images(Images),
    /// Run a slice of the compatibility matrix: caps | kernels | dotnet | lttng, --list, --all.
    Matrix(Matrix),
    /// Generate (or check) the nightly CI workflow under ci/; boot one matrix kernel by hand.
    Ci {
        #[command(subcommand)]
        what: Ci,
    },
    /// Regenerate the event tables (eventpipe's manifest.rs from the runtime's manifest, LTTng's events.rs from what its provider declares).
    Codegen(Codegen),
    /// Fuzz one decoder (libFuzzer via cargo-fuzz on nightly) from its committed seed corpus for N seconds; prints executions per second and exits 1 with the crashing input's path on a crash.
    Fuzz(Fuzz),
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
pub struct Test {
    /// Skip the prerequisite step.
    #[arg(long)]
    pub no_setup: bool,
    /// Passed to `cargo nextest run --workspace` (after `--`).
    #[arg(last = true, value_name = "NEXTEST_ARGS")]
    pub nextest_args: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Bench {
    /// perf.data → folded stacks: tracelab against `perf script | inferno-collapse-perf` and `samply import`.
    Perf {
        /// Inputs to run (default all recorded ones): framework-5k, framework-60k, framework-150k,
        /// web, or the path of any perf.data (its most-sampled process is the app).
        #[arg(long = "input", value_delimiter = ',')]
        inputs: Vec<String>,
        /// The `tracelab` binary whose `trace fold` is timed, e.g. ~/.cargo/bin/tracelab after
        /// `cargo install --path tracelab` (default: the checkout's release build).
        #[arg(long)]
        binary: Option<PathBuf>,
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
        /// Kernels (comma-separated labels such as 5.10,6.1,6.12, or 6.12-user-events: built here
        /// with CONFIG_USER_EVENTS for collect-linux); default Debian's three.
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
pub enum Ci {
    /// Write ci/nightly.yml from the scenarios and the matrix axes (`--check`: only compare).
    Workflow {
        #[arg(long)]
        check: bool,
    },
    /// Boot one kernel of the matrix and run a shell script in it; prints the job's output.
    Boot {
        /// 5.10 | 6.1 | 6.12 | 6.12-user-events (or the suite name)
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
