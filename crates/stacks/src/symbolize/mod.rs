//! Naming addresses: perf maps and jitdump (JIT code), ReadyToRun images, ELF symbols, kallsyms.
//!
//! [`Symbolizer`] turns (pid, address) of a perf recording into a model [`Frame`]: it rebuilds
//! each process's address space from the recording's MMAP records (a later mapping replaces
//! whatever it overlaps, as in the kernel), then names the address by the mapping's kind.

pub mod debug_file;
pub mod elf;
pub mod fde;
pub mod jit;
pub mod r2r;
pub mod table;

#[cfg(test)]
mod malformed;
#[cfg(test)]
mod split_debug;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use rustc_hash::FxHashMap;

use perfdata::{KERNEL_PID, PerfMmap, PerfRecording, PrefetchJob};
use model::{DsoClass, Frame};
use debug_file::DebugFiles;
use elf::ElfSymbols;
use table::SymbolTable;

/// What decoding may need besides the collector's own artifacts.
pub struct DecodeContext<'a> {
    /// The run's artifacts folder (host path).
    pub artifacts: &'a Path,
    /// Host folder where the app's /tmp was visible (perf maps, jitdump).
    pub app_tmp_dir: &'a Path,
    pub host_pid: u32,
    /// The pid inside the app's namespace (names perf-PID.map).
    pub target_pid: u32,
    /// Maps a path as the target saw it to a host path where the same file can be read
    /// (container runs: the image's files; host runs: identity).
    pub path_map: &'a dyn Fn(&Path) -> Option<PathBuf>,
    /// Symbol folders given with `--symbols DIR`.
    pub symbol_dirs: &'a [PathBuf],
}

/// Maps a file read-only. Recordings and the binaries they name run to tens of megabytes and
/// are read once, front to back or sparsely: copying them into fresh heap pages cost more than
/// decoding them.
pub fn map_file(path: &Path) -> std::io::Result<memmap2::Mmap> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the map is only read. A file truncated under us while mapped would fault; tracelab
    // maps its own artifacts and installed binaries, which nothing rewrites during a decode.
    unsafe { memmap2::Mmap::map(&file) }
}

/// A mapping of a process.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub path: String,
    pub build_id: Option<Vec<u8>>,
    pub class: DsoClass,
}

impl Mapping {
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }
}

/// One process's mappings, non-overlapping, by start address.
#[derive(Clone, Debug, Default)]
pub struct AddressSpace {
    by_start: BTreeMap<u64, Mapping>,
}

impl AddressSpace {
    /// Adds a mapping; whatever it overlaps is cut away (a later mmap replaces earlier ones).
    pub fn insert(&mut self, m: Mapping) {
        if m.end <= m.start {
            return;
        }
        let overlapping: Vec<u64> = self
            .by_start
            .range(..m.end)
            .rev()
            .take_while(|(_, old)| old.end > m.start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            let old = self.by_start.remove(&s).unwrap();
            if old.start < m.start {
                let mut left = old.clone();
                left.end = m.start;
                self.by_start.insert(left.start, left);
            }
            if old.end > m.end {
                let mut right = old;
                right.pgoff += m.end - right.start;
                right.start = m.end;
                self.by_start.insert(right.start, right);
            }
        }
        self.by_start.insert(m.start, m);
    }

    pub fn lookup(&self, addr: u64) -> Option<&Mapping> {
        self.by_start.range(..=addr).next_back().map(|(_, m)| m).filter(|m| addr < m.end)
    }

    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.by_start.values()
    }
}

