//! Truncated and damaged recordings of the wake-up (`perf-offwake`) and system-call
//! (`perf-syscalls`) modes decode to an error naming the file — and, for a truncation or a damaged
//! header or record frame, the byte offset — never to a panic or a half-read answer taken as whole.
//! Fixtures: `harness/tests/fixtures/offwake/` (README there says how they were recorded).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::offwake::join_wakeups;
use super::syscalls::syscalls_collection;
use crate::unwind::{UnwindOptions, unwind_perf_data};

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

fn check_error(path: &Path, err: &anyhow::Error, want_offset: bool) {
    let text = format!("{err:#}");
    assert!(text.contains(&path.display().to_string()), "the error names no file: {text}");
    if want_offset {
        assert!(text.contains("offset"), "the error names no byte offset: {text}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

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
            Err(e) => check_error(&path, &e, true),
            Ok(_) => prop_assert!(false, "{name} cut to {len} of {} bytes decoded without an error", bytes.len()),
        }
    }

    /// Bytes overwritten anywhere: an answer or an error naming the file, never a panic.
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
            check_error(&path, &e, false);
        }
    }
}

