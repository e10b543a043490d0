//! `cargo xtask bench r2r`: what naming ReadyToRun frames costs per 1 M frames (issue 8), through
//! the resolver the perf decode uses, timed in the release build of harness's `r2r-cost` example.
//!
//! Two streams (`--stream both`, the default): one constructed from the shared framework's
//! images with a known share of offsets inside methods (the count named must equal it, and every
//! name must be the drawn method's), and the R2R frames of a perf recording of the `framework`
//! workload, made once and cached in target/bench/r2r/ (`--rerecord` makes it again).
//!
//! No peer: nothing here names R2R frames (perf prints `[unknown]` for them; R2RDump is not
//! available offline), so there is no ratio. For context, `perf script`'s own time per 1 M frames
//! on bench perf's cached recording is printed beside it when that recording exists.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use harness::collect::perf::{PerfRecording, detect_perf_binary};
use harness::r2r_cost::{self, Spec, StreamSpec};
use xshell::Shell;

#[derive(Parser, Debug)]
#[command(name = "cargo xtask bench r2r")]
struct Args {
    /// Which stream(s) to name.
    #[arg(long, value_enum, default_value_t = StreamKind::Both)]
    stream: StreamKind,
    /// Frames per stream.
    #[arg(long, default_value_t = 1_000_000)]
    frames: usize,
    /// Share of the constructed stream's offsets placed outside any method's code.
    #[arg(long, default_value_t = 0.1)]
    gap_fraction: f64,
    /// Seed of the constructed stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Framework assemblies the constructed stream draws from (repeatable; default: CoreLib,
    /// System.Text.Json, System.Text.RegularExpressions, System.Linq, System.Collections).
    #[arg(long = "image")]
    images: Vec<String>,
    /// Timed runs per stream (the median is reported); each opens the images afresh.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Record the framework workload again even if a cached recording exists.
    #[arg(long)]
    rerecord: bool,
    /// Seconds the framework workload runs while recorded.
    #[arg(long, default_value_t = 10)]
    seconds: u32,
    /// Sampling frequency of the recording.
    #[arg(long, default_value_t = 999)]
    frequency: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StreamKind {
    Constructed,
    Recorded,
    Both,
}

fn parse(args: &[String]) -> Result<Args> {
    let args = Args::try_parse_from(std::iter::once("r2r".to_string()).chain(args.iter().cloned()))?;
    if !(0.0..1.0).contains(&args.gap_fraction) {
        bail!("--gap-fraction must be in [0, 1)");
    }
    if args.frames == 0 || args.runs == 0 {
        bail!("--frames and --runs must be at least 1");
    }
    Ok(args)
}

pub fn run(sh: &Shell, args: &[String]) -> Result<()> {
    let args = parse(args)?;
    let dotnet = harness::dotnet::Dotnet::locate_or_install()?;
    let mut specs = Vec::new();
    if args.stream != StreamKind::Recorded {
        let names: Vec<String> =
            if args.images.is_empty() { r2r_cost::DEFAULT_IMAGES.iter().map(|s| s.to_string()).collect() } else { args.images.clone() };
        let images = r2r_cost::framework_images(&dotnet, &names)?;
        specs.push(StreamSpec::Synthetic { images, frames: args.frames, gap_fraction: args.gap_fraction, seed: args.seed });
    }
    let perf = detect_perf_binary();
    if args.stream != StreamKind::Constructed {
        let perf = perf.as_ref().context("no `perf` on PATH for the recorded stream: install linux-perf, or pass --stream constructed")?;
        let dir = harness::project_root().join("target/bench/r2r");
        let data = dir.join("perf.data");
        if args.rerecord || !data.is_file() {
            eprintln!("recording the framework workload ({} s at {} Hz) into {} …", args.seconds, args.frequency, data.display());
            r2r_cost::record_framework(&dotnet, perf, &dir, args.seconds, args.frequency)?;
        }
        specs.push(StreamSpec::Recorded { perf_data: data, frames: args.frames });
    }

    sh.cmd("cargo").args(["build", "--quiet", "--release", "-p", "harness", "--example", "r2r-cost"]).run()?;
    let exe = harness::project_root().join("target/release/examples/r2r-cost");
    let mut failed = Vec::new();
    println!("R2R symbolization cost: harness::symbolize::r2r::R2rResolver, release build, one process per stream\n");
    for stream in specs {
        let m = r2r_cost::measure_in(&exe, &Spec { stream, runs: args.runs })?;
        println!("{}", r2r_cost::table(&m));
        if let Some(Err(e)) = r2r_cost::verdict(&m) {
            failed.push(e);
        }
    }

    println!("peer: none. No tool here names ReadyToRun frames (perf script prints [unknown] for them; R2RDump is not");
    println!("available offline), so there is no ratio.");
    match perf_script_context(perf.as_deref(), args.runs) {
        Ok(line) => println!("{line}"),
        Err(e) => println!("for context, perf script's own rate: not measured ({e:#})"),
    }
    println!(
        "load average while measuring: {}",
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    if !failed.is_empty() {
        bail!("the constructed stream was not named as built: {}", failed.join("; "));
    }
    Ok(())
}

/// `perf script` (every frame of every sample, symbolized by perf) on bench perf's cached
/// recording: its median time scaled to 1 M frames.
fn perf_script_context(perf: Option<&Path>, runs: usize) -> Result<String> {
    let perf = perf.context("no `perf` on PATH")?;
    let data = harness::project_root().join("target/bench/perf/perf.data");
    if !data.is_file() {
        bail!("{} does not exist; `cargo xtask bench perf` records it", data.display());
    }
    let rec = PerfRecording::read(&data)?;
    let frames: usize = rec.samples.iter().map(|s| rec.frames(s).count()).sum();
    let mut times = Vec::new();
    for _ in 0..runs.clamp(1, 3) {
        let t = Instant::now();
        let status = Command::new(perf).args(["script", "-i"]).arg(&data).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        if !status.success() {
            bail!("perf script failed: {status}");
        }
        times.push(t.elapsed());
    }
    times.sort();
    let d: Duration = times[times.len() / 2];
    Ok(format!(
        "for context, perf script on {} ({frames} frames, all kinds): {:.1} ms = {:.1} ms per 1 M frames, {:.0} frames/s",
        data.display(),
        d.as_secs_f64() * 1e3,
        d.as_secs_f64() * 1e3 * 1e6 / frames.max(1) as f64,
        frames as f64 / d.as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_are_one_million_frames_both_streams() {
        let a = args(&[]).unwrap();
        assert_eq!(a.frames, 1_000_000);
        assert_eq!(a.stream, StreamKind::Both);
        assert_eq!(a.gap_fraction, 0.1);
        assert!(a.images.is_empty());
    }

    #[test]
    fn options_parse() {
        let a = args(&["--stream", "constructed", "--frames", "1000", "--gap-fraction", "0.25", "--image", "System.Linq.dll", "--image", "System.Private.CoreLib.dll", "--runs", "2"]).unwrap();
        assert_eq!(a.stream, StreamKind::Constructed);
        assert_eq!((a.frames, a.gap_fraction, a.runs), (1000, 0.25, 2));
        assert_eq!(a.images, ["System.Linq.dll", "System.Private.CoreLib.dll"]);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(args(&["--gap-fraction", "1"]).is_err());
        assert!(args(&["--runs", "0"]).is_err());
        assert!(args(&["--stream", "other"]).is_err());
    }
}
