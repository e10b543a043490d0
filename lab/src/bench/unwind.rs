//! `cargo xtask bench unwind`: unwinding perf's sampled user stacks (`--call-graph dwarf`),
//! tracelab's unwinder (the release build of harness's `unwind-fixture` example, [`unwind_main`])
//! against `perf script` (perf's own DWARF unwinding) on the same recording, each a child
//! process, in interleaved rounds after a warm-up run of each: min/median/max, peak RSS, the
//! ratio, the load. Then sample by sample (by time): which of the .NET app's switch-outs each
//! side follows into managed code; a sample only one side reaches is a difference, failing the
//! bench unless listed in lab/data/bench-known-differences.toml.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::{Difference, Side, cargo_build_release, load_average, measured, print_table, ratio, report_differences, run_measured};
use model::DsoClass;
use stacks::{StackUnwinder, UnwindOptions, UnwoundSample, unwind_perf_data_with};

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
pub fn fixture_options(fixtures: &Path, dotnet: &harness::host::dotnet::Dotnet) -> UnwindOptions<'static> {
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

/// `unwind-fixture [OUT]`: unwinds the off-CPU fixture (what [`run`] times) and writes, one a
/// line, the time (µs) of each of the app's switch-outs that reaches managed code; prints the
/// sample counts on stderr.
pub fn unwind_main(args: &[String]) -> Result<()> {
    let fixtures = harness::shared_dir().join("fixtures/perf");
    let data = fixtures.join("perf-offcpu-dwarf.data");
    let dotnet = harness::host::dotnet::Dotnet::locate_with(&harness::host::dotnet::Search::from_env())?;
    let u = unwind_perf_data_with(&data, &mut StackUnwinder::new(fixture_options(&fixtures, &dotnet)))?;
    let app: Vec<_> = u.samples.iter().filter(|s| s.pid == APP_PID && s.sched_switch.is_some()).collect();
    let managed: Vec<_> = app
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.class == DsoClass::Jit && f.name.as_deref().is_some_and(|n| !n.starts_with("stub "))))
        .collect();
    if let Some(out) = args.first() {
        // `µs<TAB>leaf <- … <- root`: the bench shows our stack beside perf's for a difference.
        let line = |s: &&&UnwoundSample| {
            let frames: Vec<String> = s.frames.iter().map(|f| format!("{} ({})", f.name.as_deref().unwrap_or("[unknown]"), f.dso.as_deref().unwrap_or("?"))).collect();
            format!("{}\t{}\n", s.time_ns / 1000, frames.join(" <- "))
        };
        std::fs::write(out, managed.iter().map(line).collect::<String>())?;
    }
    eprintln!("{} samples, {} of the app, {} reaching managed code", u.samples.len(), app.len(), managed.len());
    Ok(())
}

pub fn run(opts: &Options) -> Result<()> {
    super::check_runs(opts.runs)?;
    let fixtures = harness::shared_dir().join("fixtures/perf");
    let data = fixtures.join("perf-offcpu-dwarf.data");
    if !data.is_file() {
        bail!("{} is missing (../shared/fixtures)", data.display());
    }
    let perf = harness::collect::perf::detect_perf_binary().context("no `perf` on PATH: install linux-perf")?;
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    let map = fixtures.join(format!("perf-offcpu-dwarf.perf-{APP_PID}.map"));
    // perf script finds JIT names only in /tmp/perf-PID.map: copied there for the bench, removed after.
    let tmp_map = PathBuf::from(format!("/tmp/perf-{APP_PID}.map"));
    let copied = !tmp_map.is_file();
    if copied {
        std::fs::copy(&map, &tmp_map).with_context(|| format!("could not copy {} to /tmp", map.display()))?;
    }
    // perf reads the images at their recorded paths: the runtime's folder of the recording
    // machine (/usr/share/dotnet) is this machine's SDK, given to perf through a symfs of links,
    // as our unwinder is given the same folders (fixture_options). Without it perf stopped at the
    // first libcoreclr frame, an unfair peer. (The perf map is read from /tmp, not the symfs.)
    let symfs = tempfile::Builder::new().prefix("tracelab-unwind-symfs-").tempdir()?;
    std::fs::create_dir_all(symfs.path().join("usr/share"))?;
    std::os::unix::fs::symlink(&dotnet.root, symfs.path().join("usr/share/dotnet"))?;
    std::os::unix::fs::symlink("/usr/lib", symfs.path().join("usr/lib"))?;
    let result = bench(opts, &perf, &data, symfs.path());
    if copied {
        let _ = std::fs::remove_file(&tmp_map);
    }
    result
}

