//! Real recordings (../shared/fixtures/perf, README there) decode with everything their readers
//! need: the DWARF unwinder's registers and stack bytes, tracepoint payloads, every process's
//! mappings in a system-wide recording.

use perfdata::{PerfRecording, x86_regs};
use tracelab_fixtures::fixture;

#[test]
fn recordings_keep_what_the_unwinder_needs() {
    let rec = PerfRecording::read(&fixture("perf/perf-offcpu-dwarf.data")).unwrap();
    assert_eq!(rec.samples.len(), 398);
    assert!(rec.event_names.iter().any(|n| n == "sched:sched_switch"), "{:?}", rec.event_names);
    let s = rec.samples.iter().find(|s| s.user_stack.as_ref().is_some_and(|b| !b.is_empty())).expect("a sample with user stack bytes");
    let regs = s.user_regs.as_ref().expect("user registers");
    assert!(regs.get(x86_regs::SP).is_some() && regs.get(x86_regs::IP).is_some());
    assert!(s.raw.as_ref().is_some_and(|r| r.len() > 40), "tracepoint payload");
    // A system-wide recording carries every process's mappings.
    let sys = PerfRecording::read(&fixture("perf/perf-offcpu-sys.data")).unwrap();
    let pids: std::collections::BTreeSet<u32> = sys.mmaps.iter().map(|m| m.pid).collect();
    assert!(pids.len() > 3, "{} pids with mappings", pids.len());
}

/// Counting samples by callchain sees the samples a full decode sees, chain for chain.
#[test]
fn chain_counts_match_the_full_decode() {
    for name in ["perf-cpu.data", "perf-offcpu-sys.data"] {
        let path = fixture(&format!("perf/{name}"));
        let rec = PerfRecording::read(&path).unwrap();
        let counted = perfdata::ChainCounts::read_with(&path, |_, _| None).unwrap();
        let mut full = std::collections::HashMap::<(u32, bool, &[u64]), u64>::new();
        for s in &rec.samples {
            *full.entry((s.pid, s.in_kernel, rec.callchain(s))).or_default() += 1;
        }
        assert_eq!(counted.chains.len(), full.len(), "{name}");
        for c in &counted.chains {
            assert_eq!(full.get(&(c.pid, c.in_kernel, counted.chain(c))), Some(&c.count), "{name}");
        }
        assert_eq!(counted.recording.mmaps.len(), rec.mmaps.len(), "{name}");
    }
}

#[test]
fn a_missing_file_names_it() {
    let err = PerfRecording::read(std::path::Path::new("/nonexistent/x.data")).unwrap_err();
    assert!(matches!(err, perfdata::Error::Io { .. }));
    assert!(err.to_string().contains("cannot read perf data /nonexistent/x.data"), "{err}");
}
