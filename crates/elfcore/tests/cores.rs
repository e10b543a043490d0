//! The core file reader on a real createdump core and on malformed ones: every malformed input
//! is an error naming a byte offset inside the file, never a panic.

use elfcore::{CoreFile, Error};
use proptest::prelude::*;

const MINI: &[u8] = include_bytes!("data/dotnet-mini-11-threads.core");

#[test]
fn createdump_mini_core_lists_threads_and_libcoreclr() {
    let core = CoreFile::parse(MINI).unwrap();
    assert_eq!(core.machine, 62);
    assert_eq!(core.threads.len(), 11);
    assert_eq!(core.threads[0].tid, 31900);
    assert_eq!((core.pid, core.process_name.as_deref()), (Some(31900), Some("dotnet")));
    assert_eq!((core.segments.len(), core.mappings.len(), core.mapped_files().len()), (227, 105, 25));
    assert!(core.maps_file("libcoreclr.so"));
    assert!(!core.maps_file("libnothere.so"));
    assert_eq!(core.loaded_bytes(), 0);
}

#[test]
fn open_names_the_file_in_errors() {
    let dir = std::env::temp_dir().join(format!("elfcore-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cut.core");
    std::fs::write(&path, &MINI[..5000]).unwrap();
    let err = CoreFile::open(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}: byte offset ", path.display())), "{text}");
    assert!(text.contains("truncated"), "{text}");
    let missing = CoreFile::open(std::path::Path::new("/nonexistent/x.core")).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }), "{missing}");
}

fn offset_of(bytes: &[u8]) -> u64 {
    match CoreFile::parse(bytes) {
        Ok(_) => panic!("{} bytes were read as a core", bytes.len()),
        Err(e) => e.offset().unwrap(),
    }
}

#[test]
fn malformed_headers_name_their_offset() {
    assert_eq!(offset_of(b"\x7fELF"), 0);
    let mut not_elf = MINI.to_vec();
    not_elf[0] = b'M';
    assert_eq!(offset_of(&not_elf), 0);
    let mut class32 = MINI.to_vec();
    class32[4] = 1;
    assert_eq!(offset_of(&class32), 4);
    let mut big_endian = MINI.to_vec();
    big_endian[5] = 2;
    assert_eq!(offset_of(&big_endian), 5);
    let mut exec = MINI.to_vec();
    exec[16] = 2;
    let err = CoreFile::parse(&exec).unwrap_err();
    assert_eq!(err.offset(), Some(16));
    assert!(err.to_string().contains("not a core file"), "{err}");
    let mut phentsize = MINI.to_vec();
    phentsize[54] = 32;
    assert_eq!(offset_of(&phentsize), 54);
}

#[test]
fn truncated_notes_and_tables_name_their_offset() {
    let phoff = u64::from_le_bytes(MINI[32..40].try_into().unwrap());
    // Inside the program header table: the error names e_phoff, which says where it is.
    assert_eq!(offset_of(&MINI[..phoff as usize + 100]), 32);
    // Inside the note segment (the notes are the file's tail).
    let err = CoreFile::parse(&MINI[..MINI.len() - 10]).err().expect("a cut core is refused");
    assert!(err.to_string().contains("truncated"), "{err}");
    // A note whose descriptor claims more bytes than its segment holds.
    let core = CoreFile::parse(MINI).unwrap();
    let first = &core.notes[0];
    let header = first.desc_offset as usize - 12 - (first.name.len() + 1).next_multiple_of(4);
    let mut huge = MINI.to_vec();
    huge[header + 4..header + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(offset_of(&huge), header as u64 + 4);
}

#[test]
fn nt_file_counts_are_checked() {
    let core = CoreFile::parse(MINI).unwrap();
    let nt_file = core.notes.iter().find(|n| n.kind == 0x4649_4c45).unwrap();
    let mut lying = MINI.to_vec();
    let at = nt_file.desc_offset as usize;
    lying[at..at + 8].copy_from_slice(&1_000_000u64.to_le_bytes());
    assert_eq!(offset_of(&lying), at as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any cut of a real core is read or refused with an offset inside the input.
    #[test]
    fn any_prefix_is_read_or_refused_with_an_offset(len in 0usize..MINI.len()) {
        match CoreFile::parse(&MINI[..len]) {
            Ok(core) => prop_assert!(core.file_len == len as u64),
            Err(e) => prop_assert!(e.offset().unwrap() <= len as u64, "{e}"),
        }
    }

    /// Any corrupted bytes in the headers or notes: read or refused with an offset, never a panic.
    #[test]
    fn any_corruption_is_read_or_refused(flips in proptest::collection::vec((0usize..MINI.len(), any::<u8>()), 1..16)) {
        let mut bytes = MINI.to_vec();
        for (at, v) in flips {
            bytes[at] = v;
        }
        if let Err(e) = CoreFile::parse(&bytes) {
            prop_assert!(e.offset().is_some(), "{e}");
        }
    }
}
