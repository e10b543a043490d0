//! Decodes each real recording in shared/fixtures/nettrace and compares it with the golden file
//! TraceEvent 4.0.0 wrote for it (shared/reference/TraceDump `summary`). The fixtures folder is
//! found by tracelab-fixtures (`$TRACELAB_SHARED/fixtures/nettrace`, else ../shared beside the workspace).

use std::collections::BTreeMap;
use std::path::PathBuf;

use eventpipe::{DecodeOptions, Decoded, SampleKind, Value, decode};
use serde_json::Value as Json;

fn fixtures_dir() -> PathBuf {
    tracelab_fixtures::fixture("nettrace")
}

fn load(name: &str) -> (Decoded, Json) {
    let dir = fixtures_dir();
    let path = dir.join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e} (set TRACELAB_SHARED)", path.display()));
    let decoded = decode(std::io::BufReader::new(file), &DecodeOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let golden_path = dir.join(format!("{name}.golden.json"));
    let golden: Json = serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    (decoded, golden)
}

/// TraceEvent's provider key: its name, or `Provider(guid)` for providers it has no name for.
fn traceevent_provider(provider: &str) -> String {
    match provider {
        "Microsoft-DotNETCore-SampleProfiler" => "Provider(3c530d44-97ae-513a-1e6d-783e8f8e03a9)".into(),
        "Microsoft-DotNETCore-EventPipe" => "Provider(92f528a6-f5b8-5160-a7ee-b33da7739e29)".into(),
        other => other.into(),
    }
}

fn check_counts(d: &Decoded, g: &Json) {
    let ours: BTreeMap<String, u64> =
        d.counts.iter().map(|((p, id), c)| (format!("{}/{id}", traceevent_provider(p)), c.count)).collect();
    // TraceEvent re-dispatches GCDynamicEvent (id 39) by its inner name under synthetic ids
    // (GC/CommittedUsage = 65524); the stream has id 39.
    let golden: BTreeMap<String, u64> = g["counts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.replace("DotNETRuntime/65524", "DotNETRuntime/39"), v.as_u64().unwrap()))
        .collect();
    assert_eq!(ours, golden, "event counts by provider/id");
    assert_eq!(d.stats.lost_events, g["meta"]["EventsLost"].as_u64().unwrap(), "lost events");
    assert_eq!(d.info.pointer_size as u64, g["meta"]["PointerSize"].as_u64().unwrap());
    assert_eq!(d.info.processor_count as u64, g["meta"]["NumberOfProcessors"].as_u64().unwrap());
    assert!(d.payload_errors.is_empty(), "payload errors: {:?}", d.payload_errors);
}

fn gc_reason(name: &str) -> u64 {
    const REASONS: [&str; 14] = [
        "AllocSmall", "Induced", "LowMemory", "Empty", "AllocLarge", "OutOfSpaceSOH", "OutOfSpaceLOH",
        "InducedNotForced", "Internal", "InducedLowMemory", "InducedCompacting", "LowMemoryHost", "PMFullGC",
        "LowMemoryHostBlocking",
    ];
    REASONS.iter().position(|r| *r == name).unwrap_or_else(|| panic!("unknown GC reason {name}")) as u64
}

fn gc_type(name: &str) -> u64 {
    ["NonConcurrentGC", "BackgroundGC", "ForegroundGC"].iter().position(|r| *r == name).unwrap() as u64
}

fn field(e: &eventpipe::DecodedEvent, name: &str) -> Value {
    Decoded::field(e, name).unwrap_or_else(|| panic!("{} has no field {name}: {:?}", e.name, e.fields)).clone()
}

fn check_gc(d: &Decoded, g: &Json) {
    let starts: Vec<_> = d.events.iter().filter(|e| e.name == "GCStart").collect();
    assert_eq!(starts.len() as u64, g["gc_starts"].as_u64().unwrap(), "GCStart count");
    for (ours, theirs) in starts.iter().zip(g["gc_start_detail"].as_array().unwrap()) {
        assert_eq!(field(ours, "Count").as_u64(), theirs["Count"].as_u64());
        assert_eq!(field(ours, "Depth").as_u64(), theirs["Depth"].as_u64());
        assert_eq!(field(ours, "Reason").as_u64(), Some(gc_reason(theirs["Reason"].as_str().unwrap())));
        assert_eq!(field(ours, "Type").as_u64(), Some(gc_type(theirs["Type"].as_str().unwrap())));
    }
}

fn check_exceptions(d: &Decoded, g: &Json) {
    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    for e in d.events.iter().filter(|e| e.name == "ExceptionThrown") {
        let t = field(e, "ExceptionType");
        let m = field(e, "ExceptionMessage");
        *ours.entry(format!("{}: {}", t.as_str().unwrap(), m.as_str().unwrap())).or_default() += 1;
    }
    let golden: BTreeMap<String, u64> =
        g["exceptions"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap())).collect();
    assert_eq!(ours, golden, "exceptions by type: message");
}

fn check_samples(d: &Decoded, g: &Json) {
    let sp = &g["sample_profiler"];
    let managed = d.samples.iter().filter(|s| s.kind == SampleKind::Managed).count() as u64;
    let external = d.samples.iter().filter(|s| s.kind == SampleKind::External).count() as u64;
    let with_stacks = d.samples.iter().filter(|s| s.stack.is_some()).count() as u64;
    assert_eq!((managed, external, with_stacks), (sp["managed"].as_u64().unwrap(), sp["external"].as_u64().unwrap(), sp["with_stacks"].as_u64().unwrap()));
}

