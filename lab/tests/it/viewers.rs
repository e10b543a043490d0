//! The files viewers open, as their own readers see them: Firefox Profiler profiles (parsed as
//! JSON: the crate only writes), pprof (decoded, and through `go tool pprof -top`), the
//! perfcollect trace.zip (through TraceEvent 4.0.0's perf-script and CTF readers, the code PerfView
//! runs), and `cargo xtask open` (the profile fetched back over loopback).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use model::{Collection, MethodName, merge_code_version};
use harness::host::environment::require_program;

/// A leaf frame's comparable key: a managed method's `Namespace.Type::Method/ARITY` (the spelling
/// either side uses for parameters and modules drops out), else the label itself.
/// TraceEvent writes `module!symbol` (or `symbol !module` when perf's symbol names no module).
fn method_key(label: &str) -> String {
    let parts = label.split_once('!').map(|(a, b)| vec![b, a]).unwrap_or_default();
    parts
        .into_iter()
        .chain([label])
        .find_map(|p| MethodName::parse(merge_code_version(without_tier_prefix(p.trim()))).map(|m| m.spelling_free_key()))
        .unwrap_or_else(|| label.to_string())
}

/// TraceEvent moves a JIT method's code tier from the end of its name to the front
/// (`[OptimizedTier1]Ns.Type::M(…)`), which is how PerfView shows tiers.
fn tier_prefix(symbol: &str) -> Option<(&str, &str)> {
    let rest = symbol.strip_prefix('[')?;
    let (tag, name) = rest.split_once(']')?;
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric())).then_some((tag, name))
}

fn without_tier_prefix(symbol: &str) -> &str {
    tier_prefix(symbol).map_or(symbol, |(_, name)| name)
}

/// TraceEvent 4.0.0's perf-script parser drops the last sample of each CPU in `perf.data.txt`
/// (a three-sample file without `[cpu]` fields reads as two; samples on CPUs 0, 1, 1 read as one,
/// on CPU 1; a 5,955-sample run's 93 / 5,862 per CPU read as 92 / 5,861), so its counts are one
/// short of ours per CPU the samples ran on, in one method each.
fn dropped_by_traceevent(cpus_recorded: usize) -> u64 {
    cpus_recorded.max(1) as u64
}

/// Per method, one more than TraceEvent drops: in one container run of 2026-11-29 our ColdLoop
/// had 1,567 leaf samples and TraceEvent's 1,565, the totals one apart as ever — one sample's leaf
/// read as another method (not traced).
fn per_method_slack(dropped: u64) -> u64 {
    dropped + 1
}

/// Methods with fewer leaf samples than this are not compared: in one run TraceEvent showed
/// neither of the two samples ours put in `Thread::<PollGC>g__PollGCWorker|67_0` (a name with a
/// `|`; not traced) — a handful of samples proves nothing about the top methods either way.
const FEWEST_COMPARED: u64 = 10;

/// Self weight per leaf label, from a run's folded stacks file.
fn folded_leaves(folded: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        *out.entry(stack.rsplit(';').next().unwrap().to_string()).or_default() += n.parse::<u64>().unwrap();
    }
    out
}

