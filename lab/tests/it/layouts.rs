//! Our EventPipe decoder's field layouts against TraceEvent 4.0.0 (the library PerfView is built
//! on), on a real .NET 10 trace: the runtime-events workload recorded through our EventPipe client
//! with the keywords that make the runtime fire its newer event versions (ContentionStart_V2,
//! ContentionStop_V1, GCHeapStats_V2, GCAllocationTick_V4, the assembly loader's and tiered
//! compilation's events …). Both read the same .nettrace; every runtime-provider event is compared
//! event by event (per thread, in order), field by field. Any difference fails with the event's
//! index in our stream, its name and the field.

use std::collections::BTreeMap;
use std::path::Path;

use eventpipe::{DecodeOptions, Value};
use judge::Verdict;
use harness::scenario::Scenario;
use harness::run::TargetKind;
use tracelab_fixtures::prerequisites;

use crate::describe;

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

/// GC 0x1, AssemblyLoader 0x4, Loader 0x8, Jit 0x10, NGen 0x20, Contention 0x4000, Exception
/// 0x8000, Threading 0x10000, Compilation 0x1000000000, at Verbose.
const SCENARIO: &str = r#"
name = "layouts-traceevent"
description = "the runtime-events workload through our EventPipe client, for the TraceEvent cross-check of field layouts"
workload = "runtime-events"
args = ["--seconds", "3", "--parts", "contention,alloc,jit,threadpool,exceptions,gcheap", "--rounds", "10,5", "--alloc-mb", "30", "--dynamic-methods", "10", "--exceptions", "20", "--work-items", "200"]
target = "host"

[[collector]]
kind = "eventpipe"
providers = ["Microsoft-Windows-DotNETRuntime:0x100001C03D:5"]

[[expect]]
kind = "event_count"
event = "ContentionStart"
min = 1
"#;

/// Event types that must be among the compared ones: the runtime's newer versions the decoder's
/// own table (crates/eventpipe/src/known.rs) adds to the generated manifest table.
const MUST_COMPARE: &[(&str, u32)] = &[
    ("ContentionStart", 2),
    ("ContentionStop", 1),
    ("ContentionLockCreated", 0),
    ("GCHeapStats", 2),
    ("GCAllocationTick", 4),
    ("ExceptionCatchStart", 0),
    ("AssemblyLoadStart", 0),
    ("AssemblyLoadStop", 0),
];

/// One event as either reader saw it: (event name, version) and the fields as text.
#[derive(Debug)]
struct Seen {
    id: u32,
    version: u32,
    name: String,
    fields: Vec<(String, String)>,
    /// Our index of the event in the stream (every event, any provider).
    index: usize,
}

