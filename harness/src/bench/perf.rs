//! `cargo xtask bench perf`: perf.data → folded stacks, tracelab against
//! `perf script | inferno-collapse-perf`, on the same recording in one run.
//!
//! The recording (FixtureApp `cpu N` under `perf record -g -F HZ`, its perf map beside it) is made
//! once and cached in target/bench/perf/; `rerecord` makes it again. Ours runs as the release build
//! of harness's `perf-fold` example ([`fold_main`]), a process per run like the peer pipeline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{ChildRun, cargo_build_release, load_average, run_measured, summary};
use crate::collect::perf::detect_perf_binary;
use crate::fold::fold_perf_file;
use crate::symbolize::DecodeContext;
use crate::testing::fixture_app;
use perfdata::PerfRecording;

#[derive(Clone, Debug)]
pub struct Options {
    /// Seconds the app burns CPU while recorded (on a shared machine it gets less than a CPU).
    pub seconds: u32,
    /// Sampling frequency.
    pub frequency: u32,
    /// Timed runs per tool (the median is reported).
    pub runs: usize,
    /// Record again even if a cached recording exists.
    pub rerecord: bool,
}

pub fn run(opts: &Options) -> Result<()> {
    super::check_runs(opts.runs)?;
    let dir = crate::project_root().join("target").join("bench").join("perf");
    let perf = detect_perf_binary().context("no `perf` on PATH: install linux-perf")?;
    let data = dir.join("perf.data");
    if opts.rerecord || !data.is_file() || !dir.join("pid.txt").is_file() {
        record(&perf, &dir, opts)?;
    }
    let pid: u32 = std::fs::read_to_string(dir.join("pid.txt"))?.trim().parse()?;
    // perf script finds JIT names only in /tmp/perf-PID.map.
    let tmp_map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    if !tmp_map.is_file() {
        std::fs::copy(dir.join(format!("perf-{pid}.map")), &tmp_map)?;
    }
    let collapse = ensure_inferno()?;

    // Ours runs as the release build of harness's `perf-fold` example, a process per run like
    // the peer pipeline: read perf.data, load symbol sources, symbolize, fold, write.
    cargo_build_release(&["-p", "harness", "--example", "perf-fold"])?;
    let exe = crate::project_root().join("target/release/examples/perf-fold");
    let ours_out = dir.join("ours.folded");
    let samples = PerfRecording::read(&data)?.samples.len();
    // The first run starts with an empty symbol cache (tracelab keeps the running kernel's
    // kallsyms on disk, as perf keeps its own in ~/.debug): it is reported on its own, and the
    // warm figures are medians of the runs after the first (shared/DESIGN.md §4), for both tools.
    let cache = dir.join("symbol-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let peer_out = dir.join("peer.folded");
    let script = format!(
        "{} script -i {} 2>/dev/null | {} > {}",
        perf.display(),
        data.display(),
        collapse.display(),
        peer_out.display()
    );
    let run_ours = || -> Result<(ChildRun, String)> {
        let run = run_measured(
            Command::new(&exe)
                .arg(&data)
                .arg(pid.to_string())
                .arg(&ours_out)
                .env("TRACELAB_CACHE_DIR", &cache)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("ours.stderr"))?),
        )?;
        let stages = std::fs::read_to_string(dir.join("ours.stderr")).unwrap_or_default().trim().to_string();
        if !run.status.success() {
            bail!("{} failed: {stages}", exe.display());
        }
        Ok((run, stages))
    };
    let run_peer = || -> Result<ChildRun> {
        let run = run_measured(Command::new("sh").arg("-c").arg(&script))?;
        if !run.status.success() {
            bail!("`{script}` failed: {}", run.status);
        }
        Ok(run)
    };
    // The first run of each side is a warm-up (tracelab's starts with an empty symbol cache,
    // perf's fills the page cache): reported on its own, kept out of the statistics. Then
    // rounds alternate A B A B …, so a change in the machine's load falls on both sides alike.
    let load_before = load_average();
    let (ours_cold, first_stages) = run_ours()?;
    let peer_cold = run_peer()?;
    let mut ours: Vec<ChildRun> = Vec::new();
    let mut peer: Vec<ChildRun> = Vec::new();
    let mut last_stages = String::new();
    for _ in 0..opts.runs {
        let (run, stages) = run_ours()?;
        ours.push(run);
        last_stages = stages;
        peer.push(run_peer()?);
    }
    let load_after = load_average();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let walls = |runs: &[ChildRun]| runs.iter().map(|r| ms(r.wall)).collect::<Vec<f64>>();
    let rss = |runs: &[ChildRun]| runs.iter().map(|r| r.max_rss_kib).max().unwrap_or(0) / 1024;
    let (o, p) = (summary(&walls(&ours)).unwrap(), summary(&walls(&peer)).unwrap());
    println!("recording: {} ({samples} samples, {} MB)", data.display(), std::fs::metadata(&data)?.len() / 1_000_000);
    println!("{} interleaved rounds (tracelab, peer) after one warm-up run of each:", opts.runs);
    println!("  {:<38} {:>9} {:>9} {:>9} {:>10}", "", "min ms", "median", "max", "peak RSS");
    println!("  {:<38} {:>9.1} {:>9.1} {:>9.1} {:>7} MB", "tracelab decode+symbolize+fold", o.min, o.median, o.max, rss(&ours));
    println!(
        "  {:<38} {:>9.1} {:>9.1} {:>9.1} {:>7} MB",
        "perf script | inferno-collapse-perf",
        p.min,
        p.median,
        p.max,
        rss(&peer)
    );
    println!("  (the peer's RSS is its largest process, perf or inferno-collapse-perf, not their sum)");
    println!(
        "ratio (peer / tracelab): median {:.1}x, range {:.1}x (tracelab's max vs peer's min) to {:.1}x (goal >= 25x)",
        p.median / o.median,
        p.min / o.max,
        p.max / o.min
    );
    println!(
        "warm-up runs (tracelab with an empty symbol cache): tracelab {:.1} ms, peer {:.1} ms, ratio {:.1}x",
        ms(ours_cold.wall),
        ms(peer_cold.wall),
        peer_cold.wall.as_secs_f64() / ours_cold.wall.as_secs_f64()
    );
    println!("tracelab stages, warm-up run: {first_stages}");
    println!("tracelab stages, last run:    {last_stages}");
    println!("load average: {load_before} before, {load_after} after");
    println!("folded outputs: {} and {}", ours_out.display(), peer_out.display());
    compare_outputs(&ours_out, &peer_out)?;
    Ok(())
}

