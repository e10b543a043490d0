//! Decoding into the model and naming checked against perf's own answers on the recorded fixtures
//! (../shared/fixtures/perf, README there). Fixture files are copied to a temp dir first, under
//! the names the runtime gave them (`perf-PID.map`), so the fixture folder stays untouched.

use std::path::{Path, PathBuf};

use perfdata::PerfRecording;

use crate::symbolize::DecodeContext;
use crate::decode::decode_recording;
use crate::fold::{fold, resolution_report};
use model::{Collection, DsoClass, merge_code_version};

fn fixture(name: &str) -> PathBuf {
    tracelab_fixtures::fixture(&format!("perf/{name}"))
}

pub(crate) struct Decoded {
    pub collection: Collection,
    #[allow(dead_code)]
    pub recording: PerfRecording,
    _dir: tempfile::TempDir,
}

/// Decodes fixture `name` as the run that recorded it would: its perf map copied into a fresh
/// artifacts dir as `perf-<map_pid>.map`, the app's host/ns pids given, extra symbol dirs and a
/// path map.
pub(crate) fn decode_fixture(
    name: &str,
    host_pid: u32,
    ns_pid: u32,
    symbol_dirs: &[PathBuf],
    path_map: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Decoded {
    decode_fixture_with(name, host_pid, ns_pid, symbol_dirs, path_map, false)
}

pub(crate) fn decode_fixture_with(
    name: &str,
    host_pid: u32,
    ns_pid: u32,
    symbol_dirs: &[PathBuf],
    path_map: &dyn Fn(&Path) -> Option<PathBuf>,
    name_doublemapped: bool,
) -> Decoded {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(fixture(&format!("{name}.perf-{ns_pid}.map")), artifacts.join(format!("perf-{ns_pid}.map"))).unwrap();
    let data = artifacts.join("perf-cpu.data");
    std::fs::copy(fixture(&format!("{name}.data")), &data).unwrap();
    let recording = PerfRecording::read(&data).unwrap();
    let ctx = DecodeContext {
        artifacts: &artifacts,
        app_tmp_dir: &tmp,
        host_pid,
        target_pid: ns_pid,
        path_map,
        symbol_dirs,
    };
    let collection = decode_recording(&recording, &ctx, "perf-cpu", name_doublemapped).unwrap();
    Decoded { collection, recording, _dir: dir }
}

fn no_files(_: &Path) -> Option<PathBuf> {
    None
}

/// A symbol folder holding the recording kernel's kallsyms.
fn kallsyms_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("kallsyms-6.18.txt.xz"), dir.path().join("kallsyms-6.18.txt.xz")).unwrap();
    dir
}

/// perf script's samples: (time in µs, leaf symbol, leaf dso).
fn script_leaves(name: &str) -> Vec<(u64, String, String)> {
    let text = std::fs::read_to_string(fixture(&format!("{name}.script.txt"))).unwrap();
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.is_empty() || line.starts_with(char::is_whitespace) {
            continue;
        }
        // `dotnet 16459/16459   734.742372:    1001001 cpu-clock: `
        let time = line.split_whitespace().find(|w| w.ends_with(':') && w.contains('.')).unwrap();
        let (s, us) = time.trim_end_matches(':').split_once('.').unwrap();
        let time_us = s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap();
        let leaf = lines.peek().filter(|l| l.starts_with('\t')).map(|l| l.trim().to_string()).unwrap_or_default();
        // `ADDR SYMBOL (DSO)`; the symbol may contain spaces and parentheses.
        let (_, rest) = leaf.split_once(' ').unwrap_or(("", ""));
        let open = rest.rfind(" (").unwrap_or(rest.len());
        let sym = rest[..open].to_string();
        let dso = rest.get(open + 2..rest.len().saturating_sub(1)).unwrap_or("").to_string();
        out.push((time_us, sym, dso));
    }
    out
}

fn share_hot(coll: &Collection) -> (u64, u64) {
    let mut hot = 0;
    let mut cold = 0;
    for s in &coll.samples {
        let Some(name) = s.frames.first().and_then(|f| f.name.as_deref()) else { continue };
        let name = merge_code_version(name);
        if name.ends_with("Fixture.Phases::CpuHot(int64)") {
            hot += 1;
        } else if name.ends_with("Fixture.Phases::CpuCold(int64)") {
            cold += 1;
        }
    }
    (hot, cold)
}

