//! Our own unwinding of the user stacks perf sampled (`--call-graph dwarf,N`: registers plus the
//! top N bytes of the user stack per sample), offline over perf.data (issue 9).
//!
//! perf's own DWARF unwinding stops at the first frame without CFI it can use, which for a .NET
//! thread blocked in a runtime wait is right after libc: JIT code has no CFI and ReadyToRun code
//! keeps Windows x64 unwind info perf does not read. Here the rule comes from the mapping each
//! address falls in: DWARF CFI (`.eh_frame`) for ELF objects, the PE exception directory
//! (RUNTIME_FUNCTIONs + UNWIND_INFO) of ReadyToRun images, frame pointers for everything else
//! (JIT code, whose ranges the perf map names). framehop does the stepping; this module feeds it
//! the process's mappings as they were at each sample. The kernel part of a chain is perf's.

pub mod completeness;
pub mod images;
pub mod names;
pub(crate) mod osr;
#[cfg(test)]
mod malformed;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use framehop::Unwinder;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use linux_perf_data::linux_perf_event_reader::{
    self as reader, CommonData, ContextSwitchRecord, EventRecord, RawData, SampleRecord,
};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use model::{DsoClass, Frame};
use crate::symbolize::debug_file::DebugFiles;
pub use completeness::{Completeness, completeness, completeness_of_collection, completeness_of_unwound};
pub use osr::{LOST_CALLER, OsrRepair, complete_osr_callers};
use images::{Bytes, Image, ImageFormat};
use names::{Kallsyms, RangeNames};

const PROT_EXEC: u32 = 4;

/// The most user frames one walk goes: perf's largest stack dump (65,528 bytes) holds at most
/// 4,095 frames of 16 bytes (a return address and a saved frame pointer), so the dump, not this
/// cap, is what ends a real stack — a 500-deep recursion once stopped here at 256 — while a
/// corrupt stack that loops still stops.
pub const MAX_USER_FRAMES: usize = 4096;

/// Names ReadyToRun code: (image as mapped, file offset) → method name.
pub type R2rNamer<'a> = dyn Fn(&Path, u64) -> Option<String> + 'a;

/// Where to find what the recording refers to.
pub struct UnwindOptions<'a> {
    /// Unwind the samples of these processes only (pids as perf saw them); other samples are
    /// kept with their kernel frames (their tracepoint fields still tell switch-in times).
    pub pids: Option<BTreeSet<u32>>,
    /// perf-PID.map per process (pid as perf saw it), read the first time it is needed.
    pub perf_maps: BTreeMap<u32, PathBuf>,
    /// Folders searched first for a mapped file by its file name (a fixture's `dsos/`, the
    /// SDK's shared framework, `--symbols DIR`), and for `.build-id/xx/yyyy.debug` files.
    pub search_dirs: Vec<PathBuf>,
    /// Maps a path as the recorded process saw it to a readable host path (containers).
    pub path_map: &'a dyn Fn(&Path) -> Option<PathBuf>,
    pub kallsyms: Option<Kallsyms>,
    /// Stop a stack after this many user frames (corrupt stacks must not run on; see
    /// [`MAX_USER_FRAMES`]).
    pub max_user_frames: usize,
    /// Names ReadyToRun code: (image as mapped, file offset) → method name.
    pub r2r_namer: Option<&'a R2rNamer<'a>>,
}

fn identity_path(p: &Path) -> Option<PathBuf> {
    Some(p.to_path_buf())
}

impl Default for UnwindOptions<'_> {
    fn default() -> Self {
        UnwindOptions {
            pids: None,
            perf_maps: BTreeMap::new(),
            search_dirs: Vec::new(),
            path_map: &identity_path,
            kallsyms: None,
            max_user_frames: MAX_USER_FRAMES,
            r2r_namer: None,
        }
    }
}

/// How the user part of a stack ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackEnd {
    /// The unwinder found the thread's root (CFI marks the return address undefined, or a
    /// null return address / frame pointer ends the chain).
    Root,
    /// The unwinder could not go on; the reason (stack bytes ran out, no rule …).
    Truncated(String),
    /// The stack was cut at `max_user_frames`.
    TooDeep,
    /// The sample carries no user registers/stack (a kernel thread, or an fp recording: its
    /// user frames are perf's callchain).
    NoUserStack,
}

/// `sched:sched_switch` fields of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedSwitch {
    pub prev_pid: u32,
    pub prev_state: u64,
    pub next_pid: u32,
}

