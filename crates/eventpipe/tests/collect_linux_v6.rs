//! The nettrace V6 reader on real `dotnet-trace collect-linux` recordings, made on the
//! 6.12-user-events guest (tests/data/collect-linux/README.md).

use std::collections::BTreeMap;
use std::io::Read;

fn read(name: &str) -> eventpipe::V6Trace {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/collect-linux").join(format!("{name}.nettrace.gz"));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
    eventpipe::read_v6(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Events per `provider/name`, and how many of them carry a stack.
fn census(t: &eventpipe::V6Trace) -> BTreeMap<String, (usize, usize)> {
    let mut by: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in &t.events {
        let key = t.metadata.get(&e.metadata_id).map_or_else(|| format!("?{}", e.metadata_id), |m| format!("{}/{}", m.provider, m.name));
        let entry = by.entry(key).or_default();
        entry.0 += 1;
        entry.1 += usize::from(!e.stack.is_empty());
    }
    by
}

#[test]
fn every_collect_linux_recording_reads_whole() {
    for name in ["cpu-bound", "gc-heavy", "exceptions", "on-vs-off-cpu"] {
        let t = read(name);
        let census = census(&t);
        eprintln!("== {name}: {} events, {} event types, lost {}, keys {:?}", t.events.len(), t.metadata.len(), t.lost_events, t.keys);
        for (k, (n, stacks)) in &census {
            eprintln!("  {n:>6} ({stacks:>6} with a stack)  {k}");
        }
        assert!(!t.events.is_empty(), "{name}: no events");
        assert!(census.keys().all(|k| !k.starts_with('?')), "{name}: events of unknown metadata: {census:?}");
    }
}

/// What each recording holds, as its scenario's app did it (the runtime's events by their manifest
/// ids: user_events carries no event names): perf CPU samples with stacks in cpu-bound; GCStart (1)
/// and GCEnd (2) once per induced collection in gc-heavy (truth: 10); ExceptionThrown_V1 (80) and
/// its catch (250) in exceptions; every runtime event with its call stack.
#[test]
fn collect_linux_recordings_hold_samples_and_runtime_events_with_stacks() {
    let count = |t: &eventpipe::V6Trace, provider: &str, id: u32| {
        t.events.iter().filter(|e| t.metadata.get(&e.metadata_id).is_some_and(|m| m.provider == provider && m.event_id == id)).count()
    };
    let runtime = "Microsoft-Windows-DotNETRuntime";
    let cpu = read("cpu-bound");
    let samples: Vec<_> = cpu.events.iter().filter(|e| cpu.metadata[&e.metadata_id].provider == "Universal.Events").collect();
    assert_eq!(samples.len(), 13314);
    assert!(samples.iter().all(|s| !s.stack.is_empty()), "a CPU sample without a stack");
    assert_eq!(cpu.keys.get("HardwareThreadCount").map(String::as_str), Some("2"));
    let gc = read("gc-heavy");
    assert_eq!((count(&gc, runtime, 1), count(&gc, runtime, 2)), (10, 10), "GCStart / GCEnd");
    let exceptions = read("exceptions");
    assert_eq!(count(&exceptions, runtime, 80), 873, "ExceptionThrown_V1");
    assert_eq!(count(&exceptions, runtime, 250), 874, "ExceptionCatchStart");
    for t in [&gc, &exceptions] {
        assert!(t.events.iter().filter(|e| t.metadata[&e.metadata_id].provider == runtime).all(|e| !e.stack.is_empty()));
    }
}


/// The recorder's own events read by their field lists: strings are UTF-8 with a u16 length
/// (every mapping's file name whole), numbers varints.
#[test]
fn universal_system_events_read_by_their_fields() {
    let t = read("cpu-bound");
    let mut names = Vec::new();
    for e in t.events.iter().filter(|e| t.metadata[&e.metadata_id].name == "ProcessMapping") {
        let fields = t.fields(e).unwrap();
        assert_eq!(fields.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["Id", "StartAddress", "EndAddress", "FileOffset", "FileName", "MetadataId"]);
        names.push(fields[4].1.as_str().unwrap().to_string());
    }
    assert!(names.iter().any(|n| n.ends_with("/libcoreclr.so")), "{names:?}");
    assert!(names.iter().any(|n| n == "/memfd:doublemapper (deleted)"), "{names:?}");
    let symbol = t.events.iter().find(|e| t.metadata[&e.metadata_id].name == "ProcessSymbol").unwrap();
    let fields = t.fields(symbol).unwrap();
    assert!(fields[4].1.as_str().unwrap().contains("[System.Private.CoreLib]"), "{fields:?}");
}