/// Names frames of one perf recording.
pub struct Symbolizer<'a> {
    spaces: FxHashMap<u32, AddressSpace>,
    jit: FxHashMap<u32, SymbolTable>,
    kernel: Option<std::sync::Arc<SymbolTable>>,
    /// The running kernel's symbols are wanted but not read yet ([`Symbolizer::preload`] or the
    /// first kernel frame reads them).
    kernel_pending: bool,
    elf: FxHashMap<String, Option<ElfSymbols>>,
    /// `.eh_frame` function ranges per mapped path, read on the first address no symbol covers.
    functions: FxHashMap<String, Option<fde::FunctionRanges>>,
    r2r: r2r::R2rResolver,
    path_map: &'a dyn Fn(&Path) -> Option<PathBuf>,
    symbol_dirs: Vec<PathBuf>,
    debug_files: DebugFiles,
    /// Interned frames: (pid or KERNEL_PID, address) → index into `frames`. Looked up once per
    /// frame of every distinct stack: FxHash, as SipHash's cost showed in profiles.
    cache: rustc_hash::FxHashMap<(u32, u64), u32>,
    frames: Vec<Frame>,
    /// Which files named what (for the manifest and for users asking "why unnamed?").
    pub sources: Vec<String>,
    pub warnings: Vec<String>,
    name_doublemapped: bool,
}

