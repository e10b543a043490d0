//! The unwinder walks perf.data records on its own (it needs every sample's stack bytes in file
//! order), so the damage that would make the reader crate allocate terabytes and abort must be
//! refused before it reads: each case names the file and the byte offset. The decoder's answers
//! to the same damage are the perfdata crate's `counts_that_would_abort_the_process_are_refused`.

use super::{UnwindOptions, unwind_perf_data};

#[test]
fn the_unwinder_refuses_counts_that_would_abort_the_process() {
    let bytes = std::fs::read(tracelab_fixtures::fixture("perf/perf-offcpu.data")).unwrap();
    let at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
    let (data, data_size) = (at(40), at(48));
    // HEADER_EVENT_DESC (feature bit 12): its entry in the feature table after the data section.
    let has = |bit: usize| bytes[72 + bit / 8] & (1 << (bit % 8)) != 0;
    assert!(has(12), "the fixture has HEADER_EVENT_DESC");
    let desc = at(data + data_size + 16 * (0..12).filter(|b| has(*b)).count());
    let attr_size = u32::from_le_bytes(bytes[desc + 4..desc + 8].try_into().unwrap()) as usize;
    let damage = |edits: &[(usize, &[u8])]| {
        let mut damaged = bytes.clone();
        for (offset, value) in edits {
            damaged[*offset..offset + value.len()].copy_from_slice(value);
        }
        damaged
    };
    let cases = [
        // The first record turned into AUXTRACE (type 71) claiming ~70 TB of AUX data.
        ("auxtrace", damage(&[(data, &71u32.to_le_bytes()), (data + 6, &16u16.to_le_bytes()), (data + 8, &0x4061_0000_40c1u64.to_le_bytes())]), data),
        ("events", damage(&[(desc, &0xffff_fff0u32.to_le_bytes())]), desc),
        ("ids", damage(&[(desc + 8 + attr_size, &0x7fff_ffffu32.to_le_bytes())]), desc + 8 + attr_size),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, damaged, offset) in cases {
        let path = dir.path().join(format!("{name}.data"));
        std::fs::write(&path, damaged).unwrap();
        let err = format!("{:#}", unwind_perf_data(&path, UnwindOptions::default()).err().expect("an error"));
        assert!(err.contains(&format!("{name}.data")) && err.contains(&format!("byte offset {offset}")), "{name}: {err}");
    }
}
