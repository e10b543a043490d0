//! Arbitrary bytes as a data stream of the recorded fixture's metadata: events or an error,
//! never a panic, a hang or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

static METADATA: &[u8] =
    include_bytes!("../../../../../shared/fixtures/lttng/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit/metadata");

fuzz_target!(|data: &[u8]| {
    let meta = ctf::Metadata::from_bytes(METADATA).expect("fixture metadata");
    for ev in ctf::decode_buffer(&meta, std::path::Path::new("fuzz"), data) {
        if ev.is_err() {
            break;
        }
    }
});
