//! perf: reading perf.data ([`PerfRecording`], shared with the off-CPU collector and the unwinder)
//! and the on-CPU collector `perf-cpu` (`perf record -g -e cpu-clock`).
//!
//! perf.data is parsed with the `linux-perf-data` crate. Before handing a file to it we check the
//! header's sections against the file length, because the crate allocates whatever a section
//! header claims; and when it reports a bad record we walk the record headers ourselves to name
//! the byte offset of the first bad one.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord, Mmap2FileId, RawData, RecordType};
use linux_perf_data::PerfFileReader;

use super::{Collector, DecodeContext};
use crate::model::{Collection, Sample};
use crate::symbolize::Symbolizer;
use crate::run::{RunningApp, Target, ToolProcess};

// ---------------------------------------------------------------------------------------------
// perf.data reader
// ---------------------------------------------------------------------------------------------

/// Callchain context markers (include/uapi/linux/perf_event.h, `enum perf_callchain_context`).
pub const PERF_CONTEXT_HV: u64 = (-32i64) as u64;
pub const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
pub const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
pub const PERF_CONTEXT_GUEST: u64 = (-2048i64) as u64;
pub const PERF_CONTEXT_GUEST_KERNEL: u64 = (-2176i64) as u64;
pub const PERF_CONTEXT_GUEST_USER: u64 = (-2560i64) as u64;
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// pid of kernel mappings in MMAP records (perf writes -1).
pub const KERNEL_PID: u32 = u32::MAX;

/// A perf.data file, decoded into owned records in time order.
#[derive(Debug, Default)]
pub struct PerfRecording {
    pub path: PathBuf,
    /// Event name per attribute index (`cpu-clock`, `sched:sched_switch` …).
    pub event_names: Vec<String>,
    pub samples: Vec<PerfSample>,
    /// Every sample's raw callchain, one after another (see [`PerfRecording::callchain`]): one
    /// allocation for a recording instead of one per sample, which cost more than parsing.
    pub callchains: Vec<u64>,
    /// MMAP and MMAP2 records in time order (kernel ones have `pid == KERNEL_PID`).
    pub mmaps: Vec<PerfMmap>,
    pub comms: Vec<PerfComm>,
    /// Events the kernel reported lost (LOST records, summed).
    pub lost: u64,
    /// Build ids from the file's build-id feature section, by mapping path.
    pub build_ids: HashMap<String, Vec<u8>>,
    /// `uname -r` of the recording machine, when perf wrote it.
    pub os_release: Option<String>,
    pub perf_version: Option<String>,
    /// `sample_regs_user` of the first attribute (which registers [`UserRegs`] carry).
    pub sample_regs_user: u64,
}

/// One PERF_RECORD_SAMPLE. Fields that only some recordings have are boxed: a profile holds
/// hundreds of thousands of these, and decoding one is mostly moving it.
#[derive(Clone, Debug, Default)]
pub struct PerfSample {
    pub attr_index: usize,
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub cpu: Option<u32>,
    pub period: u64,
    pub ip: Option<u64>,
    /// Where the raw callchain (context markers included) lies in
    /// [`PerfRecording::callchains`]; see [`PerfRecording::frames`].
    pub callchain: ChainRange,
    /// PERF_SAMPLE_RAW payload (tracepoint fields).
    pub raw: Option<Box<[u8]>>,
    pub user_regs: Option<Box<UserRegs>>,
    /// PERF_SAMPLE_STACK_USER bytes, cut to the dynamic size the kernel reported.
    pub user_stack: Option<Box<[u8]>>,
    /// Whether the sampled IP was in the kernel (`misc` cpu mode).
    pub in_kernel: bool,
}

/// A frame address of a callchain with the context it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainFrame {
    pub addr: u64,
    pub in_kernel: bool,
}

/// A stretch of [`PerfRecording::callchains`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChainRange {
    pub start: u32,
    pub len: u32,
}

impl PerfRecording {
    /// A sample's raw callchain, context markers included.
    pub fn callchain(&self, sample: &PerfSample) -> &[u64] {
        let start = sample.callchain.start as usize;
        &self.callchains[start..start + sample.callchain.len as usize]
    }

    /// A sample's callchain addresses, leaf first, context markers removed and each address
    /// tagged kernel or user. Entries of guest or hypervisor context are dropped.
    pub fn frames<'r>(&'r self, sample: &PerfSample) -> impl Iterator<Item = ChainFrame> + 'r {
        chain_frames(self.callchain(sample), sample.in_kernel)
    }
}

/// The frames of a raw callchain taken with the sampled IP in the kernel (`in_kernel`) or not:
/// see [`PerfRecording::frames`].
pub fn chain_frames(callchain: &[u64], in_kernel: bool) -> impl Iterator<Item = ChainFrame> + '_ {
    let mut context = if in_kernel { PERF_CONTEXT_KERNEL } else { PERF_CONTEXT_USER };
    callchain.iter().filter_map(move |&addr| {
        if addr >= PERF_CONTEXT_MAX {
            context = addr;
            return None;
        }
        match context {
            PERF_CONTEXT_KERNEL => Some(ChainFrame { addr, in_kernel: true }),
            PERF_CONTEXT_USER => Some(ChainFrame { addr, in_kernel: false }),
            _ => None,
        }
    })
}

/// Sampled user registers: `values` hold the registers whose bits are set in `mask`, in bit order.
#[derive(Clone, Debug, Default)]
pub struct UserRegs {
    pub mask: u64,
    pub values: Vec<u64>,
}

impl UserRegs {
    /// Register by its perf number (x86-64: `arch/x86/include/uapi/asm/perf_regs.h`: BP 6, SP 7, IP 8).
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1u64 << reg) == 0 {
            return None;
        }
        let index = (self.mask & ((1u64 << reg) - 1)).count_ones() as usize;
        self.values.get(index).copied()
    }
}

/// x86-64 perf register numbers.
pub mod x86_regs {
    pub const BP: u32 = 6;
    pub const SP: u32 = 7;
    pub const IP: u32 = 8;
}

/// One MMAP or MMAP2 record.
#[derive(Clone, Debug)]
pub struct PerfMmap {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: Option<u64>,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: String,
    /// From MMAP2 (when recorded with `--buildid-mmap`) or the file's build-id section.
    pub build_id: Option<Vec<u8>>,
    pub executable: bool,
    pub in_kernel: bool,
}

#[derive(Clone, Debug)]
pub struct PerfComm {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: Option<u64>,
    pub name: String,
    pub exec: bool,
}

