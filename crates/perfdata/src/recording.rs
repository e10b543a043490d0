//! The decoded recording: [`PerfRecording`] and the records it keeps (samples with their
//! callchains, mappings, process names), and the reading functions that fill it. Decoding runs
//! on two threads, one per half of the data section: records do not depend on each other, and
//! that is most of the time of turning a recording into stacks.

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use linux_perf_data::PerfFileReader;

use crate::check::{Section, check_recording};
use crate::error::{Error, Result};
use crate::order::{SampleOrder, file_order, merge_sorted, time_order};
use crate::check::RecordIndex;
use crate::records::{PagesBehind, RecordLayout, count_chains, decode_records, scan_mmaps};


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

/// Checks a recording's framing and reads its header, attributes and feature sections (with
/// linux-perf-data): the data section, the recording's metadata (no records yet), and how to
/// read its records.
pub(crate) fn open_recording(
    bytes: &[u8],
    path: &Path,
    map: Option<&memmap2::Mmap>,
) -> Result<(Section, RecordIndex, PerfRecording, RecordLayout)> {
    use linux_perf_data::linux_perf_event_reader::Endianness;
    let (data, index) = check_recording(bytes, path, map)?;
    let PerfFileReader { perf_file, .. } = PerfFileReader::parse_file(Cursor::new(bytes))
        .map_err(|source| Error::Attributes { path: path.to_path_buf(), data_offset: data.offset, source })?;
    if perf_file.endian() != Endianness::LittleEndian {
        return Err(Error::BigEndian { path: path.to_path_buf() });
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
        return Err(Error::NoEvents { path: path.to_path_buf() });
    }
    let layout = RecordLayout::new(attributes);
    rec.sample_regs_user = layout.sample_regs_user;
    Ok((data, index, rec, layout))
}

