//! Arbitrary metadata (text or packetized): compiled or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ctf::Metadata::from_bytes(data);
});