/// perf.data header (tools/perf/util/header.h, `struct perf_file_header`): 104 bytes.
const PERF_HEADER_SIZE: usize = 104;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Section {
    offset: u64,
    size: u64,
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks that every section the header names lies inside the file; returns the data section.
fn check_header(bytes: &[u8], path: &Path) -> Result<Section> {
    let file = path.display();
    if bytes.len() < PERF_HEADER_SIZE {
        bail!(
            "{file}: {} bytes is too short for a perf.data header ({PERF_HEADER_SIZE} bytes at byte offset 0): \
             the recording is truncated; record it again",
            bytes.len()
        );
    }
    if &bytes[0..8] != b"PERFILE2" {
        bail!(
            "{file}: not a perf.data file (magic {:?} at byte offset 0, expected \"PERFILE2\"; \
             pipe-mode output is not supported: record with `-o FILE`)",
            String::from_utf8_lossy(&bytes[0..8])
        );
    }
    let header_size = le_u64(bytes, 8);
    if header_size != PERF_HEADER_SIZE as u64 {
        bail!("{file}: header size {header_size} at byte offset 8 (expected {PERF_HEADER_SIZE}): the file is corrupt");
    }
    let len = bytes.len() as u64;
    let section = |at: usize, what: &str| -> Result<Section> {
        let s = Section { offset: le_u64(bytes, at), size: le_u64(bytes, at + 8) };
        match s.offset.checked_add(s.size) {
            Some(end) if end <= len => Ok(s),
            _ => bail!(
                "{file}: the {what} section named at byte offset {at} (offset {}, size {}) lies outside the \
                 file ({len} bytes): the file is truncated or corrupt",
                s.offset,
                s.size
            ),
        }
    };
    let attr_size = le_u64(bytes, 16);
    // From PERF_ATTR_SIZE_VER0 (64) up; today's perf_event_attr is 136 bytes.
    if !(64..=1024).contains(&attr_size) {
        bail!("{file}: attribute size {attr_size} at byte offset 16 is not plausible: the file is corrupt");
    }
    section(24, "attrs")?;
    let data = section(40, "data")?;
    section(56, "event types")?;
    let features: u32 = (0..4).map(|i| le_u64(bytes, 72 + 8 * i).count_ones()).sum();
    let table = data.offset + data.size;
    let table_end = table + 16 * features as u64;
    if table_end > len {
        bail!(
            "{file}: the feature table at byte offset {table} ({features} entries) runs past the end of the file \
             ({len} bytes): the recording is truncated (did perf get killed before it finished writing?)"
        );
    }
    for i in 0..features as usize {
        section(table as usize + 16 * i, "feature")?;
    }
    check_attribute_descriptions(bytes, path, data)?;
    Ok(data)
}

/// HEADER_EVENT_DESC (feature bit 12, tools/perf/util/header.h).
const FEATURE_EVENT_DESC: usize = 12;

/// linux-perf-data reads the event descriptions eagerly and sizes its vectors by the counts they
/// declare, taken on trust: one flipped bit asks for terabytes, and a failed allocation aborts
/// the process (no panic to catch). So the counts are checked against the bytes that hold them
/// first: the HEADER_EVENT_DESC feature, or without it the legacy event-types section.
fn check_attribute_descriptions(bytes: &[u8], path: &Path, data: Section) -> Result<()> {
    let file = path.display();
    let len = bytes.len() as u64;
    let feature_bits = &bytes[72..104];
    let has = |bit: usize| feature_bits[bit / 8] & (1 << (bit % 8)) != 0;
    if has(FEATURE_EVENT_DESC) {
        // Feature sections follow the data section in the order of their bits.
        let index = (0..FEATURE_EVENT_DESC).filter(|b| has(*b)).count();
        let entry = (data.offset + data.size) as usize + 16 * index;
        let (offset, size) = (le_u64(bytes, entry), le_u64(bytes, entry + 8));
        let desc = &bytes[offset as usize..(offset + size) as usize];
        if let Err((at, why)) = check_event_desc(desc) {
            bail!("{file}: event description at byte offset {}: {why}; the file is corrupt", offset + at as u64);
        }
        return Ok(());
    }
    let attr_size = le_u64(bytes, 16);
    let types = Section { offset: le_u64(bytes, 56), size: le_u64(bytes, 64) };
    // An event-types entry is an attribute followed by the file section of its ids.
    let entry = attr_size + 16;
    for i in 0..types.size / entry {
        let at = types.offset + i * entry + attr_size;
        let (offset, size) = (le_u64(bytes, at as usize), le_u64(bytes, at as usize + 8));
        if offset.checked_add(size).is_none_or(|end| end > len) {
            bail!(
                "{file}: the event ids named at byte offset {at} (offset {offset}, size {size}) lie outside the \
                 file ({len} bytes): the file is corrupt"
            );
        }
    }
    Ok(())
}

/// Checks HEADER_EVENT_DESC's counts against its section: (offset within it, what is wrong).
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
        at += attr_size;
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
pub(crate) fn check_recording(bytes: &[u8], path: &Path) -> Result<Section> {
    let data = check_header(bytes, path)?;
    if let Some((offset, why)) = first_bad_record(bytes, data) {
        bail!("{}: bad record at byte offset {offset}: {why}; the file is truncated or corrupt", path.display());
    }
    Ok(data)
}

/// Walks record headers of the data section in file order; returns the byte offset and a
/// description of the first record whose framing is broken.
fn first_bad_record(bytes: &[u8], data: Section) -> Option<(u64, String)> {
    let end = data.offset + data.size;
    let mut at = data.offset;
    while at < end {
        if at + 8 > end {
            return Some((at, format!("record header needs 8 bytes, {} left in the data section", end - at)));
        }
        let size = u16::from_le_bytes([bytes[at as usize + 6], bytes[at as usize + 7]]) as u64;
        if size < 8 {
            return Some((at, format!("record size {size} is smaller than its 8-byte header")));
        }
        if at + size > end {
            return Some((at, format!("record of {size} bytes runs past the data section's end at {end}")));
        }
        let ty = u32::from_le_bytes(bytes[at as usize..at as usize + 4].try_into().unwrap());
        if ty == PERF_RECORD_AUXTRACE {
            // AUX data follows the record; the reader allocates whatever size the record claims.
            if size < 16 {
                return Some((at, "AUXTRACE record too short for its size field".into()));
            }
            let aux = le_u64(bytes, at as usize + 8);
            match (at + size).checked_add(aux) {
                Some(next) if next <= end => at = next,
                _ => return Some((at, format!("AUXTRACE record claims {aux} bytes of data beyond the data section"))),
            }
            continue;
        }
        at += size;
    }
    None
}

/// PERF_RECORD_AUXTRACE (tools/perf/util/event.h): a user record followed by its AUX data.
const PERF_RECORD_AUXTRACE: u32 = 71;
/// perf's own record types start here (PERF_RECORD_USER_TYPE_START, tools/lib/perf/include/perf/event.h).
const PERF_RECORD_USER_TYPE_START: u32 = 64;
/// PERF_RECORD_COMPRESSED and PERF_RECORD_COMPRESSED2 (`perf record -z`).
const PERF_RECORD_COMPRESSED: u32 = 81;
const PERF_RECORD_COMPRESSED2: u32 = 83;

/// Where a SAMPLE record's callchain entries lie in its body (`None` when it has none), after
/// checking that the length fits inside the record.
fn callchain_range(record: &linux_perf_data::linux_perf_event_reader::RawEventRecord) -> Result<Option<std::ops::Range<usize>>, String> {
    use linux_perf_data::linux_perf_event_reader::{Endianness, SampleFormat};
    let format = record.parse_info.sample_format;
    if record.record_type != RecordType::SAMPLE || !format.contains(SampleFormat::CALLCHAIN) || format.contains(SampleFormat::READ) {
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
    let at = 8 * before.iter().filter(|f| format.contains(**f)).count();
    let body = record.data.as_slice();
    if body.len() < at + 8 {
        return Err(format!("a {}-byte sample is too short for its fields", body.len()));
    }
    let raw: [u8; 8] = body[at..at + 8].try_into().unwrap();
    let nr = match record.parse_info.endian {
        Endianness::LittleEndian => u64::from_le_bytes(raw),
        Endianness::BigEndian => u64::from_be_bytes(raw),
    };
    if nr > ((body.len() - at - 8) / 8) as u64 {
        return Err(format!("a callchain of {nr} entries does not fit the {}-byte sample", body.len()));
    }
    Ok(Some(at + 8..at + 8 + 8 * nr as usize))
}

/// Checks a recording's framing and reads its header, attributes and feature sections (with
/// linux-perf-data): the data section, the recording's metadata (no records yet), and how to
/// read its records.
fn open_recording(bytes: &[u8], path: &Path) -> Result<(Section, PerfRecording, RecordLayout)> {
    use linux_perf_data::linux_perf_event_reader::Endianness;
    let data = check_recording(bytes, path)?;
    let file = path.display();
    let PerfFileReader { perf_file, .. } = PerfFileReader::parse_file(Cursor::new(bytes)).map_err(|e| {
        anyhow::anyhow!("{file}: cannot read the perf.data header and attributes (byte offsets 0..{}): {e}", data.offset)
    })?;
    if perf_file.endian() != Endianness::LittleEndian {
        bail!("{file}: a big-endian recording; tracelab reads perf.data written on little-endian machines");
    }

    let mut rec = PerfRecording { path: path.to_path_buf(), ..Default::default() };
    let attributes = perf_file.event_attributes();
    rec.event_names = attributes.iter().map(|a| a.name().unwrap_or("unknown").to_string()).collect();
    rec.os_release = perf_file.os_release().ok().flatten().map(str::to_string);
    rec.perf_version = perf_file.perf_version().ok().flatten().map(str::to_string);
    if let Ok(ids) = perf_file.build_ids() {
        for info in ids.into_values() {
            rec.build_ids.insert(String::from_utf8_lossy(&info.path).into_owned(), info.build_id);
        }
    }
    if attributes.is_empty() {
        bail!("{file}: the recording describes no event (no attributes)");
    }
    let layout = RecordLayout::new(attributes);
    rec.sample_regs_user = layout.sample_regs_user;
    Ok((data, rec, layout))
}

/// One record of the data section as it lies in the file.
struct RawRecord<'b> {
    offset: usize,
    ty: u32,
    misc: u16,
    body: &'b [u8],
}

/// The records of `bytes[start..end]`, whose framing [`first_bad_record`] has checked; an
/// AUXTRACE record's trailing AUX data is stepped over.
fn raw_records(bytes: &[u8], start: usize, end: usize) -> impl Iterator<Item = RawRecord<'_>> {
    let mut at = start;
    std::iter::from_fn(move || {
        if at + 8 > end {
            return None;
        }
        let offset = at;
        let ty = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let misc = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]);
        let size = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        at += size;
        if ty == PERF_RECORD_AUXTRACE {
            at += le_u64(bytes, offset + 8) as usize;
        }
        Some(RawRecord { offset, ty, misc, body: &bytes[offset + 8..offset + size] })
    })
}

