//! Bad input never panics: truncated and corrupted perf.data. Every error names the file and a
//! byte offset. The damage starts from a real recording (../shared/fixtures/perf/perf-offcpu.data).

use std::path::Path;

use perfdata::PerfRecording;
use proptest::prelude::*;
use tracelab_fixtures::fixture;

fn fixture_bytes() -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(fixture("perf/perf-offcpu.data")).unwrap())
}

fn data_section(bytes: &[u8]) -> (usize, usize) {
    let at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
    (at(40), at(48))
}

fn assert_names_file_and_offset(result: perfdata::Result<PerfRecording>) {
    if let Err(e) = result {
        let msg = format!("{e:#}");
        assert!(msg.contains("bad.data") && msg.contains("byte offset"), "error lacks file or offset: {msg}");
    }
}

#[test]
fn the_fixture_itself_decodes() {
    let rec = PerfRecording::from_bytes(fixture_bytes(), Path::new("perf-offcpu.data")).unwrap();
    assert_eq!(rec.samples.len(), 226);
}

#[test]
fn header_errors_are_specific() {
    let bytes = fixture_bytes();
    let short = PerfRecording::from_bytes(&bytes[..50], Path::new("bad.data")).unwrap_err().to_string();
    assert!(short.contains("too short") && short.contains("byte offset 0"), "{short}");
    let mut wrong = bytes.to_vec();
    wrong[0] = b'X';
    let magic = PerfRecording::from_bytes(&wrong, Path::new("bad.data")).unwrap_err().to_string();
    assert!(magic.contains("not a perf.data file"), "{magic}");
    let (offset, _) = data_section(bytes);
    let cut = PerfRecording::from_bytes(&bytes[..offset + 100], Path::new("bad.data")).unwrap_err().to_string();
    assert!(cut.contains("data section") && cut.contains("byte offset 40"), "{cut}");
}

#[test]
fn a_broken_record_size_is_located() {
    let bytes = fixture_bytes();
    let (offset, _) = data_section(bytes);
    let mut broken = bytes.to_vec();
    // The first record's size field (u16 at +6) set below the header size.
    broken[offset + 6] = 3;
    broken[offset + 7] = 0;
    let err = format!("{:#}", PerfRecording::from_bytes(&broken, Path::new("bad.data")).unwrap_err());
    assert!(err.contains(&format!("byte offset {offset}")), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn truncated_perf_data_is_an_error_not_a_panic(len in 0usize..83_000) {
        let bytes = fixture_bytes();
        let len = len.min(bytes.len());
        assert_names_file_and_offset(PerfRecording::from_bytes(&bytes[..len], Path::new("bad.data")));
    }

    #[test]
    fn corrupted_perf_data_is_an_error_not_a_panic(
        flips in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 1..16),
        in_data in any::<bool>(),
    ) {
        let bytes = fixture_bytes();
        let (offset, size) = data_section(bytes);
        let mut corrupt = bytes.to_vec();
        for (at, value) in flips {
            let i = if in_data { offset + (at * size as f64) as usize } else { (at * corrupt.len() as f64) as usize };
            let i = i.min(corrupt.len() - 1);
            corrupt[i] = value;
        }
        assert_names_file_and_offset(PerfRecording::from_bytes(&corrupt, Path::new("bad.data")));
    }

}

/// Where HEADER_EVENT_DESC's section lies: (offset, size).
fn event_desc_section(bytes: &[u8]) -> (usize, usize) {
    let at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
    let has = |bit: usize| bytes[72 + bit / 8] & (1 << (bit % 8)) != 0;
    assert!(has(12), "the fixture has HEADER_EVENT_DESC");
    let (data, size) = data_section(bytes);
    let entry = data + size + 16 * (0..12).filter(|b| has(*b)).count();
    (at(entry), at(entry + 8))
}

/// Counts the reader crate would allocate by, on trust: a failed allocation aborts the process
/// (found by the unwinder's proptest, which flipped a record's type to AUXTRACE and asked for
/// 70 TB). Each must be refused naming file and offset (harness checks that its DWARF unwinder,
/// which walks records on its own, refuses them too).
#[test]
fn counts_that_would_abort_the_process_are_refused() {
    let bytes = fixture_bytes();
    let (data, _) = data_section(bytes);
    let (desc, _) = event_desc_section(bytes);
    let mut auxtrace = bytes.to_vec();
    // The first record turned into AUXTRACE (type 71), whose u64 at +8 is the size of the AUX
    // data that follows it.
    auxtrace[data..data + 4].copy_from_slice(&71u32.to_le_bytes());
    auxtrace[data + 6..data + 8].copy_from_slice(&16u16.to_le_bytes());
    auxtrace[data + 8..data + 16].copy_from_slice(&0x4061_0000_40c1u64.to_le_bytes());
    let mut events = bytes.to_vec();
    events[desc..desc + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let mut ids = bytes.to_vec();
    // The first event's id count, after its attribute (size at +4).
    let attr_size = u32::from_le_bytes(bytes[desc + 4..desc + 8].try_into().unwrap()) as usize;
    ids[desc + 8 + attr_size..desc + 12 + attr_size].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());

    for (name, damaged, offset) in [("auxtrace", &auxtrace, data), ("events", &events, desc), ("ids", &ids, desc + 8 + attr_size)] {
        let err = PerfRecording::from_bytes(damaged, Path::new("bad.data")).unwrap_err();
        assert_eq!(err.offset(), Some(offset as u64), "{name}: {err}");
        let err = err.to_string();
        assert!(err.contains("bad.data") && err.contains(&format!("byte offset {offset}")), "{name}: {err}");
        let err = perfdata::check(damaged, Path::new("bad.data")).unwrap_err().to_string();
        assert!(err.contains(&format!("byte offset {offset}")), "{name}: {err}");
    }
}

/// Inputs the fuzzer found (tests/regressions/README.md): an error naming file and offset, never
/// a panic (the reader crate asserts on an MMAP2 build id longer than 20 bytes).
#[test]
fn fuzzer_findings_are_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    for (file, why) in [
        ("mmap2-build-id-too-long.data", "build id of"),
        ("read-callchain-length-overflow.data", "does not fit"),
        ("event-desc-attr-size-not-a-version.data", "event ids run past the section"),
    ] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        for order in [perfdata::SampleOrder::Time, perfdata::SampleOrder::File] {
            let err = format!("{:#}", PerfRecording::from_bytes_in(&bytes, Path::new("bad.data"), order).unwrap_err());
            assert!(err.contains("bad.data") && err.contains("byte offset") && err.contains(why), "{file}: {err}");
        }
    }
}

/// `find_record` gives back where a record lies from its type and body, as a reader that got the
/// records sorted by time needs for its errors; a body no record has is `None`.
#[test]
fn records_are_found_again_by_their_bytes() {
    let bytes = fixture_bytes();
    let path = Path::new("perf-offcpu.data");
    let (data, size) = data_section(bytes);
    let mut at = data;
    let mut checked = 0;
    while at < data + size && checked < 200 {
        let len = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        let ty = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let found = perfdata::find_record(bytes, path, ty, &bytes[at + 8..at + len]).unwrap();
        // Equal records (two FINISHED_ROUNDs) are found at the first of them.
        assert!(found <= at as u64 && bytes[found as usize..found as usize + len] == bytes[at..at + len], "record at {at}");
        at += len;
        checked += 1;
    }
    assert_eq!(checked, 200);
    assert_eq!(perfdata::find_record(bytes, path, 9, b"no record has this body"), None);
    assert_eq!(perfdata::find_record(&bytes[..40], path, 9, b""), None);
}
