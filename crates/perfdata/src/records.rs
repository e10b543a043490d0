//! The data section's records: walking their framing, reading each with its attribute's layout
//! (linux-perf-event-reader parses one record at a time over the borrowed bytes), and decoding
//! a stretch of them into owned samples, mappings and process names. The file's framing has been
//! checked by [`crate::check`] before any of this runs.

use std::path::Path;

use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord, Mmap2FileId, RawData, RecordType};

use crate::check::{PERF_RECORD_AUXTRACE, PERF_RECORD_COMPRESSED, PERF_RECORD_COMPRESSED2, PERF_RECORD_USER_TYPE_START, le_u64};
use crate::error::{Error, Result};
use crate::recording::{ChainRange, PerfComm, PerfMmap, PerfSample, UserRegs};


/// Where a SAMPLE record's callchain entries lie in its body (`None` when it has none), after
/// checking that the length fits inside the record.
pub(crate) fn callchain_range(record: &linux_perf_data::linux_perf_event_reader::RawEventRecord) -> std::result::Result<Option<std::ops::Range<usize>>, String> {
    use linux_perf_data::linux_perf_event_reader::{Endianness, SampleFormat};
    use linux_perf_data::linux_perf_event_reader::ReadFormat;
    let format = record.parse_info.sample_format;
    if record.record_type != RecordType::SAMPLE || !format.contains(SampleFormat::CALLCHAIN) {
        return Ok(None);
    }
    let before = [
        SampleFormat::IDENTIFIER,
        SampleFormat::IP,
        SampleFormat::TID,
        SampleFormat::TIME,
        SampleFormat::ADDR,
        SampleFormat::ID,
        SampleFormat::STREAM_ID,
        SampleFormat::CPU,
        SampleFormat::PERIOD,
    ];
    let mut at = 8 * before.iter().filter(|f| format.contains(**f)).count();
    let body = record.data.as_slice();
    let u64_at = |i: usize| -> Option<u64> {
        let raw: [u8; 8] = body.get(i..i + 8)?.try_into().ok()?;
        Some(match record.parse_info.endian {
            Endianness::LittleEndian => u64::from_le_bytes(raw),
            Endianness::BigEndian => u64::from_be_bytes(raw),
        })
    };
    if format.contains(SampleFormat::READ) {
        // The READ values come first, laid out as linux-perf-event-reader 0.10 reads them (it
        // finds the callchain after them, and multiplies its length unchecked).
        let read = record.parse_info.read_format;
        let times = 8 * [ReadFormat::TOTAL_TIME_ENABLED, ReadFormat::TOTAL_TIME_RUNNING].iter().filter(|f| read.contains(**f)).count();
        let id = if read.contains(ReadFormat::ID) { 8 } else { 0 };
        if read.contains(ReadFormat::GROUP) {
            at += 8 + times + id;
        } else {
            let Some(nr) = u64_at(at) else { return Err(format!("a {}-byte sample is too short for its fields", body.len())) };
            let each = 8 + id as u64;
            let room = (body.len().saturating_sub(at + 8 + times)) as u64;
            if nr > room / each {
                return Err(format!("{nr} read values do not fit the {}-byte sample", body.len()));
            }
            at += 8 + times + (nr * each) as usize;
        }
    }
    if body.len() < at + 8 {
        return Err(format!("a {}-byte sample is too short for its fields", body.len()));
    }
    let nr = u64_at(at).unwrap_or(0);
    if nr > ((body.len() - at - 8) / 8) as u64 {
        return Err(format!("a callchain of {nr} entries does not fit the {}-byte sample", body.len()));
    }
    Ok(Some(at + 8..at + 8 + 8 * nr as usize))
}


/// One record of the data section as it lies in the file.
pub(crate) struct RawRecord<'b> {
    pub(crate) offset: usize,
    pub(crate) ty: u32,
    pub(crate) misc: u16,
    pub(crate) body: &'b [u8],
}

/// The records of `bytes[start..end]`, whose framing [`crate::check::check_recording`] has checked; an
/// AUXTRACE record's trailing AUX data is stepped over.
pub(crate) fn raw_records(bytes: &[u8], start: usize, end: usize) -> impl Iterator<Item = RawRecord<'_>> {
    let mut at = start;
    std::iter::from_fn(move || {
        if at + 8 > end {
            return None;
        }
        crate::check::prefetch(bytes, at + crate::check::PREFETCH_AHEAD);
        let record = record_at(bytes, at);
        at += 8 + record.body.len();
        if record.ty == PERF_RECORD_AUXTRACE {
            at += le_u64(bytes, record.offset + 8) as usize;
        }
        Some(record)
    })
}

