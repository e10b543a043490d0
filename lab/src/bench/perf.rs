//! `cargo xtask bench perf [--input NAME|PERF.DATA …] [--binary PATH] [--runs N] [--record]`:
//! perf.data → folded stacks, tracelab against `perf script | inferno-collapse-perf` and against
//! `samply import`, on recordings that look like real use, each side a child process. tracelab's
//! side is what users run: `tracelab trace fold` — the installed binary given by `--binary`, else
//! the checkout's release build of it.
//!
//! Inputs (recorded on first use or with `--record` into `.build/bench/perf/NAME/`, git-ignored,
//! each with the app's perf map and pid): `framework-5k`, `framework-60k`, `framework-150k` — the
//! framework workload (System.Text.Json, Regex, LINQ: deep stacks in precompiled framework code) on
//! the host under `perf record -F 999 -g` for 4, 48 and 130 s (≈ 1.15 k samples a second) — and
//! `web`, the web-routes ASP.NET Core API under the loopback load generator for 30 s. Any other
//! recording is an input too, given by its path (`--input ~/app/perf.data`): its most-sampled
//! process is the app, whose perf map is looked for beside the file and in /tmp.
//!
//! Per input: a warm-up run of every side, then interleaved rounds (tracelab, inferno, samply;
//! A B C A B C …); min/median/max wall time, peak RSS per side (wait4), the ratios, the load; then
//! up to three interleaved cold rounds (page cache dropped before each side, tracelab's symbol
//! cache empty; needs root), medians compared. Then the
//! outputs are compared: the fold's stacks must be exactly the folding of the recording decoded
//! sample by sample with the fold's symbolizer, and each of those samples is compared frame by
//! frame with the same sample in `perf script`'s output (matched by thread and time); each
//! differing frame is classified: we name more, perf names more, we disagree (and a stack one
//! side has deeper); every difference is listed by kind, and one not in
//! lab/data/bench-known-differences.toml fails the bench when it is a disagreement (we disagree,
//! the fold differs from its own samples) — on a recording the list was not written for, frames
//! one side names and the other does not are listed, not fatal.
//! samply does less work than either: its import names JIT frames (perf maps) and leaves native
//! and ReadyToRun frames as addresses for its viewer to symbolize later; only its sample total is
//! compared.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Difference, Side, cargo_build_release, load_average, measured, print_table, ratio, report_differences, run_measured};
use harness::collect::perf::detect_perf_binary;
use model::merge_code_version;
use model::frame_label;
use stacks::{DecodeContext, Symbolizer};
use perfdata::PerfRecording;

/// Cold rounds at most (each drops the page cache three times).
const COLD_ROUNDS: usize = 3;

/// The recorded inputs: name, what runs, seconds.
pub const INPUTS: &[(&str, &str, u32)] =
    &[("framework-5k", "framework", 4), ("framework-60k", "framework", 48), ("framework-150k", "framework", 130), ("web", "web-routes", 30)];

/// One input of the bench: a recording it makes itself, or one given by its path.
#[derive(Clone, Debug)]
enum Input {
    Recorded { name: &'static str, app: &'static str, seconds: u32 },
    Given(PathBuf),
}

impl Input {
    /// A name of [`INPUTS`], or the path of an existing perf.data.
    fn parse(text: &str) -> Result<Input> {
        if let Some(&(name, app, seconds)) = INPUTS.iter().find(|i| i.0 == text) {
            return Ok(Input::Recorded { name, app, seconds });
        }
        let path = PathBuf::from(text);
        if path.is_file() {
            return Ok(Input::Given(std::path::absolute(&path)?));
        }
        bail!("no perf bench input `{text}`: one of {}, or the path of a perf.data", INPUTS.iter().map(|i| i.0).collect::<Vec<_>>().join(", "))
    }

    /// Where the bench keeps what it writes for this input (its outputs, the symbol cache; for a
    /// recorded input the recording too).
    fn work_dir(&self) -> PathBuf {
        let bench = harness::project_root().join(".build").join("bench").join("perf");
        match self {
            Input::Recorded { name, .. } => bench.join(name),
            Input::Given(path) => {
                let stem = path.file_stem().map_or("perf".into(), |s| s.to_string_lossy().into_owned());
                let parent = path.parent().and_then(|p| p.file_name()).map_or("given".into(), |s| s.to_string_lossy().into_owned());
                bench.join(format!("given-{parent}-{stem}"))
            }
        }
    }

