//! Any byte string as a core file: what it says, or an error naming an offset inside it — no
//! panic, no allocation sized by an unchecked count.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match elfcore::CoreFile::parse(data) {
        Ok(core) => {
            let _ = (core.maps_file("libcoreclr.so"), core.mapped_files().len(), core.loaded_bytes());
        }
        Err(e) => assert!(e.offset().is_some_and(|o| o <= data.len() as u64), "{e}"),
    }
});
