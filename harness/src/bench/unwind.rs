//! `cargo xtask bench unwind`: unwinding perf's sampled user stacks (`--call-graph dwarf`),
//! tracelab's unwinder against `perf script` (perf's own DWARF unwinding) on the same recording,
//! in one run: samples per second of each, the ratio, and how many of the .NET app's
//! switch-outs each one follows into managed code.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::median;
use crate::model::DsoClass;
use crate::unwind::{StackUnwinder, UnwindOptions, unwind_perf_data_with};

#[derive(Clone, Debug)]
pub struct Options {
    /// Timed runs per tool (the median is reported).
    pub runs: usize,
}

/// The .NET app's pid in the recorded off-CPU fixture (perf-offcpu-dwarf.data).
pub const APP_PID: u32 = 28884;

fn no_path(_: &Path) -> Option<PathBuf> {
    None
}

/// How the off-CPU fixture in `fixtures` (../shared/fixtures/perf) is unwound, here and by the
/// criterion bench: every process of the system-wide recording (398 samples, 96 of them the .NET
/// app's), JIT names from the app's perf map, images from the fixture's `dsos/` and the SDK.
pub fn fixture_options(fixtures: &Path, dotnet: &crate::dotnet::Dotnet) -> UnwindOptions<'static> {
    UnwindOptions {
        pids: None,
        perf_maps: [(APP_PID, fixtures.join(format!("perf-offcpu-dwarf.perf-{APP_PID}.map")))].into_iter().collect(),
        search_dirs: vec![
            fixtures.join("dsos"),
            dotnet.root.join("shared/Microsoft.NETCore.App/10.0.12"),
            dotnet.root.join("host/fxr/10.0.12"),
            dotnet.root.clone(),
        ],
        path_map: &no_path,
        ..Default::default()
    }
}

pub fn run(opts: &Options) -> Result<()> {
    super::check_runs(opts.runs)?;
    let fixtures = crate::shared_dir().join("fixtures/perf");
    let data = fixtures.join("perf-offcpu-dwarf.data");
    if !data.is_file() {
        bail!("{} is missing (../shared/fixtures)", data.display());
    }
    let perf = crate::collect::perf::detect_perf_binary().context("no `perf` on PATH: install linux-perf")?;
    let dotnet = crate::dotnet::Dotnet::locate_or_install()?;
    let map = fixtures.join(format!("perf-offcpu-dwarf.perf-{APP_PID}.map"));
    // perf script finds JIT names only in /tmp/perf-PID.map.
    let tmp_map = PathBuf::from(format!("/tmp/perf-{APP_PID}.map"));
    if !tmp_map.is_file() {
        std::fs::copy(&map, &tmp_map).with_context(|| format!("could not copy {} to /tmp", map.display()))?;
    }
    let unwind_opts = || fixture_options(&fixtures, &dotnet);

    // Ours, cold (a new unwinder per run: images read again, as perf script reads them).
    let mut ours = Vec::new();
    let mut last = None;
    for _ in 0..opts.runs {
        let t = Instant::now();
        let u = unwind_perf_data_with(&data, &mut StackUnwinder::new(unwind_opts()))?;
        ours.push(t.elapsed());
        last = Some(u);
    }
    let unwound = last.unwrap();
    let samples = unwound.samples.len();
    let app: Vec<_> = unwound.samples.iter().filter(|s| s.pid == APP_PID && s.sched_switch.is_some()).collect();
    let ours_managed = app
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.class == DsoClass::Jit && f.name.as_deref().is_some_and(|n| !n.starts_with("stub "))))
        .count();

    // perf script with the same fields perf's fixture answer uses.
    let mut theirs = Vec::new();
    let mut script = String::new();
    for _ in 0..opts.runs {
        let t = Instant::now();
        let out = Command::new(&perf)
            .args(["script", "-F", "comm,pid,tid,time,event,ip,sym,dso", "-i"])
            .arg(&data)
            .output()
            .with_context(|| format!("could not run {}", perf.display()))?;
        theirs.push(t.elapsed());
        if !out.status.success() {
            bail!("perf script failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        script = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let perf_app = script.split("\n\n").filter(|b| b.contains(&format!(" {APP_PID}/"))).count();
    let perf_managed = script
        .split("\n\n")
        .filter(|b| b.contains(&format!(" {APP_PID}/")) && b.contains(&format!("perf-{APP_PID}.map")))
        .count();

    let (o, t) = (median(&ours), median(&theirs));
    let rate = |d: Duration| samples as f64 / d.as_secs_f64();
    println!("unwind: {} ({samples} samples, {} of the .NET app)", data.display(), app.len());
    println!("  tracelab     {:>9.1} ms  {:>10.0} samples/s  app switch-outs reaching managed code: {ours_managed}", o.as_secs_f64() * 1e3, rate(o));
    println!("  perf script  {:>9.1} ms  {:>10.0} samples/s  app switch-outs reaching managed code: {perf_managed} (of {perf_app})", t.as_secs_f64() * 1e3, rate(t));
    println!("  ratio (perf script time / tracelab time): {:.2}x", t.as_secs_f64() / o.as_secs_f64());
    Ok(())
}