fn top(leaves: &BTreeMap<String, u64>, n: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = leaves.iter().map(|(k, w)| (k.clone(), *w)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_end(&mut out).unwrap();
    out
}

/// Everything a run folder promises viewers, checked for every collector with samples:
/// its Firefox profile and pprof are listed in the manifest and open in their readers, and the
/// pprof's top functions are the folded stacks' top leaves.
pub fn assert_viewer_files(run: &Path) {
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    let listed = manifest["viewer_files"].as_object().unwrap_or_else(|| panic!("no viewer_files in {}", run.display()));
    assert!(!listed.is_empty());
    for (collector, files) in listed {
        let files: Vec<&str> = files.as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        for f in &files {
            assert!(run.join(f).is_file(), "{f} is listed for {collector} but missing");
        }
        let folded_path = run.join("stacks").join(format!("{collector}.folded"));
        let Ok(folded) = std::fs::read_to_string(&folded_path) else { continue };
        let leaves = folded_leaves(&folded);

        // Firefox Profiler: the processed format, named threads, categories, weight type.
        let fx = format!("{collector}.firefox.json.gz");
        assert!(files.contains(&fx.as_str()), "{collector}: {files:?}");
        let j: serde_json::Value = serde_json::from_slice(&gunzip(&run.join(&fx))).unwrap();
        assert!(j["meta"]["preprocessedProfileVersion"].as_u64().is_some(), "{fx}: no format version");
        let cats: Vec<&str> = j["meta"]["categories"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert!(cats.contains(&"JIT") && cats.contains(&"Kernel"), "{fx}: {cats:?}");
        let threads = j["threads"].as_array().unwrap();
        let samples: u64 = threads.iter().map(|t| t["samples"]["length"].as_u64().unwrap()).sum();
        assert!(samples > 0, "{fx}: no samples");
        let weight_ns = manifest["metrics"].get(format!("{collector}.offcpu_total_ns")).is_some();
        for t in threads {
            assert!(t["name"].as_str().is_some_and(|n| !n.is_empty()), "{fx}: a thread without a name");
            let want = if weight_ns { "tracing-ms" } else { "samples" };
            if t["samples"]["length"].as_u64() > Some(0) {
                assert_eq!(t["samples"]["weightType"], want, "{fx}: {}", t["name"]);
            }
        }

        // pprof: decodes with the published schema; its leaves are the folded stacks' leaves.
        let pb = format!("{collector}.pb.gz");
        assert!(files.contains(&pb.as_str()), "{collector}: {files:?}");
        let p = pprof_profile::decode(&std::fs::read(run.join(&pb)).unwrap()).unwrap();
        let mut pleaves: BTreeMap<String, u64> = BTreeMap::new();
        for s in &p.sample {
            let loc = p.location.iter().find(|l| l.id == s.location_id[0]).unwrap();
            let func = p.function.iter().find(|f| f.id == loc.line[0].function_id).unwrap();
            *pleaves.entry(p.string(func.name).to_string()).or_default() += s.value[0] as u64;
        }
        if !weight_ns {
            assert_eq!(top(&pleaves, 5), top(&leaves, 5), "{pb}: top functions differ from the folded stacks");
        }
        if require_program("go").is_ok() {
            let out = Command::new("go")
                .args(["tool", "pprof", "-top", "-nodecount=5", "-nodefraction=0", "-sample_index=0", "-symbolize=none"])
                .arg(run.join(&pb))
                .env("PPROF_TMPDIR", run)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "go tool pprof {pb}: {}", String::from_utf8_lossy(&out.stderr));
            let flats: Vec<u64> = text
                .lines()
                .skip_while(|l| !l.trim_start().starts_with("flat"))
                .skip(1)
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .collect();
            let want: Vec<u64> = top(&pleaves, 5).into_iter().map(|(_, n)| n).collect();
            assert_eq!(flats, want, "go tool pprof -top {pb}:\n{text}");
        }
    }
}

/// Builds the TraceEvent reader of trace.zip files (lab/tests/tracezip-reader).
fn build_reader() -> Result<PathBuf, String> {
    crate::build_traceevent_reader("tracezip-reader", "TraceZipReader")
}

/// What TraceEvent read from a trace.zip.
struct TraceEventView {
    samples: u64,
    leaves: BTreeMap<String, u64>,
    /// The leaf frames' names as TraceEvent wrote them (`module!symbol`).
    raw_leaves: BTreeMap<String, u64>,
    counts: BTreeMap<String, u64>,
    /// Samples per CPU as TraceEvent read them (-1: a sample line without `[cpu]`).
    cpus: BTreeMap<i64, u64>,
    /// perfinfo-PID.map as TraceEvent read it: image file name → (GUID, base address).
    perfinfo: BTreeMap<String, (String, u64)>,
}

fn read_with_traceevent(reader: &Path, zip: &Path) -> TraceEventView {
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().unwrap();
    let out_json = zip.with_extension("traceevent.json");
    let out = dotnet.command().arg(reader).arg(zip).arg(&out_json).output().unwrap();
    assert!(out.status.success(), "TraceEvent could not open {}:\n{}{}", zip.display(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out_json);
    let (mut leaves, mut raw_leaves) = (BTreeMap::new(), BTreeMap::new());
    for row in j["top_leaf"].as_array().unwrap() {
        *leaves.entry(method_key(row[0].as_str().unwrap())).or_default() += row[1].as_u64().unwrap();
        *raw_leaves.entry(row[0].as_str().unwrap().to_string()).or_default() += row[1].as_u64().unwrap();
    }
    let counts = j["counts"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    let cpus = j["cpus"].as_object().unwrap().iter().map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap())).collect();
    let perfinfo = j["perfinfo"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v["guid"].as_str().unwrap().to_string(), v["base_address"].as_u64().unwrap())))
        .collect();
    TraceEventView { samples: j["samples"].as_u64().unwrap(), leaves, raw_leaves, counts, cpus, perfinfo }
}