#[test]
fn perf_cpu_leaves_match_perf_script() {
    let syms = kallsyms_dir();
    let d = decode_fixture("perf-cpu", 16459, 16459, &[syms.path().to_path_buf()], &no_files);
    let ours = &d.collection.samples;
    let theirs = script_leaves("perf-cpu");
    assert_eq!(ours.len(), 1227, "sample count");
    assert_eq!(theirs.len(), ours.len(), "perf script and we see different sample counts");
    let (mut compared, mut jit_compared, mut kernel_compared) = (0, 0, 0);
    for (i, (s, (time_us, sym, dso))) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(s.time_ns / 1000, *time_us, "sample {i}: times differ");
        if sym == "[unknown]" || sym.is_empty() {
            continue;
        }
        let leaf = &s.frames[0];
        // perf names libc frames from debug info this machine lacks and demangles C++;
        // compare what both sides can name from the same sources: JIT code and the kernel.
        let comparable = dso.starts_with("/tmp/perf-") || dso == "[kernel.kallsyms]";
        if !comparable {
            continue;
        }
        let name = leaf.name.as_deref().unwrap_or_else(|| panic!("sample {i}: perf names `{sym}` ({dso}), we name nothing ({leaf:?})"));
        assert_eq!(merge_code_version(name), merge_code_version(sym), "sample {i} at {time_us} µs");
        compared += 1;
        if dso == "[kernel.kallsyms]" {
            kernel_compared += 1;
        } else {
            jit_compared += 1;
        }
    }
    assert_eq!((jit_compared, kernel_compared), (1163, 30), "leaves compared ({compared})");
    let (hot, cold) = share_hot(&d.collection);
    let share = 100.0 * hot as f64 / (hot + cold) as f64;
    assert!((share - 74.0).abs() <= 0.5, "CpuHot share {share:.2} % (hot {hot}, cold {cold})");
    assert_eq!((hot, cold), (860, 303));
}

#[test]
fn container_map_is_found_through_the_pid_namespace() {
    let pids = std::fs::read_to_string(fixture("perf-container.pids.txt")).unwrap();
    let host_pid: u32 = pids.split_whitespace().find_map(|w| w.strip_prefix("host_pid=")).unwrap().parse().unwrap();
    let d = decode_fixture("perf-container", host_pid, 1, &[], &no_files);
    let jit_leaves: Vec<_> = d.collection.samples.iter().filter(|s| s.frames.first().is_some_and(|f| f.class == DsoClass::Jit)).collect();
    let named = jit_leaves.iter().filter(|s| s.frames[0].name.is_some()).count();
    assert_eq!((named, jit_leaves.len()), (3005, 3005));
    let report = resolution_report(&d.collection);
    assert_eq!(report.get("jit").unwrap().leaf_ratio, Some(1.0));
}

#[test]
fn wx_on_leaves_are_unnamed_doublemapper_jit_frames() {
    let d = decode_fixture("perf-cpu-wx", 16503, 16503, &[], &no_files);
    let total = d.collection.samples.len();
    let memfd = d
        .collection
        .samples
        .iter()
        .filter(|s| {
            s.frames.first().is_some_and(|f| {
                f.class == DsoClass::Jit && f.name.is_none() && f.dso.as_deref().is_some_and(|d| d.contains("memfd:doublemapper"))
            })
        })
        .count();
    assert_eq!(total, 1012);
    assert!(memfd * 100 >= total * 90, "{memfd} of {total} leaves are unnamed doublemapper frames");
    assert_eq!(memfd, 957, "perf script shows 957 `[unknown] (/memfd:doublemapper (deleted))` leaves");
}

/// The runtime's perf map holds the alias (executable) addresses, so the W^X leaves can be named
/// after all, and they give the right split.
#[test]
fn wx_on_leaves_can_be_named_from_the_perf_map() {
    let d = decode_fixture_with("perf-cpu-wx", 16503, 16503, &[], &no_files, true);
    let (hot, cold) = share_hot(&d.collection);
    assert_eq!(hot + cold, 957);
    let share = 100.0 * hot as f64 / (hot + cold) as f64;
    assert!((share - 75.0).abs() < 1.0, "CpuHot share {share:.2} %");
}

