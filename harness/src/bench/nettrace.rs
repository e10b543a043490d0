//! `cargo xtask bench nettrace [--trace FILE] [--runs N] [--record]`: decodes one large nettrace
//! with our decoder (crates/eventpipe's `nettrace bench`, release build, as a child) and with the
//! reference TraceEvent program (../shared/reference/TraceDump `bench`, built from a copy) in one
//! run, and prints both rates and the ratio. "Warm" = the median of the runs after the first.
//!
//! Without `--trace`, the input is `target/bench/nettrace-bench.nettrace`, recorded on first use
//! (or with `--record`) by our own IPC client: FixtureApp `cpu,gc,exceptions` ×8 under
//! SampleProfiler + runtime GC (Verbose) + exceptions + the default runtime keywords, with rundown.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{cargo_build_release, median};
use crate::collect::eventpipe::{DEFAULT_RUNTIME_KEYWORDS, Provider, RUNTIME, SAMPLE_PROFILER, SessionConfig, record_app};
use crate::testing::fixture_app;
use crate::dotnet::Dotnet;

#[derive(Clone, Debug)]
pub struct Options {
    /// A .nettrace file to decode (default: the recorded benchmark trace).
    pub trace: Option<PathBuf>,
    /// Timed runs of each decoder.
    pub runs: usize,
    /// Record the default trace again.
    pub record: bool,
}

/// Parses `… run N: E events, … = R ev/s, …` lines with the given prefix; returns (events, ev/s) per run.
fn parse_runs(text: &str, prefix: &str) -> Vec<(u64, f64)> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| {
            let events = l.split(": ").nth(1)?.split_whitespace().next()?.parse().ok()?;
            let rate = l.split("= ").nth(1)?.split_whitespace().next()?.parse().ok()?;
            Some((events, rate))
        })
        .collect()
}

fn warm(runs: &[(u64, f64)]) -> f64 {
    let rest: Vec<f64> = runs.iter().skip(1).map(|r| r.1).collect();
    if rest.is_empty() { runs.first().map_or(0.0, |r| r.1) } else { median(&rest) }
}

fn record(dotnet: &Dotnet, out: &Path) -> Result<()> {
    let work = out.parent().unwrap().join("fixture-app");
    let dll = fixture_app::build(dotnet, &work)?;
    let phases = ["cpu,gc,exceptions"; 8].join(",");
    let config = SessionConfig {
        providers: vec![
            Provider::new(SAMPLE_PROFILER, 0xF000_0000_0000, 5),
            Provider::new(RUNTIME, DEFAULT_RUNTIME_KEYWORDS | 0x1 | 0x8000, 5),
        ],
        ..SessionConfig::default()
    };
    crate::progress::note("bench", &format!("recording {} (FixtureApp {phases} 1) …", out.display()));
    let bytes = record_app(&dotnet.dotnet, &dll, &[phases, "1".into()], "FIXTURE READY", &config, out)?;
    crate::progress::note("bench", &format!("recorded {:.1} MB", bytes as f64 / 1e6));
    Ok(())
}

fn build_tracedump(dotnet: &Dotnet, dir: &Path) -> Result<PathBuf> {
    let dll = dir.join("out").join("TraceDump.dll");
    if dll.is_file() {
        return Ok(dll);
    }
    let src = crate::shared_dir().join("reference").join("TraceDump");
    let copy = dir.join("src");
    std::fs::create_dir_all(&copy)?;
    for f in ["Program.cs", "TraceDump.csproj"] {
        std::fs::copy(src.join(f), copy.join(f)).with_context(|| format!("copying {}", src.join(f).display()))?;
    }
    let out = dotnet
        .command()
        .args(["build", "-c", "Release", "-o"])
        .arg(dir.join("out"))
        .arg("--source")
        .arg(Dotnet::feed())
        .arg(&copy)
        .output()
        .context("running dotnet build")?;
    if !out.status.success() {
        bail!("building TraceDump failed:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(dll)
}

pub fn run(opts: &Options) -> Result<()> {
    let bench_dir = crate::project_root().join("target").join("bench");
    std::fs::create_dir_all(&bench_dir)?;
    let dotnet = Dotnet::locate_or_install()?;
    let trace = match &opts.trace {
        Some(t) => t.clone(),
        None => {
            let t = bench_dir.join("nettrace-bench.nettrace");
            if opts.record || !t.is_file() {
                record(&dotnet, &t)?;
            }
            t
        }
    };
    let size = std::fs::metadata(&trace).with_context(|| format!("{}", trace.display()))?.len();
    crate::progress::note("build", "the release decoder and TraceDump …");
    cargo_build_release(&["-p", "eventpipe", "--bin", "nettrace"])?;
    let ours_exe = crate::project_root().join("target").join("release").join("nettrace");
    let tracedump = build_tracedump(&dotnet, &bench_dir.join("tracedump"))?;
    let runs = opts.runs.max(2).to_string();

    let ours = Command::new(&ours_exe).arg("bench").arg(&trace).arg(&runs).output()?;
    if !ours.status.success() {
        bail!("nettrace bench failed: {}", String::from_utf8_lossy(&ours.stderr));
    }
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    let theirs = dotnet.command().arg(&tracedump).arg("bench").arg(&trace).arg(&runs).output()?;
    if !theirs.status.success() {
        bail!("TraceDump bench failed: {}", String::from_utf8_lossy(&theirs.stderr));
    }
    let theirs = String::from_utf8_lossy(&theirs.stdout).into_owned();
    print!("{ours}{theirs}");

    let ours_frames = parse_runs(&ours, "frames run");
    let ours_full = parse_runs(&ours, "full run");
    let te = parse_runs(&theirs, "run");
    if ours_frames.is_empty() || te.is_empty() {
        bail!("could not read the benchmark outputs");
    }
    if ours_frames[0].0 != te[0].0 {
        println!("note: event counts differ: ours {} vs TraceEvent {}", ours_frames[0].0, te[0].0);
    }
    let (a, b, c) = (warm(&ours_frames), warm(&te), warm(&ours_full));
    println!();
    println!("input: {} ({:.1} MB, {} events)", trace.display(), size as f64 / 1e6, ours_frames[0].0);
    println!("eventpipe (events, headers, stacks; no-op consumer): {:>12.0} ev/s warm", a);
    println!("eventpipe full decode (payload fields + resolved stacks): {:>7.0} ev/s warm", c);
    println!("TraceEvent 4.0.0 EventPipeEventSource (no-op callback): {:>8.0} ev/s warm", b);
    println!("ratio eventpipe / TraceEvent: {:.1}× (full decode: {:.1}×)", a / b, c / b);
    Ok(())
}
