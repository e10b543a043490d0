//! Arbitrary bytes as a data stream of the recorded fixture's metadata: events or an error,
//! never a panic, a hang or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

static METADATA: &[u8] =
    include_bytes!("../../../../../shared/fixtures/lttng/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit/metadata");

/// Compiled once: compiling it for every input held the target at 26 executions a second.
static COMPILED: std::sync::OnceLock<ctf::Metadata> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let meta = COMPILED.get_or_init(|| ctf::Metadata::from_bytes(METADATA).expect("fixture metadata"));
    // Events are handed back as a reader would (`recycle`), so decoding into reused strings and
    // lists is fuzzed too.
    let mut events = ctf::decode_buffer(meta, std::path::Path::new("fuzz"), data);
    while let Some(ev) = events.next() {
        let Ok(ev) = ev else { break };
        events.recycle(ev);
    }
});