#[test]
fn kernel_and_libc_frames_are_named_from_given_files() {
    let syms = kallsyms_dir();
    let dsos = fixture("dsos");
    let path_map = move |p: &Path| -> Option<PathBuf> {
        let name = p.file_name()?;
        let local = dsos.join(name);
        local.is_file().then_some(local)
    };
    let d = decode_fixture("perf-cpu", 16459, 16459, &[syms.path().to_path_buf()], &path_map);
    let report = resolution_report(&d.collection);
    let kernel = report.get("kernel").unwrap();
    assert_eq!(kernel.leaf_total, 30);
    assert_eq!(kernel.leaf_resolved, 30, "kernel leaves named from kallsyms-6.18.txt.xz");
    assert!(kernel.all_ratio.unwrap() > 0.99, "{kernel:?}");
    let libc = report.get("libc").unwrap();
    assert!(libc.all_total > 0);
    assert!(libc.all_resolved * 10 >= libc.all_total * 9, "libc frames named from the fixture's dsos: {libc:?}");
    // Without the files, the same frames stay unnamed but keep their dso.
    let bare = decode_fixture("perf-cpu", 16459, 16459, &[], &no_files);
    let bare_libc = resolution_report(&bare.collection);
    assert_eq!(bare_libc.get("libc").unwrap().all_resolved, 0);
    let f = bare.collection.samples.iter().flat_map(|s| &s.frames).find(|f| f.class == DsoClass::Libc).unwrap();
    assert!(f.dso.as_deref().unwrap().contains("/usr/lib/x86_64-linux-gnu/"), "{f:?}");
}

#[test]
fn folded_stacks_of_a_fixture_merge_code_versions() {
    let d = decode_fixture("perf-cpu", 16459, 16459, &[], &no_files);
    let folded = fold(&d.collection);
    let hot: u64 = folded.iter().filter(|(k, _)| k.ends_with("Fixture.Phases::CpuHot(int64)")).map(|(_, v)| v).sum();
    assert_eq!(hot, 860);
    assert!(!folded.keys().any(|k| k.contains("[OptimizedTier1]") && k.contains("CpuHot")));
    assert_eq!(folded.values().sum::<u64>(), 1227);
}

/// The streaming fold (`fold_perf_file`: samples counted by raw callchain straight from the
/// file, no samples built) gives exactly the folded stacks of the full decode.
#[test]
fn streaming_fold_equals_the_full_decode() {
    let kallsyms = kallsyms_dir();
    let symbol_dirs = [kallsyms.path().to_path_buf()];
    for (name, host_pid, ns_pid) in [("perf-cpu", 16459, 16459), ("perf-container", 21425, 1), ("perf-cpu-wx", 16503, 16503)] {
        // The streaming fold is `trace fold`'s, which names W^X's doublemapped JIT code by the map.
        let d = decode_fixture_with(name, host_pid, ns_pid, &symbol_dirs, &no_files, true);
        let artifacts = d._dir.path().join("artifacts");
        let tmp = d._dir.path().join("tmp");
        let ctx = DecodeContext {
            artifacts: &artifacts,
            app_tmp_dir: &tmp,
            host_pid,
            target_pid: ns_pid,
            path_map: &no_files,
            symbol_dirs: &symbol_dirs,
        };
        let streamed = crate::fold::fold_perf_file(&artifacts.join("perf-cpu.data"), &ctx).unwrap();
        let full = crate::fold::fold(&with_osr_callers_per_process(&d.collection));
        assert_eq!(streamed.samples, d.collection.samples.len() as u64, "{name}");
        assert!(full.len() >= 5, "{name}: {} stacks", full.len());
        assert_eq!(streamed.folded.to_map(), full, "{name}");
    }
}

/// The collection as `trace fold` sees it: OSR frames' lost callers completed per process (a
/// recording's distinct stacks keep no thread).
fn with_osr_callers_per_process(c: &model::Collection) -> model::Collection {
    let mut c = c.clone();
    for s in &mut c.samples {
        s.tid = s.pid;
    }
    crate::unwind::complete_osr_callers(&mut c);
    c
}

/// The string-keyed fold that the interned fold replaced (whole stacks joined into a sorted map),
/// kept as the oracle: the interned fold must write byte-identical folded text.
fn string_map_fold(coll: &model::Collection) -> String {
    use std::collections::{BTreeMap, HashMap};
    type Stack<'c> = Vec<(Option<&'c str>, Option<&'c str>)>;
    let mut by_stack: HashMap<Stack, u64> = HashMap::new();
    for s in &coll.samples {
        let key: Vec<_> = s.frames.iter().rev().map(|f| (f.name.as_deref(), f.dso.as_deref())).collect();
        *by_stack.entry(key).or_default() += s.weight;
    }
    let label = |name: Option<&str>, dso: Option<&str>| {
        let frame = model::Frame { name: name.map(str::to_string), dso: dso.map(str::to_string), class: DsoClass::Unknown, addr: 0 };
        crate::fold::frame_label(&frame)
    };
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, weight) in by_stack {
        let key = if frames.is_empty() {
            crate::fold::NO_STACK.to_string()
        } else {
            frames.iter().map(|(n, d)| label(*n, *d)).collect::<Vec<_>>().join(";")
        };
        *out.entry(key).or_default() += weight;
    }
    crate::fold::folded_text(&out)
}