fn refuse_compressed(ty: u32, offset: usize, path: &Path) -> Result<()> {
    if ty == PERF_RECORD_COMPRESSED || ty == PERF_RECORD_COMPRESSED2 {
        bail!(
            "{}: compressed record at byte offset {offset}: recordings made with `perf record -z` are not supported; \
             record without -z",
            path.display()
        );
    }
    Ok(())
}

/// Samples counted by (pid, sampled in the kernel, raw callchain bytes).
type ChainCounts<'b> = rustc_hash::FxHashMap<(u32, bool, &'b [u8]), u64>;

/// Counts the samples of `bytes[start..end]` by callchain, reading each sample's pid and chain
/// where its attribute's format puts them, without decoding the rest of the record.
fn count_chains<'b>(bytes: &'b [u8], start: usize, end: usize, layout: &RecordLayout, path: &Path) -> Result<ChainCounts<'b>> {
    use linux_perf_data::linux_perf_event_reader::SampleFormat;
    let mut counts = ChainCounts::default();
    for RawRecord { offset, ty, misc, body } in raw_records(bytes, start, end) {
        refuse_compressed(ty, offset, path)?;
        if ty != RecordType::SAMPLE.0 {
            continue;
        }
        let (record, _) = layout.record(ty, misc, body);
        let format = record.parse_info.sample_format;
        let chain = callchain_range(&record)
            .map_err(|why| anyhow::anyhow!("{}: bad SAMPLE record at byte offset {offset}: {why}; the file is corrupt", path.display()))?
            .map_or(&body[..0], |range| &body[range]);
        let pid = if format.contains(SampleFormat::TID) {
            let tid_at = 8 * [SampleFormat::IDENTIFIER, SampleFormat::IP].iter().filter(|f| format.contains(**f)).count();
            body.get(tid_at..tid_at + 4).map_or(u32::MAX, |b| u32::from_le_bytes(b.try_into().unwrap()))
        } else {
            u32::MAX
        };
        let in_kernel = cpu_mode_is_kernel(CpuMode::from_misc(misc));
        *counts.entry((pid, in_kernel, chain)).or_default() += 1;
    }
    Ok(counts)
}