/// Our top-5 managed leaf methods (by the folded stacks) and TraceEvent's agree, count for count.
fn assert_same_top_methods(ours: &BTreeMap<String, u64>, theirs: &TraceEventView, dropped: u64) {
    let mut by_key: BTreeMap<String, u64> = BTreeMap::new();
    for (label, n) in ours {
        *by_key.entry(method_key(label)).or_default() += n;
    }
    let managed = |m: &BTreeMap<String, u64>| -> Vec<(String, u64)> {
        top(&m.iter().filter(|(k, v)| k.contains("::") && **v >= FEWEST_COMPARED).map(|(k, v)| (k.clone(), *v)).collect(), 5)
    };
    let (a, b) = (managed(&by_key), managed(&theirs.leaves));
    assert!(!a.is_empty(), "no managed leaf in our stacks");
    // The sample TraceEvent drops can be a method's only one: a method of ours with no more
    // samples than it drops may be missing from TraceEvent's list; anything else must be in both.
    for (key, n) in &a {
        let t = theirs.leaves.get(key).copied().unwrap_or(0);
        assert!(t <= *n && n - t <= per_method_slack(dropped), "{key}: ours {n}, TraceEvent's {t}; ours {a:?} vs TraceEvent's {b:?}");
    }
    for (key, t) in &b {
        let n = by_key.get(key).copied().unwrap_or(0);
        assert!(
            a.iter().any(|(k, _)| k == key) || (n >= *t && n - t <= per_method_slack(dropped) && a.len() == 5),
            "top-5 managed leaf methods: TraceEvent's {key} ({t}) is not among ours {a:?} (TraceEvent's {b:?})"
        );
    }
}

/// LTTng events per manifest id, as we decoded them, against TraceEvent's per `<provider>/<id>`.
fn assert_same_event_counts(lttng: &Collection, theirs: &TraceEventView) {
    let mut ours: BTreeMap<u32, u64> = BTreeMap::new();
    for e in lttng.events.iter().filter(|e| e.provider == "DotNETRuntime") {
        if let Some(id) = e.id {
            *ours.entry(id).or_default() += 1;
        }
    }
    let theirs_by_id: BTreeMap<u32, u64> = theirs
        .counts
        .iter()
        .filter(|(k, _)| k.starts_with("Microsoft-Windows-DotNETRuntime/"))
        .map(|(k, v)| (k.rsplit('/').next().unwrap().parse().unwrap(), *v))
        .collect();
    for (id, name) in [(1u32, "GCStart"), (2, "GCEnd"), (80, "ExceptionThrown")] {
        if ours.contains_key(&id) {
            assert_eq!(ours.get(&id), theirs_by_id.get(&id), "{name} (id {id}): ours vs TraceEvent's; all of theirs: {:?}", theirs.counts);
        }
    }
    assert!(ours.contains_key(&1), "the LTTng trace holds no GCStart: {ours:?}");
}

