//! The resolver on the runtime's own precompiled CoreLib: every method it lists resolves back to
//! itself from any address inside it, names have the perf-map spelling, and damaged images give
//! errors, never panics.

mod common;

use std::collections::{HashMap, HashSet};
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
    // A function pointer parameter with its signature, as the runtime's perf map writes one.
    let want = "System.Diagnostics.Tracing.EventPipeInternal::CreateProvider(string,method unmanaged void *(uint8*,int32,uint8,int64,int64,valuetype ";
    let with_fnptr: Vec<&String> = names.iter().filter(|n| n.contains("EventPipeInternal::CreateProvider(")).collect();
    assert!(with_fnptr.iter().any(|n| n.contains(want)), "{with_fnptr:?}");
    let unnamed = names.iter().filter(|n| n.contains("<unnamed method")).count();
    assert!(unnamed * 100 < names.len(), "{unnamed} of {} methods unnamed", names.len());
}

/// Every runtime function answers for its owner at its first, middle and last byte, and every byte
/// between functions (alignment padding, data) answers None. The owner is worked out from the
/// tables read independently in `common::tables`: an entry owns itself, any other function belongs
/// to the method whose EH clause starts a handler or filter there, and a function neither way
/// must not be named at all.
#[test]
fn corelib_lookups_hit_every_runtime_function_and_miss_every_gap() {
    let (bytes, image) = open();
    let t = common::tables(&bytes);
    let entries: HashSet<u32> = image.methods().map(|m| m.rva).collect();
    let funclet_owner: HashMap<u32, u32> =
        t.funclets.iter().flat_map(|(&method, starts)| starts.iter().map(move |&s| (s, method))).collect();
    let rfs = &t.runtime_functions;
    assert_eq!(rfs.len(), image.stats.runtime_functions);
    let (mut inside, mut gaps) = (0, 0);
    for (i, &(begin, end)) in rfs.iter().enumerate() {
        let want = if entries.contains(&begin) { Some(begin) } else { funclet_owner.get(&begin).copied() };
        for rva in [begin, begin + (end - begin) / 2, end - 1] {
            let got = image.method_at_rva(rva).map(|m| m.rva);
            assert_eq!(got, want, "RVA {rva:#x} in runtime function {i} ({begin:#x}..{end:#x})");
            inside += 1;
        }
        let next = rfs.get(i + 1).map_or(end + 0x1000, |f| f.0);
        for rva in [end, end + (next - end) / 2, next.saturating_sub(1)] {
            if (end..next).contains(&rva) {
                assert_eq!(image.method_at_rva(rva), None, "RVA {rva:#x} in the gap after runtime function {i}");
                gaps += 1;
            }
        }
    }
    for rva in [0, rfs[0].0 / 2, rfs[0].0 - 1] {
        assert_eq!(image.method_at_rva(rva), None, "RVA {rva:#x} before the first runtime function");
    }
    assert_eq!(inside, 3 * rfs.len());
    assert!(gaps > rfs.len() / 2, "only {gaps} gap lookups: CoreLib's functions are 16-byte aligned with padding between");
}

/// Where a method has several runtime functions, the extra ones are exactly its EH funclets.
///
/// The independent signal is the ExceptionInfo section: the JIT's EH clauses, each giving its
/// handler's (and filter's) offset from the method's start, and every handler and filter is a
/// funclet with a runtime function of its own. The unwind info cannot serve: crossgen2 sets
/// UNW_FLAG_EHANDLER | UNW_FLAG_UHANDLER on every runtime function, main body or funclet alike,
/// and only filter funclets get a different personality routine.
#[test]
fn corelib_funclets_are_exactly_the_eh_tables_handlers() {
    let (bytes, image) = open();
    let t = common::tables(&bytes);
    let rfs = &t.runtime_functions;
    let mut with_funclets = 0;
    for m in image.methods() {
        // The runtime functions the reader gives this method: those its range covers.
        let first = rfs.partition_point(|f| f.0 < m.rva);
        let last = rfs.partition_point(|f| f.0 < m.rva + m.len);
        assert_eq!(rfs[first].0, m.rva, "{} does not start at a runtime function", m.name);
        let mut extra: Vec<u32> = rfs[first + 1..last].iter().map(|f| f.0).collect();
        let mut eh = t.funclets.get(&m.rva).cloned().unwrap_or_default();
        extra.sort_unstable();
        eh.sort_unstable();
        eh.dedup();
        assert_eq!(extra, eh, "funclets of {} at {:#x}", m.name, m.rva);
        if !extra.is_empty() {
            with_funclets += 1;
        }
    }
    assert_eq!(with_funclets, t.funclets.values().filter(|s| !s.is_empty()).count());
    assert!(with_funclets > 1_000, "CoreLib has {with_funclets} methods with funclets");
}

/// Every InstanceMethodEntryPoints signature in CoreLib decodes, so every entry point is known
/// and every runtime function has an owner.
#[test]
fn corelib_decodes_every_instance_entry() {
    let (_, image) = open();
    let s = &image.stats;
    eprintln!("{s:?}");
    assert_eq!(s.instance_entries_skipped, 0);
    assert_eq!(s.unowned_functions, 0);
    assert_eq!(image.method_count(), s.methoddef_entries + s.instance_entries);
    assert_eq!(s.runtime_functions, image.method_count() + s.funclets);
    assert!(s.instance_entries > 20_000 && s.funclets > 1_000, "{s:?}");
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

/// The MVID the runtime's perfinfo-PID.map gave as an image's signature: the Module table's,
/// which compilers put first in the #GUID heap. Read here from the stream headers alone.
#[test]
fn corelib_mvid_is_the_first_guid_of_its_heap() {
    let path = common::corelib();
    let bytes = std::fs::read(&path).unwrap();
    let module = ModuleCache::default().get(&path).expect("CoreLib's metadata");
    assert!(module.ready_to_run);
    let root = bytes.windows(4).position(|w| w == b"BSJB").expect("a metadata root");
    let header = bytes[root..].windows(8).position(|w| w == b"#GUID\0\0\0").expect("a #GUID stream") + root;
    let offset = u32::from_le_bytes(bytes[header - 8..header - 4].try_into().unwrap()) as usize;
    let first: [u8; 16] = bytes[root + offset..root + offset + 16].try_into().unwrap();
    assert_eq!(module.mvid().unwrap(), first);
    assert_ne!(first, [0; 16]);
}
