//! The resolver on the runtime's own precompiled CoreLib: every method it lists resolves back to
//! itself from any address inside it, names have the perf-map spelling, and damaged images give
//! errors, never panics.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use r2r::{ModuleCache, R2rImage};

fn open() -> (Vec<u8>, R2rImage) {
    let path = common::corelib();
    let bytes = std::fs::read(&path).unwrap();
    let image = R2rImage::open(&path, Arc::new(ModuleCache::default()))
        .unwrap()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (bytes, image)
}

#[test]
fn corelib_methods_resolve_back_to_themselves() {
    let (_, image) = open();
    assert!(image.method_count() > 10_000, "only {} methods", image.method_count());
    let mut checked = 0;
    for m in image.methods().step_by(7) {
        let at_entry = image.method_at_rva(m.rva).expect("entry resolves");
        assert_eq!(at_entry.name, m.name);
        if m.len > 2 {
            let inside = image.method_at_rva(m.rva + m.len / 2).expect("middle resolves");
            assert_eq!(inside.rva, m.rva, "{} and {} overlap", inside.name, m.name);
        }
        checked += 1;
    }
    assert!(checked > 1_000);
}

#[test]
fn corelib_names_known_methods_in_perf_map_spelling() {
    let (_, image) = open();
    let names: Vec<String> = image.methods().map(|m| m.name.to_string()).collect();
    for want in ["System.Threading.Thread::Sleep", "System.String::Concat", "System.Collections.Generic.List`1"] {
        assert!(names.iter().any(|n| n.contains(want)), "no method named like `{want}`");
    }
    let unnamed = names.iter().filter(|n| n.contains("<unnamed method")).count();
    assert!(unnamed * 100 < names.len(), "{unnamed} of {} methods unnamed", names.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn damaged_corelib_is_an_error_not_a_panic(cut in 0usize..4_000_000, flips in proptest::collection::vec((0usize..4_000_000, any::<u8>()), 0..16)) {
        let (bytes, _) = open_bytes();
        let mut data = bytes[..cut.min(bytes.len())].to_vec();
        for (at, v) in flips {
            if let Some(b) = data.get_mut(at) { *b ^= v; }
        }
        if let Ok(image) = R2rImage::parse(data) {
            // A damaged image that still parses must still answer lookups without panicking.
            for m in image.methods().take(200) {
                let _ = image.method_at_rva(m.rva);
            }
        }
    }
}

fn open_bytes() -> (Vec<u8>, ()) {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    (BYTES.get_or_init(|| std::fs::read(common::corelib()).unwrap()).clone(), ())
}