/// The recorded perf and LTTng fixtures (../shared/fixtures) packed as perfcollect packs them:
/// TraceEvent opens the zip and counts what we count.
#[test]
fn trace_zip_of_recorded_perf_and_lttng_opens_in_traceevent() {
    let test = "viewers::trace_zip_of_recorded_perf_and_lttng_opens_in_traceevent";
    let reader = match build_reader() {
        Ok(r) => r,
        Err(why) => return tracelab_fixtures::skip(test, why),
    };
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let fixture = |n: &str| tracelab_fixtures::fixture(&format!("perf/{n}"));
    std::fs::copy(fixture("perf-cpu.perf-16459.map"), artifacts.join("perf-16459.map")).unwrap();
    let rec = perfdata::PerfRecording::read(&fixture("perf-cpu.data")).unwrap();
    let no_files = |_: &Path| -> Option<PathBuf> { None };
    let ctx = stacks::DecodeContext {
        artifacts: &artifacts,
        app_tmp_dir: &artifacts,
        host_pid: 16459,
        target_pid: 16459,
        path_map: &no_files,
        symbol_dirs: &[],
    };
    let mut perf = stacks::decode_recording(&rec, &ctx, "perf-cpu", false).unwrap();
    perf.metrics.insert("frequency_hz".into(), 999.0);
    let ctf = tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions");
    let lttng = harness::collect::lttng::decode_dir(&ctf, None).unwrap();
    let input = stacks::perfcollect::TraceZipInput {
        name: "fixture",
        perf: Some(&perf),
        run: &[],
        lttng_dir: Some(&ctf),
        runtime_files: stacks::perfcollect::runtime_files(&artifacts),
    };
    let zip = stacks::perfcollect::write(&input, dir.path()).unwrap().unwrap();
    let theirs = read_with_traceevent(&reader, &zip);
    let dropped = dropped_by_traceevent(0);
    assert_eq!(theirs.samples + dropped, perf.samples.len() as u64, "TraceEvent's sample count");
    assert_same_top_methods(&folded_leaves(&stacks::fold_collection(&perf).text()), &theirs, dropped);
    assert_same_event_counts(&lttng, &theirs);
    assert_modules_and_tiers(&theirs);
    // The fixture was recorded without `--sample-cpu`: its lines say no CPU, not a made-up 0.
    assert_eq!(theirs.cpus.keys().collect::<Vec<_>>(), [&-1], "CPUs of a recording that kept none");
}

/// Samples per CPU as perf itself reads the run's recording (`perf script -F cpu`).
fn cpus_by_perf(run: &Path) -> BTreeMap<i64, u64> {
    let data = run.join("artifacts/perf-cpu.data");
    let out = Command::new("perf").args(["script", "-F", "cpu", "-i"]).arg(&data).output().unwrap();
    assert!(out.status.success(), "perf script -F cpu -i {}: {}", data.display(), String::from_utf8_lossy(&out.stderr));
    let mut cpus: BTreeMap<i64, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let cpu = line.trim().trim_start_matches('[').trim_end_matches(']');
        *cpus.entry(cpu.parse().unwrap_or_else(|_| panic!("perf's CPU field `{line}`"))).or_default() += 1;
    }
    cpus
}

/// Each sample's CPU as perf recorded it (TraceEvent's count per CPU is perf's, less the one
/// sample per CPU it drops: no made-up CPU 0), and the runtime's images come with their MVID and,
/// for ReadyToRun CoreLib, its load address.
fn assert_cpus_and_perfinfo(theirs: &TraceEventView, perfs: &BTreeMap<i64, u64>) {
    assert!(!perfs.is_empty() && !theirs.cpus.contains_key(&-1), "CPUs: perf's {perfs:?}, TraceEvent's {:?}", theirs.cpus);
    let as_read: BTreeMap<i64, u64> = perfs.iter().map(|(cpu, n)| (*cpu, n - 1)).filter(|(_, n)| *n > 0).collect();
    assert_eq!(theirs.cpus, as_read, "samples per CPU: TraceEvent's, against perf's {perfs:?} less the last of each");
    let guid = regex::Regex::new(r"^\{[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}\}$").unwrap();
    let (corelib_guid, corelib_base) =
        theirs.perfinfo.get("System.Private.CoreLib.dll").unwrap_or_else(|| panic!("no CoreLib in perfinfo: {:?}", theirs.perfinfo));
    assert!(guid.is_match(corelib_guid) && *corelib_base != 0, "CoreLib's perfinfo entry: {corelib_guid} at {corelib_base:#x}");
    for (image, (g, _)) in &theirs.perfinfo {
        assert!(guid.is_match(g), "{image}'s GUID {g}");
    }
}

