//! Any byte string as a counters trace (EventCounters of System.Runtime): decoded, then every
//! counter read — counters, or an error naming an offset inside the input; no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = eventpipe::decode(data, &eventpipe::DecodeOptions::default()) {
        match eventpipe::counter_series(&d.events) {
            Ok(series) => {
                for s in series {
                    let _ = (s.median(), s.total(), s.seconds());
                }
            }
            Err(e) => assert!(e.offset() <= data.len() as u64, "{e}"),
        }
    }
});
