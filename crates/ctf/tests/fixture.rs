//! The recorded LTTng 2.12 trace of ../shared/fixtures/lttng decodes to exactly the events of
//! babeltrace's text dump of it: same order, timestamps, contexts and field values.

use std::path::PathBuf;

use ctf::{Event, Trace, Value};
use proptest::prelude::*;

fn fixture_dir() -> PathBuf {
    tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit")
}

/// babeltrace 1's default text line (UTC clock).
fn babeltrace_line(ev: &Event, prev: Option<i64>, hostname: &str) -> String {
    ctf::babeltrace_line(ev, prev, hostname, ctf::TextClock::TimeOfDay)
}

#[test]
fn fixture_matches_babeltrace_text() {
    let dir = fixture_dir();
    let expected = std::fs::read_to_string(tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions.babeltrace.txt"))
        .expect("the LTTng fixture's babeltrace text");
    let expected: Vec<&str> = expected.lines().collect();
    let trace = Trace::open(&dir).unwrap();
    assert_eq!(trace.metadata().env("tracer_minor"), Some("12"));
    let hostname = trace.metadata().env("hostname").unwrap().to_string();
    let mut prev = None;
    let mut got = Vec::new();
    let mut events = trace.events();
    for ev in &mut events {
        let ev = ev.unwrap();
        got.push(babeltrace_line(&ev, prev, &hostname));
        prev = Some(ev.ns_from_origin);
    }
    assert_eq!(events.discarded(), 0);
    assert_eq!(got.len(), 1068);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "event {i} differs");
    }
    assert_eq!(got.len(), expected.len());
}

#[test]
fn fixture_counts_and_fields() {
    let trace = Trace::open(&fixture_dir()).unwrap();
    let mut counts = std::collections::BTreeMap::new();
    let mut messages = std::collections::BTreeMap::new();
    for ev in trace.events() {
        let ev = ev.unwrap();
        *counts.entry(ev.name().to_string()).or_insert(0) += 1;
        if ev.name() == "DotNETRuntime:ExceptionThrown_V1" {
            assert_eq!(ev.field("ExceptionType").and_then(Value::as_str), Some("Fixture.FixtureException"));
            let msg = ev.field("ExceptionMessage").and_then(Value::as_str).unwrap().to_string();
            *messages.entry(msg).or_insert(0) += 1;
            assert_eq!(ev.context_field("procname").and_then(Value::as_str), Some("dotnet"));
        }
    }
    assert_eq!(counts["DotNETRuntime:ExceptionThrown_V1"], 1000);
    assert_eq!(counts["DotNETRuntime:GCStart_V2"], 22);
    assert_eq!(counts["DotNETRuntime:GCEnd_V1"], 23);
    assert_eq!(counts["DotNETRuntime:GCHeapStats_V2"], 23);
    assert_eq!(messages["fixture 0"], 334);
    assert_eq!(messages["fixture 1"], 333);
    assert_eq!(messages["fixture 2"], 333);
}

/// Events decoded into a recycled event's strings and lists equal those decoded afresh, field by
/// field (a reused string or list keeps nothing of the event before).
#[test]
fn recycled_events_equal_fresh_ones() {
    let trace = Trace::open(&fixture_dir()).unwrap();
    let fresh: Vec<String> = trace.events().map(|e| format!("{:?}", e.unwrap())).collect();
    let mut recycled = Vec::new();
    let mut events = trace.events();
    while let Some(ev) = events.next() {
        let ev = ev.unwrap();
        recycled.push(format!("{ev:?}"));
        events.recycle(ev);
    }
    assert_eq!(fresh.len(), 1068);
    for (i, (f, r)) in fresh.iter().zip(&recycled).enumerate() {
        assert_eq!(f, r, "event {i} differs when decoded into a recycled event");
    }
    assert_eq!(fresh.len(), recycled.len());
}

#[test]
fn truncated_stream_names_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    copy_fixture(tmp);
    let stream = tmp.join("channel0_1");
    let data = std::fs::read(&stream).unwrap();
    std::fs::write(&stream, &data[..5000]).unwrap();
    let trace = Trace::open(tmp).unwrap();
    let err = trace.events().find_map(Result::err).expect("a truncated packet is an error");
    let text = err.to_string();
    assert!(text.contains("channel0_1") && text.contains("at byte 0"), "{text}");
}

#[test]
fn bad_metadata_names_the_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    std::fs::write(tmp.join("metadata"), "/* CTF 1.8 */\ntrace {\n  major = 1;\n  byte_order = le;\n  packet.header := struct { uint32_t magic; };\n};\n").unwrap();
    let err = Trace::open(tmp).err().expect("an unknown type is an error").to_string();
    assert!(err.contains("metadata") && err.contains("line 5") && err.contains("uint32_t"), "{err}");
}

fn copy_fixture(to: &std::path::Path) {
    for name in ["metadata", "channel0_0", "channel0_1"] {
        std::fs::copy(fixture_dir().join(name), to.join(name)).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// Corrupting any bytes of a stream gives events or an error, never a panic or a hang.
    #[test]
    fn corrupt_streams_never_panic(edits in proptest::collection::vec((0usize..90112, any::<u8>()), 1..16)) {
        let meta = std::fs::read(fixture_dir().join("metadata")).unwrap();
        let mut data = std::fs::read(fixture_dir().join("channel0_1")).unwrap();
        for (at, b) in edits {
            data[at] = b;
        }
        let metadata = ctf::Metadata::from_bytes(&meta).unwrap();
        let mut n = 0;
        // Recycling every other event: damaged input must not trip the reuse of strings and lists.
        let mut events = ctf::decode_buffer(&metadata, std::path::Path::new("channel0_1"), &data);
        while let Some(ev) = events.next() {
            let Ok(ev) = ev else { break };
            n += 1;
            if n % 2 == 0 {
                events.recycle(ev);
            }
        }
        prop_assert!(n <= 100_000);
    }

    /// Arbitrary metadata text is parsed or refused, never a panic.
    #[test]
    fn arbitrary_metadata_never_panics(text in "[a-z_ {}:=;\\[\\]<>0-9.,\"]{0,200}") {
        let _ = ctf::Metadata::from_text(&format!("trace {{ byte_order = le; }}; {text}"));
    }
}

/// A folder that is not a whole trace is an error naming what is missing, never "0 events".
#[test]
fn incomplete_trace_folders_are_errors_naming_what_is_missing() {
    let empty = tempfile::tempdir().unwrap();
    let e = Trace::find(empty.path()).unwrap_err().to_string();
    assert!(e.contains("not a CTF trace: an empty folder"), "{e}");

    // The fixture's streams without its metadata.
    let no_meta = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_dir()).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() && entry.file_name() != "metadata" {
            std::fs::copy(entry.path(), no_meta.path().join(entry.file_name())).unwrap();
        }
    }
    let e = Trace::find(no_meta.path()).unwrap_err().to_string();
    assert!(e.contains("no `metadata` file in it or below it"), "{e}");

    // Its metadata without streams.
    let no_streams = tempfile::tempdir().unwrap();
    std::fs::copy(fixture_dir().join("metadata"), no_streams.path().join("metadata")).unwrap();
    let e = Trace::open(no_streams.path()).err().unwrap().to_string();
    assert!(e.contains("no stream files beside it"), "{e}");
}
