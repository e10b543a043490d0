//! Everything linux-perf-data would take on trust, checked before it reads a file: the header's
//! sections against the file length, the event descriptions' counts against their bytes, and the
//! framing of every record. The crate allocates whatever a size or count claims, and a failed
//! allocation aborts the process (no panic to catch), so a flipped bit must be an error here.

use std::path::Path;

use crate::error::{Error, Result};

/// Returns an [`Error::Header`] about the field at byte `offset`; the message names the offset.
macro_rules! bail_at {
    ($path:expr, $offset:expr, $($fmt:tt)+) => {
        return Err(Error::Header { path: $path.to_path_buf(), offset: $offset, message: format!($($fmt)+) })
    };
}

/// perf.data header (tools/perf/util/header.h, `struct perf_file_header`): 104 bytes.
pub const PERF_HEADER_SIZE: usize = 104;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Section {
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks that every section the header names lies inside the file; returns the data section.
pub(crate) fn check_header(bytes: &[u8], path: &Path) -> Result<Section> {
    if bytes.len() < PERF_HEADER_SIZE {
        bail_at!(path, 0,
            "{} bytes is too short for a perf.data header ({PERF_HEADER_SIZE} bytes at byte offset 0): \
             the recording is truncated; record it again",
            bytes.len()
        );
    }
    if &bytes[0..8] != b"PERFILE2" {
        bail_at!(path, 0,
            "not a perf.data file (magic {:?} at byte offset 0, expected \"PERFILE2\"; \
             pipe-mode output is not supported: record with `-o FILE`)",
            String::from_utf8_lossy(&bytes[0..8])
        );
    }
    let header_size = le_u64(bytes, 8);
    if header_size != PERF_HEADER_SIZE as u64 {
        bail_at!(path, 8, "header size {header_size} at byte offset 8 (expected {PERF_HEADER_SIZE}): the file is corrupt");
    }
    let len = bytes.len() as u64;
    let section = |at: usize, what: &str| -> Result<Section> {
        let s = Section { offset: le_u64(bytes, at), size: le_u64(bytes, at + 8) };
        match s.offset.checked_add(s.size) {
            Some(end) if end <= len => Ok(s),
            _ => bail_at!(path, at as u64,
                "the {what} section named at byte offset {at} (offset {}, size {}) lies outside the \
                 file ({len} bytes): the file is truncated or corrupt",
                s.offset,
                s.size
            ),
        }
    };
    let attr_size = le_u64(bytes, 16);
    // From PERF_ATTR_SIZE_VER0 (64) up; today's perf_event_attr is 136 bytes.
    if !(64..=1024).contains(&attr_size) {
        bail_at!(path, 16, "attribute size {attr_size} at byte offset 16 is not plausible: the file is corrupt");
    }
    section(24, "attrs")?;
    let data = section(40, "data")?;
    section(56, "event types")?;
    let features: u32 = (0..4).map(|i| le_u64(bytes, 72 + 8 * i).count_ones()).sum();
    let table = data.offset + data.size;
    let table_end = table + 16 * features as u64;
    if table_end > len {
        bail_at!(path, table,
            "the feature table at byte offset {table} ({features} entries) runs past the end of the file \
             ({len} bytes): the recording is truncated (did perf get killed before it finished writing?)"
        );
    }
    for i in 0..features as usize {
        section(table as usize + 16 * i, "feature")?;
    }
    check_attribute_descriptions(bytes, path, data)?;
    Ok(data)
}

/// See [`crate::feature_section`]: feature sections follow the data section in the order of
/// their bits, each entry an (offset, size) pair.
pub(crate) fn feature_section(bytes: &[u8], bit: usize) -> Option<(u64, u64)> {
    let u64_at = |at: usize| bytes.get(at..at.checked_add(8)?).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let bits = bytes.get(72..104)?;
    let has = |b: usize| bits[b / 8] & (1 << (b % 8)) != 0;
    if bit >= 256 || !has(bit) {
        return None;
    }
    let index = (0..bit).filter(|b| has(*b)).count() as u64;
    let entry = u64_at(40)?.checked_add(u64_at(48)?)?.checked_add(16 * index)?;
    let entry = usize::try_from(entry).ok()?;
    let (offset, size) = (u64_at(entry)?, u64_at(entry.checked_add(8)?)?);
    let end = offset.checked_add(size)?;
    (end <= bytes.len() as u64).then_some((offset, end))
}

/// HEADER_EVENT_DESC (feature bit 12, tools/perf/util/header.h).
const FEATURE_EVENT_DESC: usize = 12;

/// linux-perf-data reads the event descriptions eagerly and sizes its vectors by the counts they
/// declare, taken on trust: one flipped bit asks for terabytes, and a failed allocation aborts
/// the process (no panic to catch). So the counts are checked against the bytes that hold them
/// first: the HEADER_EVENT_DESC feature, or without it the legacy event-types section.
fn check_attribute_descriptions(bytes: &[u8], path: &Path, data: Section) -> Result<()> {
    let attr_size = le_u64(bytes, 16);
    let feature_bits = &bytes[72..104];
    let has = |bit: usize| feature_bits[bit / 8] & (1 << (bit % 8)) != 0;
    if has(FEATURE_EVENT_DESC) {
        // Feature sections follow the data section in the order of their bits.
        let index = (0..FEATURE_EVENT_DESC).filter(|b| has(*b)).count();
        let entry = (data.offset + data.size) as usize + 16 * index;
        let (offset, size) = (le_u64(bytes, entry), le_u64(bytes, entry + 8));
        let desc = &bytes[offset as usize..(offset + size) as usize];
        if let Err((at, why)) = check_event_desc(desc) {
            bail_at!(path, offset + at as u64, "event description at byte offset {}: {why}; the file is corrupt", offset + at as u64);
        }
        return Ok(());
    }
    check_attr_id_sections(bytes, path, Section { offset: le_u64(bytes, 56), size: le_u64(bytes, 64) }, attr_size)
}

/// Bytes linux-perf-data consumes for one attribute whose own `size` field says `size`, in a
/// slot of `slot` bytes (its `parse_single_attr`): the fields of the largest attribute version
/// that fits `size` (every byte above version 7's 128), then `slot - size` skipped. A size that
/// is no version's (102) makes it read the next field early — a count from the wrong bytes,
/// sized into an allocation (the 15-minute fuzz campaign found one asking for 34 GB). None when
/// it refuses the attribute (an error, nothing allocated).
fn attr_consumed(size: u32, slot: u64) -> Option<u64> {
    // PERF_ATTR_SIZE_VER0..VER7 (include/uapi/linux/perf_event.h).
    const VERSIONS: [u32; 8] = [64, 72, 80, 96, 104, 112, 120, 128];
    if size < VERSIONS[0] || u64::from(size) > slot {
        return None;
    }
    let read = if size > 128 { size } else { VERSIONS.iter().rev().copied().find(|v| *v <= size)? };
    Some(u64::from(read) + (slot - u64::from(size)))
}

/// The legacy event-types section: each attribute followed by the file section of its event ids,
/// read where linux-perf-data reads it; the ids must lie inside the file (it sizes a
/// vector by them).
fn check_attr_id_sections(bytes: &[u8], path: &Path, entries: Section, attr_size: u64) -> Result<()> {
    let len = bytes.len() as u64;
    let u32_at = |o: u64| bytes.get(o as usize..o as usize + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |o: u64| bytes.get(o as usize..o as usize + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    let mut pos = entries.offset;
    for _ in 0..entries.size / (attr_size + 16) {
        // Past these, linux-perf-data fails to read: an error, nothing allocated.
        let Some(consumed) = u32_at(pos + 4).and_then(|size| attr_consumed(size, attr_size)) else { return Ok(()) };
        let at = pos + consumed;
        let (Some(offset), Some(size)) = (u64_at(at), u64_at(at + 8)) else { return Ok(()) };
        if offset.checked_add(size).is_none_or(|end| end > len) {
            bail_at!(path, at,
                "the event ids named at byte offset {at} (offset {offset}, size {size}) lie outside the \
                 file ({len} bytes): the file is corrupt"
            );
        }
        pos = at + 16;
    }
    Ok(())
}

/// Checks HEADER_EVENT_DESC's counts against its section, reading each attribute as
/// linux-perf-data does ([`attr_consumed`]): (offset within it, what is wrong).
fn check_event_desc(d: &[u8]) -> std::result::Result<(), (usize, String)> {
    let u32_at = |o: usize| -> std::result::Result<u32, (usize, String)> {
        d.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).ok_or((o, "truncated".to_string()))
    };
    let nr = u32_at(0)? as usize;
    let attr_size = u32_at(4)? as usize;
    if !(64..=1024).contains(&attr_size) || nr > d.len() / attr_size {
        return Err((0, format!("{nr} events of {attr_size} bytes do not fit its {} bytes", d.len())));
    }
    let mut at = 8;
    for _ in 0..nr {
        let size = u32_at(at + 4)?;
        let Some(consumed) = attr_consumed(size, attr_size as u64) else {
            return Err((at + 4, format!("an attribute of {size} bytes does not fit its {attr_size}-byte slot")));
        };
        at += consumed as usize;
        let nr_ids_at = at;
        let nr_ids = u32_at(at)? as usize;
        let str_len = u32_at(at + 4)? as usize;
        at += 8;
        if str_len > d.len() - at.min(d.len()) {
            return Err((at - 4, format!("an event name of {str_len} bytes runs past the section")));
        }
        at += str_len;
        if nr_ids > (d.len() - at.min(d.len())) / 8 {
            return Err((nr_ids_at, format!("{nr_ids} event ids run past the section")));
        }
        at += nr_ids * 8;
    }
    Ok(())
}

/// Everything linux-perf-data would take on trust, checked before it reads `bytes`: the header's
/// sections, the event descriptions and the framing of every record (an AUXTRACE record's claimed
/// size would otherwise be allocated as is). Returns the data section.
pub(crate) fn check_recording(bytes: &[u8], path: &Path, map: Option<&memmap2::Mmap>) -> Result<(Section, RecordIndex)> {
    let data = check_header(bytes, path)?;
    let pages = crate::records::PagesBehind::new(map, data.offset as usize);
    let index = index_records(bytes, data, pages).map_err(|(offset, why)| Error::Framing { path: path.to_path_buf(), offset, why })?;
    Ok((data, index))
}

/// What the framing check learns on its way through the data section, so that no later step
/// walks it again: a walk over a recording of tens of MB waits on memory at every record (three
/// walks before the decode were a fifth of a fold's time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecordIndex {
    /// Byte offsets of the MMAP and MMAP2 records, in file order.
    pub mmaps: Vec<usize>,
    /// The first record boundary at or past the middle of the data section (its end when none):
    /// where the second decoding thread starts.
    pub middle: usize,
}

/// How far ahead of the walk to ask for memory: about ten records. The walk reads 8 bytes of
/// each ~200-byte record of a file too large for the caches, so without a hint it waits on
/// memory at every record.
pub(crate) const PREFETCH_AHEAD: usize = 2048;

/// Asks the CPU to bring the cache line holding `bytes[at]` (if in range) towards it; a hint
/// only: it never faults and changes no result.
#[inline]
pub(crate) fn prefetch(bytes: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < bytes.len() {
        // SAFETY: the pointer is inside `bytes`; a prefetch reads nothing and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().add(at).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

/// PERF_RECORD_MMAP and PERF_RECORD_MMAP2 (include/uapi/linux/perf_event.h).
const PERF_RECORD_MMAP: u32 = 1;
const PERF_RECORD_MMAP2: u32 = 10;

/// The byte offset of the first record of the data section with type `record_type` whose body
/// (the bytes after its 8-byte header) is `body`, walking the records in file order; `None` when
/// the header or framing is broken before it or no record matches. A reader that gets records
/// re-ordered by time (linux-perf-data sorts them) finds a damaged one's place in the file with it.
pub(crate) fn find_record(bytes: &[u8], path: &Path, record_type: u32, body: &[u8]) -> Option<u64> {
    let data = check_header(bytes, path).ok()?;
    checked_records(bytes, data)
        .map_while(std::result::Result::ok)
        .find(|r| r.ty == record_type && &bytes[r.offset as usize + 8..(r.offset + r.size) as usize] == body)
        .map(|r| r.offset)
}

/// One record's framing: where it starts, its type and its size (header included).
#[derive(Clone, Copy)]
struct Framing {
    offset: u64,
    ty: u32,
    size: u64,
}

/// The records of the data section in file order, each one's framing checked before it is
/// handed out; the first broken one ends the walk with its byte offset and what is wrong with
/// it. The one checked walk: the framing check ([`check_recording`]) and [`find_record`] take
/// it; the decoders then walk the checked records without checks ([`crate::records::raw_records`]).
fn checked_records(bytes: &[u8], data: Section) -> impl Iterator<Item = std::result::Result<Framing, (u64, String)>> + '_ {
    let end = data.offset + data.size;
    let mut at = data.offset;
    let mut broken = false;
    std::iter::from_fn(move || {
        if broken || at >= end {
            return None;
        }
        prefetch(bytes, at as usize + PREFETCH_AHEAD);
        let framing = frame_at(bytes, at, end);
        match framing {
            Ok(f) => at = f.offset + f.size + if f.ty == PERF_RECORD_AUXTRACE { le_u64(bytes, at as usize + 8) } else { 0 },
            Err(_) => broken = true,
        }
        Some(framing)
    })
}

/// The framing of the record at `at`, checked against the data section's `end`.
#[inline]
fn frame_at(bytes: &[u8], at: u64, end: u64) -> std::result::Result<Framing, (u64, String)> {
    if at + 8 > end {
        return Err((at, format!("record header needs 8 bytes, {} left in the data section", end - at)));
    }
    let size = u16::from_le_bytes([bytes[at as usize + 6], bytes[at as usize + 7]]) as u64;
    if size < 8 {
        return Err((at, format!("record size {size} is smaller than its 8-byte header")));
    }
    if at + size > end {
        return Err((at, format!("record of {size} bytes runs past the data section's end at {end}")));
    }
    let ty = u32::from_le_bytes(bytes[at as usize..at as usize + 4].try_into().unwrap());
    if ty == PERF_RECORD_AUXTRACE {
        // AUX data follows the record, outside its size; the reader allocates whatever size the
        // record claims.
        if size < 16 {
            return Err((at, "AUXTRACE record too short for its size field".into()));
        }
        let aux = le_u64(bytes, at as usize + 8);
        if (at + size).checked_add(aux).is_none_or(|next| next > end) {
            return Err((at, format!("AUXTRACE record claims {aux} bytes of data beyond the data section")));
        }
    }
    Ok(Framing { offset: at, ty, size })
}

/// Walks record headers of the data section in file order, noting where the MMAP records are
/// and the middle boundary ([`RecordIndex`]); the byte offset and a description of the first
/// record whose framing is broken, if any.
fn index_records(bytes: &[u8], data: Section, mut pages: crate::records::PagesBehind) -> std::result::Result<RecordIndex, (u64, String)> {
    let end = data.offset + data.size;
    let middle = data.offset + data.size / 2;
    let mut index = RecordIndex { mmaps: Vec::new(), middle: end as usize };
    for framing in checked_records(bytes, data) {
        let Framing { offset, ty, .. } = framing?;
        pages.passed(offset as usize);
        if offset >= middle && index.middle == end as usize {
            index.middle = offset as usize;
        }
        if ty == PERF_RECORD_MMAP || ty == PERF_RECORD_MMAP2 {
            index.mmaps.push(offset as usize);
        }
    }
    Ok(index)
}

/// PERF_RECORD_AUXTRACE (tools/perf/util/event.h): a user record followed by its AUX data.
pub(crate) const PERF_RECORD_AUXTRACE: u32 = 71;
/// perf's own record types start here (PERF_RECORD_USER_TYPE_START, tools/lib/perf/include/perf/event.h).
pub(crate) const PERF_RECORD_USER_TYPE_START: u32 = 64;
/// PERF_RECORD_COMPRESSED and PERF_RECORD_COMPRESSED2 (`perf record -z`).
pub(crate) const PERF_RECORD_COMPRESSED: u32 = 81;
pub(crate) const PERF_RECORD_COMPRESSED2: u32 = 83;