impl<'a> Symbolizer<'a> {
    /// Prepares naming for `rec`: address spaces from its MMAP records, JIT names from each
    /// sampled process's perf map or jitdump (a malformed one is an error), kallsyms from a
    /// `kallsyms*` file in a symbol folder or, when the recording is from this boot's kernel,
    /// /proc/kallsyms (read when first needed, see [`Symbolizer::preload`]).
    pub fn new(ctx: &DecodeContext<'a>, rec: &PerfRecording) -> Result<Symbolizer<'a>> {
        let mut pids: Vec<u32> = rec.samples.iter().map(|x| x.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let kernel_frames = rec.samples.iter().any(|x| rec.frames(x).any(|f| f.in_kernel));
        Symbolizer::for_mappings(ctx, &rec.mmaps, &pids, kernel_frames, rec.os_release.as_deref())
    }

    /// As [`Symbolizer::new`], from what it reads of a recording: its MMAP records, the sampled
    /// pids, whether any sampled frame is in the kernel, and the kernel release it was made on.
    pub fn for_mappings(
        ctx: &DecodeContext<'a>,
        mmaps: &[PerfMmap],
        pids: &[u32],
        kernel_frames: bool,
        os_release: Option<&str>,
    ) -> Result<Symbolizer<'a>> {
        let mut spaces: FxHashMap<u32, AddressSpace> = FxHashMap::default();
        for m in mmaps {
            let pid = if m.in_kernel { KERNEL_PID } else { m.pid };
            spaces.entry(pid).or_default().insert(mapping_of(m));
        }
        let mut s = Symbolizer {
            spaces,
            jit: FxHashMap::default(),
            kernel: None,
            kernel_pending: false,
            elf: FxHashMap::default(),
            functions: FxHashMap::default(),
            r2r: r2r::R2rResolver::new(),
            path_map: ctx.path_map,
            symbol_dirs: ctx.symbol_dirs.to_vec(),
            debug_files: DebugFiles::new(ctx.symbol_dirs),
            cache: Default::default(),
            frames: Vec::new(),
            sources: Vec::new(),
            warnings: Vec::new(),
            name_doublemapped: false,
        };
        for &pid in pids {
            if pid == KERNEL_PID || pid == 0 {
                continue;
            }
            // The runtime names its map with the pid it sees in its own namespace.
            let ns = if pid == ctx.host_pid {
                ctx.target_pid
            } else {
                jit::ns_pid(pid).ok().flatten().unwrap_or(pid)
            };
            let dirs = jit::candidate_dirs(ctx.artifacts, ctx.app_tmp_dir, pid);
            if let Some((table, path, damage)) = jit::load_jit_symbols(&dirs, ns)? {
                s.sources.push(format!("pid {pid}: {} JIT symbols from {}", table.len(), path.display()));
                s.warnings.extend(jit::perf_map_damage_finding(&path.display().to_string(), &damage));
                s.jit.insert(pid, table);
            }
        }
        if kernel_frames {
            s.kernel = s.load_kallsyms(os_release)?;
        }
        Ok(s)
    }

    /// Reads, in parallel, every symbol source the given addresses need — ReadyToRun images, ELF
    /// files, the running kernel's symbols — so that naming them afterwards only looks up.
    /// Optional: [`Symbolizer::frame_id`] loads what it lacks on its own, one file at a time.
    /// Loading is most of the time of naming a recording (System.Private.CoreLib alone is a
    /// 15 MB image), and the files do not depend on each other.
    pub fn preload(&mut self, frames: impl IntoIterator<Item = (u32, u64, bool)>) {
        let mut want_kernel = false;
        let mut r2r_files: Vec<PathBuf> = Vec::new();
        let mut elf_files: Vec<(Mapping, Option<PathBuf>)> = Vec::new();
        // Frames repeat across chains (a fold's 150k-sample recording: ~500k frames, a tenth of
        // them distinct) and mappings across frames: each address is looked up once, and each
        // mapping's path compared once.
        let mut addresses: rustc_hash::FxHashSet<(u32, u64)> = Default::default();
        let mut mappings: rustc_hash::FxHashSet<(u32, u64)> = Default::default();
        let mut seen: rustc_hash::FxHashSet<&str> = Default::default();
        for (pid, addr, in_kernel) in frames {
            if in_kernel {
                want_kernel = true;
                continue;
            }
            if !addresses.insert((pid, addr)) {
                continue;
            }
            let Some(m) = self.spaces.get(&pid).and_then(|s| s.lookup(addr)) else { continue };
            if !mappings.insert((pid, m.start)) || !seen.insert(m.path.as_str()) {
                continue;
            }
            match m.class {
                DsoClass::R2r => {
                    if let Some(host) = (self.path_map)(Path::new(&m.path)) {
                        r2r_files.push(host);
                    }
                }
                DsoClass::RuntimeNative | DsoClass::Libc | DsoClass::OtherNative if !self.elf.contains_key(&m.path) => {
                    elf_files.push((m.clone(), (self.path_map)(Path::new(&m.path))));
                }
                _ => {}
            }
        }
        // The running kernel's symbols are not waited for here: a prefetch ([`prefetch_job`])
        // may still be reading them, and on a cold page cache that read outlasts everything
        // else. [`Symbolizer::frame_id`] takes them at the first kernel frame, so a caller that
        // names user frames first ([`crate::fold`]) overlaps the two; with no prefetch, they are
        // read beside the images here.
        let want_kernel = want_kernel && self.kernel_pending && !kernel_symbols_started();
        let r2r = &mut self.r2r;
        let debug_files = &self.debug_files;
        let (kernel, elves) = std::thread::scope(|scope| {
            let images = scope.spawn(move || r2r.preload(&r2r_files));
            let kernel = want_kernel.then(running_kernel_symbols);
            let elves: Vec<_> = elf_files.into_iter().map(|(m, host)| (m.path.clone(), load_elf(&m, host, debug_files))).collect();
            let _ = images.join();
            (kernel, elves)
        });
        if let Some(kernel) = kernel {
            self.kernel_pending = false;
            self.take_kernel(kernel);
        }
        for (path, loaded) in elves {
            self.add_elf(path, loaded);
        }
    }

    fn take_kernel(&mut self, read: Result<std::sync::Arc<SymbolTable>>) {
        match read {
            Ok(table) => {
                self.sources.push(format!("kernel: {} symbols from /proc/kallsyms", table.len()));
                self.kernel = Some(table);
            }
            Err(e) => self.warnings.push(format!("kernel frames stay unnamed: {e:#}")),
        }
    }

    fn load_kallsyms(&mut self, os_release: Option<&str>) -> Result<Option<std::sync::Arc<SymbolTable>>> {
        for dir in &self.symbol_dirs {
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("kallsyms")))
                .collect();
            files.sort();
            if let Some(file) = files.first() {
                let table = elf::read_kallsyms(file)?;
                self.sources.push(format!("kernel: {} symbols from {}", table.len(), file.display()));
                return Ok(Some(std::sync::Arc::new(table)));
            }
        }
        if made_on_running_kernel(os_release) {
            self.kernel_pending = true;
        } else {
            self.warnings.push(format!(
                "kernel frames stay unnamed: the recording's kernel ({}) is not the running one ({}) and no \
                 kallsyms file is in a symbol folder",
                os_release.unwrap_or("unknown"),
                running_kernel_release()
            ));
        }
        Ok(None)
    }

    /// Also names JIT code executing from the W^X alias (`/memfd:doublemapper`). perf does not:
    /// it consults perf maps only for anonymous memory. The .NET 10 runtime writes the
    /// executable (alias) addresses into its perf map, so the names are right; off by default
    /// so that tracelab reports what perf users see. Call before naming any frame.
    pub fn set_name_doublemapped(&mut self, on: bool) {
        self.name_doublemapped = on;
        self.cache.clear();
    }

    /// Names `pid`'s JIT code by `table` (symbols a recorder resolved, as a perf map would) and,
    /// for code the table does not cover, by any perf map found for it. Call before naming any
    /// frame.
    pub fn use_jit_symbols(&mut self, pid: u32, mut table: SymbolTable, source: String) {
        if let Some(file) = self.jit.remove(&pid) {
            for (start, end, name) in file.symbols() {
                table.push(start, end, name);
            }
            table.finish();
        }
        self.jit.insert(pid, table);
        self.sources.push(source);
        self.cache.clear();
    }

    /// Names kernel frames by `table` (symbols a recorder resolved on the recording's machine),
    /// instead of this machine's kallsyms. Call before naming any frame.
    pub fn use_kernel_symbols(&mut self, table: SymbolTable, source: String) {
        self.kernel = Some(std::sync::Arc::new(table));
        self.kernel_pending = false;
        self.sources.push(source);
        self.cache.clear();
    }

    /// The mapping covering `addr` in `pid` (kernel mappings under [`KERNEL_PID`]).
    pub fn mapping(&self, pid: u32, addr: u64) -> Option<&Mapping> {
        self.spaces.get(&pid)?.lookup(addr)
    }

    pub fn address_space(&self, pid: u32) -> Option<&AddressSpace> {
        self.spaces.get(&pid)
    }

    /// Names one address. `in_kernel` comes from the callchain context.
    pub fn frame(&mut self, pid: u32, addr: u64, in_kernel: bool) -> Frame {
        let id = self.frame_id(pid, addr, in_kernel);
        self.frames[id as usize].clone()
    }

    /// As [`Symbolizer::frame`], interned: equal ids mean equal frames.
    pub fn frame_id(&mut self, pid: u32, addr: u64, in_kernel: bool) -> u32 {
        let key = (if in_kernel { KERNEL_PID } else { pid }, addr);
        if let Some(&id) = self.cache.get(&key) {
            return id;
        }
        if in_kernel && self.kernel_pending {
            self.kernel_pending = false;
            self.take_kernel(running_kernel_symbols());
        }
        let frame = if in_kernel { self.kernel_frame(addr) } else { self.user_frame(pid, addr) };
        self.frames.push(frame);
        let id = (self.frames.len() - 1) as u32;
        self.cache.insert(key, id);
        id
    }

    /// Interns a frame no address names (`[caller lost to on-stack replacement]`): a new id.
    pub fn intern_frame(&mut self, frame: Frame) -> u32 {
        self.frames.push(frame);
        (self.frames.len() - 1) as u32
    }

    /// Frames interned so far (ids run from 0 to this).
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Whether naming a kernel frame now would wait for nothing: the kernel's symbols are loaded,
    /// or no read of them is pending.
    pub fn kernel_ready(&self) -> bool {
        !self.kernel_pending
    }

    pub fn frame_by_id(&self, id: u32) -> &Frame {
        &self.frames[id as usize]
    }

    fn kernel_frame(&self, addr: u64) -> Frame {
        let name = self.kernel.as_ref().and_then(|t| t.lookup(addr)).map(str::to_string);
        Frame { name, dso: Some("[kernel.kallsyms]".into()), class: DsoClass::Kernel, addr }
    }

    fn user_frame(&mut self, pid: u32, addr: u64) -> Frame {
        let mapping = self.spaces.get(&pid).and_then(|s| s.lookup(addr)).cloned();
        let jit_name = |s: &Self| s.jit.get(&pid).and_then(|t| t.lookup(addr)).map(str::to_string);
        let Some(m) = mapping else {
            // JIT code allocated after perf's synthesized maps and never mmapped separately.
            if let Some(name) = jit_name(self) {
                let class = DsoClass::Jit.refined(Some(&name));
                return Frame { name: Some(name), dso: Some("[jit]".into()), class, addr };
            }
            return Frame { name: None, dso: None, class: DsoClass::Unknown, addr };
        };
        let name = match m.class {
            DsoClass::Jit if m.path.contains("memfd:doublemapper") && !self.name_doublemapped => None,
            DsoClass::Jit => jit_name(self),
            DsoClass::R2r => {
                // Only a file the path map vouches for: in a container run the recorded path
                // names a file of the image, not of the host.
                match (self.path_map)(Path::new(&m.path)) {
                    Some(host) => self.r2r.name(&host, m.file_offset(addr)),
                    None => None,
                }
            }
            DsoClass::Kernel => self.kernel.as_ref().and_then(|t| t.lookup(addr)).map(str::to_string),
            DsoClass::Unknown => jit_name(self),
            _ => {
                let offset = m.file_offset(addr);
                let symbol = self.elf_symbols(&m).and_then(|e| e.name_at_file_offset(offset)).map(|n| n.into_owned());
                symbol.or_else(|| self.function_start(&m, offset).map(model::anonymous_function))
            }
        };
        let dso = if m.class == DsoClass::Jit && name.is_some() && !m.path.contains("memfd:") {
            "[jit]".to_string()
        } else {
            m.path.clone()
        };
        let class = m.class.refined(name.as_deref());
        Frame { name, dso: Some(dso), class, addr }
    }

    /// Symbols for a mapped ELF file (see [`load_elf`]), read once per path.
    fn elf_symbols(&mut self, m: &Mapping) -> Option<&ElfSymbols> {
        if !self.elf.contains_key(&m.path) {
            let loaded = load_elf(m, (self.path_map)(Path::new(&m.path)), &self.debug_files);
            self.add_elf(m.path.clone(), loaded);
        }
        self.elf.get(&m.path).and_then(Option::as_ref)
    }

    /// The start of the function holding `file_offset` from the file's `.eh_frame`, for an
    /// address no symbol covers: only where the file's symbols were read (so its build id was
    /// checked) and from the same file.
    fn function_start(&mut self, m: &Mapping, file_offset: u64) -> Option<u64> {
        let svma = self.elf.get(&m.path)?.as_ref()?.svma_of_file_offset(file_offset)?;
        if !self.functions.contains_key(&m.path) {
            let want = m.build_id.as_deref();
            let ranges = (self.path_map)(Path::new(&m.path))
                .and_then(|host| fde::FunctionRanges::read(&host).ok())
                .filter(|r| want.is_none() || r.build_id.as_deref() == want)
                .filter(|r| !r.is_empty());
            if let Some(r) = &ranges {
                self.sources.push(format!("{}: {} function ranges from .eh_frame (for addresses no symbol covers)", m.path, r.len()));
            }
            self.functions.insert(m.path.clone(), ranges);
        }
        self.functions.get(&m.path)?.as_ref()?.function_at(svma)
    }

    fn add_elf(&mut self, path: String, loaded: LoadedElf) {
        self.sources.extend(loaded.source);
        self.warnings.extend(loaded.warning);
        self.elf.insert(path, loaded.symbols);
    }

    /// Figures for the manifest.
    pub fn metrics(&self) -> Vec<(String, f64)> {
        vec![
            ("jit_symbol_tables".into(), self.jit.len() as f64),
            ("jit_symbols".into(), self.jit.values().map(|t| t.len() as f64).sum()),
            ("kernel_symbols".into(), self.kernel.as_ref().map(|t| t.len() as f64).unwrap_or(0.0)),
            ("elf_files_symbolized".into(), self.elf.values().filter(|e| e.is_some()).count() as f64),
            ("eh_frame_function_tables".into(), self.functions.values().filter(|f| f.is_some()).count() as f64),
        ]
    }
}

