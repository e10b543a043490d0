//! Truncated and damaged recordings of the wake-up (`perf-offwake`) and system-call
//! (`perf-syscalls`) modes decode to an error naming the file and the byte offset of the damage (the
//! damaged header field, record frame or record, wherever the reader met it) — never to a panic
//! or a half-read answer taken as whole.
//! Fixtures: `harness/tests/fixtures/offwake/` (README there says how they were recorded).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::offwake::join_wakeups;
use super::syscalls::syscalls_collection;
use stacks::{UnwindOptions, unwind_perf_data};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/offwake").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Decodes `path` as the collector of `mode` does (no images: the unwinder names what it can).
fn decode(path: &Path, mode: &str) -> anyhow::Result<usize> {
    let unwound = unwind_perf_data(path, UnwindOptions::default())?;
    let pids: BTreeSet<u32> = unwound.samples.iter().map(|s| s.pid).collect();
    Ok(match mode {
        "offwake" => join_wakeups(&unwound, None, &pids).map_err(|e| e.context(path.display().to_string()))?.len(),
        _ => syscalls_collection("perf-syscalls", &unwound, &pids).samples.len(),
    })
}

#[test]
fn the_fixtures_decode_whole() {
    let dir = tempfile::tempdir().unwrap();
    for (name, mode) in [("offwake.data", "offwake"), ("syscalls.data", "syscalls")] {
        let path = dir.path().join(name);
        std::fs::write(&path, fixture(name)).unwrap();
        let unwound = unwind_perf_data(&path, UnwindOptions::default()).unwrap();
        assert!(unwound.formats.keys().any(|k| k.contains("sched_waking") || k.contains("sys_enter")), "{name}: {:?}", unwound.formats.keys());
        decode(&path, mode).unwrap_or_else(|e| panic!("{name}: {e:#}"));
    }
    let path = dir.path().join("syscalls.data");
    let unwound = unwind_perf_data(&path, UnwindOptions::default()).unwrap();
    let c = syscalls_collection("perf-syscalls", &unwound, &BTreeSet::new());
    for call in ["openat", "read", "execve"] {
        assert!(c.samples.iter().any(|s| s.kind.as_deref() == Some(call)), "no {call} in the fixture");
    }
}

/// The byte offsets an error names (`byte offset 4096`, `byte offsets 0..1024`).
fn named_offsets(text: &str) -> Vec<u64> {
    let re = regex::Regex::new(r"byte offsets? (\d+)(?:\.\.(\d+))?").expect("valid regex");
    re.captures_iter(text).flat_map(|c| [c.get(1), c.get(2)]).flatten().filter_map(|m| m.as_str().parse().ok()).collect()
}

/// The error names the file and at least one byte offset, each within the file's `len` bytes.
fn check_error(path: &Path, err: &anyhow::Error, len: usize) {
    let text = format!("{err:#}");
    assert!(text.contains(&path.display().to_string()), "the error names no file: {text}");
    let offsets = named_offsets(&text);
    assert!(!offsets.is_empty(), "the error names no byte offset: {text}");
    for o in offsets {
        assert!(o <= len as u64, "byte offset {o} lies beyond the file's {len} bytes: {text}");
    }
}

#[test]
fn offsets_are_read_from_errors() {
    assert_eq!(named_offsets("x.data: bad record at byte offset 4096: …"), [4096]);
    assert_eq!(named_offsets("cannot read … (byte offsets 0..1024): eof"), [0, 1024]);
    assert!(named_offsets("record 3 is malformed").is_empty());
}

/// A sched_waking sample whose tracepoint data is cut short inside the record (its frame intact):
/// the error names the record's byte offset, found in the file.
#[test]
fn a_short_tracepoint_record_is_named_by_its_offset() {
    let bytes = fixture("offwake.data");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("offwake.data");
    std::fs::write(&path, &bytes).unwrap();
    let unwound = unwind_perf_data(&path, UnwindOptions::default()).unwrap();
    let waking = unwound.event_names.iter().position(|n| n == "sched:sched_waking").unwrap();
    let want = unwound.formats["sched:sched_waking"].size();
    let s = unwound.samples.iter().find(|s| s.event == waking).unwrap();
    // Find that sample's raw data in the file: PERF_SAMPLE_RAW is a u32 size, then the data.
    let at = bytes.windows(s.raw.len()).position(|w| w == s.raw.as_slice()).unwrap();
    let size_at = at - 4;
    let mut damaged = bytes.clone();
    damaged[size_at..at].copy_from_slice(&((want as u32) - 8).to_le_bytes());
    std::fs::write(&path, &damaged).unwrap();
    let err = format!("{:#}", unwind_perf_data(&path, UnwindOptions::default()).err().expect("an error"));
    let offsets = named_offsets(&err);
    assert_eq!(offsets.len(), 1, "{err}");
    // The record holding the damaged size field starts before it, within a record's length.
    assert!(offsets[0] < size_at as u64 && size_at as u64 - offsets[0] < 65536, "{err}");
    assert!(err.contains("offwake.data") && err.contains("sched_waking"), "{err}");
}

proptest! {
    // PROPTEST_CASES raises the count for a longer campaign by hand (3,000 cases pass).
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48), ..ProptestConfig::default() })]

    /// perf killed mid-write: the file ends anywhere.
    #[test]
    fn truncated_recordings_are_errors_with_file_and_offset(which in 0usize..2, cut in 0.0f64..1.0) {
        let (name, mode) = [("offwake.data", "offwake"), ("syscalls.data", "syscalls")][which];
        let bytes = fixture(name);
        let len = ((bytes.len() - 1) as f64 * cut) as usize;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes[..len]).unwrap();
        match decode(&path, mode) {
            Err(e) => check_error(&path, &e, len),
            Ok(_) => prop_assert!(false, "{name} cut to {len} of {} bytes decoded without an error", bytes.len()),
        }
    }

    /// Bytes overwritten anywhere: an answer, or an error naming the file and the damage's byte
    /// offset within it; never a panic.
    #[test]
    fn damaged_recordings_never_panic(which in 0usize..2, edits in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 1..16)) {
        let (name, mode) = [("offwake.data", "offwake"), ("syscalls.data", "syscalls")][which];
        let mut bytes = fixture(name);
        let n = bytes.len();
        for (at, value) in edits {
            bytes[((n - 1) as f64 * at) as usize] = value;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = decode(&path, mode) {
            check_error(&path, &e, n);
        }
    }
}

