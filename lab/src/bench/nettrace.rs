//! `cargo xtask bench nettrace [--trace FILE] [--sizes 5,50,250] [--runs N] [--record]`: decodes
//! nettrace files with our decoder (crates/eventpipe's `nettrace bench`, release build) and with
//! the reference TraceEvent program (../shared/reference/TraceDump `bench`, built from a copy),
//! each a child process, in interleaved rounds (ours parse-only, ours full decode, TraceEvent; A B
//! C A B C …) after a warm-up round of all three. Every child makes W passes over the file and
//! reports its last: W − 1 in-process warm-up passes let TraceEvent's JIT tier up (≥ 100 MB read
//! before the measured pass, W ≤ 20). Prints min/median/max of events per second, peak RSS of each
//! child, the ratios and the load; then compares the outputs (event counts per provider/id, lost
//! events, GCStart payloads, exceptions by type and message, SampleProfiler samples, top leaf
//! frames) with TraceDump `summary` and fails on a difference not in
//! lab/data/bench-known-differences.toml.
//!
//! Without `--trace`, the inputs are `.build/bench/nettrace/{5,50,250}MB.nettrace` (git-ignored),
//! recorded on first use (or with `--record`) by our own IPC client: FixtureApp `cpu,gc,exceptions`
//! repeated (×8 per 5 MB) under SampleProfiler + runtime GC (Verbose) + exceptions + the default
//! runtime keywords, with rundown.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::{Difference, Side, cargo_build_release, load_average, measured, print_table, ratio, report_differences, run_measured};
use harness::collect::eventpipe::{DEFAULT_RUNTIME_KEYWORDS, Provider, RUNTIME, SAMPLE_PROFILER, SessionConfig, record_app};
use harness::host::dotnet::Dotnet;
use crate::apps::fixture_app;