/// The record whose header is at `offset` (a boundary the framing check found).
fn record_at(bytes: &[u8], offset: usize) -> RawRecord<'_> {
    let ty = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap());
    let misc = u16::from_le_bytes([bytes[offset + 4], bytes[offset + 5]]);
    let size = u16::from_le_bytes([bytes[offset + 6], bytes[offset + 7]]) as usize;
    RawRecord { offset, ty, misc, body: &bytes[offset + 8..offset + size] }
}

fn refuse_compressed(ty: u32, offset: usize, path: &Path) -> Result<()> {
    if ty == PERF_RECORD_COMPRESSED || ty == PERF_RECORD_COMPRESSED2 {
        return Err(Error::Compressed { path: path.to_path_buf(), offset: offset as u64 });
    }
    Ok(())
}

/// Samples counted by (pid, sampled in the kernel, raw callchain). Each chain is copied into one
/// arena of entries the first time it is seen, so that the counts hold nothing of the recording
/// and a walk can give the recording's pages back behind it (see [`PagesBehind`]); memory grows
/// with distinct chains, not with samples, and the arena is what the caller gets in the end.
#[derive(Default)]
pub(crate) struct ChainTable {
    table: hashbrown::HashTable<Counted>,
    pub(crate) ips: Vec<u64>,
}

/// One distinct chain: where its entries lie in the arena, and its count.
pub(crate) struct Counted {
    hash: u64,
    pub(crate) pid: u32,
    pub(crate) in_kernel: bool,
    pub(crate) at: u32,
    pub(crate) len: u32,
    pub(crate) count: u64,
}

/// Whether the chain's raw little-endian bytes are `ips`.
#[inline]
fn same_chain(raw: &[u8], ips: &[u64]) -> bool {
    if raw.len() != ips.len() * 8 {
        return false;
    }
    #[cfg(target_endian = "little")]
    {
        // SAFETY: any u64 may be read as its 8 bytes; on a little-endian machine those are the
        // bytes the recording holds.
        let bytes = unsafe { std::slice::from_raw_parts(ips.as_ptr().cast::<u8>(), raw.len()) };
        bytes == raw
    }
    #[cfg(not(target_endian = "little"))]
    raw.chunks_exact(8).zip(ips).all(|(b, ip)| u64::from_le_bytes(b.try_into().unwrap()) == *ip)
}

impl ChainTable {
    /// Adds `n` samples of (`pid`, `in_kernel`, the chain whose raw bytes are `raw`).
    #[inline]
    pub(crate) fn add(&mut self, pid: u32, in_kernel: bool, raw: &[u8], n: u64) {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut hasher = rustc_hash::FxBuildHasher.build_hasher();
        (pid, in_kernel).hash(&mut hasher);
        hasher.write(raw);
        let hash = hasher.finish();
        let ips = &self.ips;
        let found = self.table.find_mut(hash, |c| {
            c.pid == pid && c.in_kernel == in_kernel && same_chain(raw, &ips[c.at as usize..][..c.len as usize])
        });
        match found {
            Some(counted) => counted.count += n,
            None => {
                let at = self.ips.len() as u32;
                self.ips.extend(raw.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())));
                let counted = Counted { hash, pid, in_kernel, at, len: (raw.len() / 8) as u32, count: n };
                self.table.insert_unique(hash, counted, |c| c.hash);
            }
        }
    }

    /// Adds every count of `other`.
    pub(crate) fn merge(&mut self, other: &ChainTable) {
        let mut raw = Vec::new();
        for (pid, in_kernel, chain, n) in other.iter() {
            raw.clear();
            raw.extend(chain.iter().flat_map(|ip| ip.to_le_bytes()));
            self.add(pid, in_kernel, &raw, n);
        }
    }

    /// (pid, in kernel, chain, count) of each distinct chain, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, bool, &[u64], u64)> {
        self.table.iter().map(|c| (c.pid, c.in_kernel, &self.ips[c.at as usize..][..c.len as usize], c.count))
    }

    /// The distinct chains (each an arena range) and the arena.
    pub(crate) fn into_parts(self) -> (impl Iterator<Item = Counted>, Vec<u64>) {
        (self.table.into_iter(), self.ips)
    }
}