#[derive(Clone, Debug)]
pub struct UnwoundSample {
    /// Index into [`Unwound::event_names`].
    pub event: usize,
    pub pid: u32,
    pub tid: u32,
    /// None when the recording kept no CPU (PERF_SAMPLE_CPU).
    pub cpu: Option<u32>,
    pub time_ns: u64,
    pub period: u64,
    /// Leaf first: perf's kernel frames, then ours.
    pub frames: Vec<Frame>,
    pub user_frames: usize,
    pub end: StackEnd,
    pub sched_switch: Option<SchedSwitch>,
    /// User stack bytes perf captured (dyn size), for the cost report.
    pub user_stack_bytes: u64,
    /// The raw tracepoint record of a tracepoint sample other than sched_switch (whose fields
    /// are in `sched_switch`), empty otherwise: read its fields with [`Unwound::formats`].
    pub raw: Vec<u8>,
}

/// A PERF_RECORD_SWITCH (`--switch-events`): the monitored thread went off (`out`) or came
/// back on (`!out`) a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSwitch {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub out: bool,
    pub preempted: bool,
}

#[derive(Debug, Default)]
pub struct Unwound {
    pub event_names: Vec<String>,
    pub samples: Vec<UnwoundSample>,
    pub switches: Vec<ThreadSwitch>,
    /// Thread exit times (tid → ns).
    pub exits: BTreeMap<u32, u64>,
    pub thread_names: BTreeMap<u32, String>,
    pub lost: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// Mapped files that could not be read (their frames stay unnamed and unwind by frame
    /// pointer), with why.
    pub missing_images: BTreeMap<String, String>,
    /// Field layouts (name → (offset, size)) of the recorded tracepoints, by event name as in
    /// `event_names`, from the format perf saved in HEADER_TRACING_DATA.
    pub formats: BTreeMap<String, TracepointFormat>,
    /// Byte offsets (start, end) of the file's tracing data (HEADER_TRACING_DATA), where
    /// `formats` were read: the place to name when a format does not fit its records.
    pub tracing_data_at: Option<(u64, u64)>,
}

/// A tracepoint's fields: name → (offset, size) in the raw record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracepointFormat {
    pub fields: BTreeMap<String, (usize, usize)>,
}

impl TracepointFormat {
    /// Reads the `format:` block of tracepoint `name` (without its system) from perf's saved
    /// tracing data.
    pub fn from_tracing_data(data: &[u8], name: &str) -> Option<TracepointFormat> {
        let needle = format!("name: {name}\n");
        let at = data.windows(needle.len()).position(|w| w == needle.as_bytes())?;
        let rest = &data[at..data.len().min(at + 8192)];
        let text = String::from_utf8_lossy(rest);
        let text = text.split("print fmt").next()?;
        let mut fields = BTreeMap::new();
        for line in text.lines().filter(|l| l.trim_start().starts_with("field:")) {
            let num = |key: &str| -> Option<usize> { line.split(key).nth(1)?.split(';').next()?.trim().parse().ok() };
            let decl = line.trim_start().trim_start_matches("field:").split(';').next().unwrap_or("");
            // `char comm[16]`, `pid_t pid`, `const char * filename`: the name is the last word
            // before any array bound.
            let name = decl.split('[').next().unwrap_or(decl).trim().rsplit([' ', '*']).next().unwrap_or("");
            let (false, Some(off), Some(size)) = (name.is_empty(), num("offset:"), num("size:")) else { continue };
            fields.insert(name.to_string(), (off, size));
        }
        (!fields.is_empty()).then_some(TracepointFormat { fields })
    }

    /// An unsigned little-endian field of a raw record (sizes 1, 2, 4, 8).
    /// The bytes the fields span: a record of the tracepoint holds at least these.
    pub fn size(&self) -> usize {
        self.fields.values().map(|(off, size)| off + size).max().unwrap_or(0)
    }