#[derive(Clone, Debug)]
pub struct Options {
    /// A .nettrace file to decode (default: the recorded benchmark traces of `sizes`).
    pub trace: Option<PathBuf>,
    /// Sizes of the recorded inputs, MB.
    pub sizes: Vec<u32>,
    /// Interleaved rounds.
    pub runs: usize,
    /// Record the default traces again.
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

fn record(dotnet: &Dotnet, out: &Path, size_mb: u32) -> Result<()> {
    let work = harness::project_root().join(".build").join("bench").join("fixture-app");
    let dll = fixture_app::build(dotnet, &work)?;
    let repeats = (size_mb as usize * 8).div_ceil(5).max(1);
    let phases = vec!["cpu,gc,exceptions"; repeats].join(",");
    let config = SessionConfig {
        providers: vec![
            Provider::new(SAMPLE_PROFILER, 0xF000_0000_0000, 5),
            Provider::new(RUNTIME, DEFAULT_RUNTIME_KEYWORDS | 0x1 | 0x8000, 5),
        ],
        ..SessionConfig::default()
    };
    harness::host::progress::note("bench", &format!("recording {} (FixtureApp `cpu,gc,exceptions` ×{repeats}) …", out.display()));
    let partial = out.with_extension("partial");
    let bytes = record_app(&dotnet.dotnet, &dll, &[phases, "1".into()], "FIXTURE READY", &config, &partial)?;
    std::fs::rename(&partial, out)?;
    harness::host::progress::note("bench", &format!("recorded {:.1} MB", bytes as f64 / 1e6));
    Ok(())
}

fn build_tracedump(dotnet: &Dotnet, dir: &Path) -> Result<PathBuf> {
    let dll = dir.join("out").join("TraceDump.dll");
    if dll.is_file() {
        return Ok(dll);
    }
    let src = harness::shared_dir().join("reference").join("TraceDump");
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
    super::check_runs(opts.runs)?;
    let bench_dir = harness::project_root().join(".build").join("bench").join("nettrace");
    std::fs::create_dir_all(&bench_dir)?;
    let dotnet = Dotnet::locate_or_install()?;
    let traces: Vec<PathBuf> = match &opts.trace {
        Some(t) => vec![t.clone()],
        None => {
            let mut v = Vec::new();
            for &mb in &opts.sizes {
                let t = bench_dir.join(format!("{mb}MB.nettrace"));
                if opts.record || !t.is_file() {
                    record(&dotnet, &t, mb)?;
                }
                v.push(t);
            }
            v
        }
    };
    harness::host::progress::note("build", "the release decoder and TraceDump …");
    cargo_build_release(&["-p", "eventpipe", "--bin", "nettrace"])?;
    let ours_exe = harness::project_root().join("target").join("release").join("nettrace");
    let tracedump = build_tracedump(&dotnet, &harness::project_root().join(".build").join("bench").join("tracedump"))?;
    let mut failures = Vec::new();
    for trace in &traces {
        if let Err(e) = bench_one(opts, &dotnet, &ours_exe, &tracedump, trace) {
            println!("FAILED: {e:#}");
            failures.push(format!("{}: {e:#}", trace.display()));
        }
        println!();
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

fn bench_one(opts: &Options, dotnet: &Dotnet, ours_exe: &Path, tracedump: &Path, trace: &Path) -> Result<()> {
    let size = std::fs::metadata(trace).with_context(|| format!("{}", trace.display()))?.len();
    let mb = size as f64 / 1e6;
    // Passes per child: the last is measured, the ones before warm the process (TraceEvent's JIT).
    let passes = ((100.0 / mb).ceil() as usize + 1).clamp(2, 20);
    let passes_arg = passes.to_string();
    let run_child = |cmd: &mut Command, prefix: &str, who: &str| -> Result<(u64, f64, u64)> {
        let out_path = trace.with_extension(format!("{who}.out"));
        let run = run_measured(measured(cmd).stdout(std::fs::File::create(&out_path)?).stderr(Stdio::null()))?;
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let _ = std::fs::remove_file(&out_path);
        if !run.status.success() {
            bail!("{who} failed ({}): {text}", run.status);
        }
        let runs = parse_runs(&text, prefix);
        let &(events, rate) = runs.last().with_context(|| format!("{who} printed no `{prefix}` line: {text}"))?;
        Ok((events, rate, run.max_rss_kib))
    };
    let ours = |mode: &str| -> Result<(u64, f64, u64)> {
        run_child(Command::new(ours_exe).arg("bench").arg(trace).arg(&passes_arg).arg(mode), &format!("{mode} run"), mode)
    };
    let peer = || -> Result<(u64, f64, u64)> {
        run_child(dotnet.command().arg(tracedump).arg("bench").arg(trace).arg(&passes_arg), "run", "traceevent")
    };
    let load_before = load_average();
    // Warm-up round: page cache, and every binary once.
    let (events, _, _) = ours("frames")?;
    ours("full")?;
    let (peer_events, _, _) = peer()?;
    let mut frames = Side::new("eventpipe parse-only (headers, stacks)");
    let mut full = Side::new("eventpipe full decode (payloads, stacks)");
    let mut te = Side::new("TraceEvent 4.0.0, no-op callback");
    for _ in 0..opts.runs {
        let (_, r, rss) = ours("frames")?;
        frames.push(r / 1e6, rss);
        let (_, r, rss) = ours("full")?;
        full.push(r / 1e6, rss);
        let (_, r, rss) = peer()?;
        te.push(r / 1e6, rss);
    }
    let load_after = load_average();
    println!("input: {} ({mb:.1} MB, {events} events; TraceEvent counted {peer_events})", trace.display());
    println!("{} interleaved rounds after a warm-up round; each child makes {passes} passes, the last measured:", opts.runs);
    print_table(&[&frames, &full, &te], "M ev/s");
    let (parse_ratio, parse_text) = ratio(&frames, &te, true);
    let (full_ratio, full_text) = ratio(&full, &te, true);
    println!("ratio parse-only / TraceEvent: {parse_text} (goal >= 10x){}", if parse_ratio < 10.0 { "  BELOW GOAL" } else { "" });
    println!("ratio full decode / TraceEvent: {full_text} (goal >= 3x){}", if full_ratio < 3.0 { "  BELOW GOAL" } else { "" });
    println!("  (TraceEvent's callback does nothing: it parses headers and hands out events with payloads undecoded)");
    println!("load average: {load_before} before, {load_after} after");
    compare(dotnet, tracedump, trace)
}

/// TraceEvent's provider key: its name, or `Provider(guid)` for providers it has no name for.
fn traceevent_provider(provider: &str) -> String {
    match provider {
        "Microsoft-DotNETCore-SampleProfiler" => "Provider(3c530d44-97ae-513a-1e6d-783e8f8e03a9)".into(),
        "Microsoft-DotNETCore-EventPipe" => "Provider(92f528a6-f5b8-5160-a7ee-b33da7739e29)".into(),
        other => other.into(),
    }
}

const GC_REASONS: [&str; 14] = [
    "AllocSmall", "Induced", "LowMemory", "Empty", "AllocLarge", "OutOfSpaceSOH", "OutOfSpaceLOH", "InducedNotForced", "Internal",
    "InducedLowMemory", "InducedCompacting", "LowMemoryHost", "PMFullGC", "LowMemoryHostBlocking",
];
const GC_TYPES: [&str; 3] = ["NonConcurrentGC", "BackgroundGC", "ForegroundGC"];

/// Our streaming full decode against TraceDump `summary` (TraceEvent 4.0.0 and its TraceLog for
/// stacks), item by item.
fn compare(dotnet: &Dotnet, tracedump: &Path, trace: &Path) -> Result<()> {
    let json_path = trace.with_extension("tracedump.json");
    let fresh = |p: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(p), m(trace)), (Some(a), Some(b)) if a >= b)
    };
    if !fresh(&json_path) {
        // TraceDump writes its .etlx into the temp folder: point it at ours, not /tmp.
        let tmp = trace.parent().unwrap_or(Path::new(".")).join("tracedump-tmp");
        std::fs::create_dir_all(&tmp)?;
        let out = dotnet.command().arg(tracedump).arg("summary").arg(trace).arg(&json_path).env("TMPDIR", &tmp).output()?;
        let _ = std::fs::remove_dir_all(&tmp);
        if !out.status.success() {
            bail!("TraceDump summary failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json_path)?)?;
    let file = std::fs::File::open(trace)?;
    let f = eventpipe::NettraceReader::from_file(file).and_then(eventpipe::inspect::full).with_context(|| format!("decoding {}", trace.display()))?;
    let d = &f.decoded;
    let mut diffs = Vec::new();
    let mut compared = 0usize;
    // Event counts per provider/id.
    let ours: std::collections::BTreeMap<String, u64> =
        d.counts.iter().map(|((p, id), c)| (format!("{}/{id}", traceevent_provider(p)), c.count)).collect();
    let peer: std::collections::BTreeMap<String, u64> =
        g["counts"].as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect()).unwrap_or_default();
    for k in ours.keys().chain(peer.keys()).collect::<std::collections::BTreeSet<_>>() {
        compared += 1;
        let (a, b) = (ours.get(k).copied().unwrap_or(0), peer.get(k).copied().unwrap_or(0));
        if a != b {
            diffs.push(Difference::new("event count", k.as_str(), a, b));
        }
    }
    let mut same = |kind: &str, key: &str, a: u64, b: Option<u64>| {
        compared += 1;
        if Some(a) != b {
            diffs.push(Difference::new(kind, key, a, b.map_or("absent".to_string(), |b| b.to_string())));
        }
    };
    same("lost events", "EventsLost", d.stats.lost_events, g["meta"]["EventsLost"].as_u64());
    same("trace info", "PointerSize", u64::from(d.info.pointer_size), g["meta"]["PointerSize"].as_u64());
    same("trace info", "NumberOfProcessors", u64::from(d.info.processor_count), g["meta"]["NumberOfProcessors"].as_u64());
    same("GCStart", "count", f.gc_starts, g["gc_starts"].as_u64());
    let sp = &g["sample_profiler"];
    same("samples", "managed", f.samples.managed, sp["managed"].as_u64());
    same("samples", "external", f.samples.external, sp["external"].as_u64());
    same("samples", "with stacks", f.samples.with_stacks(), sp["with_stacks"].as_u64());
    let empty = Vec::new();
    for (i, theirs) in g["gc_start_detail"].as_array().unwrap_or(&empty).iter().enumerate() {
        compared += 1;
        let peer = (
            theirs["Count"].as_u64(),
            theirs["Depth"].as_u64(),
            theirs["Reason"].as_str().and_then(|r| GC_REASONS.iter().position(|x| *x == r)).map(|p| p as u64),
            theirs["Type"].as_str().and_then(|r| GC_TYPES.iter().position(|x| *x == r)).map(|p| p as u64),
        );
        let ours = f.gc_start_detail.get(i).map(|o| (Some(o.count), Some(o.depth), Some(o.reason), Some(o.kind)));
        if ours != Some(peer) {
            diffs.push(Difference::new("GCStart payload", format!("GCStart #{i}"), format!("{ours:?}"), format!("{peer:?}")));
        }
    }
    let peer_ex: std::collections::BTreeMap<String, u64> =
        g["exceptions"].as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect()).unwrap_or_default();
    for k in f.exceptions.keys().chain(peer_ex.keys()).collect::<std::collections::BTreeSet<_>>() {
        compared += 1;
        let (a, b) = (f.exceptions.get(k).copied().unwrap_or(0), peer_ex.get(k).copied().unwrap_or(0));
        if a != b {
            diffs.push(Difference::new("exceptions", k.as_str(), a, b));
        }
    }
    // Leaf frames: TraceEvent names them `module!Namespace.Type.Method(params)` (the module lower
    // case when it came from load events), `!` when it could not; compared case-insensitively.
    let mut leaves: std::collections::BTreeMap<String, u64> = Default::default();
    for (&(_, stack), &n) in &f.samples.by_stack {
        let Some(stack) = stack else { continue };
        let leaf = d.frames(stack)[0];
        let name = match leaf.method {
            Some(m) => format!("{}!{}", leaf.module.unwrap_or(""), m.traceevent_name()),
            None => "!".to_string(),
        };
        *leaves.entry(name.to_lowercase()).or_default() += n;
    }
    // TraceEvent spells some modules two ways (System.Private.CoreLib from its load event,
    // system.private.corelib from its path) and counts each spelling apart: its counts are summed
    // by the name both sides share, compared case-insensitively. A method whose other spelling
    // fell out of TraceEvent's top list still differs: that is a spelling, listed, not fatal.
    let mut peer_leaves: std::collections::BTreeMap<String, (u64, String)> = Default::default();
    for (k, v) in g["top_leaf"].as_object().into_iter().flatten() {
        let entry = peer_leaves.entry(k.to_lowercase()).or_insert_with(|| (0, k.clone()));
        entry.0 += v.as_u64().unwrap_or(0);
    }
    for (key, (peer, shown)) in &peer_leaves {
        compared += 1;
        let ours = leaves.get(key).copied().unwrap_or(0);
        if ours != *peer {
            diffs.push(Difference::coverage("leaf frame samples", shown.as_str(), ours, peer));
        }
    }
    report_differences("nettrace", &format!("{compared} items against TraceDump `summary` ({})", json_path.display()), &diffs)
}