/// Work to run while a recording's samples decode ([`PerfRecording::read_with`]): when the
/// recording was made on the running kernel, read that kernel's symbols — the slowest symbol
/// source, which needs only the MMAP records — into the process-wide cache [`Symbolizer`] reads.
/// ReadyToRun images are not parsed here: a .NET process maps a dozen or more, its samples hit a
/// few, and which ones is known only once the samples are counted ([`Symbolizer::preload`] parses
/// those). On two shared cores, parsing every mapped image beside the decode was work taken from
/// the decode, and on a cold page cache it read images no sample needs from disk.
pub fn prefetch_job(ctx: &DecodeContext, mmaps: &[PerfMmap], os_release: Option<&str>) -> Option<PrefetchJob> {
    // A kallsyms file in a symbol folder takes precedence (see `load_kallsyms`).
    let kernel = ctx.symbol_dirs.is_empty() && mmaps.iter().any(|m| m.in_kernel) && made_on_running_kernel(os_release);
    if !kernel {
        return None;
    }
    Some(Box::new(|| {
        let _ = running_kernel_symbols();
    }))
}

/// `uname -r` of the running kernel.
fn running_kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

/// Whether a recording whose header names `os_release` was made on the running kernel, so that
/// /proc/kallsyms names its kernel frames.
fn made_on_running_kernel(os_release: Option<&str>) -> bool {
    os_release.is_some_and(|r| r == running_kernel_release())
}

