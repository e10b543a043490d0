//! Property tests on synthetic streams: compressed event rows written by a small encoder (the
//! runtime's rules: per-block state, deltas, optional fields) decode back to what was written;
//! any corruption or truncation of a real recording gives an error with an in-range byte offset,
//! never a panic, hang or unbounded allocation.

use eventpipe::write_varint_u64 as write_u64;
use eventpipe::{Error, NettraceReader};
use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
struct Row {
    metadata_id: u32,
    thread: u64,
    capture_thread: u64,
    processor: u32,
    stack_id: u32,
    timestamp_delta: u64,
    activity: Option<[u8; 16]>,
    payload: Vec<u8>,
}

fn utf16z(out: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16().chain([0]) {
        out.extend_from_slice(&u.to_le_bytes());
    }
}

fn object(out: &mut Vec<u8>, name: &str, version: u32) {
    out.extend_from_slice(&[5, 5, 1]);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(6);
}

fn block(out: &mut Vec<u8>, name: &str, body: &[u8]) {
    object(out, name, 2);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out.extend_from_slice(body);
    out.push(6);
}

fn block_header() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&20u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&[0; 16]);
    b
}

/// Compresses rows as the runtime does: a field is written only when it differs from the
/// previous row of the block.
fn encode_rows(rows: &[Row], sequences: bool, dropped_before: Option<(usize, u32)>) -> Vec<u8> {
    let mut b = block_header();
    let mut prev: Option<&Row> = None;
    let mut prev_payload_len = None;
    // Each capture thread numbers its events; the header carries one running number.
    let mut per_thread: std::collections::HashMap<u64, u32> = Default::default();
    let mut running = 0u32;
    for (i, r) in rows.iter().enumerate() {
        let seq = per_thread.entry(r.capture_thread).or_insert(0);
        *seq += 1;
        // The writer dropped `n` events of this thread here (its buffers were full).
        if let Some((at, n)) = dropped_before.filter(|(at, _)| *at == i) {
            let _ = at;
            *seq += n;
        }
        let seq = *seq;
        let mut flags = 0u8;
        let mut tail = Vec::new();
        if prev.is_none_or(|p| p.metadata_id != r.metadata_id) {
            flags |= 1;
            write_u64(&mut tail, r.metadata_id.into());
        }
        if sequences
            && (prev.is_none_or(|p| p.capture_thread != r.capture_thread || p.processor != r.processor)
                || seq != running.wrapping_add(1))
        {
            flags |= 2;
            write_u64(&mut tail, seq.wrapping_sub(running).wrapping_sub(1).into());
            write_u64(&mut tail, r.capture_thread);
            write_u64(&mut tail, r.processor.into());
        }
        if prev.is_none_or(|p| p.thread != r.thread) {
            flags |= 4;
            write_u64(&mut tail, r.thread);
        }
        if prev.is_none_or(|p| p.stack_id != r.stack_id) {
            flags |= 8;
            write_u64(&mut tail, r.stack_id.into());
        }
        write_u64(&mut tail, r.timestamp_delta);
        if let Some(a) = r.activity {
            flags |= 16;
            tail.extend_from_slice(&a);
        }
        if prev_payload_len != Some(r.payload.len()) {
            flags |= 128;
            write_u64(&mut tail, r.payload.len() as u64);
        }
        if sequences {
            running = seq;
        }
        b.push(flags);
        b.extend_from_slice(&tail);
        b.extend_from_slice(&r.payload);
        prev = Some(r);
        prev_payload_len = Some(r.payload.len());
    }
    b
}

/// A stream with metadata ids 1..=3, one stack block (ids 1, 2) and `rows`.
fn stream(rows: &[Row], sequences: bool) -> Vec<u8> {
    stream_with_drops(rows, sequences, None)
}

fn stream_with_drops(rows: &[Row], sequences: bool, dropped_before: Option<(usize, u32)>) -> Vec<u8> {
    let mut s = b"Nettrace".to_vec();
    s.extend_from_slice(&20u32.to_le_bytes());
    s.extend_from_slice(b"!FastSerialization.1");
    object(&mut s, "Trace", 4);
    let mut header = vec![0u8; 16];
    header.extend_from_slice(&0u64.to_le_bytes());
    header.extend_from_slice(&1_000_000_000u64.to_le_bytes());
    for v in [8u32, 4242, 2, 1_000_000] {
        header.extend_from_slice(&v.to_le_bytes());
    }
    s.extend_from_slice(&header);
    s.push(6);
    let mut meta = block_header();
    for id in 1..=3u32 {
        let mut payload = Vec::new();
        payload.extend_from_slice(&id.to_le_bytes());
        utf16z(&mut payload, "Test-Provider");
        payload.extend_from_slice(&(100 + id).to_le_bytes());
        utf16z(&mut payload, &format!("Event{id}"));
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&4u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        meta.push(if id == 1 { 128 | 4 } else { 128 });
        if id == 1 {
            write_u64(&mut meta, 0);
        }
        write_u64(&mut meta, 0);
        write_u64(&mut meta, payload.len() as u64);
        meta.extend_from_slice(&payload);
    }
    block(&mut s, "MetadataBlock", &meta);
    let mut stacks = Vec::new();
    stacks.extend_from_slice(&1u32.to_le_bytes());
    stacks.extend_from_slice(&2u32.to_le_bytes());
    for ips in [&[0x1000u64, 0x2000][..], &[0x3000u64][..]] {
        stacks.extend_from_slice(&((ips.len() * 8) as u32).to_le_bytes());
        for ip in ips {
            stacks.extend_from_slice(&ip.to_le_bytes());
        }
    }
    block(&mut s, "StackBlock", &stacks);
    block(&mut s, "EventBlock", &encode_rows(rows, sequences, dropped_before));
    s.push(1);
    s
}