/// Gives the pages of a mapped recording back to the kernel once a walk has passed them. The
/// mapped pages a walk touches count in the process's resident memory, so without this a fold's
/// RSS grows with the recording (36 → 56 MB from a 0.8 to a 28.7 MB file). The pages stay mapped:
/// a later read faults them in again from the page cache.
pub(crate) struct PagesBehind<'m> {
    map: Option<&'m memmap2::Mmap>,
    released: usize,
    window: usize,
}

impl<'m> PagesBehind<'m> {
    /// How far a walk goes between two releases: a few madvise calls per recording, and a
    /// resident window of this size per walking thread.
    const WINDOW: usize = 2 << 20;
    const PAGE: usize = 4096;

    /// Releases pages of `map` (none when the bytes are not a file mapping) from `start` on.
    pub(crate) fn new(map: Option<&'m memmap2::Mmap>, start: usize) -> PagesBehind<'m> {
        PagesBehind { map, released: start & !(Self::PAGE - 1), window: Self::WINDOW }
    }

    /// As [`PagesBehind::new`], releasing every page as soon as it is passed (for tests).
    #[cfg(test)]
    pub(crate) fn eager(map: Option<&'m memmap2::Mmap>, start: usize) -> PagesBehind<'m> {
        PagesBehind { window: Self::PAGE, ..Self::new(map, start) }
    }

    /// The walk has read everything before `at`.
    #[inline]
    pub(crate) fn passed(&mut self, at: usize) {
        if at >= self.released + self.window {
            self.release_to(at);
        }
    }

    #[cold]
    fn release_to(&mut self, at: usize) {
        let upto = at & !(Self::PAGE - 1);
        if let Some(map) = self.map {
            // SAFETY: the map is a read-only mapping of a file, never written: MADV_DONTNEED
            // only drops its pages from this process, and any later read of them faults the
            // file's unchanged contents back in. A failed advice changes nothing but the RSS.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.released, upto - self.released) };
        }
        self.released = upto;
    }
}

/// Counts the samples of `bytes[start..end]` by callchain, reading each sample's pid and chain
/// where its attribute's format puts them, without decoding the rest of the record; `pages`
/// gives the walked stretch back as it goes.
pub(crate) fn count_chains(bytes: &[u8], start: usize, end: usize, layout: &RecordLayout, path: &Path, mut pages: PagesBehind) -> Result<ChainTable> {
    use linux_perf_data::linux_perf_event_reader::SampleFormat;
    let mut counts = ChainTable::default();
    for RawRecord { offset, ty, misc, body } in raw_records(bytes, start, end) {
        pages.passed(offset);
        refuse_compressed(ty, offset, path)?;
        if ty != RecordType::SAMPLE.0 {
            continue;
        }
        let (record, _) = layout.record(ty, misc, body);
        let format = record.parse_info.sample_format;
        let chain = callchain_range(&record)
            .map_err(|why| Error::Record { path: path.to_path_buf(), offset: offset as u64, kind: "SAMPLE".into(), why })?
            .map_or(&body[..0], |range| &body[range]);
        let pid = if format.contains(SampleFormat::TID) {
            let tid_at = 8 * [SampleFormat::IDENTIFIER, SampleFormat::IP].iter().filter(|f| format.contains(**f)).count();
            body.get(tid_at..tid_at + 4).map_or(u32::MAX, |b| u32::from_le_bytes(b.try_into().unwrap()))
        } else {
            u32::MAX
        };
        let in_kernel = cpu_mode_is_kernel(CpuMode::from_misc(misc));
        counts.add(pid, in_kernel, chain, 1);
    }
    Ok(counts)
}

/// How to read the records of one recording: each attribute's layout, and which attribute an
/// event id belongs to.
pub(crate) struct RecordLayout {
    pub(crate) parse_infos: Vec<linux_perf_data::linux_perf_event_reader::RecordParseInfo>,
    pub(crate) attr_of_id: rustc_hash::FxHashMap<u64, usize>,
    pub(crate) sample_regs_user: u64,
}

impl RecordLayout {
    /// From a little-endian recording's attributes (at least one).
    pub(crate) fn new(attributes: &[linux_perf_data::AttributeDescription]) -> RecordLayout {
        use linux_perf_data::linux_perf_event_reader::{Endianness, RecordParseInfo};
        RecordLayout {
            parse_infos: attributes.iter().map(|a| RecordParseInfo::new(a.attributes(), Endianness::LittleEndian)).collect(),
            attr_of_id: attributes.iter().enumerate().flat_map(|(i, a)| a.ids().iter().map(move |id| (*id, i))).collect(),
            sample_regs_user: attributes.first().map_or(0, |a| a.attributes().sample_regs_user),
        }
    }

    /// A record of the data section with the layout of its attribute, and that attribute's index.
    /// With several events a record's id says whose it is. perf places it where every
    /// attribute's layout agrees (or in PERF_SAMPLE_IDENTIFIER), so the first attribute's
    /// layout finds it.
    pub(crate) fn record<'b>(
        &self,
        ty: u32,
        misc: u16,
        body: &'b [u8],
    ) -> (linux_perf_data::linux_perf_event_reader::RawEventRecord<'b>, usize) {
        let mut record = linux_perf_data::linux_perf_event_reader::RawEventRecord::new(
            RecordType(ty),
            misc,
            RawData::Single(body),
            self.parse_infos[0],
        );
        let attr_index = if self.parse_infos.len() == 1 {
            0
        } else {
            record.id().and_then(|id| self.attr_of_id.get(&id).copied()).unwrap_or(0)
        };
        record.parse_info = self.parse_infos[attr_index];
        (record, attr_index)
    }
}

/// What one stretch of the data section holds, each list in time order.
#[derive(Default)]
pub(crate) struct RecordsPart {
    /// In file order; their callchains index `callchains`.
    pub(crate) samples: Vec<PerfSample>,
    pub(crate) callchains: Vec<u64>,
    pub(crate) mmaps: Vec<(u64, PerfMmap)>,
    pub(crate) comms: Vec<(u64, PerfComm)>,
    pub(crate) lost: u64,
}


/// Decodes the records in `bytes[start..end]` (whole records, framing checked by
/// [`crate::check::check_recording`]); samples stay in file order, the other lists are sorted by time
/// (stable: records of equal time keep their file order). The capacities size the sample list
/// and the callchain pool: an upper bound only reserves address space, pages are touched as
/// they fill.
pub(crate) fn decode_records(
    bytes: &[u8],
    start: usize,
    end: usize,
    (sample_capacity, chain_capacity): (usize, usize),
    layout: &RecordLayout,
    path: &Path,
) -> Result<RecordsPart> {
    let mut part = RecordsPart {
        samples: Vec::with_capacity(sample_capacity),
        callchains: Vec::with_capacity(chain_capacity),
        ..RecordsPart::default()
    };
    for RawRecord { offset, ty, misc, body } in raw_records(bytes, start, end) {
        refuse_compressed(ty, offset, path)?;
        if ty >= PERF_RECORD_USER_TYPE_START {
            continue;
        }
        let record_type = RecordType(ty);
        let (record, attr_index) = layout.record(ty, misc, body);
        // linux-perf-event-reader multiplies a sample's callchain length unchecked (an
        // overflow panic on a corrupt length): check the length against the record first.
        let chain_at = callchain_range(&record).and_then(|c| fields_parse_safely(ty, misc, body).map(|()| c));
        let parsed = match &chain_at {
            Err(why) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why.clone())),
            Ok(_) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| record.parse())).unwrap_or_else(|_| {
                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the record's fields do not fit its size"))
            }),
        };
        let parsed = parsed
            .map_err(|e| Error::Record { path: path.to_path_buf(), offset: offset as u64, kind: format!("{record_type:?}"), why: e.to_string() })?;
        let time = record.timestamp();
        match parsed {
            EventRecord::Sample(s) => {
                // Read in one pass from the body: the reader's per-entry accessor re-walks
                // the record for every entry.
                let start = part.callchains.len();
                if let Ok(Some(range)) = chain_at {
                    part.callchains.extend(body[range].chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())));
                }
                let callchain = ChainRange { start: start as u32, len: (part.callchains.len() - start) as u32 };
                part.samples.push(PerfSample {
                    attr_index,
                    pid: s.pid.unwrap_or(-1) as u32,
                    tid: s.tid.unwrap_or(-1) as u32,
                    time_ns: s.timestamp.unwrap_or(0),
                    cpu: s.cpu,
                    period: s.period.unwrap_or(1),
                    ip: s.ip,
                    callchain,
                    raw: s.raw.map(|r| r.as_slice().into_owned().into_boxed_slice()),
                    user_regs: s.user_regs.map(|r| {
                        let mask = layout.sample_regs_user;
                        let values = (0..64u64).filter(|b| mask & (1 << b) != 0).filter_map(|b| r.get(b)).collect();
                        Box::new(UserRegs { mask, values })
                    }),
                    user_stack: s.user_stack.map(|(stack, dyn_size)| {
                        let mut bytes = stack.as_slice().into_owned();
                        bytes.truncate(dyn_size.min(bytes.len() as u64) as usize);
                        bytes.into_boxed_slice()
                    }),
                    in_kernel: cpu_mode_is_kernel(s.cpu_mode),
                });
            }
            EventRecord::Mmap(_) | EventRecord::Mmap2(_) => {
                if let Some(m) = mmap_of(parsed, time) {
                    part.mmaps.push((time.unwrap_or(0), m));
                }
            }
            EventRecord::Comm(c) => part.comms.push((
                time.unwrap_or(0),
                PerfComm { pid: c.pid as u32, tid: c.tid as u32, time_ns: time, name: lossy(c.name), exec: c.is_execve },
            )),
            EventRecord::Lost(l) => part.lost += l.count,
            EventRecord::Raw(r) if r.record_type == RecordType::LOST_SAMPLES => {
                // PERF_RECORD_LOST_SAMPLES: u64 lost, then sample_id.
                let body = r.data.as_slice();
                if body.len() >= 8 {
                    part.lost += le_u64(&body, 0);
                }
            }
            _ => {}
        }
    }
    part.mmaps.sort_by_key(|(t, _)| *t);
    part.comms.sort_by_key(|(t, _)| *t);
    Ok(part)
}