/// Every perf fixture, through the model fold and the streaming fold: the same bytes as the
/// string-map fold.
#[test]
fn interned_fold_writes_what_the_string_map_fold_wrote() {
    let kallsyms = kallsyms_dir();
    let symbol_dirs = [kallsyms.path().to_path_buf()];
    let host_files = |p: &Path| -> Option<PathBuf> { p.is_file().then(|| p.to_path_buf()) };
    let fixtures = [
        ("perf-cpu", 16459, 16459),
        ("perf-container", 21425, 1),
        ("perf-cpu-wx", 16503, 16503),
        ("perf-offcpu", 16481, 16481),
        ("perf-offcpu-sys", 28825, 28825),
        ("perf-offcpu-dwarf", 28884, 28884),
    ];
    for (name, host_pid, ns_pid) in fixtures {
        let d = decode_fixture_with(name, host_pid, ns_pid, &symbol_dirs, &host_files, true);
        let old = string_map_fold(&d.collection);
        assert!(old.lines().count() >= 5, "{name}: {} stacks", old.lines().count());
        assert_eq!(crate::fold::fold_collection(&d.collection).text(), old, "{name}: model fold");
        let artifacts = d._dir.path().join("artifacts");
        let tmp = d._dir.path().join("tmp");
        let ctx = DecodeContext {
            artifacts: &artifacts,
            app_tmp_dir: &tmp,
            host_pid,
            target_pid: ns_pid,
            path_map: &host_files,
            symbol_dirs: &symbol_dirs,
        };
        let streamed = crate::fold::fold_perf_file(&artifacts.join("perf-cpu.data"), &ctx).unwrap();
        if name.ends_with("-dwarf") {
            // A DWARF recording's user stacks are the fold's to unwind (the model decode keeps
            // perf's kernel chains): the same samples, with more frames.
            assert_eq!(streamed.samples, d.collection.samples.len() as u64, "{name}");
            let frames = |text: &str| text.lines().map(|l| l.matches(';').count() as u64 * l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).sum::<u64>();
            assert!(frames(&streamed.folded.text()) > frames(&old), "{name}: the unwound fold has no more frames");
            continue;
        }
        assert_eq!(streamed.folded.text(), string_map_fold(&with_osr_callers_per_process(&d.collection)), "{name}: streaming fold");
    }
}

/// libcoreclr.so is stripped: its .dynsym names a few exports, so perf shows one
/// `[unknown] (libcoreclr.so)` heap. Its .eh_frame describes every function: the cpu recording's
/// runtime frames split into one box per function (`libcoreclr.so!fn@0x…`), and they still count
/// as unnamed in resolution figures.
#[test]
fn stripped_runtime_frames_split_into_functions() {
    let runtime = match tracelab_fixtures::recorded_runtime_dir() {
        Ok(d) => d,
        Err(why) => return tracelab_fixtures::skip("stripped_runtime_frames_split_into_functions", why),
    };
    let path_map = move |p: &Path| -> Option<PathBuf> {
        let local = runtime.join(p.file_name()?);
        (p.to_string_lossy().contains("Microsoft.NETCore.App") && local.is_file()).then_some(local)
    };
    let d = decode_fixture("perf-cpu", 16459, 16459, &[], &path_map);
    let naming = model::dso_naming(&d.collection);
    let (dso, coreclr) = naming.iter().find(|(k, _)| k.ends_with("/libcoreclr.so")).expect("libcoreclr.so frames");
    assert!(coreclr.distinct_functions >= 10, "{dso}: {coreclr:?}");
    assert!((coreclr.function_only + coreclr.symbol) * 10 >= coreclr.frames * 9, "most frames get a function: {coreclr:?}");
    let folded = fold(&d.collection);
    let labels: std::collections::BTreeSet<&str> = folded.keys().flat_map(|k| k.split(';')).collect();
    let functions = labels.iter().filter(|l| l.starts_with("libcoreclr.so!fn@0x")).count();
    assert!(functions >= 10, "{functions} libcoreclr functions in the folded stacks");
    let report = resolution_report(&d.collection);
    let runtime = report.get("runtime_native").unwrap();
    assert!(runtime.all_resolved <= coreclr.symbol + naming.values().map(|n| n.symbol).sum::<u64>(), "{runtime:?}");
    assert!(runtime.all_resolved * 2 < runtime.all_total, "function starts are no symbols: {runtime:?}");
    let hints = model::unnamed_dso_hints(&d.collection);
    assert!(hints.iter().any(|h| h.contains("libcoreclr.so") && h.contains("--symbols")), "{hints:#?}");
}