/// Whether this process has begun reading the running kernel's symbols (a prefetch took them on).
fn kernel_symbols_started() -> bool {
    KERNEL_SYMBOLS_STARTED.load(std::sync::atomic::Ordering::Acquire)
}

static KERNEL_SYMBOLS_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The running kernel's symbols, read once per process (and cached on disk across processes,
/// see [`elf::running_kallsyms`]).
fn running_kernel_symbols() -> Result<std::sync::Arc<SymbolTable>> {
    static RUNNING: std::sync::Mutex<Option<std::sync::Arc<SymbolTable>>> = std::sync::Mutex::new(None);
    let mut cached = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    KERNEL_SYMBOLS_STARTED.store(true, std::sync::atomic::Ordering::Release);
    if let Some(table) = cached.as_ref() {
        return Ok(table.clone());
    }
    let (table, save_to) = elf::running_kallsyms()?;
    let table = std::sync::Arc::new(table);
    *cached = Some(table.clone());
    // Waiters take the table now; saving 6 MB is the next process's gain, not theirs.
    drop(cached);
    if let Some(path) = save_to {
        elf::save_kallsyms(&table, &path);
    }
    Ok(table)
}

/// An ELF file's symbols with what to tell about them.
struct LoadedElf {
    symbols: Option<ElfSymbols>,
    source: Option<String>,
    warning: Option<String>,
}