fn row_strategy() -> impl Strategy<Value = Row> {
    (
        1u32..=3,
        prop_oneof![Just(7u64), Just(8), any::<u64>()],
        prop_oneof![Just(7u64), Just(8)],
        0u32..4,
        0u32..=2,
        prop_oneof![0u64..1000, any::<u64>()],
        proptest::option::of(any::<[u8; 16]>()),
        proptest::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(metadata_id, thread, capture_thread, processor, stack_id, timestamp_delta, activity, payload)| Row {
            metadata_id,
            thread,
            capture_thread,
            processor,
            stack_id,
            timestamp_delta,
            activity,
            payload,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn compressed_rows_round_trip(rows in proptest::collection::vec(row_strategy(), 1..60), sequences: bool) {
        let bytes = stream(&rows, sequences);
        let mut reader = NettraceReader::new(&bytes[..]).unwrap();
        let mut timestamp = 0u64;
        let mut activity = [0u8; 16];
        for (i, r) in rows.iter().enumerate() {
            let ev = reader.next_event().unwrap().unwrap_or_else(|| panic!("row {i} missing"));
            timestamp = timestamp.wrapping_add(r.timestamp_delta);
            if let Some(a) = r.activity { activity = a; }
            prop_assert_eq!(ev.metadata.metadata_id, r.metadata_id);
            prop_assert_eq!(ev.metadata.event_id, 100 + r.metadata_id);
            prop_assert_eq!(&ev.metadata.name, &format!("Event{}", r.metadata_id));
            prop_assert_eq!(ev.thread_id, r.thread);
            prop_assert_eq!(ev.timestamp, timestamp);
            prop_assert_eq!(ev.activity_id, activity);
            prop_assert_eq!(ev.payload, &r.payload[..]);
            let expected_stack: &[u64] = match r.stack_id { 1 => &[0x1000, 0x2000], 2 => &[0x3000], _ => &[] };
            prop_assert_eq!(ev.stack(), expected_stack);
            if sequences {
                prop_assert_eq!(ev.capture_thread_id, r.capture_thread);
            }
        }
        prop_assert!(reader.next_event().unwrap().is_none());
        prop_assert_eq!(reader.stats().lost_events, 0);
    }

    /// Truncation anywhere is an error naming an offset inside the data, never a panic.
    #[test]
    fn truncated_streams_fail_with_an_offset(rows in proptest::collection::vec(row_strategy(), 1..20), cut in any::<prop::sample::Index>()) {
        let bytes = stream(&rows, true);
        let cut = cut.index(bytes.len());
        let result = read_all(&bytes[..cut]);
        let err = result.expect_err("a truncated stream must not decode as complete");
        prop_assert!(err.offset() <= cut as u64, "offset {} past the {cut} bytes: {err}", err.offset());
    }

    /// Corrupting bytes of a real recording: events or an error with an in-range offset.
    #[test]
    fn corrupted_recording_never_panics(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = real_recording().to_vec();
        let len = bytes.len();
        for (at, value) in flips {
            bytes[at.index(len)] = value;
        }
        if let Err(e) = read_all(&bytes) {
            prop_assert!(e.offset() <= len as u64, "{e}");
            prop_assert!(e.to_string().contains("byte offset"), "{e}");
        }
        let _ = eventpipe::decode(&bytes[..], &Default::default());
    }
}

fn read_all(bytes: &[u8]) -> Result<u64, Error> {
    let mut reader = NettraceReader::new(bytes)?;
    let mut n = 0;
    while let Some(ev) = reader.next_event()? {
        let _ = eventpipe::decode_payload(ev.metadata, ev.payload, 8, ev.payload_offset);
        n += 1;
    }
    Ok(n)
}

fn real_recording() -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| {
        std::fs::read(tracelab_fixtures::fixture("nettrace/fixture-jit-norundown.nettrace")).unwrap()
    })
}

#[test]
fn a_huge_block_size_is_refused_before_allocating() {
    let mut bytes = stream(&[], false);
    // The MetadataBlock's size field follows its type header right after the Trace object.
    let at = bytes.windows(13).position(|w| w == b"MetadataBlock").unwrap() + 14;
    bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = read_all(&bytes).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    assert_eq!(err.offset(), at as u64);
}

#[test]
fn not_a_nettrace_file_is_named() {
    let err = read_all(b"\x7fELF\x02\x01\x01\x00rest").unwrap_err();
    assert!(err.to_string().contains("not a nettrace stream"), "{err}");
    let err = read_all(b"Nett").unwrap_err();
    assert!(matches!(err, Error::Truncated { offset: 4, .. }), "{err}");
}

/// Gaps in a thread's sequence numbers are events the writer dropped.
#[test]
fn dropped_events_are_counted() {
    let row = |capture_thread| Row {
        metadata_id: 1,
        thread: capture_thread,
        capture_thread,
        processor: 0,
        stack_id: 0,
        timestamp_delta: 10,
        activity: None,
        payload: vec![1, 2],
    };
    let rows = [row(7), row(7), row(8), row(7), row(8)];
    let bytes = stream_with_drops(&rows, true, Some((3, 5)));
    let mut reader = NettraceReader::new(&bytes[..]).unwrap();
    let mut n = 0;
    while reader.next_event().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 5);
    assert_eq!(reader.stats().lost_events, 5);
}
