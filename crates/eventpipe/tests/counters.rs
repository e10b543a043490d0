//! EventCounters payloads through the real path: an `EventCounters` metadata definition as the
//! runtime's EventSource describes it (one `Payload` structure), a payload decoded by it, then
//! read as a counter. Any bytes give a counter or an error naming an offset inside the payload.

use eventpipe::{CounterKind, DecodedEvent, EventMetadata, counter_sample, decode_payload};
use proptest::prelude::*;

const OFFSET: u64 = 4096;

fn utf16z(out: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16().chain([0]) {
        out.extend_from_slice(&u.to_le_bytes());
    }
}

/// The metadata of a mean counter's `EventCounters` event (TypeCode 1 = object, 18 = string,
/// 14 = double, 13 = single, 9 = int32).
fn mean_metadata() -> EventMetadata {
    let mut m = Vec::new();
    m.extend_from_slice(&7u32.to_le_bytes());
    utf16z(&mut m, "System.Runtime");
    m.extend_from_slice(&0u32.to_le_bytes());
    utf16z(&mut m, "EventCounters");
    m.extend_from_slice(&0u64.to_le_bytes());
    m.extend_from_slice(&0u32.to_le_bytes());
    m.extend_from_slice(&4u32.to_le_bytes());
    m.extend_from_slice(&1u32.to_le_bytes());
    m.extend_from_slice(&1u32.to_le_bytes());
    let fields: [(u32, &str); 12] = [
        (18, "Name"), (18, "DisplayName"), (14, "Mean"), (14, "StandardDeviation"), (9, "Count"), (14, "Min"),
        (14, "Max"), (13, "IntervalSec"), (18, "Series"), (18, "CounterType"), (18, "Metadata"), (18, "DisplayUnits"),
    ];
    m.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for (code, name) in fields {
        m.extend_from_slice(&code.to_le_bytes());
        utf16z(&mut m, name);
    }
    utf16z(&mut m, "Payload");
    EventMetadata::parse(&m, 0).unwrap()
}

fn mean_payload(name: &str, mean: f64, interval: f32) -> Vec<u8> {
    let mut p = Vec::new();
    utf16z(&mut p, name);
    utf16z(&mut p, "CPU Usage");
    p.extend_from_slice(&mean.to_le_bytes());
    p.extend_from_slice(&0f64.to_le_bytes());
    p.extend_from_slice(&1i32.to_le_bytes());
    p.extend_from_slice(&mean.to_le_bytes());
    p.extend_from_slice(&mean.to_le_bytes());
    p.extend_from_slice(&interval.to_le_bytes());
    utf16z(&mut p, "Interval=1000");
    utf16z(&mut p, "Mean");
    utf16z(&mut p, "");
    utf16z(&mut p, "%");
    p
}

fn event(meta: &EventMetadata, payload: &[u8]) -> eventpipe::Result<DecodedEvent> {
    let fields = decode_payload(meta, payload, 8, OFFSET)?;
    Ok(DecodedEvent {
        provider: meta.provider.clone(),
        name: meta.name.clone(),
        event_id: meta.event_id,
        version: meta.version,
        time_ns: 0,
        thread_id: 1,
        stack: None,
        payload_offset: OFFSET,
        fields,
    })
}

#[test]
fn a_runtime_shaped_mean_counter_reads() {
    let meta = mean_metadata();
    let ev = event(&meta, &mean_payload("cpu-usage", 25.5, 1.0)).unwrap();
    let s = counter_sample(&ev).unwrap().unwrap();
    assert_eq!((s.name.as_str(), s.kind, s.value, s.interval_s, s.units.as_str()), ("cpu-usage", CounterKind::Mean, 25.5, 1.0, "%"));
}

#[test]
fn a_cut_payload_names_an_offset_inside_it() {
    let meta = mean_metadata();
    let full = mean_payload("cpu-usage", 25.5, 1.0);
    let err = event(&meta, &full[..40]).and_then(|ev| counter_sample(&ev).map(|_| ())).unwrap_err();
    assert!((OFFSET..=OFFSET + 40).contains(&err.offset()), "{err}");
}

proptest! {
    /// Any payload bytes: a counter, or an error at an offset within the payload.
    #[test]
    fn any_payload_reads_or_names_its_offset(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let meta = mean_metadata();
        match event(&meta, &bytes).and_then(|ev| counter_sample(&ev)) {
            Ok(Some(s)) => prop_assert!(s.value.is_finite() && s.interval_s > 0.0),
            Ok(None) => prop_assert!(false, "an EventCounters event is a counter or an error"),
            Err(e) => prop_assert!((OFFSET..=OFFSET + bytes.len() as u64).contains(&e.offset()), "{e}"),
        }
    }

    /// Cuts and flips of a valid payload: the same.
    #[test]
    fn damaged_payloads_read_or_name_their_offset(cut in 0usize..120, flips in proptest::collection::vec((0usize..120, any::<u8>()), 0..6)) {
        let meta = mean_metadata();
        let mut bytes = mean_payload("gc-heap-size", 64.0, 1.0);
        for (at, v) in flips {
            if at < bytes.len() { bytes[at] = v; }
        }
        bytes.truncate(cut.min(bytes.len()));
        if let Err(e) = event(&meta, &bytes).and_then(|ev| counter_sample(&ev)) {
            prop_assert!((OFFSET..=OFFSET + bytes.len() as u64).contains(&e.offset()), "{e}");
        }
    }
}

/// A recorded session of the runtime's counters: every counter dotnet-counters shows for
/// System.Runtime, with the totals the app measured itself (see tests/data/README.md).
#[test]
fn recorded_runtime_counters() {
    let bytes = include_bytes!("data/system-runtime-counters.nettrace");
    let d = eventpipe::decode(&bytes[..], &eventpipe::DecodeOptions::default()).unwrap();
    let series = eventpipe::counter_series(&d.events).unwrap();
    let get = |name: &str| series.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no counter {name}"));
    for name in ["cpu-usage", "working-set", "gc-heap-size", "gen-0-gc-count", "exception-count", "alloc-rate", "threadpool-queue-length", "threadpool-thread-count", "time-in-gc"] {
        assert_eq!(get(name).samples.len(), 7, "{name}");
    }
    assert_eq!((get("exception-count").kind, get("exception-count").total()), (CounterKind::Sum, 599.0));
    assert_eq!(get("gen-0-gc-count").total(), 59.0);
    assert_eq!(get("alloc-rate").total(), 240_963_344.0);
    assert_eq!((get("threadpool-queue-length").kind, get("threadpool-queue-length").median()), (CounterKind::Mean, 5.0));
    assert!((get("cpu-usage").median() - 23.43).abs() < 0.01, "{}", get("cpu-usage").median());
}