/// Symbols for a mapped ELF file: its debug file with a full symbol table when one is found
/// ([`DebugFiles`]: `/usr/lib/debug` by build id and by path, then the symbol folders), else the
/// file itself at `host` (where the path map found it). A file whose build id differs from the
/// recording's is refused: its names would be wrong.
fn load_elf(m: &Mapping, host: Option<PathBuf>, debug_files: &DebugFiles) -> LoadedElf {
    if m.path == "[vdso]" && !host.as_deref().is_some_and(Path::is_file) {
        return load_vdso(m);
    }
    let mut warning = None;
    let want = m.build_id.as_deref().map(elf::hex);
    let binary = host.and_then(|p| match ElfSymbols::read(&p) {
        Ok(e) if want.is_none() || want == e.build_id.as_deref().map(elf::hex) => Some(e),
        Ok(e) => {
            warning = Some(format!(
                "{}: build id {} differs from the recording's {}: not used",
                p.display(),
                e.build_id.as_deref().map(elf::hex).unwrap_or_default(),
                want.clone().unwrap_or_default()
            ));
            None
        }
        Err(_) => None,
    });
    // The recording's build id, else (a recording without build ids) the binary's own.
    let build_id = m.build_id.clone().or_else(|| binary.as_ref().and_then(|b| b.build_id.clone()));
    let debug = debug_files.find(Path::new(&m.path), build_id.as_deref(), |path, data| {
        ElfSymbols::parse(data, path).ok().filter(|debug| debug.full_symtab)
    });
    if let Some((path, debug)) = debug {
        let source = Some(format!("{}: symbols from {}", m.path, path.display()));
        let symbols = Some(match &binary {
            Some(b) => debug.with_segments_of(b),
            None => debug,
        });
        return LoadedElf { symbols, source, warning };
    }
    let source = binary.as_ref().map(|b| {
        format!("{}: {} symbols from {}", m.path, if b.full_symtab { ".symtab" } else { ".dynsym" }, b.path.display())
    });
    LoadedElf { symbols: binary, source, warning }
}