    fn data(&self) -> PathBuf {
        match self {
            Input::Recorded { .. } => self.work_dir().join("perf.data"),
            Input::Given(path) => path.clone(),
        }
    }

    /// The goals of issue 33 hold on the framework recordings, of issue 21 on the largest.
    fn goals(&self) -> Goals {
        match self {
            Input::Recorded { name, app: "framework", .. } => Goals { samply: true, inferno: *name == "framework-150k" },
            _ => Goals { samply: false, inferno: false },
        }
    }
}

/// Which goals an input is held to.
#[derive(Clone, Copy)]
struct Goals {
    /// ≥ [`GOAL_SAMPLY`]× `samply import` warm, ≥ [`GOAL_SAMPLY_COLD`]× cold.
    samply: bool,
    /// ≥ [`GOAL_INFERNO`]× the inferno pipeline warm, ≥ [`GOAL_COLD`]× cold.
    inferno: bool,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Inputs by name (default: all of [`INPUTS`]).
    pub inputs: Vec<String>,
    /// Sampling frequency of the recordings.
    pub frequency: u32,
    /// Interleaved rounds.
    pub runs: usize,
    /// Record again even if a cached recording exists.
    pub rerecord: bool,
    /// The `tracelab` binary to time (`PATH trace fold`); default: the checkout's release build.
    pub binary: Option<PathBuf>,
}

/// The goals of issue 21 on the largest framework input (against the inferno pipeline) and of
/// issue 33 on every framework input (against samply: what users run, warm and cold).
const GOAL_INFERNO: f64 = 20.0;
const GOAL_SAMPLY: f64 = 3.0;
const GOAL_COLD: f64 = 10.0;
const GOAL_SAMPLY_COLD: f64 = 1.5;