/// Folded stacks of a perf.data file, with what named them.
pub struct PerfFold {
    pub folded: std::collections::BTreeMap<String, u64>,
    pub samples: u64,
    pub distinct_callchains: usize,
    pub sources: Vec<String>,
    pub warnings: Vec<String>,
}

/// perf.data → folded stacks, streaming: samples are counted by raw callchain straight from the
/// mapped file (two threads, one per half of the data section), the slow symbol sources are read
/// meanwhile on a third ([`crate::symbolize::prefetch_job`]), and each distinct chain is named
/// once. No per-sample structure is built: for folding, that was most of the cost. What
/// `cargo xtask trace fold` and `cargo xtask bench perf` run.
pub fn fold_perf_file(path: &Path, ctx: &DecodeContext) -> Result<PerfFold> {
    let bytes = crate::symbolize::map_file(path).with_context(|| format!("cannot read perf data {}", path.display()))?;
    let (data, mut rec, layout) = open_recording(&bytes, path)?;
    rec.mmaps = scan_mmaps(&bytes, data, &layout);
    rec.fill_build_ids();
    let job = crate::symbolize::prefetch_job(ctx, &rec.mmaps, rec.os_release.as_deref());
    let end = (data.offset + data.size) as usize;
    let middle = middle_record_boundary(&bytes, data);
    let (first, second) = std::thread::scope(|scope| {
        if let Some(job) = job {
            scope.spawn(job);
        }
        let second = scope.spawn(|| count_chains(&bytes, middle, end, &layout, path));
        let first = count_chains(&bytes, data.offset as usize, middle, &layout, path);
        (first, second.join().unwrap_or_else(|_| Err(anyhow::anyhow!("{}: the decoding thread panicked", path.display()))))
    });
    let (mut counts, second) = (first?, second?);
    for (key, n) in second {
        *counts.entry(key).or_default() += n;
    }
    // (pid, sampled in the kernel, callchain) and how many samples took it.
    type Counted = ((u32, bool, Vec<u64>), u64);
    let chains: Vec<Counted> = counts
        .into_iter()
        .map(|((pid, in_kernel, raw), n)| {
            ((pid, in_kernel, raw.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect()), n)
        })
        .collect();
    let mut pids: Vec<u32> = chains.iter().map(|((pid, _, _), _)| *pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let kernel_frames = chains.iter().any(|((_, in_kernel, chain), _)| chain_frames(chain, *in_kernel).any(|f| f.in_kernel));
    let mut symbolizer = Symbolizer::for_mappings(ctx, &rec.mmaps, &pids, kernel_frames, rec.os_release.as_deref())?;
    let samples = chains.iter().map(|(_, n)| n).sum();
    let distinct_callchains = chains.len();
    let folded = fold_chains(chains.iter().map(|((pid, in_kernel, chain), n)| (*pid, *in_kernel, chain.as_slice(), *n)), &mut symbolizer);
    Ok(PerfFold { folded, samples, distinct_callchains, sources: symbolizer.sources.clone(), warnings: symbolizer.warnings.clone() })
}

/// How to read the records of one recording: each attribute's layout, and which attribute an
/// event id belongs to.
struct RecordLayout {
    parse_infos: Vec<linux_perf_data::linux_perf_event_reader::RecordParseInfo>,
    attr_of_id: rustc_hash::FxHashMap<u64, usize>,
    sample_regs_user: u64,
}

impl RecordLayout {
    /// From a little-endian recording's attributes (at least one).
    fn new(attributes: &[linux_perf_data::AttributeDescription]) -> RecordLayout {
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
    fn record<'b>(
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
struct RecordsPart {
    /// In file order; their callchains index `callchains`.
    samples: Vec<PerfSample>,
    callchains: Vec<u64>,
    mmaps: Vec<(u64, PerfMmap)>,
    comms: Vec<(u64, PerfComm)>,
    lost: u64,
}

/// The byte offset of the first record header at or after the middle of `data`, walking the
/// (already checked) framing from its start.
fn middle_record_boundary(bytes: &[u8], data: Section) -> usize {
    let end = (data.offset + data.size) as usize;
    let middle = data.offset as usize + data.size as usize / 2;
    raw_records(bytes, data.offset as usize, end).map(|r| r.offset).find(|&at| at >= middle).unwrap_or(end)
}

/// Decodes the records in `bytes[start..end]` (whole records, framing checked by
/// [`first_bad_record`]); samples stay in file order, the other lists are sorted by time
/// (stable: records of equal time keep their file order). The capacities size the sample list
/// and the callchain pool: an upper bound only reserves address space, pages are touched as
/// they fill.
fn decode_records(
    bytes: &[u8],
    start: usize,
    end: usize,
    (sample_capacity, chain_capacity): (usize, usize),
    layout: &RecordLayout,
    path: &Path,
) -> Result<RecordsPart> {
    let file = path.display();
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
        let chain_at = callchain_range(&record);
        let parsed = match &chain_at {
            Err(why) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why.clone())),
            Ok(_) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| record.parse())).unwrap_or_else(|_| {
                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the record's fields do not fit its size"))
            }),
        };
        let parsed = parsed
            .map_err(|e| anyhow::anyhow!("{file}: bad {record_type:?} record at byte offset {offset}: {e}; the file is corrupt"))?;
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

/// The order of [`PerfRecording::samples`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleOrder {
    /// By timestamp, ties in file order: what a timeline needs (perf writes each CPU's buffer
    /// in turn, so the file interleaves stretches of time).
    Time,
    /// As perf wrote them: enough for anything that only counts, such as folded stacks, and
    /// saves sorting (a quarter of decoding a cpu-clock recording).
    File,
}

/// Both halves' samples one after the other; the second half's callchains move by
/// `chain_offset` (its pool follows the first's).
fn file_order(mut first: Vec<PerfSample>, second: Vec<PerfSample>, chain_offset: u32) -> Vec<PerfSample> {
    let split = first.len();
    first.extend(second);
    for s in &mut first[split..] {
        s.callchain.start += chain_offset;
    }
    first
}

/// The samples of both halves (each in file order) in time order, ties in file order; the
/// second half's callchains move by `chain_offset` (its pool follows the first's).
///
/// Sorts (time, position) keys and then permutes the samples in place, cycle by cycle: sorting
/// the samples themselves, or gathering them into a new vector, moved or newly touched more
/// memory than decoding them did.
fn time_order(first: Vec<PerfSample>, second: Vec<PerfSample>, chain_offset: u32) -> Vec<PerfSample> {
    let mut samples = file_order(first, second, chain_offset);
    let mut order: Vec<(u64, u32)> = samples.iter().enumerate().map(|(i, s)| (s.time_ns, i as u32)).collect();
    if order.is_sorted() {
        return samples;
    }
    // Keys are distinct (positions are), so an unstable sort orders exactly as a stable one.
    order.sort_unstable();
    // `from[k]`: the position whose sample belongs at k. Each cycle is walked once; a finished
    // slot is marked by pointing at itself.
    let mut from: Vec<u32> = order.into_iter().map(|(_, i)| i).collect();
    for start in 0..from.len() {
        let mut k = start;
        while from[k] as usize != k {
            let source = from[k] as usize;
            from[k] = k as u32;
            if source == start {
                break;
            }
            samples.swap(k, source);
            k = source;
        }
    }
    samples
}