/// Where perf's unwinding of a sample ended, by its last frame's image: a ReadyToRun `.dll`
/// (perf has no unwind information for precompiled managed code: it is in the image's R2R
/// runtime-functions table, not in an .eh_frame), an inlined frame, or the file itself.
fn perf_stop(block: &str) -> String {
    let last = block.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let dso = last.rsplit_once('(').map(|(_, d)| d.trim_end_matches(')')).unwrap_or("");
    let file = dso.rsplit('/').next().unwrap_or(dso);
    if dso == "inlined" {
        // perf prints a frame inlined into its caller without an image: name the function.
        format!("an inlined frame (`{}`)", last.split_whitespace().nth(1).unwrap_or("?"))
    } else if file.ends_with(".dll") {
        "a ReadyToRun image".to_string()
    } else if file.is_empty() {
        format!("`{}`", last.trim())
    } else {
        file.to_string()
    }
}

fn bench(opts: &Options, perf: &Path, data: &Path, symfs: &Path) -> Result<()> {
    cargo_build_release(&["-p", "lab", "--example", "unwind-fixture"])?;
    let exe = harness::project_root().join("target/release/examples/unwind-fixture");
    let dir = harness::project_root().join(".build/bench/unwind");
    std::fs::create_dir_all(&dir)?;
    let ours_out = dir.join("ours-managed.txt");
    let script_out = dir.join("perf-script.txt");
    let run_ours = || -> Result<(super::ChildRun, String)> {
        let err = dir.join("ours.stderr");
        let r = run_measured(measured(Command::new(&exe).arg(&ours_out)).stdout(Stdio::null()).stderr(std::fs::File::create(&err)?))?;
        let text = std::fs::read_to_string(&err).unwrap_or_default().trim().to_string();
        if !r.status.success() {
            bail!("{} failed: {text}", exe.display());
        }
        Ok((r, text))
    };
    let run_perf = || -> Result<super::ChildRun> {
        let r = run_measured(
            measured(Command::new(perf).arg("script").arg("--symfs").arg(symfs).args(["-F", "comm,pid,tid,time,event,ip,sym,dso", "-i"]).arg(data))
                .stdout(std::fs::File::create(&script_out)?)
                .stderr(Stdio::null()),
        )?;
        if !r.status.success() {
            bail!("perf script failed: {}", r.status);
        }
        Ok(r)
    };
    let load_before = load_average();
    let (_, counts) = run_ours()?;
    run_perf()?;
    let mut ours = Side::new("tracelab unwinder (release)");
    let mut peer = Side::new("perf script (DWARF unwinding)");
    let ms = |r: &super::ChildRun| r.wall.as_secs_f64() * 1e3;
    for _ in 0..opts.runs {
        let (r, _) = run_ours()?;
        ours.push(ms(&r), r.max_rss_kib);
        let r = run_perf()?;
        peer.push(ms(&r), r.max_rss_kib);
    }
    let load_after = load_average();
    println!("unwind: {} ({counts})", data.display());
    println!("{} interleaved rounds after a warm-up run of each:", opts.runs);
    print_table(&[&ours, &peer], "ms");
    let (_, text) = ratio(&ours, &peer, false);
    println!("ratio perf script / tracelab: {text}");
    println!("load average: {load_before} before, {load_after} after");
    // Sample by sample: the app's switch-outs each side follows into managed code (perf: its
    // callchain has a frame from the app's perf map).
    let script = std::fs::read_to_string(&script_out)?;
    let mut perf_managed = BTreeSet::new();
    let mut perf_stops = std::collections::BTreeMap::new();
    let mut perf_stacks = std::collections::BTreeMap::new();
    let mut perf_app = 0;
    for block in script.split("\n\n").filter(|b| b.contains(&format!(" {APP_PID}/"))) {
        perf_app += 1;
        // `comm pid/tid time: event:` — the time is seconds with µs.
        let time = block.split_whitespace().find(|w| w.ends_with(':') && w.contains('.')).and_then(|w| w.trim_end_matches(':').parse::<f64>().ok());
        let Some(t) = time.map(|t| (t * 1e6).round() as u64) else { continue };
        let frames: Vec<&str> = block.lines().skip(1).map(str::trim).filter(|l| !l.is_empty()).collect();
        perf_stacks.insert(t, frames.join(" <- "));
        if block.contains(&format!("perf-{APP_PID}.map")) {
            perf_managed.insert(t);
        } else {
            perf_stops.insert(t, perf_stop(block));
        }
    }
    let ours_stacks: std::collections::BTreeMap<u64, String> = std::fs::read_to_string(&ours_out)?
        .lines()
        .filter_map(|l| {
            let (t, stack) = l.split_once('\t').unwrap_or((l, ""));
            Some((t.trim().parse().ok()?, stack.to_string()))
        })
        .collect();
    let ours_managed: BTreeSet<u64> = ours_stacks.keys().copied().collect();
    let stacks = |t: &u64| {
        let get = |m: &std::collections::BTreeMap<u64, String>| m.get(t).cloned().unwrap_or_default();
        (get(&ours_stacks), get(&perf_stacks))
    };
    println!("the app's switch-outs reaching managed code: tracelab {}, perf script {} (of {perf_app})", ours_managed.len(), perf_managed.len());
    let mut diffs = Vec::new();
    for t in ours_managed.difference(&perf_managed) {
        let stop = perf_stops.get(t).map_or("?", String::as_str);
        let (ours, peer) = stacks(t);
        diffs.push(Difference::coverage(&format!("only we reach managed code; perf stops in {stop}"), format!("sample at {t} µs"), ours, peer));
    }
    for t in perf_managed.difference(&ours_managed) {
        let (ours, peer) = stacks(t);
        diffs.push(Difference::coverage("only perf reaches managed code", format!("sample at {t} µs"), ours, peer));
    }
    let _ = std::fs::remove_file(&script_out);
    report_differences("unwind", &format!("{perf_app} samples of the app, by time"), &diffs)
}

#[cfg(test)]
mod tests {
    use super::perf_stop;

    /// Blocks as `perf script -F comm,pid,tid,time,event,ip,sym,dso` printed them for the
    /// off-CPU fixture (../shared/fixtures/perf/perf-offcpu-dwarf.data, with --symfs).
    #[test]
    fn perf_stops_are_named_by_the_last_frames_image() {
        let r2r = "dotnet 28884/28884  3786.509246: sched:sched_switch: \n\t 5fa4af [unknown] (/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.12/libcoreclr.so)\n\t 877f [unknown] (/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.12/System.Console.dll)";
        assert_eq!(perf_stop(r2r), "a ReadyToRun image");
        let libc = "dotnet 28884/28884  3786.520681: sched:sched_switch: \n\t 85f16 __futex_abstimed_wait_common (/usr/lib/x86_64-linux-gnu/libc.so.6)\n";
        assert_eq!(perf_stop(libc), "libc.so.6");
        let inlined = "dotnet 28884/28884  3786.493515: sched:sched_switch: \n\tffffffff81000c82 [unknown] ([kernel.kallsyms])\n\t 222a3 index (inlined)";
        assert_eq!(perf_stop(inlined), "an inlined frame (`index`)");
    }
}