/// PerfView's view of JIT frames: each in its assembly's module (not one `jit` module for all),
/// the module written once, and the code tiers kept — a method that tiered up shows as two or
/// more of TraceEvent's frame names.
fn assert_modules_and_tiers(theirs: &TraceEventView) {
    let managed: Vec<&String> = theirs.raw_leaves.keys().filter(|k| k.contains("::")).collect();
    assert!(!managed.is_empty(), "no managed leaf: {:?}", theirs.raw_leaves);
    eprintln!("TraceEvent's managed leaves: {:?}", managed.iter().take(4).collect::<Vec<_>>());
    for name in &managed {
        let (module, symbol) = name.split_once('!').unwrap_or(("", name));
        assert!(!module.is_empty() && module != "jit" && !module.starts_with("perf-"), "a JIT frame in module `{module}`: {name}");
        // Not a count of `!`: a generic signature has its own (`FindValue(!0)`).
        assert!(!symbol.starts_with(&format!("{module}!")), "the module twice: {name}");
    }
    let mut tiers: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for name in &managed {
        let symbol = name.split_once('!').map(|(_, s)| s).unwrap_or(name);
        if let Some((tier, method)) = tier_prefix(symbol) {
            tiers.entry(method.to_string()).or_default().insert(tier.to_string());
        }
    }
    assert!(tiers.values().any(|t| t.len() >= 2), "no method shows two code tiers: {tiers:?}");
}

/// A finished run's trace.zip (runs with perf cpu-clock write one) opens in TraceEvent, which
/// counts the samples of the run's folded stacks and finds the same top-5 managed leaf methods,
/// each sample's CPU and the runtime images of perfinfo-PID.map.
/// Called from the real runs of `scenarios::cpu_bound…` and `your_app::console_app…`.
pub fn assert_trace_zip_opens(run: &Path) {
    let reader = build_reader().unwrap_or_else(|e| panic!("the TraceEvent reader: {e}"));
    let zip = std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".trace.zip"))
        .unwrap_or_else(|| panic!("no *.trace.zip in {}", run.display()));
    let theirs = read_with_traceevent(&reader, &zip);
    let folded = std::fs::read_to_string(run.join("stacks/perf-cpu.folded")).unwrap();
    let leaves = folded_leaves(&folded);
    let perfs = cpus_by_perf(run);
    let dropped = dropped_by_traceevent(perfs.len());
    assert_eq!(theirs.samples + dropped, leaves.values().sum::<u64>(), "TraceEvent's sample count of {} (CPUs {perfs:?})", zip.display());
    assert_same_top_methods(&leaves, &theirs, dropped);
    assert_modules_and_tiers(&theirs);
    assert_cpus_and_perfinfo(&theirs, &perfs);
}

/// `cargo xtask open`'s server: the URL it prints serves the profile's bytes over loopback.
pub fn assert_open_serves(run: &Path) {
    let file = lab::viewer::find_profile(run, Some("perf-cpu")).unwrap();
    let server = lab::viewer::ProfileServer::bind(&file, 0).unwrap();
    let url = server.url();
    assert!(server.profiler_url().starts_with("https://profiler.firefox.com/from-url/http%3A%2F%2F127.0.0.1%3A"));
    let mut served = 0;
    std::thread::scope(|s| {
        s.spawn(|| server.serve(|| { served += 1; served <= 1 }).unwrap());
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_at(rest.find('/').unwrap());
        let mut c = std::net::TcpStream::connect(host).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out[..split]));
        assert_eq!(&out[split + 4..], std::fs::read(&file).unwrap().as_slice());
    });
}
