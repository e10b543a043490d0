//! Any byte string as a ReadyToRun image: parsing, then lookups and every method's name (so the
//! NativeFormat, metadata and signature decoders all run) must give answers or errors — no panic,
//! no hang, no allocation sized by a length field.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(image) = r2r::R2rImage::parse(data.to_vec()) else { return };
    let _ = image.assembly();
    // Names are built on first use: walking the methods builds every one of them.
    let mut last = 0u32;
    for m in image.methods() {
        assert!(!m.name.is_empty());
        for rva in [m.rva, m.rva.wrapping_add(m.len / 2), m.rva.wrapping_add(m.len)] {
            let _ = image.method_at_rva(rva);
        }
        last = last.max(m.rva);
    }
    // File offsets and RVAs spread over the input and past it, where no method may be found.
    let len = data.len() as u64;
    for i in 0..=32u64 {
        let off = len * i / 32;
        let _ = image.method_at_file_offset(off);
        let _ = image.method_at_rva((u64::from(last) * i / 32) as u32);
    }
    for rva in [0, 1, u32::MAX - 1, u32::MAX] {
        let _ = image.method_at_rva(rva);
    }
    let _ = image.method_at_file_offset(u64::MAX);
});