    pub fn read_u64(&self, raw: &[u8], field: &str) -> Option<u64> {
        let (off, size) = *self.fields.get(field)?;
        let b = raw.get(off..off.checked_add(size)?)?;
        Some(match size {
            1 => b[0] as u64,
            2 => u16::from_le_bytes(b.try_into().ok()?) as u64,
            4 => u32::from_le_bytes(b.try_into().ok()?) as u64,
            8 => u64::from_le_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
}

#[derive(Clone)]
struct Mapping {
    range: Range<u64>,
    pgoff: u64,
    path: String,
    exec: bool,
}

#[derive(Default)]
struct Process {
    mappings: Vec<Mapping>,
    unwinder: Option<UnwinderX86_64<Bytes>>,
    /// (avma range, image, base avma) of the modules in `unwinder`, for naming.
    modules: Vec<(Range<u64>, Arc<Image>, u64)>,
    dirty: bool,
    perf_map: Option<Arc<RangeNames>>,
}

impl Process {
    fn add_mapping(&mut self, m: Mapping) {
        let Range { start, end } = m.range.clone();
        let mut kept = Vec::with_capacity(self.mappings.len() + 2);
        for old in self.mappings.drain(..) {
            if old.range.end <= start || old.range.start >= end {
                kept.push(old);
                continue;
            }
            // A new mapping replaces the part of an old one it covers.
            if old.range.start < start {
                kept.push(Mapping { range: old.range.start..start, ..old.clone() });
            }
            if old.range.end > end {
                let skip = end - old.range.start;
                kept.push(Mapping { range: end..old.range.end, pgoff: old.pgoff + skip, ..old });
            }
        }
        let at = kept.partition_point(|k| k.range.start < start);
        kept.insert(at, m);
        self.mappings = kept;
        self.dirty = true;
    }

    fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.range.start <= addr);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        m.range.contains(&addr).then_some(m)
    }
}

/// Field offsets of `sched:sched_switch` in the raw tracepoint data.
#[derive(Clone, Copy, Debug)]
struct SchedSwitchLayout {
    prev_pid: (usize, usize),
    prev_state: (usize, usize),
    next_pid: (usize, usize),
}

impl SchedSwitchLayout {
    /// The layout of every kernel since 4.x, used when the file's tracing data lacks the format.
    const DEFAULT: SchedSwitchLayout =
        SchedSwitchLayout { prev_pid: (24, 4), prev_state: (32, 8), next_pid: (56, 4) };

    /// Reads the format perf saved in the HEADER_TRACING_DATA section.
    fn from_tracing_data(data: &[u8]) -> Option<SchedSwitchLayout> {
        let needle = b"name: sched_switch\n";
        let at = data.windows(needle.len()).position(|w| w == needle)?;
        let rest = &data[at..data.len().min(at + 4096)];
        let text = String::from_utf8_lossy(rest);
        let text = text.split("print fmt").next()?;
        let field = |name: &str| -> Option<(usize, usize)> {
            let line = text.lines().find(|l| l.contains(&format!(" {name};")))?;
            let num = |key: &str| -> Option<usize> {
                let s = line.split(key).nth(1)?;
                s.split(';').next()?.trim().parse().ok()
            };
            Some((num("offset:")?, num("size:")?))
        };
        Some(SchedSwitchLayout {
            prev_pid: field("prev_pid")?,
            prev_state: field("prev_state")?,
            next_pid: field("next_pid")?,
        })
    }

    fn read(&self, raw: &[u8]) -> Option<SchedSwitch> {
        let get = |(off, size): (usize, usize)| -> Option<u64> {
            let b = raw.get(off..off.checked_add(size)?)?;
            Some(match size {
                4 => u32::from_le_bytes(b.try_into().ok()?) as u64,
                8 => u64::from_le_bytes(b.try_into().ok()?),
                2 => u16::from_le_bytes(b.try_into().ok()?) as u64,
                _ => return None,
            })
        };
        Some(SchedSwitch {
            prev_pid: get(self.prev_pid)? as u32,
            prev_state: get(self.prev_state)?,
            next_pid: get(self.next_pid)? as u32,
        })
    }
}

/// The unwinding state over one recording.
pub struct StackUnwinder<'a> {
    opts: UnwindOptions<'a>,
    processes: HashMap<u32, Process>,
    images: HashMap<String, Option<Arc<Image>>>,
    missing: BTreeMap<String, String>,
    cache: CacheX86_64,
    /// Children given their parent's perf map at fork (their own exec voids it).
    inherited_perf_maps: BTreeSet<u32>,
}

impl<'a> StackUnwinder<'a> {
    pub fn new(opts: UnwindOptions<'a>) -> Self {
        StackUnwinder {
            opts,
            processes: HashMap::new(),
            images: HashMap::new(),
            missing: BTreeMap::new(),
            cache: CacheX86_64::new(),
            inherited_perf_maps: BTreeSet::new(),
        }
    }