/// Total samples and the CpuHot share of CpuHot + CpuCold leaves in both outputs, as a check
/// that both sides folded the same thing.
fn compare_outputs(ours: &Path, peer: &Path) -> Result<()> {
    let summary = |path: &Path| -> Result<(u64, u64, u64)> {
        let text = std::fs::read_to_string(path)?;
        let (mut total, mut hot, mut cold) = (0, 0, 0);
        for line in text.lines() {
            let Some((stack, count)) = line.rsplit_once(' ') else { continue };
            let count: u64 = count.parse().unwrap_or(0);
            total += count;
            let leaf = stack.rsplit(';').next().unwrap_or("");
            if leaf.contains("Fixture.Phases::CpuHot") {
                hot += count;
            } else if leaf.contains("Fixture.Phases::CpuCold") {
                cold += count;
            }
        }
        Ok((total, hot, cold))
    };
    for (who, path) in [("tracelab", ours), ("peer", peer)] {
        let (total, hot, cold) = summary(path)?;
        let share = if hot + cold > 0 { 100.0 * hot as f64 / (hot + cold) as f64 } else { 0.0 };
        // inferno-collapse-perf counts perf's periods (ns of cpu-clock), we count samples.
        println!("{who:>9}: total weight {total}, CpuHot {hot} / CpuCold {cold} = {share:.1} % hot");
    }
    Ok(())
}