/// An MMAP or MMAP2 record as a [`PerfMmap`] (`None` for any other record).
pub(crate) fn mmap_of(record: EventRecord, time: Option<u64>) -> Option<PerfMmap> {
    Some(match record {
        EventRecord::Mmap(m) => PerfMmap {
            pid: m.pid as u32,
            tid: m.tid as u32,
            time_ns: time,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            path: lossy(m.path),
            build_id: None,
            executable: m.is_executable,
            in_kernel: cpu_mode_is_kernel(m.cpu_mode),
        },
        EventRecord::Mmap2(m) => PerfMmap {
            pid: m.pid as u32,
            tid: m.tid as u32,
            time_ns: time,
            start: m.address,
            len: m.length,
            pgoff: m.page_offset,
            path: lossy(m.path),
            build_id: match m.file_id {
                Mmap2FileId::BuildId(id) => Some(id),
                Mmap2FileId::InodeAndVersion(_) => None,
            },
            executable: m.protection & 4 != 0,
            in_kernel: cpu_mode_is_kernel(m.cpu_mode),
        },
        _ => return None,
    })
}

/// The MMAP and MMAP2 records of the data section, in file order: a walk of record headers
/// that parses only those (a few hundred among the samples), so that symbol sources can be
/// read while the samples are still being decoded. Records that do not parse are left to the
/// full decode to report.
pub(crate) fn scan_mmaps(bytes: &[u8], at: &[usize], layout: &RecordLayout) -> Vec<PerfMmap> {
    let mut found = Vec::new();
    // Offsets from the framing check: whole records inside the data section.
    for RawRecord { ty, misc, body, .. } in at.iter().map(|&offset| record_at(bytes, offset)) {
        if fields_parse_safely(ty, misc, body).is_err() {
            continue;
        }
        let (record, _) = layout.record(ty, misc, body);
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| record.parse()));
        if let Ok(Ok(parsed)) = parsed {
            found.extend(mmap_of(parsed, None));
        }
    }
    found
}


/// Fields linux-perf-event-reader asserts on instead of returning an error (a panic, which a
/// fuzzer counts as a crash and `catch_unwind` only hides): checked before it parses.
fn fields_parse_safely(ty: u32, misc: u16, body: &[u8]) -> std::result::Result<(), String> {
    /// PERF_RECORD_MISC_MMAP_BUILD_ID: an MMAP2 record carries a build id instead of device ids.
    const MMAP_BUILD_ID: u16 = 1 << 14;
    if ty == RecordType::MMAP2.0 && misc & MMAP_BUILD_ID != 0 {
        // pid, tid (4 + 4), address, length, page offset (3 × 8), then the build id's length.
        if let Some(&len) = body.get(32)
            && len > 20
        {
            return Err(format!("an MMAP2 build id of {len} bytes (at most 20)"));
        }
    }
    Ok(())
}

pub(crate) fn cpu_mode_is_kernel(mode: CpuMode) -> bool {
    matches!(mode, CpuMode::Kernel | CpuMode::GuestKernel)
}

fn lossy(raw: RawData) -> String {
    String::from_utf8_lossy(&raw.as_slice()).into_owned()
}