    fn wants(&self, pid: u32) -> bool {
        self.opts.pids.as_ref().is_none_or(|p| p.contains(&pid))
    }

    fn image(&mut self, path: &str) -> Option<Arc<Image>> {
        if let Some(cached) = self.images.get(path) {
            return cached.clone();
        }
        let loaded = self.load_image(path);
        let image = match loaded {
            Ok(image) => Some(Arc::new(image)),
            Err(e) => {
                self.missing.insert(path.to_string(), format!("{e:#}"));
                None
            }
        };
        self.images.insert(path.to_string(), image.clone());
        image
    }

    fn load_image(&self, path: &str) -> Result<Image> {
        let recorded = Path::new(path);
        let mut candidates = Vec::new();
        if let Some(name) = recorded.file_name() {
            candidates.extend(self.opts.search_dirs.iter().map(|d| d.join(name)));
        }
        if let Some(p) = (self.opts.path_map)(recorded) {
            candidates.push(p);
        }
        let found = candidates
            .iter()
            .find(|p| p.is_file())
            .ok_or_else(|| anyhow!("no readable copy (looked at {})", join_paths(&candidates)))?;
        Image::load(found, recorded, &DebugFiles::new(&self.opts.search_dirs))
    }

    /// Feeds a PERF_RECORD_MMAP/MMAP2.
    pub fn on_mmap(&mut self, pid: u32, start: u64, len: u64, pgoff: u64, path: &str, exec: bool) {
        if !self.wants(pid) || len == 0 {
            return;
        }
        let Some(end) = start.checked_add(len) else { return };
        self.processes.entry(pid).or_default().add_mapping(Mapping {
            range: start..end,
            pgoff,
            path: path.to_string(),
            exec,
        });
    }