/// The vDSO is no file: the kernel maps one image into every process, so this process's own
/// copy names a recorded process's `[vdso]` frames (`__vdso_clock_gettime` …) — on the kernel
/// that recorded it, which a build id in the recording confirms (another kernel's is refused).
fn load_vdso(m: &Mapping) -> LoadedElf {
    match elf::running_vdso() {
        Ok(v) if m.build_id.is_none() || m.build_id == v.build_id => {
            LoadedElf { source: Some(format!("[vdso]: {} symbols from this kernel's vDSO", v.table.len())), symbols: Some(v), warning: None }
        }
        Ok(_) => LoadedElf { symbols: None, source: None, warning: Some("[vdso]: recorded on another kernel (build id differs): its frames stay unnamed".into()) },
        Err(e) => LoadedElf { symbols: None, source: None, warning: Some(format!("[vdso]: {e:#}: its frames stay unnamed")) },
    }
}

fn mapping_of(m: &PerfMmap) -> Mapping {
    Mapping {
        start: m.start,
        end: m.start.saturating_add(m.len),
        pgoff: m.pgoff,
        path: m.path.clone(),
        build_id: m.build_id.clone(),
        class: DsoClass::of_mapping(&m.path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, path: &str) -> Mapping {
        Mapping { start, end, pgoff: 0, path: path.into(), build_id: None, class: DsoClass::of_mapping(path) }
    }

    #[test]
    fn later_mappings_replace_what_they_overlap() {
        let mut s = AddressSpace::default();
        s.insert(map(0x1000, 0x5000, "/a"));
        s.insert(map(0x2000, 0x3000, "/b"));
        assert_eq!(s.lookup(0x1fff).unwrap().path, "/a");
        assert_eq!(s.lookup(0x2000).unwrap().path, "/b");
        let right = s.lookup(0x3000).unwrap();
        assert_eq!((right.path.as_str(), right.pgoff), ("/a", 0x2000));
        assert!(s.lookup(0x5000).is_none());
        s.insert(map(0x0, 0x10000, "/c"));
        assert_eq!(s.mappings().count(), 1);
    }
}