/// Work to run beside the decode of a recording, prepared from the recording's mappings and
/// kernel release before any sample is decoded (see [`PerfRecording::read_with`]).
pub type PrefetchJob = Box<dyn FnOnce() + Send>;


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
    /// own meanwhile (in tracelab: reading the symbol sources those mappings will need).
    pub fn read_with(
        path: &Path,
        order: SampleOrder,
        prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>,
    ) -> Result<PerfRecording> {
        let bytes = map_file(path)?;
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
        let (data, index, mut rec, layout) = open_recording(bytes, path, None)?;

        // The two halves of the data section decode on two threads: this is most of the time of
        // turning a recording into stacks, and records do not depend on each other.
        let end = (data.offset + data.size) as usize;
        let middle = index.middle;
        let job = prefetch(&scan_mmaps(bytes, &index.mmaps, &layout), rec.os_release.as_deref());
        let (first, second) = std::thread::scope(|scope| {
            if let Some(job) = job {
                scope.spawn(job);
            }
            // A cpu-clock sample with a frame-pointer chain takes ~200 bytes of the file. The first
            // half's lists get room for both halves, so the second's are appended in place.
            let second = scope.spawn(|| decode_records(bytes, middle, end, ((end - middle) / 192, (end - middle) / 8), &layout, path));
            let whole = end - data.offset as usize;
            let first = decode_records(bytes, data.offset as usize, middle, (whole / 192, whole / 8), &layout, path);
            (first, second.join().unwrap_or_else(|_| Err(Error::ThreadPanicked { path: path.to_path_buf() })))
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
    pub(crate) fn fill_build_ids(&mut self) {
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

/// Maps a file read-only. Recordings run to tens of megabytes and are read once, front to back:
/// copying them into fresh heap pages cost more than decoding them.
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is only read. A file truncated under us while mapped would fault; perf.data
    // files are read after perf has finished writing them.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

/// One distinct callchain of a recording and how many samples took it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedChain {
    pub pid: u32,
    /// Whether the sampled IP was in the kernel (the context the chain starts in).
    pub in_kernel: bool,
    /// Where the raw callchain, context markers included (see [`chain_frames`]), lies in
    /// [`ChainCounts::ips`]; [`ChainCounts::chain`] gives it.
    pub chain: ChainRange,
    pub count: u64,
}

/// A recording's samples counted by callchain: what folded stacks need, without one structure
/// per sample (for folding, building those was most of the cost).
#[derive(Debug, Default)]
pub struct ChainCounts {
    /// The recording's metadata and MMAP records (no samples, comms or lost counts).
    pub recording: PerfRecording,
    /// Distinct (pid, in kernel, callchain), in no particular order.
    pub chains: Vec<CountedChain>,
    /// The chains' entries, one after the other (one arena rather than a list per chain: memory
    /// grows with the distinct chains of a long recording).
    pub ips: Vec<u64>,
    /// The prefetch job, still running or done: the counts do not wait for it (on a cold page
    /// cache the kernel's symbols take longer to read than the whole count, and the caller has
    /// other files to read meanwhile). Whoever needs its result waits for that result; the caller
    /// joins this before it exits, so a job writing a cache is never cut off half-way.
    pub prefetch: Option<std::thread::JoinHandle<()>>,
}

impl ChainCounts {
    /// The raw callchain of one of [`ChainCounts::chains`].
    pub fn chain(&self, c: &CountedChain) -> &[u64] {
        &self.ips[c.chain.start as usize..][..c.chain.len as usize]
    }

    /// Counts the samples of a perf.data file by callchain, streaming over the mapped file on
    /// two threads (one per half of the data section); `prefetch` as in
    /// [`PerfRecording::read_with`], except that its job may outlive the count
    /// ([`ChainCounts::prefetch`]).
    pub fn read_with(path: &Path, prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>) -> Result<ChainCounts> {
        let map = map_file(path)?;
        // The walks give the mapped pages back behind them: the fold's resident memory stays the
        // same whatever the recording's size.
        Self::count(&map, Some(&map), path, prefetch)
    }

    /// As [`ChainCounts::read_with`] over bytes in memory; `path` only names them in messages.
    pub fn from_bytes_with(
        bytes: &[u8],
        path: &Path,
        prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>,
    ) -> Result<ChainCounts> {
        Self::count(bytes, None, path, prefetch)
    }

    /// Counts `bytes`, which are `map` when it is given.
    fn count(
        bytes: &[u8],
        map: Option<&memmap2::Mmap>,
        path: &Path,
        prefetch: impl FnOnce(&[PerfMmap], Option<&str>) -> Option<PrefetchJob>,
    ) -> Result<ChainCounts> {
        let (data, index, mut rec, layout) = open_recording(bytes, path, map)?;
        rec.mmaps = scan_mmaps(bytes, &index.mmaps, &layout);
        rec.fill_build_ids();
        let prefetch = prefetch(&rec.mmaps, rec.os_release.as_deref()).map(std::thread::spawn);
        let end = (data.offset + data.size) as usize;
        let middle = index.middle;
        let (first, second) = std::thread::scope(|scope| {
            let second = scope.spawn(|| count_chains(bytes, middle, end, &layout, path, PagesBehind::new(map, middle)));
            let first = count_chains(bytes, data.offset as usize, middle, &layout, path, PagesBehind::new(map, data.offset as usize));
            (first, second.join().unwrap_or_else(|_| Err(Error::ThreadPanicked { path: path.to_path_buf() })))
        });
        let (mut counts, second) = (first?, second?);
        counts.merge(&second);
        drop(second);
        let (counted, ips) = counts.into_parts();
        let chains = counted
            .map(|c| CountedChain { pid: c.pid, in_kernel: c.in_kernel, chain: ChainRange { start: c.at, len: c.len }, count: c.count })
            .collect();
        Ok(ChainCounts { recording: rec, chains, ips, prefetch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_header;

    /// The framing check's index (MMAP records, the middle boundary) is what a plain walk over
    /// the records finds, on every recorded perf fixture.
    #[test]
    fn the_framing_check_indexes_what_a_walk_finds() {
        let recordings = tracelab_fixtures::fixtures_with_extension("perf", "data");
        assert!(recordings.len() >= 5, "expected the recorded perf fixtures, found {recordings:?}");
        for path in recordings {
            let bytes = std::fs::read(&path).unwrap();
            let (data, index) = crate::check::check_recording(&bytes, &path, None).unwrap();
            let end = (data.offset + data.size) as usize;
            let middle = data.offset as usize + data.size as usize / 2;
            let records: Vec<_> = crate::records::raw_records(&bytes, data.offset as usize, end).collect();
            let mmaps: Vec<usize> = records.iter().filter(|r| r.ty == 1 || r.ty == 10).map(|r| r.offset).collect();
            assert!(!mmaps.is_empty(), "{}", path.display());
            assert_eq!(index.mmaps, mmaps, "{}", path.display());
            assert_eq!(index.middle, records.iter().map(|r| r.offset).find(|&at| at >= middle).unwrap_or(end), "{}", path.display());
        }
    }

    /// Giving a mapped recording's pages back behind the walk, page by page, changes no count:
    /// the counts hold copies of the chains, and a passed page read again faults back in.
    #[test]
    fn releasing_passed_pages_changes_no_count() {
        for path in tracelab_fixtures::fixtures_with_extension("perf", "data") {
            let map = map_file(&path).unwrap();
            let (data, index, _, layout) = open_recording(&map, &path, Some(&map)).unwrap();
            let (start, end) = (data.offset as usize, (data.offset + data.size) as usize);
            let sorted = |counts: crate::records::ChainTable| {
                let mut all: Vec<_> = counts.iter().map(|(pid, k, chain, n)| (pid, k, chain.to_vec(), n)).collect();
                all.sort();
                all
            };
            let released = crate::records::count_chains(&map, start, end, &layout, &path, PagesBehind::eager(Some(&map), start)).unwrap();
            // Read again after every page was given back, and from a copy in memory.
            let again = crate::records::count_chains(&map, start, end, &layout, &path, PagesBehind::new(None, start)).unwrap();
            let copy = map.to_vec();
            let in_memory = crate::records::count_chains(&copy, start, end, &layout, &path, PagesBehind::new(None, start)).unwrap();
            let (released, again, in_memory) = (sorted(released), sorted(again), sorted(in_memory));
            assert!(!in_memory.is_empty() || index.mmaps.is_empty(), "{}", path.display());
            assert_eq!(released, in_memory, "{}", path.display());
            assert_eq!(again, in_memory, "{}", path.display());
        }
    }

    /// The two-thread decode gives what one pass over the whole data section gives, on real
    /// recordings with one event (cpu-clock) and with several (sched_switch + switch events,
    /// DWARF stacks).
    #[test]
    fn halves_decode_as_one_pass_does() {
        for name in ["perf-cpu.data", "perf-offcpu-sys.data", "perf-offcpu-dwarf.data"] {
            let path = tracelab_fixtures::fixture(&format!("perf/{name}"));
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
