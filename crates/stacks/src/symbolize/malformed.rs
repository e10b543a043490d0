//! Bad input never panics: random perf-map lines. Every error names the file and a byte offset.
//! (Damaged perf.data is the perfdata crate's tests; the fold's and the unwinder's answers to it
//! are tested beside them: `fold.rs`, `unwind/malformed.rs`.)

use std::path::Path;

use proptest::prelude::*;

use super::jit::parse_perf_map;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_perf_map_lines_never_panic(lines in proptest::collection::vec("[0-9a-fA-Fx ]{0,18}[ -~]{0,30}", 0..20)) {
        let text = lines.join("\n") + "\n";
        match parse_perf_map(text.as_bytes(), Path::new("perf-7.map")) {
            Ok(_) => {}
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("perf-7.map") && msg.contains("byte offset"), "{}", msg);
            }
        }
    }

    #[test]
    fn valid_perf_map_lines_are_found(entries in proptest::collection::vec((0x1000u64..1 << 40, 1u64..0x1000), 1..30)) {
        let text: String = entries.iter().enumerate().map(|(i, (s, n))| format!("{s:x} {n:x} m{i}\n")).collect();
        let (table, _) = parse_perf_map(text.as_bytes(), Path::new("perf-7.map")).unwrap();
        for (start, size) in &entries {
            prop_assert!(table.lookup(*start).is_some());
            prop_assert!(table.lookup(start + size - 1).is_some());
        }
    }
}