pub fn run(opts: &Options) -> Result<()> {
    super::check_runs(opts.runs)?;
    let chosen: Vec<Input> = if opts.inputs.is_empty() {
        INPUTS.iter().map(|i| Input::parse(i.0)).collect::<Result<_>>()?
    } else {
        opts.inputs.iter().map(|n| Input::parse(n)).collect::<Result<_>>()?
    };
    let perf = detect_perf_binary().context("no `perf` on PATH: install linux-perf")?;
    // Record first: the recordings need only perf and .NET.
    for input in &chosen {
        if let Input::Recorded { app, seconds, .. } = input {
            let dir = input.work_dir();
            if opts.rerecord || !dir.join("perf.data").is_file() || !dir.join("pid.txt").is_file() {
                record(&perf, &dir, app, *seconds, opts.frequency)?;
            }
        }
    }
    if let crate::prereq::Outcome::Missing = crate::prereq::run(&crate::prereq::Plan::for_perf_bench(), false)? {
        bail!("the perf benchmark's peer tools are missing (commands above; as root `cargo xtask bench perf` installs them)");
    }
    let collapse = ensure_inferno()?;
    let samply = harness::host::environment::which("samply")
        .or_else(|| Some(cargo_bin("samply")).filter(|p| p.is_file()))
        .context("samply is not installed: `cargo install samply --locked`")?;
    let exe = match &opts.binary {
        Some(binary) => std::path::absolute(binary)?,
        None => {
            cargo_build_release(&["-p", "tracelab", "--bin", "tracelab"])?;
            harness::project_root().join("target/release/tracelab")
        }
    };
    let version = Command::new(&exe).arg("--version").output().with_context(|| format!("cannot run {}", exe.display()))?;
    if !version.status.success() {
        bail!("{} --version failed: is it tracelab?", exe.display());
    }
    println!("tracelab's side: `{} trace fold` ({})", exe.display(), String::from_utf8_lossy(&version.stdout).trim());
    let tools = Tools { perf, collapse, samply, exe };
    let mut failures = Vec::new();
    for input in chosen {
        let name = match &input {
            Input::Recorded { name, .. } => name.to_string(),
            Input::Given(path) => path.display().to_string(),
        };
        match &input {
            Input::Recorded { name, app, seconds } => println!("== {name} ({app}, {seconds} s)"),
            Input::Given(path) => println!("== {} (given)", path.display()),
        }
        if let Err(e) = bench_one(opts, &tools, &input) {
            println!("FAILED: {e:#}");
            failures.push(format!("{name}: {e:#}"));
        }
        println!();
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

struct Tools {
    perf: PathBuf,
    collapse: PathBuf,
    samply: PathBuf,
    exe: PathBuf,
}

/// Removes a copied perf map from /tmp when the bench ends (perf script and samply find JIT
/// names only in /tmp/perf-PID.map).
struct TmpMap(Option<PathBuf>);

impl Drop for TmpMap {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn drop_page_cache() -> Result<()> {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").context("dropping the page cache needs root (echo 3 > /proc/sys/vm/drop_caches)")
}

/// The app's pid in a recording: the one recorded beside it, else the most-sampled process.
fn app_pid(input: &Input, rec: &PerfRecording) -> Result<u32> {
    if let Input::Recorded { .. } = input {
        return Ok(std::fs::read_to_string(input.work_dir().join("pid.txt"))?.trim().parse()?);
    }
    let mut counts = std::collections::HashMap::<u32, usize>::new();
    for s in &rec.samples {
        *counts.entry(s.pid).or_default() += 1;
    }
    counts.into_iter().max_by_key(|&(pid, n)| (n, pid)).map(|(pid, _)| pid).context("the recording has no samples")
}

fn bench_one(opts: &Options, tools: &Tools, input: &Input) -> Result<()> {
    let dir = input.work_dir();
    std::fs::create_dir_all(&dir)?;
    let data = input.data();
    let rec = PerfRecording::read(&data)?;
    let pid = app_pid(input, &rec)?;
    let samples = rec.samples.len();
    drop(rec);
    // perf script and samply find JIT names only in /tmp/perf-PID.map: the map beside the
    // recording is copied there for the bench (and removed after).
    let tmp_map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    let beside = data.with_file_name(format!("perf-{pid}.map"));
    let _cleanup = if tmp_map.exists() || !beside.is_file() {
        if !tmp_map.exists() {
            println!("no perf map of pid {pid} beside the recording or in /tmp: every side leaves its JIT frames unnamed");
        }
        TmpMap(None)
    } else {
        std::fs::copy(&beside, &tmp_map)?;
        TmpMap(Some(tmp_map))
    };
    let goals = input.goals();
    let ours_out = dir.join("ours.folded");
    let peer_out = dir.join("peer.folded");
    let samply_out = dir.join("samply.json");
    let cache = dir.join("symbol-cache");
    let script = format!("{} script -i {} 2>/dev/null | {} > {}", tools.perf.display(), data.display(), tools.collapse.display(), peer_out.display());
    let run_ours = || -> Result<(super::ChildRun, String)> {
        let stderr = dir.join("ours.stderr");
        let run = run_measured(
            measured(Command::new(&tools.exe).args(["trace", "fold"]).arg(&data).arg("--out").arg(&ours_out).env("TRACELAB_CACHE_DIR", &cache))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr)?),
        )?;
        let stages = std::fs::read_to_string(&stderr).unwrap_or_default().trim().to_string();
        if !run.status.success() {
            bail!("{} failed: {stages}", tools.exe.display());
        }
        Ok((run, stages))
    };
    let run_peer = || -> Result<super::ChildRun> {
        let run = run_measured(&mut measured(Command::new("sh").arg("-c").arg(&script)))?;
        if !run.status.success() {
            bail!("`{script}` failed: {}", run.status);
        }
        Ok(run)
    };
    let run_samply = || -> Result<super::ChildRun> {
        let run = run_measured(
            measured(Command::new(&tools.samply).arg("import").arg(&data).args(["--save-only", "-o"]).arg(&samply_out))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        if !run.status.success() {
            bail!("samply import failed: {}", run.status);
        }
        Ok(run)
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let load_before = load_average();
    let _ = std::fs::remove_dir_all(&cache);
    let (_, first_stages) = run_ours()?;
    run_peer()?;
    run_samply()?;
    let mut ours = Side::new("tracelab trace fold");
    let mut peer = Side::new("perf script | inferno-collapse-perf");
    let mut sam = Side::new("samply import --save-only");
    let mut last_stages = String::new();
    for _ in 0..opts.runs {
        let (r, stages) = run_ours()?;
        ours.push(ms(r.wall), r.max_rss_kib);
        last_stages = stages;
        let r = run_peer()?;
        peer.push(ms(r.wall), r.max_rss_kib);
        let r = run_samply()?;
        sam.push(ms(r.wall), r.max_rss_kib);
    }
    let load_after = load_average();
    println!("recording: {} ({samples} samples, {:.1} MB)", data.display(), std::fs::metadata(&data)?.len() as f64 / 1e6);
    println!("{} interleaved rounds (tracelab, inferno, samply) after a warm-up run of each:", opts.runs);
    print_table(&[&ours, &peer, &sam], "ms");
    println!("  (a pipeline's RSS is its largest process's, perf or inferno-collapse-perf, not their sum)");
    let (r_inferno, t_inferno) = ratio(&ours, &peer, false);
    let (r_samply, t_samply) = ratio(&ours, &sam, false);
    let goal = |held: bool, r: f64, g: f64| if !held { String::new() } else if r >= g { format!(" (goal >= {g}x: met)") } else { format!(" (goal >= {g}x: NOT MET)") };
    println!("ratio inferno pipeline / tracelab: {t_inferno}{}", goal(goals.inferno, r_inferno, GOAL_INFERNO));
    println!("ratio samply import / tracelab:    {t_samply}{}", goal(goals.samply, r_samply, GOAL_SAMPLY));
    println!(
        "  (samply's import does less work: it names JIT frames from perf maps only; native, kernel and ReadyToRun frames stay addresses its viewer symbolizes later. tracelab names them all.)"
    );
    println!("tracelab, warm-up run: {first_stages}");
    println!("tracelab, last run:    {last_stages}");
    // Cold: page cache dropped before each side, tracelab's symbol cache empty; interleaved
    // rounds (one cold run swung by a third from one round to the next), medians compared.
    let cold_rounds = opts.runs.clamp(1, COLD_ROUNDS);
    let cold_round = || -> Result<[super::ChildRun; 3]> {
        let _ = std::fs::remove_dir_all(&cache);
        drop_page_cache()?;
        let (o, _) = run_ours()?;
        drop_page_cache()?;
        let p = run_peer()?;
        drop_page_cache()?;
        let s = run_samply()?;
        Ok([o, p, s])
    };
    match (0..cold_rounds).map(|_| cold_round()).collect::<Result<Vec<_>>>() {
        Ok(rounds) => {
            let mut ours = Side::new("tracelab trace fold");
            let mut peer = Side::new("perf script | inferno-collapse-perf");
            let mut sam = Side::new("samply import --save-only");
            for [o, p, s] in rounds {
                ours.push(ms(o.wall), o.max_rss_kib);
                peer.push(ms(p.wall), p.max_rss_kib);
                sam.push(ms(s.wall), s.max_rss_kib);
            }
            let (o, p, s) = (ours.summary().median, peer.summary().median, sam.summary().median);
            let (cold, cold_samply) = (p / o, s / o);
            let goal = |held: bool, r: f64, g: f64| match (held, r >= g) {
                (false, _) => String::new(),
                (true, true) => format!(", goal >= {g}x: met"),
                (true, false) => format!(", goal >= {g}x: NOT MET"),
            };
            println!(
                "cold (page cache dropped, tracelab's caches empty; median of {cold_rounds} interleaved rounds): tracelab {o:.1} ms, inferno pipeline {p:.1} ms ({cold:.1}x{}), samply {s:.1} ms ({cold_samply:.1}x{})",
                goal(goals.inferno, cold, GOAL_COLD),
                goal(goals.samply, cold_samply, GOAL_SAMPLY_COLD),
            );
            print_table(&[&ours, &peer, &sam], "ms");
        }
        Err(e) => println!("cold: not measured ({e:#})"),
    }
    println!("load average: {load_before} before, {load_after} after");
    compare_outputs(tools, &data, pid, &ours_out, &samply_out, samples as u64)
}

fn cargo_bin(name: &str) -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"));
    home.join("bin").join(name)
}

/// A folded file as (frames root first, count).
fn read_folded(path: &Path) -> Result<Vec<(Vec<String>, u64)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            Some((stack.split(';').map(String::from).collect(), n.parse().ok()?))
        })
        .collect())
}

