//! Any byte string through the whole decoder (framing, rows, metadata, stacks, payloads,
//! symbolization) must give events or an error — no panic, no hang, bounded memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = eventpipe::Limits { max_block: 1 << 20, max_stack_bytes: 8 << 20, max_metadata: 4096 };
    if let Ok(mut reader) = eventpipe::NettraceReader::with_limits(data, limits) {
        while let Ok(Some(ev)) = reader.next_event() {
            let _ = eventpipe::decode_payload(ev.metadata, ev.payload, 8, ev.payload_offset);
        }
    }
    if let Ok(d) = eventpipe::decode(data, &eventpipe::DecodeOptions::default()) {
        let _ = d.folded();
    }
});
