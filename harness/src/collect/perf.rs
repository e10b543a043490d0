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
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use super::{Collector, DecodeContext};
use crate::model::{Collection, Sample};
use crate::scenario::CollectorSpec;
use crate::symbolize::Symbolizer;
use crate::target::{RunningApp, Target, ToolProcess};

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

/// One PERF_RECORD_SAMPLE.
#[derive(Clone, Debug, Default)]
pub struct PerfSample {
    pub attr_index: usize,
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub cpu: Option<u32>,
    pub period: u64,
    pub ip: Option<u64>,
    /// The raw callchain, context markers included (see [`PerfSample::frames`]).
    pub callchain: Vec<u64>,
    /// PERF_SAMPLE_RAW payload (tracepoint fields).
    pub raw: Option<Vec<u8>>,
    pub user_regs: Option<UserRegs>,
    /// PERF_SAMPLE_STACK_USER bytes, cut to the dynamic size the kernel reported.
    pub user_stack: Option<Vec<u8>>,
    /// Whether the sampled IP was in the kernel (`misc` cpu mode).
    pub in_kernel: bool,
}

/// A frame address of a callchain with the context it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainFrame {
    pub addr: u64,
    pub in_kernel: bool,
}

impl PerfSample {
    /// Callchain addresses, leaf first, context markers removed and each address tagged kernel
    /// or user. Entries of guest or hypervisor context are dropped.
    pub fn frames(&self) -> impl Iterator<Item = ChainFrame> + '_ {
        let mut context = if self.in_kernel { PERF_CONTEXT_KERNEL } else { PERF_CONTEXT_USER };
        self.callchain.iter().filter_map(move |&addr| {
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
struct Section {
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
    if attr_size == 0 || attr_size > 4096 {
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

/// Offsets of records whose type and body equal the given ones (for naming a record that
/// parsed badly: the reader hands us copies in time order, not file positions).
fn offset_of_record(bytes: &[u8], data: Section, record_type: u32, body: &[u8]) -> Option<u64> {
    let end = data.offset + data.size;
    let mut at = data.offset;
    while at + 8 <= end {
        let i = at as usize;
        let ty = u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let size = u16::from_le_bytes([bytes[i + 6], bytes[i + 7]]) as u64;
        if size < 8 || at + size > end {
            return None;
        }
        if ty == record_type && size as usize - 8 == body.len() && &bytes[i + 8..i + size as usize] == body {
            return Some(at);
        }
        at += size;
    }
    None
}

/// Whether a SAMPLE record's callchain length fits inside the record.
fn callchain_fits(record: &linux_perf_data::linux_perf_event_reader::RawEventRecord) -> Result<(), String> {
    use linux_perf_data::linux_perf_event_reader::{Endianness, SampleFormat};
    let format = record.parse_info.sample_format;
    if record.record_type != RecordType::SAMPLE || !format.contains(SampleFormat::CALLCHAIN) || format.contains(SampleFormat::READ) {
        return Ok(());
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
    Ok(())
}

fn cpu_mode_is_kernel(mode: CpuMode) -> bool {
    matches!(mode, CpuMode::Kernel | CpuMode::GuestKernel)
}

fn lossy(raw: RawData) -> String {
    String::from_utf8_lossy(&raw.as_slice()).into_owned()
}

impl PerfRecording {
    /// Reads and decodes a whole perf.data file (`perf record -o FILE`, any event, `-p` or `-a`).
    pub fn read(path: &Path) -> Result<PerfRecording> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read perf data {}", path.display()))?;
        Self::from_bytes(&bytes, path)
    }

    /// Decodes perf.data held in memory; `path` only names it in messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<PerfRecording> {
        let data = check_header(bytes, path)?;
        let file = path.display();
        let locate = |e: &dyn std::fmt::Display| -> anyhow::Error {
            match first_bad_record(bytes, data) {
                Some((offset, why)) => anyhow::anyhow!(
                    "{file}: bad record at byte offset {offset}: {why} ({e}); the file is truncated or corrupt"
                ),
                None => anyhow::anyhow!(
                    "{file}: cannot decode the data section (byte offsets {}..{}): {e}; the file is corrupt",
                    data.offset,
                    data.offset + data.size
                ),
            }
        };
        if let Some((offset, why)) = first_bad_record(bytes, data) {
            bail!("{file}: bad record at byte offset {offset}: {why}; the file is truncated or corrupt");
        }
        let PerfFileReader { mut perf_file, mut record_iter } =
            PerfFileReader::parse_file(Cursor::new(bytes)).map_err(|e| {
                anyhow::anyhow!("{file}: cannot read the perf.data header and attributes (byte offsets 0..{}): {e}", data.offset)
            })?;

        let mut rec = PerfRecording { path: path.to_path_buf(), ..Default::default() };
        rec.event_names = perf_file
            .event_attributes()
            .iter()
            .map(|a| a.name().unwrap_or("unknown").to_string())
            .collect();
        rec.sample_regs_user = perf_file.event_attributes().first().map(|a| a.attributes().sample_regs_user).unwrap_or(0);
        rec.os_release = perf_file.os_release().ok().flatten().map(str::to_string);
        rec.perf_version = perf_file.perf_version().ok().flatten().map(str::to_string);
        if let Ok(ids) = perf_file.build_ids() {
            for info in ids.into_values() {
                rec.build_ids.insert(String::from_utf8_lossy(&info.path).into_owned(), info.build_id);
            }
        }

        loop {
            let record = match record_iter.next_record(&mut perf_file) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => return Err(locate(&e)),
            };
            let PerfFileRecord::EventRecord { attr_index, record } = record else { continue };
            // linux-perf-event-reader multiplies a sample's callchain length unchecked (an
            // overflow panic on a corrupt length): check the length against the record first.
            let checked = match callchain_fits(&record) {
                Err(why) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why)),
                Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| record.parse())).unwrap_or_else(|_| {
                    Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the record's fields do not fit its size"))
                }),
            };
            let parsed = match checked {
                Ok(p) => p,
                Err(e) => {
                    let body = record.data.as_slice();
                    return Err(match offset_of_record(bytes, data, record.record_type.0, &body) {
                        Some(offset) => anyhow::anyhow!(
                            "{file}: bad {:?} record at byte offset {offset}: {e}; the file is corrupt",
                            record.record_type
                        ),
                        None => locate(&e),
                    });
                }
            };
            let time = record.timestamp();
            match parsed {
                EventRecord::Sample(s) => {
                    let callchain = match &s.callchain {
                        Some(c) => (0..c.len()).filter_map(|i| c.get(i)).collect(),
                        None => Vec::new(),
                    };
                    rec.samples.push(PerfSample {
                        attr_index,
                        pid: s.pid.unwrap_or(-1) as u32,
                        tid: s.tid.unwrap_or(-1) as u32,
                        time_ns: s.timestamp.unwrap_or(0),
                        cpu: s.cpu,
                        period: s.period.unwrap_or(1),
                        ip: s.ip,
                        callchain,
                        raw: s.raw.map(|r| r.as_slice().into_owned()),
                        user_regs: s.user_regs.map(|r| {
                            let mask = rec.sample_regs_user;
                            let values = (0..64u64).filter(|b| mask & (1 << b) != 0).filter_map(|b| r.get(b)).collect();
                            UserRegs { mask, values }
                        }),
                        user_stack: s.user_stack.map(|(stack, dyn_size)| {
                            let mut bytes = stack.as_slice().into_owned();
                            bytes.truncate(dyn_size.min(bytes.len() as u64) as usize);
                            bytes
                        }),
                        in_kernel: cpu_mode_is_kernel(s.cpu_mode),
                    });
                }
                EventRecord::Mmap(m) => rec.mmaps.push(PerfMmap {
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
                }),
                EventRecord::Mmap2(m) => rec.mmaps.push(PerfMmap {
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
                }),
                EventRecord::Comm(c) => rec.comms.push(PerfComm {
                    pid: c.pid as u32,
                    tid: c.tid as u32,
                    time_ns: time,
                    name: lossy(c.name),
                    exec: c.is_execve,
                }),
                EventRecord::Lost(l) => rec.lost += l.count,
                EventRecord::Raw(r) if r.record_type == RecordType::LOST_SAMPLES => {
                    // PERF_RECORD_LOST_SAMPLES: u64 lost, then sample_id.
                    let body = r.data.as_slice();
                    if body.len() >= 8 {
                        rec.lost += le_u64(&body, 0);
                    }
                }
                _ => {}
            }
        }
        for m in &mut rec.mmaps {
            if m.build_id.is_none() {
                m.build_id = rec.build_ids.get(&m.path).cloned();
            }
        }
        Ok(rec)
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
    rec.samples
        .iter()
        .map(|s| Sample {
            pid: s.pid,
            tid: s.tid,
            time_ns: s.time_ns,
            weight: weight_of(s),
            frames: s.frames().map(|f| symbolizer.frame(s.pid, f.addr, f.in_kernel)).collect(),
            kind: None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The perf-cpu collector
// ---------------------------------------------------------------------------------------------

/// Finds a perf binary: `perf`, else a versioned `perf_X.Y` (Debian bullseye ships only those).
pub fn detect_perf_binary() -> Option<PathBuf> {
    if let Some(p) = crate::testing::which("perf") {
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

pub fn from_spec(spec: &CollectorSpec) -> Result<Box<dyn Collector>> {
    Ok(Box::new(PerfCpuCollector::from_spec(spec)?))
}

impl PerfCpuCollector {
    pub fn from_spec(spec: &CollectorSpec) -> Result<PerfCpuCollector> {
        for key in spec.options.keys() {
            if !matches!(key.as_str(), "frequency" | "call_graph" | "wx" | "perf_binary" | "name_doublemapped") {
                bail!(
                    "collector `{}`: unknown option `{key}` (perf-cpu takes frequency, call_graph, wx, perf_binary, name_doublemapped)",
                    spec.name()
                );
            }
        }
        let frequency = spec.opt_u64("frequency").unwrap_or(999);
        if frequency == 0 || frequency > 100_000 {
            bail!("collector `{}`: frequency {frequency} Hz is out of range (1..100000)", spec.name());
        }
        Ok(PerfCpuCollector {
            name: spec.name().to_string(),
            frequency,
            call_graph: CallGraph::parse(spec.opt_str("call_graph").unwrap_or("fp"))
                .with_context(|| format!("collector `{}`", spec.name()))?,
            wx: spec.opt_bool("wx").unwrap_or(false),
            perf_binary: spec.opt_str("perf_binary").map(str::to_string),
            name_doublemapped: spec.opt_bool("name_doublemapped").unwrap_or(false),
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
        let rec = PerfRecording::read(&path)?;
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
pub fn fold_recording(rec: &PerfRecording, symbolizer: &mut Symbolizer) -> std::collections::BTreeMap<String, u64> {
    let stacks: Vec<Vec<u32>> = rec
        .samples
        .iter()
        .map(|s| s.frames().map(|f| symbolizer.frame_id(s.pid, f.addr, f.in_kernel)).collect())
        .collect();
    crate::fold::fold_interned(stacks.iter().map(|s| (s.as_slice(), 1)), |id| {
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