/// One frame as both sides can be compared: code versions merged (`[OptimizedTier1]`), parameter
/// lists cut (inferno cuts them), perf's `[unknown]` / `[module]` and ours `[unknown] (dso)` all
/// unnamed (`None`).
fn canonical(frame: &str) -> Option<String> {
    // inferno writes a frame perf could not name as its module in brackets (`[libcoreclr.so]`).
    let module_only = frame.starts_with('[') && frame.ends_with(']') && !frame.contains(' ');
    // A function known only by its start (`libcoreclr.so!fn@0x63cd50`) has no symbol: perf
    // prints its module.
    let anonymous = frame.rsplit_once('!').is_some_and(|(_, f)| model::anonymous_function_start(f).is_some());
    if frame.starts_with("[unknown]") || module_only || anonymous {
        return None;
    }
    // perf prints a runtime stub as the perf map spells it (`stub CreateHelper<DynamicHelper>`),
    // our folded stacks by its kind (`stub<DynamicHelper>`): both sides get the kind's label.
    if let Some(kind) = model::stub_kind(frame) {
        return Some(format!("stub<{kind}>"));
    }
    // inferno tidies names: a parameter list is cut (`Framework::Main(string[])` → `Framework::Main`).
    let name = merge_code_version(frame);
    let name = match name.find('(') {
        Some(i) if i > 0 => &name[..i],
        _ => name,
    };
    // perf prints a JIT frame in the perf map's spelling (`instance class [System.Runtime]System.
    // Threading.Tasks.Task [Microsoft.AspNetCore.Http] Microsoft.AspNetCore.Http.
    // DefaultHttpResponse::StartAsync`), our folded stacks as their label
    // (`Microsoft.AspNetCore.Http.DefaultHttpResponse::StartAsync(…)`): both sides are given the
    // label of the method (with an empty parameter list, as inferno cut it), so only what the
    // method is can differ, not how it is spelled.
    if name.contains("::") {
        let label = model::method_label(&format!("{name}()")).into_owned();
        return Some(label.strip_suffix("()").unwrap_or(&label).to_string());
    }
    Some(name.to_string())
}