    /// An exec replaces the process image: its old mappings are gone.
    pub fn on_exec(&mut self, pid: u32) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.mappings.clear();
            p.dirty = true;
            // The process's own map (the runtime writes it after this exec) is read on first use.
            p.perf_map = None;
        }
        // The new program has none of the parent's JIT code: a perf map inherited at fork is void.
        if self.inherited_perf_maps.remove(&pid) {
            self.opts.perf_maps.remove(&pid);
        }
    }

    /// A fork starts with its parent's mappings.
    pub fn on_fork(&mut self, pid: u32, parent: u32) {
        if pid == parent || !self.wants(pid) {
            return;
        }
        let mappings = self.processes.get(&parent).map(|p| p.mappings.clone()).unwrap_or_default();
        // A forked (or vforked) child runs its parent's JIT code until it execs: the parent's
        // perf map names it (Process.Start's child reaches execve through managed frames).
        if let Some(map) = self.opts.perf_maps.get(&parent).cloned()
            && !self.opts.perf_maps.contains_key(&pid)
        {
            self.opts.perf_maps.insert(pid, map);
            self.inherited_perf_maps.insert(pid);
        }
        self.processes.insert(pid, Process { mappings, dirty: true, ..Default::default() });
    }

    fn refresh(&mut self, pid: u32) {
        let Some(process) = self.processes.get(&pid) else { return };
        if !process.dirty {
            return;
        }
        let exec_mappings: Vec<Mapping> = process
            .mappings
            .iter()
            .filter(|m| m.exec && is_code_file(&m.path))
            .cloned()
            .collect();
        let mut unwinder = UnwinderX86_64::new();
        let mut modules = Vec::new();
        for m in exec_mappings {
            let Some(image) = self.image(&m.path) else { continue };
            let Some(base) = image.base_avma(m.range.start, m.pgoff, m.range.end - m.range.start) else {
                continue;
            };
            if image.has_unwind_info() {
                unwinder.add_module(image.module(m.path.clone(), m.range.clone(), base));
            }
            modules.push((m.range.clone(), image, base));
        }
        let process = self.processes.get_mut(&pid).expect("checked above");
        process.unwinder = Some(unwinder);
        process.modules = modules;
        process.dirty = false;
    }

    fn perf_map(&mut self, pid: u32) -> Option<Arc<RangeNames>> {
        let process = self.processes.get_mut(&pid)?;
        if process.perf_map.is_none() {
            let names = match self.opts.perf_maps.get(&pid) {
                Some(path) => match RangeNames::read_perf_map(path) {
                    Ok(n) => n,
                    Err(e) => {
                        self.missing.insert(path.display().to_string(), format!("{e:#}"));
                        RangeNames::default()
                    }
                },
                None => RangeNames::default(),
            };
            process.perf_map = Some(Arc::new(names));
        }
        process.perf_map.clone()
    }

    /// Unwinds one sample's user stack. `regs` = (ip, sp, bp) at the user/kernel boundary;
    /// `stack` = the bytes perf copied from `sp` up.
    pub fn unwind_user(&mut self, pid: u32, ip: u64, sp: u64, bp: u64, stack: &[u8]) -> (Vec<(u64, bool)>, StackEnd) {
        self.refresh(pid);
        let max = self.opts.max_user_frames;
        let Some(unwinder) = self.processes.get(&pid).and_then(|p| p.unwinder.as_ref()) else {
            return (vec![(ip, false)], StackEnd::Truncated("no mappings known for the process".into()));
        };
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let process = self.processes.get(&pid).expect("unwinder exists, so the process does");
        let in_pe = |addr: u64| {
            process.modules.iter().any(|(r, image, _)| r.contains(&addr) && matches!(image.format, ImageFormat::Pe))
        };
        let perf_map = process.perf_map.clone();
        let plausible = |addr: u64| {
            process.mapping(addr).is_some_and(|m| m.exec) || perf_map.as_ref().is_some_and(|m| m.lookup(addr).is_some())
        };
        let mut frames = vec![(ip, false)];
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut address = framehop::FrameAddress::from_instruction_pointer(ip);
        let end = loop {
            if frames.len() >= max {
                break StackEnd::TooDeep;
            }
            let before = regs.clone();
            let step = unwinder.unwind_frame(address, &mut regs, &mut self.cache, &mut read_stack);
            let lookup = address.address_for_lookup();
            let ret = match step {
                // A ReadyToRun method whose unwind info leads nowhere (a P/Invoke with an inlined
                // transition frame, Process.Start's ForkAndExecProcess, gives a zero or unmapped
                // return address): its frame is rbp-based like the JIT's, so step by frame pointer.
                Ok(r) if in_pe(lookup) && r.is_none_or(|a| !plausible(a)) => {
                    let bp = before.bp();
                    match (read_stack(bp.wrapping_add(8)), read_stack(bp)) {
                        (Ok(ret), Ok(next_bp)) if bp > before.sp() && plausible(ret) => {
                            regs = UnwindRegsX86_64::new(ret, bp + 16, next_bp);
                            Some(ret)
                        }
                        _ => r,
                    }
                }
                Ok(r) => r,
                Err(e) => break StackEnd::Truncated(e.to_string()),
            };
            let Some(ret) = ret else { break StackEnd::Root };
            if regs.sp() <= before.sp() && frames.len() > 1 {
                break StackEnd::Truncated("the stack pointer did not move up".into());
            }
            let Some(next) = framehop::FrameAddress::from_return_address(ret) else { break StackEnd::Root };
            frames.push((ret, true));
            address = next;
        };
        (frames, end)
    }

    /// Names a user address of process `pid`.
    pub fn user_frame(&mut self, pid: u32, addr: u64, is_return: bool) -> Frame {
        self.refresh(pid);
        let lookup = if is_return { addr.saturating_sub(1) } else { addr };
        let process = self.processes.get(&pid);
        if let Some((_, image, base)) =
            process.and_then(|p| p.modules.iter().find(|(r, ..)| r.contains(&lookup)))
        {
            let rel = lookup.wrapping_sub(*base);
            let mapping = process.and_then(|p| p.mapping(lookup));
            let name = match image.format {
                // As the symbolizer names it: a symbol, else the function's start.
                ImageFormat::Elf => image.symbol(rel).map(str::to_string).or_else(|| image.function_start(rel).map(model::anonymous_function)),
                ImageFormat::Pe => self.opts.r2r_namer.zip(mapping).and_then(|(f, m)| {
                    f(&image.path, m.pgoff + (lookup - m.range.start))
                }),
            };
            let path = mapping.map(|m| m.path.clone());
            let dso = path.unwrap_or_else(|| image.path.display().to_string());
            let class = DsoClass::of_mapping(&dso);
            return Frame { name, dso: Some(dso), class, addr };
        }
        let mapping_path = process.and_then(|p| p.mapping(lookup)).map(|m| m.path.clone());
        let jit_name = self.perf_map(pid).and_then(|m| m.lookup(lookup).map(str::to_string));
        match (jit_name, mapping_path) {
            (Some(name), _) => {
                let class = DsoClass::Jit.refined(Some(&name));
                Frame { name: Some(name), dso: Some("[jit]".into()), class, addr }
            }
            (None, Some(path)) => {
                let class = DsoClass::of_mapping(&path);
                Frame { name: None, dso: Some(path), class, addr }
            }
            (None, None) => Frame { name: None, dso: None, class: DsoClass::Unknown, addr },
        }
    }

    /// Whether `ip` of process `pid` is in glibc's vfork (whose return address is in %rdi).
    fn in_vfork(&mut self, pid: u32, ip: u64) -> bool {
        let name = self.user_frame(pid, ip, false).name;
        matches!(name.as_deref(), Some("__libc_vfork" | "vfork" | "__vfork"))
    }

    pub fn kernel_frame(&self, addr: u64) -> Frame {
        let name = self.opts.kallsyms.as_ref().and_then(|k| k.lookup(addr)).map(str::to_string);
        Frame { name, dso: Some("[kernel.kallsyms]".into()), class: DsoClass::Kernel, addr }
    }

    /// Builds the whole chain of one sample: perf's kernel frames, then our user frames (or
    /// perf's user callchain when the sample has no stack bytes).
    fn sample_frames(&mut self, s: &SampleRecord) -> (Vec<Frame>, usize, StackEnd, u64) {
        let pid = s.pid.unwrap_or(-1) as u32;
        let mut frames = Vec::new();
        let mut perf_user = Vec::new();
        if let Some(chain) = &s.callchain {
            let mut context = reader::constants::PERF_CONTEXT_KERNEL;
            for i in 0..chain.len() {
                let Some(addr) = chain.get(i) else { break };
                if addr >= reader::constants::PERF_CONTEXT_MAX {
                    context = addr;
                    continue;
                }
                if context == reader::constants::PERF_CONTEXT_USER {
                    perf_user.push(addr);
                } else {
                    frames.push(self.kernel_frame(addr));
                }
            }
        }
        let kernel_frames = frames.len();
        let regs = s.user_regs.as_ref().and_then(|r| {
            Some((
                r.get(reader::constants::PERF_REG_X86_IP)?,
                r.get(reader::constants::PERF_REG_X86_SP)?,
                r.get(reader::constants::PERF_REG_X86_BP)?,
            ))
        });
        let rdi = s.user_regs.as_ref().and_then(|r| r.get(reader::constants::PERF_REG_X86_DI));
        let stack = s.user_stack.as_ref().map(|(data, dyn_size)| {
            let bytes = data.as_slice();
            let n = (*dyn_size as usize).min(bytes.len());
            bytes[..n].to_vec()
        });
        let (user, end, stack_len) = match (regs, stack) {
            (Some((ip, sp, bp)), Some(stack)) if self.wants(pid) && ip != 0 => {
                let (user, end) = match rdi.filter(|_| self.in_vfork(pid, ip)) {
                    // glibc's vfork pops its return address into %rdi before the system call
                    // (the child must not overwrite it on the shared stack); its CFI says so, but
                    // the unwinder follows only ip/sp/bp: continue from %rdi with the same sp.
                    Some(ret) => {
                        let (mut rest, end) = self.unwind_user(pid, ret, sp, bp, &stack);
                        if let Some(first) = rest.first_mut() {
                            first.1 = true;
                        }
                        rest.insert(0, (ip, false));
                        (rest, end)
                    }
                    None => self.unwind_user(pid, ip, sp, bp, &stack),
                };
                (user, end, stack.len() as u64)
            }
            _ => {
                let user: Vec<(u64, bool)> =
                    perf_user.iter().enumerate().map(|(i, a)| (*a, i > 0)).collect();
                (user, StackEnd::NoUserStack, 0)
            }
        };
        if self.wants(pid) {
            for (addr, is_return) in &user {
                let f = self.user_frame(pid, *addr, *is_return);
                frames.push(f);
            }
        }
        let user_frames = frames.len() - kernel_frames;
        (frames, user_frames, end, stack_len)
    }

    pub fn missing_images(&self) -> &BTreeMap<String, String> {
        &self.missing
    }
}