/// TraceEvent names frames `module!Namespace.Type.Method(params)`, the module lower-case when it
/// came from load events; `!` alone for a frame it could not name. Compare case-insensitively.
fn check_top_leaves(d: &Decoded, g: &Json) {
    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    for s in &d.samples {
        let Some(stack) = s.stack else { continue };
        let leaf = d.frames(stack)[0];
        let name = match leaf.method {
            Some(m) => format!("{}!{}", leaf.module.unwrap_or(""), m.traceevent_name()),
            None => "!".to_string(),
        };
        *ours.entry(name.to_lowercase()).or_default() += 1;
    }
    let golden: Vec<(String, u64)> =
        g["top_leaf"].as_object().unwrap().iter().map(|(k, v)| (k.to_lowercase(), v.as_u64().unwrap())).collect();
    let mut top: Vec<_> = golden.clone();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    for (name, count) in top.iter().take(10) {
        assert_eq!(ours.get(name), Some(count), "leaf {name}; ours (top): {:?}", {
            let mut v: Vec<_> = ours.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1));
            v.into_iter().take(12).collect::<Vec<_>>()
        });
    }
}

macro_rules! fixture_test {
    ($test:ident, $file:expr) => {
        #[test]
        fn $test() {
            let (d, g) = load($file);
            check_counts(&d, &g);
            check_gc(&d, &g);
            check_exceptions(&d, &g);
            check_samples(&d, &g);
            check_top_leaves(&d, &g);
        }
    };
}

fixture_test!(dotnet_common, "fixture-dotnet-common.nettrace");
fixture_test!(gc_verbose, "fixture-gc-verbose.nettrace");
fixture_test!(exceptions, "fixture-exceptions.nettrace");
fixture_test!(jit_norundown, "fixture-jit-norundown.nettrace");
fixture_test!(net8_dotnet_common, "fixture-net8-dotnet-common.nettrace");

/// MethodFlags tell JIT code from precompiled (ReadyToRun) code: the app's hot loop is jitted,
/// CoreLib's Thread.Sleep comes precompiled and is known from rundown only.
#[test]
fn jitted_and_precompiled_methods_are_told_apart() {
    let (d, _) = load("fixture-dotnet-common.nettrace");
    let find = |name: &str| {
        d.methods.methods().iter().find(|m| m.qualified_name() == name).unwrap_or_else(|| panic!("no method {name}"))
    };
    let hot = find("Fixture.Phases::CpuHot(int64)");
    assert!(hot.is_jitted(), "CpuHot flags {:#x}", hot.flags);
    let sleep = find("System.Threading.Thread::Sleep(int32)");
    assert!(!sleep.is_jitted(), "Thread.Sleep flags {:#x}", sleep.flags);
    assert!(sleep.from_rundown);
    assert_eq!(d.methods.module(sleep.module_id).map(|m| m.short_name()), Some("System.Private.CoreLib"));
}

/// Catch events carry the catching method's name (ExceptionCatchStart is newer than the
/// reference manifest: its layout comes from src/known.rs).
#[test]
fn exception_catch_payloads_decode() {
    let (d, _) = load("fixture-exceptions.nettrace");
    let catches: Vec<_> = d.events.iter().filter(|e| e.name == "ExceptionCatchStart").collect();
    assert_eq!(catches.len(), 1000);
    let name = Decoded::field(catches[0], "MethodName").and_then(Value::as_str).unwrap();
    assert!(name.contains("Exceptions"), "{name}");
    assert!(catches[0].fields.iter().all(|(n, _)| n != "__rest__"), "{:?}", catches[0].fields);
}

/// The counting walk (`count_payload`, what `inspect --full` uses for events whose values it does
/// not read) agrees with the full decode on every payload of every fixture: the same fields, the
/// same strings, the same errors — also on each payload cut short at every third byte.
#[test]
fn counting_a_payload_agrees_with_decoding_it() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(fixtures_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    names.retain(|p| p.extension().is_some_and(|e| e == "nettrace"));
    names.sort();
    assert!(names.len() >= 5, "fixtures: {names:?}");
    let (mut payloads, mut cuts, mut errors) = (0u64, 0u64, 0u64);
    for path in names {
        let mut reader = eventpipe::NettraceReader::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap())).unwrap();
        let pointer_size = reader.info().pointer_size;
        while let Some(ev) = reader.next_event_where(|_| true).unwrap() {
            let mut check = |payload: &[u8]| {
                let decoded = eventpipe::decode_payload(ev.metadata, payload, pointer_size, ev.payload_offset);
                let counted = eventpipe::count_payload(ev.metadata, payload, pointer_size, ev.payload_offset);
                match (&decoded, &counted) {
                    (Ok(fields), Ok(count)) => {
                        let strings = fields.iter().filter(|(_, v)| matches!(v, Value::Str(_))).count() as u32;
                        assert_eq!((count.fields, count.strings), (fields.len() as u32, strings), "{}: {}", path.display(), ev.metadata.name);
                    }
                    (Err(d), Err(c)) => {
                        errors += 1;
                        assert_eq!(d.offset(), c.offset(), "{}: {}: {d} / {c}", path.display(), ev.metadata.name);
                    }
                    _ => panic!("{}: {}: decode {decoded:?}, count {counted:?}", path.display(), ev.metadata.name),
                }
            };
            check(ev.payload);
            payloads += 1;
            for cut in (0..ev.payload.len()).step_by(3) {
                check(&ev.payload[..cut]);
                cuts += 1;
            }
        }
    }
    assert!(payloads > 10_000 && errors > 0, "{payloads} payloads, {cuts} cut ones, {errors} errors");
}