/// Merges lists sorted by `key`; on equal keys `first`'s items come first (they are earlier in
/// the file).
fn merge_sorted<T>(first: Vec<T>, second: Vec<T>, key: impl Fn(&T) -> u64) -> Vec<T> {
    if second.is_empty() {
        return first;
    }
    let mut out = Vec::with_capacity(first.len() + second.len());
    let mut second = second.into_iter().peekable();
    for item in first {
        while let Some(next) = second.next_if(|n| key(n) < key(&item)) {
            out.push(next);
        }
        out.push(item);
    }
    out.extend(second);
    out
}

/// An MMAP or MMAP2 record as a [`PerfMmap`] (`None` for any other record).
fn mmap_of(record: EventRecord, time: Option<u64>) -> Option<PerfMmap> {
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
fn scan_mmaps(bytes: &[u8], data: Section, layout: &RecordLayout) -> Vec<PerfMmap> {
    let end = (data.offset + data.size) as usize;
    let mut found = Vec::new();
    for RawRecord { ty, misc, body, .. } in raw_records(bytes, data.offset as usize, end) {
        if ty != RecordType::MMAP.0 && ty != RecordType::MMAP2.0 {
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

/// Work to run beside the decode of a recording, prepared from the recording's mappings and
/// kernel release before any sample is decoded (see [`PerfRecording::read_with`]).
pub type PrefetchJob = Box<dyn FnOnce() + Send>;

fn cpu_mode_is_kernel(mode: CpuMode) -> bool {
    matches!(mode, CpuMode::Kernel | CpuMode::GuestKernel)
}

fn lossy(raw: RawData) -> String {
    String::from_utf8_lossy(&raw.as_slice()).into_owned()
}

impl PerfRecording {
    /// Reads and decodes a whole perf.data file (`perf record -o FILE`, any event, `-p` or `-a`).
    pub fn read(path: &Path) -> Result<PerfRecording> {
        Self::read_in(path, SampleOrder::Time)
    }

    /// As [`PerfRecording::read`], with the samples in the order asked for.
    pub fn read_in(path: &Path, order: SampleOrder) -> Result<PerfRecording> {
        Self::read_with(path, order, |_, _| None)
    }

    /// As [`PerfRecording::read_in`]; `prefetch` sees the recording's MMAP records and kernel
    /// release before the samples are decoded, and the job it returns runs on a thread of its
    /// own meanwhile (reading the symbol sources those mappings will need:
    /// [`crate::symbolize::prefetch_job`]).
    pub fn read_with(
        path: &Path,
        order: SampleOrder,
        prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>,
    ) -> Result<PerfRecording> {
        let bytes = crate::symbolize::map_file(path).with_context(|| format!("cannot read perf data {}", path.display()))?;
        Self::from_bytes_with(&bytes, path, order, prefetch)
    }

    /// Decodes perf.data held in memory; `path` only names it in messages.
    ///
    /// linux-perf-data reads the header, attributes and feature sections; the data section is
    /// walked here in file order over the borrowed bytes, each record parsed by
    /// linux-perf-event-reader, and the results sorted by time at the end. The crate's own
    /// iterator copies every record into a buffer and sorts through a heap, which was most of the
    /// time of turning a recording into folded stacks; a stable sort by timestamp gives the same
    /// order as its (timestamp, file offset) key.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<PerfRecording> {
        Self::from_bytes_in(bytes, path, SampleOrder::Time)
    }

    /// As [`PerfRecording::from_bytes`], with the samples in the order asked for.
    pub fn from_bytes_in(bytes: &[u8], path: &Path, order: SampleOrder) -> Result<PerfRecording> {
        Self::from_bytes_with(bytes, path, order, |_, _| None)
    }

    /// As [`PerfRecording::from_bytes_in`], with a prefetch as in [`PerfRecording::read_with`].
    pub fn from_bytes_with(
        bytes: &[u8],
        path: &Path,
        order: SampleOrder,
        prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>,
    ) -> Result<PerfRecording> {
        let (data, mut rec, layout) = open_recording(bytes, path)?;
        let file = path.display();

        // The two halves of the data section decode on two threads: this is most of the time of
        // turning a recording into stacks, and records do not depend on each other.
        let end = (data.offset + data.size) as usize;
        let middle = middle_record_boundary(bytes, data);
        let job = prefetch(&scan_mmaps(bytes, data, &layout), rec.os_release.as_deref());
        let (first, second) = std::thread::scope(|scope| {
            if let Some(job) = job {
                scope.spawn(job);
            }
            // A cpu-clock sample with a frame-pointer chain takes ~200 bytes of the file. The first
            // half's lists get room for both halves, so the second's are appended in place.
            let second = scope.spawn(|| decode_records(bytes, middle, end, ((end - middle) / 192, (end - middle) / 8), &layout, path));
            let whole = end - data.offset as usize;
            let first = decode_records(bytes, data.offset as usize, middle, (whole / 192, whole / 8), &layout, path);
            (first, second.join().unwrap_or_else(|_| Err(anyhow::anyhow!("{file}: the decoding thread panicked"))))
        });
        // An error in the first half is the earlier one in the file.
        let (first, second) = (first?, second?);
        rec.lost = first.lost + second.lost;
        let chain_offset = first.callchains.len() as u32;
        let mut callchains = first.callchains;
        callchains.extend_from_slice(&second.callchains);
        rec.callchains = callchains;
        rec.samples = match order {
            SampleOrder::Time => time_order(first.samples, second.samples, chain_offset),
            SampleOrder::File => file_order(first.samples, second.samples, chain_offset),
        };
        rec.mmaps = merge_sorted(first.mmaps, second.mmaps, |(t, _)| *t).into_iter().map(|(_, m)| m).collect();
        rec.comms = merge_sorted(first.comms, second.comms, |(t, _)| *t).into_iter().map(|(_, c)| c).collect();
        rec.fill_build_ids();
        Ok(rec)
    }

    /// Gives MMAP records without a build id the one the build-id feature section lists for
    /// their path (MMAP2 records may carry their own).
    fn fill_build_ids(&mut self) {
        for m in &mut self.mmaps {
            if m.build_id.is_none() {
                m.build_id = self.build_ids.get(&m.path).cloned();
            }
        }
    }

    /// The event name of a sample (`cpu-clock`, `sched:sched_switch` …).
    pub fn event_name(&self, sample: &PerfSample) -> &str {
        self.event_names.get(sample.attr_index).map(String::as_str).unwrap_or("unknown")
    }

    /// Process names by pid, from COMM records (the last one wins).
    pub fn process_names(&self) -> HashMap<u32, String> {
        self.comms.iter().filter(|c| c.pid == c.tid).map(|c| (c.pid, c.name.clone())).collect()
    }
}

/// Turns the samples of a recording into model samples (frames symbolized, leaf first).
pub fn samples_to_model(rec: &PerfRecording, symbolizer: &mut Symbolizer, weight_of: impl Fn(&PerfSample) -> u64) -> Vec<Sample> {
    let chains: rustc_hash::FxHashSet<(u32, bool, &[u64])> =
        rec.samples.iter().map(|s| (s.pid, s.in_kernel, rec.callchain(s))).collect();
    symbolizer.preload(chains.iter().flat_map(|&(pid, in_kernel, callchain)| {
        chain_frames(callchain, in_kernel).map(move |f| (pid, f.addr, f.in_kernel))
    }));
    rec.samples
        .iter()
        .map(|s| Sample {
            pid: s.pid,
            tid: s.tid,
            time_ns: s.time_ns,
            weight: weight_of(s),
            frames: rec.frames(s).map(|f| symbolizer.frame(s.pid, f.addr, f.in_kernel)).collect(),
            kind: None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The perf-cpu collector
// ---------------------------------------------------------------------------------------------

/// Finds a perf binary: `perf`, else a versioned `perf_X.Y` (Debian bullseye ships only those).
pub fn detect_perf_binary() -> Option<PathBuf> {
    if let Some(p) = crate::environment::which("perf") {
        return Some(p);
    }
    let path = std::env::var_os("PATH")?;
    let mut found: Vec<PathBuf> = std::env::split_paths(&path)
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("perf_") && n[5..].starts_with(|c: char| c.is_ascii_digit())))
        .collect();
    found.sort();
    found.pop()
}

/// `call_graph` option: frame pointers or DWARF with a stack size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallGraph {
    FramePointer,
    Dwarf(u32),
}

impl CallGraph {
    pub fn parse(s: &str) -> Result<CallGraph> {
        if s == "fp" {
            return Ok(CallGraph::FramePointer);
        }
        if s == "dwarf" {
            return Ok(CallGraph::Dwarf(8192));
        }
        if let Some(n) = s.strip_prefix("dwarf,") {
            let size: u32 = n.parse().with_context(|| format!("call_graph `{s}`: `{n}` is not a stack size in bytes"))?;
            if size == 0 || size > 65528 || size % 8 != 0 {
                bail!("call_graph `{s}`: the stack size must be a multiple of 8 between 8 and 65528");
            }
            return Ok(CallGraph::Dwarf(size));
        }
        bail!("call_graph `{s}`: expected `fp`, `dwarf` or `dwarf,SIZE`")
    }

    pub fn perf_args(&self) -> Vec<String> {
        match self {
            CallGraph::FramePointer => vec!["-g".into()],
            CallGraph::Dwarf(n) => vec!["--call-graph".into(), format!("dwarf,{n}")],
        }
    }
}

pub struct PerfCpuCollector {
    name: String,
    pub frequency: u64,
    pub call_graph: CallGraph,
    pub wx: bool,
    pub perf_binary: Option<String>,
    /// Name JIT frames in the W^X alias from the perf map (perf itself leaves them unnamed).
    pub name_doublemapped: bool,
    artifacts: Option<PathBuf>,
    target_pid: u32,
    tmp_dir_host: Option<PathBuf>,
    tool: Option<ToolProcess>,
    commands: Vec<String>,
    perf_stderr: Option<std::thread::JoinHandle<String>>,
}

/// What a container needs for perf_event_open (shared/DESIGN.md §6: PERFMON is unknown to
/// Debian's docker.io 20.10, no capability fails).
pub const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN"];

/// `[[collector]] kind = "perf-cpu"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerfCpuOptions {
    /// Samples per second (cpu-clock), 1..=100000.
    #[serde(default = "default_frequency")]
    pub frequency: u64,
    /// `fp` (default) or `dwarf,BYTES`.
    #[serde(default)]
    pub call_graph: Option<String>,
    /// Leave .NET's W^X on (the JIT then runs code from a memfd alias).
    #[serde(default)]
    pub wx: bool,
    #[serde(default)]
    pub perf_binary: Option<String>,
    /// Name JIT frames in the W^X alias from the perf map (perf itself leaves them unnamed).
    #[serde(default)]
    pub name_doublemapped: bool,
}

fn default_frequency() -> u64 {
    999
}

impl Default for PerfCpuOptions {
    fn default() -> Self {
        PerfCpuOptions { frequency: default_frequency(), call_graph: None, wx: false, perf_binary: None, name_doublemapped: false }
    }
}

/// The capability probe: the defaults a scenario gets (999 Hz, frame pointers).
pub fn probe_options() -> PerfCpuOptions {
    PerfCpuOptions::default()
}

pub fn from_spec(name: &str, options: &PerfCpuOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(PerfCpuCollector::new(name, options)?))
}

impl PerfCpuCollector {
    pub fn new(name: &str, options: &PerfCpuOptions) -> Result<PerfCpuCollector> {
        let frequency = options.frequency;
        if frequency == 0 || frequency > 100_000 {
            bail!("collector `{name}`: frequency {frequency} Hz is out of range (1..100000)");
        }
        Ok(PerfCpuCollector {
            name: name.to_string(),
            frequency,
            call_graph: CallGraph::parse(options.call_graph.as_deref().unwrap_or("fp"))
                .with_context(|| format!("collector `{name}`"))?,
            wx: options.wx,
            perf_binary: options.perf_binary.clone(),
            name_doublemapped: options.name_doublemapped,
            artifacts: None,
            target_pid: 0,
            tmp_dir_host: None,
            tool: None,
            commands: Vec::new(),
            perf_stderr: None,
        })
    }

    fn data_path(&self) -> Option<PathBuf> {
        self.artifacts.as_ref().map(|a| a.join(format!("{}.data", self.name)))
    }
}

/// Explains a failed perf start from its stderr: what is wrong and what to do.
pub fn explain_perf_failure(stderr: &str) -> String {
    let mut advice = String::new();
    if stderr.contains("perf_event_paranoid") || stderr.contains("Permission") || stderr.contains("EACCES") {
        advice = "perf may not observe this process: run as root, or lower /proc/sys/kernel/perf_event_paranoid \
                  (`sysctl kernel.perf_event_paranoid=1`), or in a container grant CAP_SYS_ADMIN \
                  (CAP_PERFMON where the engine knows it)"
            .into();
    } else if stderr.contains("No such process") || stderr.contains("ESRCH") {
        advice = "the app exited before perf attached".into();
    } else if stderr.contains("not supported") || stderr.contains("EOPNOTSUPP") {
        advice = "the kernel or VM does not support this event".into();
    }
    if advice.is_empty() { stderr.trim().to_string() } else { format!("{advice}. perf said: {}", stderr.trim()) }
}

impl Collector for PerfCpuCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("DOTNET_PerfMapEnabled".to_string(), "1".to_string())];
        if !self.wx {
            // With W^X on, JIT code runs from a memfd alias the perf map does not describe.
            env.push(("DOTNET_EnableWriteXorExecute".into(), "0".into()));
        }
        env
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        let perf = match &self.perf_binary {
            Some(p) => p.clone(),
            // Inside a container the engine's target knows its own tools; on the host we detect.
            None if app.container_id.is_none() => detect_perf_binary()
                .context("no `perf` (or `perf_X.Y`) on PATH: install linux-perf (Debian) / linux-tools")?
                .display()
                .to_string(),
            None => "perf".to_string(),
        };
        std::fs::create_dir_all(artifacts).with_context(|| format!("cannot create {}", artifacts.display()))?;
        self.artifacts = Some(artifacts.to_path_buf());
        self.target_pid = app.target_pid;
        self.tmp_dir_host = Some(app.tmp_dir_host.clone());
        let host_out = self.data_path().unwrap();
        let _ = std::fs::remove_file(&host_out);
        // The engine makes the artifacts folder the app's work dir; the tool sees it at
        // `work_dir_in_target` (on the host, the same path).
        let out_in_target = if app.container_id.is_none() {
            host_out.clone()
        } else {
            app.work_dir_in_target.join(host_out.file_name().unwrap())
        };
        let mut argv = vec![perf, "record".into(), "-k".into(), "1".into()];
        argv.extend(self.call_graph.perf_args());
        argv.extend([
            "-e".into(),
            "cpu-clock".into(),
            "-F".into(),
            self.frequency.to_string(),
            "-p".into(),
            app.target_pid.to_string(),
            "-o".into(),
            out_in_target.display().to_string(),
        ]);
        self.commands.push(argv.join(" "));
        let mut tool = target.spawn_tool(app, &argv, &[])?;
        let stderr = tool.child.stderr.take();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        self.perf_stderr = stderr.map(|s| {
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut all = String::new();
                for line in std::io::BufReader::new(s).lines().map_while(Result::ok) {
                    let _ = tx.send(line.clone());
                    all.push_str(&line);
                    all.push('\n');
                }
                all
            })
        });
        // Sentinel: perf writes its header and the synthesized MMAP/COMM records of the process
        // once its events are open; the file then grows past the header.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut early_stderr = String::new();
        loop {
            while let Ok(line) = rx.try_recv() {
                early_stderr.push_str(&line);
                early_stderr.push('\n');
            }
            if let Some(status) = tool.child.try_wait()? {
                let all = self.perf_stderr.take().and_then(|h| h.join().ok()).unwrap_or(early_stderr);
                bail!("perf exited at start ({status}): {}", explain_perf_failure(&all));
            }
            let size = std::fs::metadata(&host_out).map(|m| m.len()).unwrap_or(0);
            if size > PERF_HEADER_SIZE as u64 {
                break;
            }
            if Instant::now() > deadline {
                let _ = tool.interrupt();
                bail!(
                    "perf did not start recording within 20 s ({} stayed at {size} bytes); perf said: {}",
                    host_out.display(),
                    early_stderr.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // perf writes the header before it finishes synthesizing; a short settle lets an error
        // that comes right after (an event it cannot open) show as an exit.
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = tool.child.try_wait()? {
            let all = self.perf_stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
            if !status.success() {
                bail!("perf exited at start ({status}): {}", explain_perf_failure(&all));
            }
        }
        self.tool = Some(tool);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, _app: &RunningApp) -> Result<()> {
        if let Some(mut tool) = self.tool.take() {
            // perf -p exits by itself once the process is gone.
            let deadline = Instant::now() + Duration::from_secs(5);
            while tool.child.try_wait()?.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if tool.child.try_wait()?.is_none() {
                tool.interrupt()?;
            }
            let status = tool.wait(Duration::from_secs(30))?;
            let stderr = self.perf_stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
            if let Some(artifacts) = &self.artifacts {
                let _ = std::fs::write(artifacts.join(format!("{}.perf-record.txt", self.name)), &stderr);
            }
            let data = self.data_path().unwrap_or_default();
            if !data.is_file() {
                bail!("perf record ended ({status}) without writing {}: {}", data.display(), explain_perf_failure(&stderr));
            }
        }
        if let (Some(artifacts), Some(tmp)) = (&self.artifacts, &self.tmp_dir_host) {
            for file in [format!("perf-{}.map", self.target_pid), format!("jit-{}.dump", self.target_pid)] {
                let from = tmp.join(&file);
                if from.is_file() && !artifacts.join(&file).is_file() {
                    std::fs::copy(&from, artifacts.join(&file))
                        .with_context(|| format!("cannot copy {} into {}", from.display(), artifacts.display()))?;
                }
            }
        }
        Ok(())
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let path = ctx.artifacts.join(format!("{}.data", self.name));
        let rec = PerfRecording::read_with(&path, SampleOrder::Time, |mmaps, os| crate::symbolize::prefetch_job(ctx, mmaps, os))?;
        let mut coll = decode_recording(&rec, ctx, &self.name, self.name_doublemapped)?;
        coll.metrics.insert("frequency_hz".into(), self.frequency as f64);
        Ok(coll)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// Decodes an on-CPU recording into a collection (every sample weight 1).
pub fn decode_recording(rec: &PerfRecording, ctx: &DecodeContext, collector: &str, name_doublemapped: bool) -> Result<Collection> {
    let mut symbolizer = Symbolizer::new(ctx, rec)?;
    symbolizer.set_name_doublemapped(name_doublemapped);
    let mut coll = Collection::new(collector);
    coll.samples = samples_to_model(rec, &mut symbolizer, |_| 1);
    coll.lost_events = rec.lost;
    coll.metrics.insert("samples_total".into(), coll.samples.len() as f64);
    coll.metrics.insert("lost_events".into(), rec.lost as f64);
    coll.metrics.insert("mmaps".into(), rec.mmaps.len() as f64);
    for (k, v) in symbolizer.metrics() {
        coll.metrics.insert(k, v);
    }
    Ok(coll)
}

/// perf.data → folded stacks without building model samples: frames are interned per address
/// and equal stacks counted before any label is built (what `cargo xtask bench perf` times).
/// Folding only counts, so `rec` may be in either [`SampleOrder`].
pub fn fold_recording(rec: &PerfRecording, symbolizer: &mut Symbolizer) -> std::collections::BTreeMap<String, u64> {
    // Samples of a busy loop repeat the same raw callchain: count them before naming anything,
    // so each distinct chain's addresses are looked up once.
    let mut chains: rustc_hash::FxHashMap<(u32, bool, &[u64]), u64> = Default::default();
    for s in &rec.samples {
        *chains.entry((s.pid, s.in_kernel, rec.callchain(s))).or_default() += 1;
    }
    fold_chains(chains.into_iter().map(|((pid, in_kernel, chain), n)| (pid, in_kernel, chain, n)), symbolizer)
}

/// Folds distinct (pid, sampled in the kernel, raw callchain, count): names every address once
/// (symbol sources read in parallel first), then labels each distinct frame once.
fn fold_chains<'c>(
    chains: impl Iterator<Item = (u32, bool, &'c [u64], u64)>,
    symbolizer: &mut Symbolizer,
) -> std::collections::BTreeMap<String, u64> {
    let chains: Vec<(u32, bool, &[u64], u64)> = chains.collect();
    symbolizer.preload(
        chains.iter().flat_map(|&(pid, in_kernel, chain, _)| chain_frames(chain, in_kernel).map(move |f| (pid, f.addr, f.in_kernel))),
    );
    let stacks: Vec<(Vec<u32>, u64)> = chains
        .iter()
        .map(|&(pid, in_kernel, chain, count)| {
            (chain_frames(chain, in_kernel).map(|f| symbolizer.frame_id(pid, f.addr, f.in_kernel)).collect(), count)
        })
        .collect();
    crate::fold::fold_interned(stacks.iter().map(|(ids, count)| (ids.as_slice(), *count)), |id| {
        crate::fold::frame_label(symbolizer.frame_by_id(id))
    })
}

/// The fixture app (../shared/fixtures/FixtureApp), built for tests and benchmarks that need a
/// real .NET process with a known CPU split.
pub mod fixture_app {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, bail};

    use crate::dotnet::Dotnet;

    /// Builds FixtureApp into `out_dir/app` (sources copied to `out_dir/src`: the shared folder
    /// is read-only and a build writes `obj/` beside the project). Reuses a previous build.
    pub fn build(dotnet: &Dotnet, out_dir: &Path) -> Result<PathBuf> {
        let dll = out_dir.join("app").join("FixtureApp.dll");
        if dll.is_file() {
            return Ok(dll);
        }
        let source = crate::shared_dir().join("fixtures").join("FixtureApp");
        let src = out_dir.join("src");
        std::fs::create_dir_all(&src).with_context(|| format!("cannot create {}", src.display()))?;
        for file in ["FixtureApp.csproj", "Program.cs"] {
            std::fs::copy(source.join(file), src.join(file))
                .with_context(|| format!("cannot copy {} (is ../shared present?)", source.join(file).display()))?;
        }
        let out = dotnet
            .command()
            .args(["build", "-c", "Release", "-v", "q", "-nologo", "-o"])
            .arg(out_dir.join("app"))
            .arg(src.join("FixtureApp.csproj"))
            .output()
            .context("cannot run `dotnet build`")?;
        if !out.status.success() || !dll.is_file() {
            bail!(
                "`dotnet build` of FixtureApp failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(dll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_the_first_lists_items_first_on_equal_keys() {
        let first = vec![(1, 'a'), (3, 'b'), (3, 'c'), (7, 'd')];
        let second = vec![(0, 'w'), (3, 'x'), (5, 'y'), (9, 'z')];
        let merged: String = merge_sorted(first, second, |(k, _)| *k).into_iter().map(|(_, c)| c).collect();
        assert_eq!(merged, "wabcxydz");
    }

    /// The two-thread decode gives what one pass over the whole data section gives, on real
    /// recordings with one event (cpu-clock) and with several (sched_switch + switch events,
    /// DWARF stacks).
    #[test]
    fn halves_decode_as_one_pass_does() {
        for name in ["perf-cpu.data", "perf-offcpu-sys.data", "perf-offcpu-dwarf.data"] {
            let path = crate::symbolize::perf_fixtures::fixture(name);
            let bytes = std::fs::read(&path).unwrap();
            let rec = PerfRecording::from_bytes(&bytes, &path).unwrap();

            let data = check_header(&bytes, &path).unwrap();
            let PerfFileReader { perf_file, .. } = PerfFileReader::parse_file(Cursor::new(&bytes[..])).unwrap();
            let layout = RecordLayout::new(perf_file.event_attributes());
            let whole = decode_records(&bytes, data.offset as usize, (data.offset + data.size) as usize, (0, 0), &layout, &path).unwrap();
            let key = |chains: &[u64], s: &PerfSample| {
                let chain = chains[s.callchain.start as usize..][..s.callchain.len as usize].to_vec();
                (s.attr_index, s.pid, s.tid, s.time_ns, chain, s.raw.clone(), s.user_stack.as_ref().map(|b| b.len()))
            };
            let mut one_pass: Vec<_> = whole.samples.iter().map(|s| key(&whole.callchains, s)).collect();
            one_pass.sort_by_key(|k| k.3);
            assert!(rec.samples.len() > 100, "{name}: {} samples", rec.samples.len());
            assert_eq!(rec.samples.iter().map(|s| key(&rec.callchains, s)).collect::<Vec<_>>(), one_pass, "{name}");
            assert_eq!(
                rec.mmaps.iter().map(|m| (m.start, m.path.clone())).collect::<Vec<_>>(),
                whole.mmaps.iter().map(|(_, m)| (m.start, m.path.clone())).collect::<Vec<_>>(),
                "{name}"
            );
            assert_eq!(rec.lost, whole.lost);
            assert!(rec.samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "{name}: not in time order");
            // The off-CPU recordings hold sched:sched_switch and perf's dummy event (which only
            // carries switch records): each sample must be routed to the tracepoint by its id.
            let expected = if name == "perf-cpu.data" { "cpu-clock" } else { "sched:sched_switch" };
            assert!(rec.samples.iter().all(|s| rec.event_name(s).starts_with(expected)), "{name}: {:?}", rec.event_names);
        }
    }
}