/// Whether a mapping's path names a file holding code we can read: not anonymous memory, not
/// W^X's memfd alias, not the jitdump file the runtime maps executable only as a marker for perf.
fn is_code_file(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    let jitdump = file.starts_with("jit-") && file.ends_with(".dump");
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.starts_with("/memfd:")
        && !path.ends_with(" (deleted)")
        && !jitdump
}

fn join_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nowhere: no search folder and no path mapping".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn raw_str(data: &RawData) -> String {
    let bytes = data.as_slice();
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Reads `perf_data` and unwinds every sample of the wanted processes.
pub fn unwind_perf_data(perf_data: &Path, opts: UnwindOptions) -> Result<Unwound> {
    unwind_perf_data_with(perf_data, &mut StackUnwinder::new(opts))
}

/// The same with an unwinder kept between files: images it loaded stay loaded (benchmarks,
/// several recordings of one app).
pub fn unwind_perf_data_with(perf_data: &Path, unwinder: &mut StackUnwinder) -> Result<Unwound> {
    let bytes = crate::symbolize::map_file(perf_data)
        .with_context(|| format!("could not open {}: was perf recording?", perf_data.display()))?;
    perfdata::check(&bytes, perf_data)?;
    unwinder.processes.clear();
    // The reader crates assert on some malformed fields; a bad file must give an error here.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        read_all(&bytes, perf_data, unwinder)
    }))
    .unwrap_or_else(|_| {
        // A panic while the reader sorted records, before it handed one over (a record's own
        // panic is caught around it in read_all and named by its offset): the place known is the
        // data section.
        let (start, end) = data_section(&bytes);
        Err(anyhow!(
            "{}: malformed perf.data: the record reader panicked in the data section (byte offsets {start}..{end}); \
             re-record it with perf record",
            perf_data.display()
        ))
    })
}