/// Sample-by-sample comparison with `perf script` on the same recording (the perf map in /tmp,
/// as for the timed pipeline). Our side is the fold's own naming, one sample at a time: the
/// recording decoded sample by sample, each frame named by the fold's symbolizer and labelled as
/// the fold labels it; first the fold's output must be exactly the folding of those samples,
/// then each sample is matched to perf's by thread and time (perf prints µs) and compared frame
/// by frame, leaf first, after [`canonical`]. Each differing frame is a difference — `we name
/// more` (perf: unknown), `perf names more` (ours: unknown) or `we disagree` — and a stack one
/// side has deeper is one too. Comparing stacks sample by sample leaves nothing to pair up: the
/// earlier comparison of folded stacks had to guess which of perf's stacks stood for which of
/// ours, and its guesses were differences of their own.
fn compare_outputs(tools: &Tools, data: &Path, pid: u32, ours_path: &Path, samply_json: &Path, samples: u64) -> Result<()> {
    let rec = PerfRecording::read(data)?;
    let dir = data.parent().unwrap_or(Path::new(".")).to_path_buf();
    let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = DecodeContext { artifacts: &dir, app_tmp_dir: &dir, host_pid: pid, target_pid: pid, path_map: &identity, symbol_dirs: &[] };
    let mut symbolizer = Symbolizer::new(&ctx, &rec)?;
    // As the fold names them: a recording of .NET's default (W^X on) runs its JIT code from a
    // memfd alias the perf map's addresses name. Without this, every such frame made the fold
    // "differ from its samples" on a corpus app's recording.
    symbolizer.set_name_doublemapped(true);
    stacks::preload_samples(&rec, &mut symbolizer);
    let stacks: Vec<Vec<u32>> =
        rec.samples.iter().map(|s| rec.frames(s).map(|f| symbolizer.frame_id(s.pid, f.addr, f.in_kernel)).collect()).collect();
    let mut diffs = Vec::new();

    // The fold's output is the folding of these samples, stack for stack, once OSR frames' lost
    // callers are completed as the fold completes them (perf's samples below are compared with
    // the stacks as recorded: perf script shows the Tier0 twin too).
    let mut completed = stacks.clone();
    let mut view: Vec<(u32, &mut [u32], u64)> = completed.iter_mut().zip(&rec.samples).map(|(ids, s)| (s.pid, ids.as_mut_slice(), 1)).collect();
    stacks::complete_osr_callers_interned(&mut view, &mut symbolizer);
    let from_samples = stacks::fold_interned(completed.iter().map(|s| (s.as_slice(), 1)), |id| frame_label(symbolizer.frame_by_id(id))).to_map();
    let folded: BTreeMap<String, u64> =
        read_folded(ours_path)?.into_iter().map(|(frames, n)| (frames.join(";"), n)).collect();
    for (stack, n) in &folded {
        if from_samples.get(stack) != Some(n) {
            diffs.push(Difference::new("fold differs from its samples", stack.as_str(), n, from_samples.get(stack).copied().unwrap_or(0)));
        }
    }
    for (stack, n) in from_samples.iter().filter(|(stack, _)| !folded.contains_key(*stack)) {
        diffs.push(Difference::new("fold differs from its samples", stack.as_str(), 0, n));
    }

    // perf's samples, streamed as perf writes them, each matched to ours by thread and time.
    let mut ours_at: std::collections::HashMap<(u32, u64), Vec<usize>> = Default::default();
    for (i, s) in rec.samples.iter().enumerate().rev() {
        ours_at.entry((s.tid, s.time_ns / 1000)).or_default().push(i);
    }
    let mut canon: Vec<Option<Option<String>>> = Vec::new();
    let mut canon_of = |id: u32| -> Option<String> {
        let i = id as usize;
        if canon.len() <= i {
            canon.resize(i + 1, None);
        }
        canon[i].get_or_insert_with(|| canonical(&frame_label(symbolizer.frame_by_id(id)))).clone()
    };
    let mut child = Command::new(&tools.perf)
        .args(["script", "-F", "comm,pid,tid,time,ip,sym,dso", "-i"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run perf script")?;
    let source = format!("perf script -i {}", data.display());
    let mut reader = stacks::ScriptReader::new(&source);
    let (mut compared, mut peer_total) = (0u64, 0u64);
    let mut compare = |theirs: stacks::ScriptSample, diffs: &mut Vec<Difference>| {
        peer_total += 1;
        let show = |frames: &[Option<String>]| frames.iter().rev().map(|f| f.as_deref().unwrap_or("[unknown]")).collect::<Vec<_>>().join(";");
        let perf_frames: Vec<Option<String>> = theirs.frames.iter().map(|f| f.symbol.as_deref().and_then(canonical)).collect();
        let Some(i) = theirs.tid.and_then(|tid| ours_at.get_mut(&(tid, theirs.time_us))).and_then(|v| v.pop()) else {
            diffs.push(Difference::coverage("sample only in perf's", show(&perf_frames), "-", format!("{:?} at {} µs", theirs.tid, theirs.time_us)));
            return;
        };
        compared += 1;
        let ours: Vec<Option<String>> = stacks[i].iter().map(|&id| canon_of(id)).collect();
        for ((o, p), id) in ours.iter().zip(&perf_frames).zip(&stacks[i]) {
            match (o, p) {
                // The key names the image too: the known difference is about the ReadyToRun
                // images (.dll), and must not cover a frame named more anywhere else.
                (Some(o), None) => {
                    let image = symbolizer.frame_by_id(*id).dso.as_deref().map_or("?", model::dso_file);
                    diffs.push(Difference::coverage("we name more", format!("{o} (in {image})"), o, "[unknown]"))
                }
                (None, Some(p)) => diffs.push(Difference::coverage("perf names more", p.as_str(), "[unknown]", p)),
                (Some(o), Some(p)) if o != p => diffs.push(Difference::new("we disagree", format!("{o} | {p}"), o, p)),
                _ => {}
            }
        }
        if ours.len() != perf_frames.len() {
            let kind = if ours.len() > perf_frames.len() { "our stack is deeper" } else { "perf's stack is deeper" };
            diffs.push(Difference::coverage(kind, format!("{} | {}", show(&ours), show(&perf_frames)), show(&ours), show(&perf_frames)));
        }
    };
    let stdout = child.stdout.take().context("perf script's output")?;
    for line in std::io::BufReader::new(stdout).lines() {
        if let Some(sample) = reader.line(&line.with_context(|| format!("reading {source}"))?)? {
            compare(sample, &mut diffs);
        }
    }
    if let Some(sample) = reader.finish() {
        compare(sample, &mut diffs);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`{source}` failed: {status}");
    }
    let unmatched: u64 = ours_at.values().map(|v| v.len() as u64).sum();
    if unmatched > 0 {
        diffs.push(Difference::coverage("sample only in ours", format!("{unmatched} samples"), unmatched, 0));
    }
    // Differences are counted per distinct frame (a frame differs in many samples).
    let mut merged: BTreeMap<(String, String), Difference> = BTreeMap::new();
    for d in diffs {
        merged.entry((d.kind.clone(), d.key.clone())).or_insert(d);
    }
    let diffs: Vec<Difference> = merged.into_values().collect();
    let samply_total = samply_samples(samply_json).unwrap_or(0);
    println!("samply: {samply_total} samples in its profile (recording: {samples})");
    report_differences(
        "perf",
        &format!("{compared} of {} samples matched to perf script's {peer_total} by thread and time, frame by frame; the fold's {} stacks against those samples", rec.samples.len(), folded.len()),
        &diffs,
    )
}

/// Samples in a Firefox Profiler processed profile as `samply import` saves it.
fn samply_samples(path: &Path) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_reader(std::io::BufReader::new(std::fs::File::open(path).ok()?)).ok()?;
    Some(
        v["threads"]
            .as_array()?
            .iter()
            .map(|t| t["samples"]["length"].as_u64().or_else(|| t["samples"]["stack"].as_array().map(|a| a.len() as u64)).unwrap_or(0))
            .sum(),
    )
}

fn ensure_inferno() -> Result<PathBuf> {
    if let Some(p) = harness::host::environment::which("inferno-collapse-perf") {
        return Ok(p);
    }
    let installed = cargo_bin("inferno-collapse-perf");
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

fn record(perf: &Path, dir: &Path, app: &str, seconds: u32, frequency: u32) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    let built = harness::workload::build_named(&dotnet, app, false)?;
    let data = dir.join("perf.data");
    let partial = dir.join("perf.data.partial");
    let web = app == "web-routes";
    println!("recording {app} for {seconds} s at {frequency} Hz{} into {} …", if web { " under loopback load" } else { "" }, data.display());
    let mut cmd = Command::new(perf);
    cmd.args(["record", "--no-buildid-cache", "-k", "1", "-g", "-e", "cpu-clock", "-F"])
        .arg(frequency.to_string())
        .arg("-o")
        .arg(&partial)
        .arg("--")
        .arg(&dotnet.dotnet)
        .arg(&built.dll)
        .env("DOTNET_ROOT", &dotnet.root)
        .env("DOTNET_PerfMapEnabled", "1")
        .env("DOTNET_EnableWriteXorExecute", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if web {
        // Serves until the load ends and `GET /stop`; --seconds only bounds a run gone wrong.
        cmd.args(["--seconds", &(seconds + 60).to_string(), "--port", "0", "--cpu-ms", "20", "--blocked-ms", "20"]);
    } else {
        cmd.args(["--seconds", &seconds.to_string()]);
    }
    let mut child = cmd.spawn().context("cannot run perf record")?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    if web {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut url = None;
        while Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    if let Some(u) = line.strip_prefix("TRACELAB LISTENING ") {
                        url = Some(u.trim().to_string());
                    }
                    if line.starts_with("TRACELAB READY") {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => break,
            }
        }
        let Some(url) = url else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("web-routes printed no `TRACELAB LISTENING` line within 120 s");
        };
        let host_port = harness::run::load::loopback_host_port(&url)?;
        let mut config = loadgen::Config::new(&host_port, vec!["/cpu".parse()?, "/blocked".parse()?])?;
        config.connections_per_route = 4;
        config.duration = Duration::from_secs(u64::from(seconds));
        let report = loadgen::run(&config).context("the load generator failed")?;
        println!("load: {}", serde_json::to_string(&report)?);
        let mut stop = loadgen::Config::new(&host_port, vec!["/stop".parse()?])?;
        stop.max_requests_per_route = Some(1);
        stop.duration = Duration::from_secs(5);
        let _ = loadgen::run(&stop);
    }
    let out = child.wait_with_output()?;
    let _ = reader.join();
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "perf record failed ({}): {}",
            out.status,
            harness::collect::perf::explain_perf_failure(&String::from_utf8_lossy(&out.stderr))
        );
    }
    let rec = PerfRecording::read(&partial)?;
    let mut counts = std::collections::HashMap::<u32, usize>::new();
    for s in &rec.samples {
        *counts.entry(s.pid).or_default() += 1;
    }
    let (pid, n) = counts.into_iter().max_by_key(|(_, n)| *n).context("the recording has no samples")?;
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::copy(&map, dir.join(format!("perf-{pid}.map"))).with_context(|| format!("the app wrote no {}", map.display()))?;
    // The app's perf map, perfinfo, jitdump and diagnostic sockets are ours to remove: nothing
    // left in /tmp (the jitdump was left behind before).
    for file in harness::host::runtime_files::runtime_files(pid, Path::new("/tmp")) {
        let _ = std::fs::remove_file(file);
    }
    std::fs::write(dir.join("pid.txt"), pid.to_string())?;
    std::fs::rename(&partial, &data)?;
    println!("recorded {} samples of the app ({} in all)", n, rec.samples.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Input, canonical};

    /// A recorded input by name, any existing file by its path (held to no goal), anything else
    /// refused with the names there are.
    #[test]
    fn inputs_are_names_or_recordings_given_by_path() {
        assert!(matches!(Input::parse("framework-5k").unwrap(), Input::Recorded { name: "framework-5k", seconds: 4, .. }));
        assert!(Input::parse("framework-150k").unwrap().goals().inferno);
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("perf.data");
        std::fs::write(&data, b"").unwrap();
        let given = Input::parse(data.to_str().unwrap()).unwrap();
        assert!(matches!(&given, Input::Given(p) if *p == data));
        assert_eq!(given.data(), data);
        assert!(!given.goals().samply && !given.goals().inferno);
        let err = Input::parse("framework-3s").unwrap_err().to_string();
        assert!(err.contains("framework-5k, framework-60k, framework-150k, web") && err.contains("path of a perf.data"), "{err}");
    }

    /// perf's spelling of a JIT frame (the perf map's, parameters cut by inferno) and our folded
    /// label of the same method compare equal; unnamed frames of either side are `None`.
    #[test]
    fn a_stub_compares_by_its_kind() {
        assert_eq!(canonical("stub CreateHelper<DynamicHelper>"), canonical("stub<DynamicHelper>"));
        assert_eq!(canonical("stub Link<DelegateShuffleThunk>").as_deref(), Some("stub<DelegateShuffleThunk>"));
    }

    #[test]
    fn both_spellings_of_a_method_compare_equal() {
        let peer = "instance class [System.Runtime]System.Threading.Tasks.Task [Microsoft.AspNetCore.Http] Microsoft.AspNetCore.Http.DefaultHttpResponse::StartAsync";
        let ours = "Microsoft.AspNetCore.Http.DefaultHttpResponse::StartAsync(class [System.Runtime]System.Threading.CancellationToken)";
        assert_eq!(canonical(peer), canonical(ours));
        assert_eq!(canonical(peer).as_deref(), Some("Microsoft.AspNetCore.Http.DefaultHttpResponse::StartAsync"));
        assert_eq!(canonical("string [web-routes] Tracelab.Workloads.WebRoutes::Measure[OptimizedTier1]"), canonical("Tracelab.Workloads.WebRoutes::Measure(int32)"));
        assert_ne!(canonical(peer), canonical("Microsoft.AspNetCore.Http.DefaultHttpResponse::get_Headers()"));
        assert_eq!(canonical("__schedule").as_deref(), Some("__schedule"));
        assert_eq!(canonical("[libcoreclr.so]"), None);
        assert_eq!(canonical("[unknown] (libcoreclr.so)"), None);
        assert_eq!(canonical("libcoreclr.so!fn@0x63cd50"), None);
    }
}