fn value_text(v: &Value) -> String {
    match v {
        Value::U64(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::F64(x) => format!("{x:?}"),
        Value::Bool(b) => if *b { "1" } else { "0" }.to_string(),
        Value::Str(s) => s.clone(),
        Value::Guid(g) => eventpipe::guid_string(g),
        Value::Bytes(b) => b.iter().map(|x| format!("{x:02X}")).collect(),
    }
}

/// Equal values: the same text, the same number, or the same bits of an integer one side
/// declares signed and the other unsigned (HRESULTs are `win:UInt32` in the manifest, `int` in
/// TraceEvent).
fn same(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if let (Ok(x), Ok(y)) = (a.parse::<i128>(), b.parse::<i128>()) {
        let bits = |w: u32| x.rem_euclid(1 << w) == y.rem_euclid(1 << w) && x.abs() < 1 << w && y.abs() < 1 << w;
        return bits(32) || bits(64);
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y || (x.is_nan() && y.is_nan()),
        _ => false,
    }
}

/// Our decoder's runtime-provider events by thread, in stream order.
fn ours(path: &Path) -> BTreeMap<u64, Vec<Seen>> {
    let file = std::fs::File::open(path).unwrap();
    let d = eventpipe::decode(std::io::BufReader::new(file), &DecodeOptions { keep_events: true, keep_samples: false }).unwrap();
    assert_eq!(d.payload_error_count, 0, "payloads that did not fit our layouts: {:?}", d.payload_errors);
    let mut by_thread: BTreeMap<u64, Vec<Seen>> = BTreeMap::new();
    // GCDynamicEvent (id 39) never reaches TraceEvent 4.0.0's Clr.All nor Dynamic.All (0 of the
    // 4 we decoded in a run): it is left out here, not compared.
    for (index, e) in d.events.iter().enumerate().filter(|(_, e)| e.provider == RUNTIME && e.event_id != 39) {
        by_thread.entry(e.thread_id).or_default().push(Seen {
            id: e.event_id,
            version: e.version,
            name: e.name.clone(),
            fields: e.fields.iter().map(|(k, v)| (k.to_string(), value_text(v))).collect(),
            index,
        });
    }
    by_thread
}

/// TraceEvent's runtime-provider events by thread, in the order it delivered them.
fn theirs(reader: &Path, trace: &Path) -> BTreeMap<u64, Vec<Seen>> {
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().unwrap();
    let out_path = trace.with_extension("traceevent.jsonl");
    let out = dotnet.command().arg(reader).arg(trace).arg(&out_path).output().unwrap();
    assert!(out.status.success(), "TraceEvent could not read {}:\n{}{}", trace.display(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&out_path).unwrap();
    std::fs::remove_file(&out_path).unwrap();
    let mut by_thread: BTreeMap<u64, Vec<Seen>> = BTreeMap::new();
    for line in text.lines() {
        let j: serde_json::Value = serde_json::from_str(line).unwrap();
        if j["provider"] != RUNTIME {
            continue;
        }
        let fields = j["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f[0].as_str().unwrap().to_string(), f[1].as_str().unwrap().to_string()))
            .collect();
        by_thread.entry(j["thread"].as_u64().unwrap()).or_default().push(Seen {
            id: j["id"].as_u64().unwrap() as u32,
            version: j["version"].as_u64().unwrap() as u32,
            name: j["name"].as_str().unwrap().to_string(),
            fields,
            index: usize::MAX,
        });
    }
    by_thread
}

/// Fields TraceEvent presents differently from the payload, by design of its typed events (not a
/// layout question): it derives `OptimizationTier` from MethodFlags bits 7–9 and shows
/// MethodFlags without them, reports `ReJITID` 0 for method events of versions without it,
/// adds `ModuleILFileName` (ModuleILPath's file name) and FinalizeObject's `TypeName`, and hides `Reserved1` and ModuleLoad's
/// trailing ClrInstanceID. `ours` is our value of `field` when we have the field.
fn traceevent_presentation(event: &str, field: &str, ours: Option<&str>, theirs: Option<&str>) -> bool {
    let method_event = event.starts_with("Method");
    match (field, ours, theirs) {
        ("MethodFlags", Some(a), Some(b)) if method_event => a.parse::<u64>().ok().map(|f| (f & !0x380).to_string()).as_deref() == Some(b),
        ("OptimizationTier", None, Some(_)) | ("ReJITID", None, Some("0")) => method_event,
        ("ModuleILFileName", None, Some(_)) => event.contains("Module"),
        // Sums over the generations and the GC's depth, which TraceEvent joins from GCStart.
        ("Depth" | "TotalHeapSize" | "TotalPromoted", None, Some(_)) => event == "GCHeapStats",
        // Looked up from the type events of the session, not in the payload.
        ("TypeName", None, Some(_)) => event == "FinalizeObject",
        ("Reserved1", Some(_), None) => true,
        ("ClrInstanceID", Some(_), None) => event.contains("Module"),
        _ => false,
    }
}

/// (event, our field name, TraceEvent's): the same payload field named differently. Ours is the
/// name the runtime's LTTng provider declares (harness/data/runtime-events/lttng-provider.txt).
const RENAMED: &[(&str, &str, &str)] = &[("GCMarkWithType", "Bytes", "Promoted")];

/// What comparing the two readings found.
#[derive(Default)]
struct Comparison {
    /// Every difference, one line each.
    diffs: Vec<String>,
    /// Events compared field by field, per (our name, version).
    compared: BTreeMap<(String, u32), u64>,
    /// Events we have no layout for (no fields decoded), per (name, version): not compared.
    no_layout: BTreeMap<(String, u32), u64>,
    /// Events TraceEvent delivered without any field (it has no layout for them), per (our name,
    /// version): matched in order, not compared field by field.
    undecoded: BTreeMap<(String, u32), u64>,
}

/// Compares the two readings thread by thread, event by event, field by field.
fn compare(ours: &BTreeMap<u64, Vec<Seen>>, theirs: &BTreeMap<u64, Vec<Seen>>) -> Comparison {
    let mut out = Comparison::default();
    let Comparison { diffs, compared, no_layout, undecoded } = &mut out;
    for thread in ours.keys().chain(theirs.keys()).collect::<std::collections::BTreeSet<_>>() {
        let (a, b) = (ours.get(thread).map_or(&[][..], |v| v.as_slice()), theirs.get(thread).map_or(&[][..], |v| v.as_slice()));
        if a.len() != b.len() {
            diffs.push(format!("thread {thread}: {} runtime events ours, {} TraceEvent's", a.len(), b.len()));
        }
        for (x, y) in a.iter().zip(b) {
            let at = format!("event #{} ({} v{}, thread {thread})", x.index, x.name, x.version);
            if (x.id, x.version) != (y.id, y.version) {
                diffs.push(format!("{at}: TraceEvent read id {} v{} ({}) here", y.id, y.version, y.name));
                break;
            }
            if x.fields.is_empty() && !y.fields.is_empty() {
                *no_layout.entry((x.name.clone(), x.version)).or_default() += 1;
                continue;
            }
            if y.fields.is_empty() && !x.fields.is_empty() {
                *undecoded.entry((x.name.clone(), x.version)).or_default() += 1;
                continue;
            }
            *compared.entry((x.name.clone(), x.version)).or_default() += 1;
            let ours_name = |f: &str| RENAMED.iter().find(|r| r.0 == x.name && r.2 == f).map_or(f.to_string(), |r| r.1.to_string());
            let y_fields: Vec<(String, &str)> = y.fields.iter().map(|(k, v)| (ours_name(k), v.as_str())).collect();
            let theirs: BTreeMap<&str, &str> = y_fields.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            for (field, value) in &x.fields {
                let t = theirs.get(field.as_str()).copied();
                if t.is_some_and(|t| same(value, t)) || traceevent_presentation(&x.name, field, Some(value), t) {
                    continue;
                }
                match t {
                    Some(t) => diffs.push(format!("{at} field {field}: ours {value:?}, TraceEvent {t:?}")),
                    None => diffs.push(format!("{at} field {field}: ours {value:?}, TraceEvent has no such field")),
                }
            }
            for (field, t) in &y_fields {
                if !x.fields.iter().any(|(k, _)| k == field) && !traceevent_presentation(&x.name, field, None, Some(t)) {
                    diffs.push(format!("{at} field {field}: TraceEvent {t:?}, ours has no such field"));
                }
            }
        }
    }
    out
}

/// Differences grouped by event and field (count and first occurrence), for a readable failure.
fn grouped(diffs: &[String]) -> String {
    let mut groups: BTreeMap<String, (u64, &str)> = BTreeMap::new();
    for d in diffs {
        let field = d.find(" field ");
        let key = match (d.find(" ("), d.find(", thread"), field, field.and_then(|f| d[f..].find(": ").map(|i| f + i))) {
            (Some(a), Some(b), Some(f), Some(c)) if a < b && f < c => format!("{}{}", &d[a + 2..b], &d[f..c]),
            _ => d.clone(),
        };
        let g = groups.entry(key).or_insert((0, d));
        g.0 += 1;
    }
    groups.iter().map(|(k, (n, first))| format!("{k} ×{n}, first: {first}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn eventpipe_layouts_agree_with_traceevent_field_by_field() {
    let test = "layouts::eventpipe_layouts_agree_with_traceevent_field_by_field";
    let locate = || harness::host::dotnet::Dotnet::locate_or_install().map(|_| ()).map_err(|e| format!("no .NET SDK: {e:#}"));
    if !prerequisites(test, &[&locate]) {
        return;
    }
    let reader = crate::build_traceevent_reader("nettrace-reader", "NettraceReader").unwrap_or_else(|e| panic!("the TraceEvent reader: {e}"));
    let scenario = Scenario::from_toml(SCENARIO, &harness::project_root().join("scenarios/layouts-traceevent.toml")).unwrap();
    let (o, _dir) = crate::run_scenario(&scenario, TargetKind::Host);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
    let trace = o.dir.join("artifacts/eventpipe.nettrace");
    let (ours, theirs) = (ours(&trace), theirs(&reader, &trace));
    let Comparison { diffs, compared, no_layout, undecoded } = compare(&ours, &theirs);
    let list = |m: &BTreeMap<(String, u32), u64>| m.iter().map(|((n, v), c)| format!("{n} v{v} ×{c}")).collect::<Vec<_>>().join(", ");
    let table = list(&compared);
    eprintln!("compared with TraceEvent 4.0.0, field by field: {table}");
    eprintln!("without fields in TraceEvent 4.0.0 (not compared): {}", list(&undecoded));
    eprintln!("without a layout of ours (not compared): {}", list(&no_layout));
    assert!(diffs.is_empty(), "{} differences, by event and field:\n{}", diffs.len(), grouped(&diffs));
    for (name, version) in MUST_COMPARE {
        assert!(compared.contains_key(&(name.to_string(), *version)), "no {name} v{version} in the run to compare: {table}");
    }
}

#[test]
fn a_changed_field_value_or_a_missing_field_is_a_difference_naming_event_and_field() {
    let seen = |fields: &[(&str, &str)]| Seen {
        id: 81,
        version: 2,
        name: "ContentionStart".into(),
        fields: fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        index: 7,
    };
    let one = |s: Seen| BTreeMap::from([(42u64, vec![s])]);
    let ours = one(seen(&[("LockID", "140000"), ("ContentionFlags", "0"), ("ExceptionHRESULT", "2148734208")]));
    let Comparison { diffs, compared, .. } = compare(&ours, &one(seen(&[("LockID", "140000"), ("ContentionFlags", "0"), ("ExceptionHRESULT", "-2146233088")])));
    assert!(diffs.is_empty(), "{diffs:?}");
    assert_eq!(compared[&("ContentionStart".to_string(), 2)], 1);
    let diffs = compare(&ours, &one(seen(&[("LockID", "140001"), ("ContentionFlags", "0")]))).diffs;
    assert_eq!(diffs.len(), 2, "{diffs:?}");
    assert!(diffs[0].starts_with("event #7 (ContentionStart v2, thread 42) field LockID: ours \"140000\", TraceEvent \"140001\""), "{diffs:?}");
    assert!(diffs[1].contains("field ExceptionHRESULT") && diffs[1].contains("no such field"), "{diffs:?}");
    let diffs = compare(&ours, &BTreeMap::new()).diffs;
    assert_eq!(diffs, ["thread 42: 1 runtime events ours, 0 TraceEvent's"]);
}