fn ensure_inferno() -> Result<PathBuf> {
    if let Some(p) = crate::environment::which("inferno-collapse-perf") {
        return Ok(p);
    }
    let home = std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
    });
    let installed = home.join("bin").join("inferno-collapse-perf");
    if installed.is_file() {
        return Ok(installed);
    }
    println!("inferno-collapse-perf is not installed: running `cargo install inferno` (once)");
    let status = Command::new("cargo").args(["install", "inferno", "--locked"]).status()?;
    if !status.success() || !installed.is_file() {
        bail!("`cargo install inferno` failed; install it by hand and run again");
    }
    Ok(installed)
}

fn record(perf: &Path, dir: &Path, opts: &Options) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let dotnet = crate::dotnet::Dotnet::locate_or_install()?;
    let app_dir = crate::project_root().join("target").join("bench").join("fixture-app");
    let dll = fixture_app::build(&dotnet, &app_dir)?;
    let data = dir.join("perf.data");
    println!("recording FixtureApp `cpu {}` at {} Hz into {} …", opts.seconds, opts.frequency, data.display());
    let out = Command::new(perf)
        .args(["record", "-k", "1", "-g", "-e", "cpu-clock", "-F"])
        .arg(opts.frequency.to_string())
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(&dotnet.dotnet)
        .arg(&dll)
        .args(["cpu", &opts.seconds.to_string()])
        .env("DOTNET_ROOT", &dotnet.root)
        .env("DOTNET_PerfMapEnabled", "1")
        .env("DOTNET_EnableWriteXorExecute", "0")
        .output()
        .context("cannot run perf record")?;
    if !out.status.success() {
        bail!(
            "perf record failed ({}): {}",
            out.status,
            crate::collect::perf::explain_perf_failure(&String::from_utf8_lossy(&out.stderr))
        );
    }
    let rec = PerfRecording::read(&data)?;
    let mut counts = std::collections::HashMap::<u32, usize>::new();
    for s in &rec.samples {
        *counts.entry(s.pid).or_default() += 1;
    }
    let (pid, n) = counts.into_iter().max_by_key(|(_, n)| *n).context("the recording has no samples")?;
    if n < 30_000 {
        println!("note: only {n} samples (goal ≥ 30 000): raise --seconds or --frequency");
    }
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::copy(&map, dir.join(format!("perf-{pid}.map")))
        .with_context(|| format!("the app wrote no {}", map.display()))?;
    std::fs::write(dir.join("pid.txt"), pid.to_string())?;
    Ok(())
}

/// `perf-fold PERF.DATA PID [OUT]`: perf.data → folded stacks through [`fold_perf_file`] (perf
/// map of PID beside PERF.DATA or in /tmp); prints what it did on stderr. The `perf-fold` example
/// is this function, so [`run`] times it as a release-built process.
pub fn fold_main(args: &[String]) -> Result<()> {
    let (Some(data), Some(pid)) = (args.first(), args.get(1)) else {
        bail!("usage: perf-fold PERF.DATA PID [OUT]");
    };
    let data = PathBuf::from(data);
    let pid: u32 = pid.parse()?;
    let dir = data.parent().unwrap_or(Path::new(".")).to_path_buf();
    // A host run: recorded paths are host paths.
    let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = DecodeContext {
        artifacts: &dir,
        app_tmp_dir: &dir,
        host_pid: pid,
        target_pid: pid,
        path_map: &identity,
        symbol_dirs: &[],
    };
    let t0 = Instant::now();
    let fold = fold_perf_file(&data, &ctx)?;
    let t1 = Instant::now();
    let text = fold.folded.text();
    match args.get(2) {
        Some(out) => std::fs::write(out, text)?,
        None => print!("{text}"),
    }
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    eprintln!(
        "{} samples, {} distinct callchains, {} stacks: read+symbolize+fold {:.1} ms, total {:.1} ms",
        fold.samples,
        fold.distinct_callchains,
        fold.folded.len(),
        ms(t0, t1),
        ms(t0, Instant::now())
    );
    Ok(())
}