/// The data section's byte offsets (start, end) from the header (offset and size at bytes 40 and
/// 48, which `perfdata::check` has seen), for errors that can name no record.
fn data_section(bytes: &[u8]) -> (u64, u64) {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("checked header"));
    let start = u64_at(40);
    (start, start.saturating_add(u64_at(48)))
}

/// Where a file the reader refuses as a whole went wrong: its header and the event attribute
/// section the header points to (perf.data's header: attrs section offset and size at bytes 24
/// and 32), when that section lies within the file.
fn header_place(bytes: &[u8]) -> String {
    let u64_at = |at: usize| bytes.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    match (u64_at(24), u64_at(32)) {
        (Some(offset), Some(size)) if offset.checked_add(size).is_some_and(|end| end <= bytes.len() as u64) => {
            format!("the header (byte offsets 0..104) or the event attributes it points to (byte offsets {offset}..{})", offset + size)
        }
        _ => "the header (byte offsets 0..104)".to_string(),
    }
}

fn read_all(bytes: &[u8], path: &Path, unwinder: &mut StackUnwinder) -> Result<Unwound> {
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(std::io::Cursor::new(bytes))
        .map_err(|e| anyhow!("{}: not a perf.data file perf 5+ writes ({e}) in {}; file size {} bytes", path.display(), header_place(bytes), bytes.len()))?;
    let event_names: Vec<String> = perf_file
        .event_attributes()
        .iter()
        .map(|a| a.name().unwrap_or("?").to_string())
        .collect();
    let layout = perf_file
        .feature_section_data(linux_perf_data::Feature::TRACING_DATA)
        .and_then(SchedSwitchLayout::from_tracing_data)
        .unwrap_or(SchedSwitchLayout::DEFAULT);
    let switch_attr: BTreeSet<usize> =
        event_names.iter().enumerate().filter(|(_, n)| n.ends_with("sched_switch")).map(|(i, _)| i).collect();
    let formats: BTreeMap<String, TracepointFormat> = perf_file
        .feature_section_data(linux_perf_data::Feature::TRACING_DATA)
        .map(|data| {
            event_names
                .iter()
                .filter_map(|n| {
                    let short = n.rsplit(':').next()?;
                    Some((n.clone(), TracepointFormat::from_tracing_data(data, short)?))
                })
                .collect()
        })
        .unwrap_or_default();

    let tracing_data_at = perfdata::feature_section(bytes, 1);
    let mut out = Unwound { event_names, formats, tracing_data_at, first_time_ns: u64::MAX, ..Default::default() };
    loop {
        let record = match record_iter.next_record(&mut perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                // The reader failed before handing the record over (e.g. a compressed batch that
                // does not decompress): the place known is the data section.
                let (start, end) = data_section(bytes);
                return Err(anyhow!(
                    "{}: record {} is malformed ({e}), in the data section (byte offsets {start}..{end}); the file may be truncated \
                     (perf killed before it flushed?) or corrupt: re-record it with perf record",
                    path.display(),
                    out.samples.len()
                ));
            }
        };
        let PerfFileRecord::EventRecord { attr_index, record } = record else { continue };
        // The reader hands records over sorted by time: a damaged one is found in the file by its
        // bytes, so its error names where it lies.
        let at = |record: &reader::RawEventRecord| -> String {
            match perfdata::find_record(bytes, path, record.record_type.0, &record.data.as_slice()) {
                Some(offset) => format!("at byte offset {offset}"),
                None => "(not found again in the file)".to_string(),
            }
        };
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (record.common_data().unwrap_or(CommonData::default()), record.parse())
        }));
        let Ok((common, parsed)) = read else {
            return Err(anyhow!(
                "{}: the {:?} record {} has fields that do not fit its size (the record reader panicked on it); the file is \
                 corrupt: re-record it with perf record",
                path.display(),
                record.record_type,
                at(&record)
            ));
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                return Err(anyhow!(
                    "{}: the {:?} record {} is malformed ({e}); the file is corrupt: re-record it with perf record",
                    path.display(),
                    record.record_type,
                    at(&record)
                ));
            }
        };
        if let Some(t) = common.timestamp {
            out.first_time_ns = out.first_time_ns.min(t);
            out.last_time_ns = out.last_time_ns.max(t);
        }
        match parsed {
            EventRecord::Mmap(m) => {
                let path = raw_str(&m.path);
                unwinder.on_mmap(m.pid as u32, m.address, m.length, m.page_offset, &path, m.is_executable);
            }
            EventRecord::Mmap2(m) => {
                let path = raw_str(&m.path);
                unwinder.on_mmap(m.pid as u32, m.address, m.length, m.page_offset, &path, m.protection & PROT_EXEC != 0);
            }
            EventRecord::Comm(c) => {
                if c.is_execve {
                    unwinder.on_exec(c.pid as u32);
                }
                out.thread_names.insert(c.tid as u32, raw_str(&c.name));
            }
            EventRecord::Fork(f) => unwinder.on_fork(f.pid as u32, f.ppid as u32),
            EventRecord::Exit(e) => {
                out.exits.insert(e.tid as u32, e.timestamp);
            }
            EventRecord::Lost(l) => out.lost += l.count,
            EventRecord::ContextSwitch(cs) => {
                let (out_, preempted) = match cs {
                    ContextSwitchRecord::In { .. } => (false, false),
                    ContextSwitchRecord::Out { preempted, .. } => {
                        (true, matches!(preempted, reader::TaskWasPreempted::Yes))
                    }
                };
                if let (Some(pid), Some(tid), Some(t)) = (common.pid, common.tid, common.timestamp) {
                    out.switches.push(ThreadSwitch { time_ns: t, pid: pid as u32, tid: tid as u32, out: out_, preempted });
                }
            }
            EventRecord::Sample(s) => {
                let sched_switch = if switch_attr.contains(&attr_index) {
                    s.raw.as_ref().and_then(|r| layout.read(&r.as_slice()))
                } else {
                    None
                };
                let raw = match (&sched_switch, &s.raw) {
                    (None, Some(r)) => r.as_slice().to_vec(),
                    _ => Vec::new(),
                };
                // A tracepoint record shorter than its format would read as missing fields later,
                // far from the file; refused here with its place.
                let name = &out.event_names[attr_index];
                if let (Some(format), Some(r)) = (out.formats.get(name), &s.raw)
                    && r.len() < format.size()
                {
                    return Err(anyhow!(
                        "{}: the {name} sample {} holds {} bytes of tracepoint data, its format needs {}; the file is corrupt: \
                         re-record it with perf record",
                        path.display(),
                        at(&record),
                        r.len(),
                        format.size()
                    ));
                }
                let (frames, user_frames, end, user_stack_bytes) = unwinder.sample_frames(&s);
                out.samples.push(UnwoundSample {
                    event: attr_index,
                    pid: s.pid.unwrap_or(-1) as u32,
                    tid: s.tid.unwrap_or(-1) as u32,
                    cpu: s.cpu,
                    time_ns: s.timestamp.unwrap_or(0),
                    period: s.period.unwrap_or(1),
                    frames,
                    user_frames,
                    end,
                    sched_switch,
                    user_stack_bytes,
                    raw,
                });
            }
            _ => {}
        }
    }
    if out.first_time_ns == u64::MAX {
        out.first_time_ns = 0;
    }
    out.missing_images = unwinder.missing_images().clone();
    Ok(out)
}
