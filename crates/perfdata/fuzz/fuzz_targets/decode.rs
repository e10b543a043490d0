//! Any byte string as perf.data: checking, decoding (both sample orders) and counting callchains
//! must give a recording or an error naming a byte offset — no panic, and no allocation sized by
//! a count the file claims (that aborts the process, which libFuzzer reports as a crash).
//! Start the corpus from ../shared/fixtures/perf/*.data: random bytes rarely pass the magic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use perfdata::{ChainCounts, PerfRecording, SampleOrder};

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.data");
    let checked = perfdata::check(data, path);
    for order in [SampleOrder::Time, SampleOrder::File] {
        match PerfRecording::from_bytes_in(data, path, order) {
            Ok(rec) => {
                assert!(checked.is_ok(), "decoded a file the checks refuse");
                for s in &rec.samples {
                    let _ = rec.frames(s).count();
                    let _ = rec.event_name(s);
                }
            }
            Err(e) => assert!(e.to_string().contains("fuzz.data"), "{e}"),
        }
    }
    if let Ok(counts) = ChainCounts::from_bytes_with(data, path, |_, _| None) {
        let _ = counts.chains.iter().map(|c| c.count).sum::<u64>();
    }
});
