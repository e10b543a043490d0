//! A ReadyToRun image: where its methods' code lies and what they are called.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Bytes, Error, Result, bad};
use crate::metadata::{self as md, Metadata};
use crate::native::{self, NativeArray};
use crate::pe::{self, PeInfo};
use crate::sig::{self, MethodSig, SigReader, Ty};

const READYTORUN_SIGNATURE: u32 = 0x0052_5452; // "RTR"
const SECTION_RUNTIME_FUNCTIONS: u32 = 102;
const SECTION_METHODDEF_ENTRY_POINTS: u32 = 103;
const SECTION_EXCEPTION_INFO: u32 = 104;
const SECTION_INSTANCE_METHOD_ENTRY_POINTS: u32 = 109;
const SECTION_MANIFEST_METADATA: u32 = 112;
const SECTION_HOT_COLD_MAP: u32 = 120;

const SIG_UPDATE_CONTEXT: u32 = 0x80;
const SIG_OWNER_TYPE: u32 = 0x40;
const SIG_CONSTRAINED: u32 = 0x20;
const SIG_MEMBER_REF_TOKEN: u32 = 0x10;
const SIG_SLOT_INSTEAD_OF_TOKEN: u32 = 0x08;
const SIG_METHOD_INSTANTIATION: u32 = 0x04;
/// Flags known to add nothing to the signature's bytes: unboxing stub 0x01, instantiating stub 0x02,
/// async variant 0x100. A flag outside this set and the ones above may carry data we cannot skip.
const SIG_KNOWN_FLAGS: u32 = 0x1ff;

/// EH clause flag: the clause has a filter funclet (at the clause's last field) before its handler.
const EH_CLAUSE_FILTER: u32 = 0x1;

const NO_METHOD: u32 = u32::MAX;

/// An assembly's file and metadata, shared by every image that needs its names.
/// An image's bytes: read into memory, or mapped from its file. Mapping saves copying a 15 MB
/// System.Private.CoreLib to name a handful of its methods: only the pages the tables and the
/// looked-up names lie on are ever read.
pub(crate) enum Data {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Owned(v) => v,
            Data::Mapped(m) => m,
        }
    }
}

impl Data {
    fn map(path: &Path) -> std::io::Result<Data> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the map is only read. Assemblies of an installed runtime are not rewritten in
        // place; a file truncated under us would fault, as it would for the runtime that maps it.
        Ok(Data::Mapped(unsafe { memmap2::Mmap::map(&file)? }))
    }
}

pub struct Module {
    pub(crate) data: Data,
    pub(crate) metadata: Metadata,
    pub assembly: String,
    /// Holds precompiled code (the CLI header names a ManagedNativeHeader).
    pub ready_to_run: bool,
}

impl Module {
    /// Reads just the metadata of a .NET assembly (ReadyToRun or not).
    pub fn parse(data: Vec<u8>) -> Result<Module> {
        Module::parse_data(Data::Owned(data))
    }

    fn parse_data(data: Data) -> Result<Module> {
        let pe = pe::parse(&data)?;
        let metadata = parse_metadata(&data, &pe)?;
        let assembly = assembly_name(Bytes(&data), &metadata)?;
        let ready_to_run = Bytes(&data).u32(pe.cli_header + 64, "CLI header ManagedNativeHeader")? != 0;
        Ok(Module { data, metadata, assembly, ready_to_run })
    }

    /// The module version id (the Module table's Mvid), which the runtime's perfinfo-PID.map gave
    /// as each image's signature.
    pub fn mvid(&self) -> Result<[u8; 16]> {
        let index = self.metadata.cell(self.b(), md::MODULE, 1, 2)?;
        self.metadata.guid(self.b(), index)
    }

    fn b(&self) -> Bytes<'_> {
        Bytes(&self.data)
    }
}

fn parse_metadata(data: &[u8], pe: &PeInfo) -> Result<Metadata> {
    let b = Bytes(data);
    let rva = b.u32(pe.cli_header + 8, "CLI header metadata RVA")?;
    let size = b.u32(pe.cli_header + 12, "CLI header metadata size")?;
    let at = pe.rva_to_offset(rva, size, "metadata", data.len()).map_err(|e| at_least(e, pe.cli_header))?;
    Metadata::parse(b, at, size as usize)
}

fn at_least(mut e: Error, offset: usize) -> Error {
    if e.offset == 0 {
        e.offset = offset as u64;
    }
    e
}

fn assembly_name(b: Bytes, m: &Metadata) -> Result<String> {
    if m.rows(md::ASSEMBLY) > 0 {
        Ok(m.string_cell(b, md::ASSEMBLY, 1, 7)?.to_string())
    } else if m.rows(md::MODULE) > 0 {
        let name = m.string_cell(b, md::MODULE, 1, 1)?;
        Ok(name.strip_suffix(".dll").unwrap_or(name).to_string())
    } else {
        Ok(String::new())
    }
}

/// Loaded assemblies by path, shared between images of one directory (the framework's images
/// name each other's types in generic instantiations).
#[derive(Default)]
pub struct ModuleCache {
    modules: Mutex<HashMap<PathBuf, Option<Arc<Module>>>>,
}

impl ModuleCache {
    pub fn get(&self, path: &Path) -> Option<Arc<Module>> {
        let mut map = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(path.to_path_buf())
            .or_insert_with(|| Data::map(path).ok().and_then(|d| Module::parse_data(d).ok()).map(Arc::new))
            .clone()
    }
}

#[derive(Clone, Copy, Debug)]
enum MethodKind {
    Def(u32),
    /// A generic instantiation: the file offset of its ReadyToRun method signature.
    Instance(usize),
}

#[derive(Clone, Copy, Debug)]
struct MethodEntry {
    kind: MethodKind,
    /// Its runtime functions: the entry, then funclets and cold parts up to `last`.
    first: u32,
    last: u32,
}

/// A method as found at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodInfo {
    /// RVA of the method's entry.
    pub rva: u32,
    /// Bytes from the entry to the end of the method's last code part.
    pub len: u32,
    pub name: Arc<str>,
}

/// Counts for reports and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub runtime_functions: usize,
    pub methoddef_entries: usize,
    pub instance_entries: usize,
    /// Instance entries whose signature this reader could not decode: their entry point is not
    /// known, so runtime functions are then tied to a method only where the EH table proves it.
    pub instance_entries_skipped: usize,
    /// Runtime functions other than entries (funclets, cold parts) tied to a method.
    pub funclets: usize,
    /// Runtime functions no method is known to own (lookups there give None).
    pub unowned_functions: usize,
}

/// A parsed ReadyToRun image.
pub struct R2rImage {
    module: Arc<Module>,
    pe: PeInfo,
    machine_has_end: bool,
    /// (begin RVA, end RVA) of each runtime function, sorted.
    funcs: Vec<(u32, u32)>,
    /// The method (index into `methods`) each runtime function belongs to; NO_METHOD = none.
    owner: Vec<u32>,
    methods: Vec<MethodEntry>,
    /// Names made so far, by method index: a recording names a few hundred of CoreLib's ~50 k
    /// methods, and a slot for each (a megabyte of fresh pages) cost more than the lookups.
    names: Mutex<HashMap<u32, Arc<str>>>,
    manifest: Option<Metadata>,
    dir: Option<PathBuf>,
    cache: Arc<ModuleCache>,
    pub stats: Stats,
    index_reused: bool,
}

const INDEX_MAGIC: &[u8; 8] = b"TLR2RIX1";
/// Magic, then the image's size, the function and method counts and the six [`Stats`].
const INDEX_HEADER: usize = 8 + 9 * 8;
/// The top bit of a method's kind in [`R2rImage::index_bytes`]: an instantiation (the rest is its
/// signature's file offset), else a MethodDef row.
const INDEX_INSTANCE: u64 = 1 << 63;

/// A method index read back from [`R2rImage::index_bytes`].
struct Index {
    funcs: Vec<(u32, u32)>,
    owner: Vec<u32>,
    methods: Vec<MethodEntry>,
    stats: Stats,
}

impl Index {
    /// The index in `bytes` when it is whole and fits an image of `image_len` bytes with
    /// `method_rows` MethodDef rows: functions in order, owners and method parts in range.
    /// Anything else is `None` (the caller builds the index anew).
    fn decode(bytes: &[u8], image_len: usize, method_rows: u32) -> Option<Index> {
        let rest = bytes.strip_prefix(INDEX_MAGIC)?;
        let u64_at = |at: usize| -> Option<usize> { usize::try_from(u64::from_le_bytes(rest.get(at..at + 8)?.try_into().ok()?)).ok() };
        let u32_at = |at: usize| -> Option<u32> { Some(u32::from_le_bytes(rest.get(at..at + 4)?.try_into().ok()?)) };
        let field = |i: usize| u64_at(i * 8);
        if field(0)? != image_len {
            return None;
        }
        let (n, m) = (field(1)?, field(2)?);
        let body = INDEX_HEADER - 8;
        if rest.len() != body.checked_add(n.checked_mul(12)?)?.checked_add(m.checked_mul(16)?)? {
            return None;
        }
        let stats = Stats {
            runtime_functions: field(3)?,
            methoddef_entries: field(4)?,
            instance_entries: field(5)?,
            instance_entries_skipped: field(6)?,
            funclets: field(7)?,
            unowned_functions: field(8)?,
        };
        let mut funcs = Vec::with_capacity(n);
        for i in 0..n {
            let (begin, end) = (u32_at(body + i * 8)?, u32_at(body + i * 8 + 4)?);
            if end < begin || funcs.last().is_some_and(|&(prev, _)| prev > begin) {
                return None;
            }
            funcs.push((begin, end));
        }
        let owners = body + n * 8;
        let owner: Vec<u32> = (0..n).map(|i| u32_at(owners + i * 4)).collect::<Option<_>>()?;
        if owner.iter().any(|&o| o != NO_METHOD && o as usize >= m) {
            return None;
        }
        let at = owners + n * 4;
        let mut methods = Vec::with_capacity(m);
        for i in 0..m {
            let row = at + i * 16;
            let kind = u64::from_le_bytes(rest.get(row..row + 8)?.try_into().ok()?);
            let (first, last) = (u32_at(row + 8)?, u32_at(row + 12)?);
            let kind = if kind & INDEX_INSTANCE != 0 {
                let offset = usize::try_from(kind & !INDEX_INSTANCE).ok().filter(|&o| o < image_len)?;
                MethodKind::Instance(offset)
            } else {
                MethodKind::Def(u32::try_from(kind).ok().filter(|&rid| rid >= 1 && rid <= method_rows)?)
            };
            if first > last || last as usize >= n {
                return None;
            }
            methods.push(MethodEntry { kind, first, last });
        }
        Some(Index { funcs, owner, methods, stats })
    }
}

impl std::fmt::Debug for R2rImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("R2rImage").field("assembly", &self.module.assembly).field("stats", &self.stats).finish()
    }
}

impl R2rImage {
    /// Parses an image held in memory. Types of other assemblies in generic instantiations are
    /// named only when the image is opened from a file ([`R2rImage::open`]), from its directory.
    pub fn parse(data: Vec<u8>) -> Result<R2rImage> {
        R2rImage::parse_in(Data::Owned(data), None, Arc::new(ModuleCache::default()))
    }

    /// Reads and parses the image at `path`; other assemblies are looked up beside it.
    /// I/O errors come back as `Err(io)`, format errors as `Ok(Err(..))` so callers can name both.
    pub fn open(path: &Path, cache: Arc<ModuleCache>) -> std::io::Result<Result<R2rImage>> {
        R2rImage::open_indexed(path, cache, None)
    }

    /// As [`R2rImage::open`], taking the method index from `index` (an earlier parse's
    /// [`R2rImage::index_bytes`] of the same file) when it fits this image; else (or when `None`)
    /// the index is built from the image's tables. [`R2rImage::index_reused`] says which.
    pub fn open_indexed(path: &Path, cache: Arc<ModuleCache>, index: Option<&[u8]>) -> std::io::Result<Result<R2rImage>> {
        let data = Data::map(path)?;
        Ok(R2rImage::parse_with(data, path.parent().map(Path::to_path_buf), cache, &|_| false, index))
    }

    fn parse_in(data: Data, dir: Option<PathBuf>, cache: Arc<ModuleCache>) -> Result<R2rImage> {
        R2rImage::parse_forgetting(data, dir, cache, &|_| false)
    }

    /// The method index built for this image — which runtime function each method's code
    /// starts at and which method each function belongs to — as bytes to keep beside it.
    /// Building it walks every method entry point of the image (System.Private.CoreLib: ~40 k,
    /// each instantiation's signature decoded), the most costly step of naming a recording's
    /// first framework frame; it depends on the image's bytes alone.
    pub fn index_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INDEX_HEADER + self.funcs.len() * 12 + self.methods.len() * 16);
        out.extend_from_slice(INDEX_MAGIC);
        let st = &self.stats;
        let stats = [st.runtime_functions, st.methoddef_entries, st.instance_entries, st.instance_entries_skipped, st.funclets, st.unowned_functions];
        for n in [self.module.data.len(), self.funcs.len(), self.methods.len()].into_iter().chain(stats) {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        for &(begin, end) in &self.funcs {
            out.extend_from_slice(&begin.to_le_bytes());
            out.extend_from_slice(&end.to_le_bytes());
        }
        for &o in &self.owner {
            out.extend_from_slice(&o.to_le_bytes());
        }
        for m in &self.methods {
            let kind = match m.kind {
                MethodKind::Def(rid) => rid as u64,
                MethodKind::Instance(at) => at as u64 | INDEX_INSTANCE,
            };
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&m.first.to_le_bytes());
            out.extend_from_slice(&m.last.to_le_bytes());
        }
        out
    }

    /// Whether this image's method index came from [`R2rImage::open_indexed`]'s bytes.
    pub fn index_reused(&self) -> bool {
        self.index_reused
    }

    /// `forget_instance(i)` treats the i-th InstanceMethodEntryPoints entry as undecodable, so
    /// tests can check what a reader that meets a signature it cannot skip still gets right.
    fn parse_forgetting(
        data: Data,
        dir: Option<PathBuf>,
        cache: Arc<ModuleCache>,
        forget_instance: &dyn Fn(usize) -> bool,
    ) -> Result<R2rImage> {
        R2rImage::parse_with(data, dir, cache, forget_instance, None)
    }

    fn parse_with(
        data: Data,
        dir: Option<PathBuf>,
        cache: Arc<ModuleCache>,
        forget_instance: &dyn Fn(usize) -> bool,
        index: Option<&[u8]>,
    ) -> Result<R2rImage> {
        let pe = pe::parse(&data)?;
        let metadata = parse_metadata(&data, &pe)?;
        let b = Bytes(&data);
        let native_rva = b.u32(pe.cli_header + 64, "CLI header ManagedNativeHeader")?;
        let native_size = b.u32(pe.cli_header + 68, "CLI header ManagedNativeHeader")?;
        if native_rva == 0 {
            return bad(pe.cli_header as u64 + 64, "no ManagedNativeHeader in the CLI header: not a ReadyToRun image (IL only)");
        }
        let header = pe.rva_to_offset(native_rva, native_size.max(16), "ReadyToRun header", data.len())?;
        let signature = b.u32(header, "ReadyToRun header")?;
        if signature != READYTORUN_SIGNATURE {
            return bad(header as u64, format!("ReadyToRun header signature is {signature:#x}, not 0x00525452 ('RTR')"));
        }
        let count = b.u32(header + 12, "ReadyToRun section count")?;
        if count as usize > data.len() / 12 {
            return bad(header as u64 + 12, format!("ReadyToRun header claims {count} sections"));
        }
        let mut sections = HashMap::new();
        for i in 0..count as usize {
            let at = header + 16 + i * 12;
            let kind = b.u32(at, "ReadyToRun section")?;
            let rva = b.u32(at + 4, "ReadyToRun section")?;
            let size = b.u32(at + 8, "ReadyToRun section")?;
            sections.insert(kind, (rva, size, at));
        }
        let section = |kind: u32, what: &str| -> Result<Option<(usize, usize)>> {
            match sections.get(&kind) {
                Some(&(rva, size, at)) => {
                    let off = pe.rva_to_offset(rva, size, what, data.len()).map_err(|e| at_least(e, at))?;
                    Ok(Some((off, size as usize)))
                }
                None => Ok(None),
            }
        };
        let Some((rf_at, rf_size)) = section(SECTION_RUNTIME_FUNCTIONS, "RuntimeFunctions")? else {
            return bad(header as u64, "ReadyToRun header has no RuntimeFunctions section (a component of a composite image?)");
        };
        // Only amd64's RUNTIME_FUNCTION has an end field; x86, arm and arm64 have (begin, unwind).
        let machine_has_end = pe.machine == pe::MACHINE_AMD64;
        if let Some(ix) = index.and_then(|bytes| Index::decode(bytes, data.len(), metadata.rows(md::METHOD_DEF))) {
            let manifest = match section(SECTION_MANIFEST_METADATA, "ManifestMetadata")? {
                Some((at, size)) => Some(Metadata::parse(b, at, size)?),
                None => None,
            };
            let assembly = assembly_name(b, &metadata)?;
            let module = Arc::new(Module { data, metadata, assembly, ready_to_run: true });
            let Index { funcs, owner, methods, stats } = ix;
            let names = Mutex::default();
            return Ok(R2rImage { module, pe, machine_has_end, funcs, owner, methods, names, manifest, dir, cache, stats, index_reused: true });
        }
        let entry_size = if machine_has_end { 12 } else { 8 };
        let n = rf_size / entry_size;
        let mut funcs = Vec::with_capacity(n);
        for i in 0..n {
            let at = rf_at + i * entry_size;
            let begin = b.u32(at, "RUNTIME_FUNCTION")?;
            let end = if machine_has_end { b.u32(at + 4, "RUNTIME_FUNCTION")? } else { begin };
            if end < begin || funcs.last().is_some_and(|&(prev, _)| prev > begin) {
                return bad(at as u64, format!("RUNTIME_FUNCTION {i} ({begin:#x}..{end:#x}) is out of order"));
            }
            funcs.push((begin, end));
        }
        if !machine_has_end {
            for i in 0..funcs.len() {
                // Without an end field a function reaches the next one's start.
                funcs[i].1 = funcs.get(i + 1).map_or(funcs[i].0.saturating_add(1), |f| f.0);
            }
        }

        let mut stats = Stats { runtime_functions: funcs.len(), ..Stats::default() };
        let mut methods = Vec::new();
        if let Some((at, _)) = section(SECTION_METHODDEF_ENTRY_POINTS, "MethodDefEntryPoints")? {
            let array = NativeArray::new(b, at)?;
            for index in 0..array.len.min(metadata.rows(md::METHOD_DEF)) {
                if let Some(entry) = array.get(index)? {
                    let rf = native::entry_point(b, entry)?;
                    methods.push(MethodEntry { kind: MethodKind::Def(index + 1), first: rf, last: rf });
                    stats.methoddef_entries += 1;
                }
            }
        }
        if let Some((at, size)) = section(SECTION_INSTANCE_METHOD_ENTRY_POINTS, "InstanceMethodEntryPoints")? {
            for (i, entry) in native::hashtable_entries(b, at, at + size)?.into_iter().enumerate() {
                match skip_method_signature(&data, entry) {
                    Ok(after) if !forget_instance(i) => {
                        let rf = native::entry_point(b, after)?;
                        methods.push(MethodEntry { kind: MethodKind::Instance(entry), first: rf, last: rf });
                        stats.instance_entries += 1;
                    }
                    _ => stats.instance_entries_skipped += 1,
                }
            }
        }
        let manifest = match section(SECTION_MANIFEST_METADATA, "ManifestMetadata")? {
            Some((at, size)) => Some(Metadata::parse(b, at, size)?),
            None => None,
        };
        let cold = match section(SECTION_HOT_COLD_MAP, "HotColdMap")? {
            Some((at, size)) => hot_cold_map(b, at, size, funcs.len())?,
            None => Vec::new(),
        };
        // With an entry point missing, "up to the next entry" can run into the unknown method's
        // code: only the EH table's funclet starts then tie a function to the method before it.
        // Unreadable EH data proves nothing, which leaves those functions unnamed, not misnamed.
        let proofs = if stats.instance_entries_skipped > 0 {
            Some(match section(SECTION_EXCEPTION_INFO, "ExceptionInfo") {
                Ok(Some((at, size))) => funclet_starts(b, &pe, at, size).unwrap_or_default(),
                _ => HashSet::new(),
            })
        } else {
            None
        };

        methods.retain(|m| (m.first as usize) < funcs.len());
        methods.sort_by_key(|m| m.first);
        methods.dedup_by_key(|m| m.first);
        let owner = assign_owners(&funcs, &mut methods, &cold, proofs.as_ref());
        stats.unowned_functions = owner.iter().filter(|&&o| o == NO_METHOD).count();
        stats.funclets = funcs.len() - stats.unowned_functions - methods.len();
        let names = Mutex::default();
        let assembly = assembly_name(b, &metadata)?;
        let module = Arc::new(Module { data, metadata, assembly, ready_to_run: true });
        Ok(R2rImage { module, pe, machine_has_end, funcs, owner, methods, names, manifest, dir, cache, stats, index_reused: false })
    }

    pub fn assembly(&self) -> &str {
        &self.module.assembly
    }

    /// The RVA mapped from file offset `offset` (what perf's MMAP pgoff and a sample IP give).
    pub fn file_offset_to_rva(&self, offset: u64) -> Option<u32> {
        self.pe.offset_to_rva(offset)
    }

    pub fn method_count(&self) -> usize {
        self.methods.len()
    }

    /// The method whose code holds `rva`.
    pub fn method_at_rva(&self, rva: u32) -> Option<MethodInfo> {
        let i = self.funcs.partition_point(|f| f.0 <= rva).checked_sub(1)?;
        let (begin, end) = self.funcs[i];
        if rva >= end && (self.machine_has_end || rva != begin) {
            return None;
        }
        let m = *self.owner.get(i)?;
        if m == NO_METHOD {
            return None;
        }
        Some(self.info(m as usize))
    }

    pub fn method_at_file_offset(&self, offset: u64) -> Option<MethodInfo> {
        self.method_at_rva(self.file_offset_to_rva(offset)?)
    }

    /// Every method with code, in address order.
    pub fn methods(&self) -> impl Iterator<Item = MethodInfo> + '_ {
        (0..self.methods.len()).map(|i| self.info(i))
    }

    fn info(&self, i: usize) -> MethodInfo {
        let m = self.methods[i];
        let rva = self.funcs[m.first as usize].0;
        let end = self.funcs[m.last as usize].1;
        let known = self.names.lock().unwrap_or_else(|p| p.into_inner()).get(&(i as u32)).cloned();
        let name = known.unwrap_or_else(|| {
            // Made outside the lock: naming may open another assembly (`module_at`).
            let made: Arc<str> = match self.method_name(m.kind) {
                Ok(n) => n.into(),
                Err(e) => format!("[{}] <unnamed method at RVA {rva:#x}: {}>", self.module.assembly, e).into(),
            };
            self.names.lock().unwrap_or_else(|p| p.into_inner()).entry(i as u32).or_insert(made).clone()
        });
        MethodInfo { rva, len: end.saturating_sub(rva), name }
    }

    /// The assembly that ReadyToRun module index `index` stands for (0 = this one).
    fn module_at(&self, index: u32) -> Option<Arc<Module>> {
        if index == 0 {
            return Some(self.module.clone());
        }
        let own = &self.module;
        let refs = own.metadata.rows(md::ASSEMBLY_REF);
        let name = if index <= refs {
            own.metadata.string_cell(own.b(), md::ASSEMBLY_REF, index, 6).ok()?.to_string()
        } else {
            let manifest = self.manifest.as_ref()?;
            let row = index - refs - 1;
            if row == 0 {
                return None;
            }
            manifest.string_cell(own.b(), md::ASSEMBLY_REF, row, 6).ok()?.to_string()
        };
        if name == own.assembly {
            return Some(self.module.clone());
        }
        let dir = self.dir.as_ref()?;
        self.cache.get(&dir.join(format!("{name}.dll")))
    }

    fn method_name(&self, kind: MethodKind) -> Result<String> {
        match kind {
            MethodKind::Def(rid) => name_method(&self.module, rid, None, &|i| self.module_at(i)),
            MethodKind::Instance(at) => {
                let data = &self.module.data;
                let mut r = SigReader::new(data, at, 0);
                let flags = r.uint()?;
                let mut module = self.module.clone();
                if flags & SIG_UPDATE_CONTEXT != 0 {
                    let index = r.uint()?;
                    module = self.module_at(index).ok_or_else(|| r.err(format!("module {index} of a method signature is not available")))?;
                    r.set_module(Some(index));
                }
                let owner = if flags & SIG_OWNER_TYPE != 0 { Some(r.ty()?) } else { None };
                // A slot or a MemberRef row read as a MethodDef row would name some other method.
                if flags & SIG_SLOT_INSTEAD_OF_TOKEN != 0 {
                    return Err(r.err("method given by a vtable slot, not a token"));
                }
                if flags & SIG_MEMBER_REF_TOKEN != 0 {
                    return Err(r.err("method given by a MemberRef token"));
                }
                let rid = r.uint()?;
                name_method(&module, rid, owner.as_ref(), &|i| self.module_at(i))
            }
        }
    }
}

/// Moves past a ReadyToRun method signature (the key of an InstanceMethodEntryPoints entry).
fn skip_method_signature(data: &[u8], at: usize) -> Result<usize> {
    let mut r = SigReader::new(data, at, 0);
    let flags = r.uint()?;
    if flags & !SIG_KNOWN_FLAGS != 0 {
        return Err(r.err(format!("method signature flags {flags:#x} include ones this reader does not know")));
    }
    if flags & SIG_UPDATE_CONTEXT != 0 {
        r.uint()?;
    }
    if flags & SIG_OWNER_TYPE != 0 {
        r.ty()?;
    }
    r.uint()?; // the token's row, or the slot: both one compressed integer
    if flags & SIG_METHOD_INSTANTIATION != 0 {
        let n = r.uint()?;
        if n as usize > data.len() - r.pos {
            return Err(r.err("method instantiation count exceeds the file"));
        }
        for _ in 0..n {
            r.ty()?;
        }
    }
    if flags & SIG_CONSTRAINED != 0 {
        r.ty()?;
    }
    Ok(r.pos)
}

/// The HotColdMap: (first runtime function of a cold part, the method's hot entry), sorted by the
/// cold part; each cold part runs up to the next one's start (the last to the table's end).
fn hot_cold_map(b: Bytes, at: usize, size: usize, funcs: usize) -> Result<Vec<(u32, u32)>> {
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(size / 8);
    for i in 0..size / 8 {
        let off = at + i * 8;
        let cold = b.u32(off, "HotColdMap entry")?;
        let hot = b.u32(off + 4, "HotColdMap entry")?;
        if cold as usize >= funcs || hot as usize >= funcs {
            return bad(off as u64, format!("HotColdMap entry ({cold}, {hot}) names a runtime function past the {funcs} there are"));
        }
        if out.last().is_some_and(|&(prev, _)| prev >= cold) {
            return bad(off as u64, format!("HotColdMap entry {i} (cold part {cold}) is out of order"));
        }
        out.push((cold, hot));
    }
    Ok(out)
}

/// Every (method start RVA, funclet start RVA) the ExceptionInfo section implies: a handler's (and
/// a filter's) code is a funclet of its own, starting at the clause's offset from the method start.
fn funclet_starts(b: Bytes, pe: &PeInfo, at: usize, size: usize) -> Result<HashSet<(u32, u32)>> {
    const CLAUSE: u32 = 24;
    let mut out = HashSet::new();
    let rows = size / 8;
    // The last row only closes the one before it (its EH info RVA ends that row's clauses).
    for i in 0..rows.saturating_sub(1) {
        let row = at + i * 8;
        let method = b.u32(row, "ExceptionInfo row")?;
        let info = b.u32(row + 4, "ExceptionInfo row")?;
        let next = b.u32(row + 12, "ExceptionInfo row")?;
        let Some(len) = next.checked_sub(info) else {
            return bad(row as u64 + 12, "ExceptionInfo rows are out of order");
        };
        if len < CLAUSE {
            continue;
        }
        let clauses = pe.rva_to_offset(info, len, "EH clauses", b.len())?;
        for c in 0..(len / CLAUSE) as usize {
            let clause = clauses + c * CLAUSE as usize;
            let flags = b.u32(clause, "EH clause")?;
            let handler = b.u32(clause + 12, "EH clause")?;
            out.insert((method, method.wrapping_add(handler)));
            if flags & EH_CLAUSE_FILTER != 0 {
                out.insert((method, method.wrapping_add(b.u32(clause + 20, "EH clause")?)));
            }
        }
    }
    Ok(out)
}

/// Which method each runtime function belongs to (NO_METHOD: none known), extending each
/// method's `last` over the funclets that follow its entry.
///
/// The format puts a method's funclets right after its entry, up to the next method's entry
/// (R2RDump reads it so), and cold parts where the HotColdMap says. That rule is only sound when
/// every entry point is known; `proofs` (see [`funclet_starts`]) is given when some are not, and
/// then a function after an entry is that method's only if it starts one of its funclets.
fn assign_owners(funcs: &[(u32, u32)], methods: &mut [MethodEntry], cold: &[(u32, u32)], proofs: Option<&HashSet<(u32, u32)>>) -> Vec<u32> {
    let n = funcs.len();
    let mut owner = vec![NO_METHOD; n];
    let mut is_entry = vec![false; n];
    for (i, m) in methods.iter().enumerate() {
        owner[m.first as usize] = i as u32;
        is_entry[m.first as usize] = true;
    }
    let first_cold = cold.first().map_or(n, |c| c.0 as usize);
    let mut current = NO_METHOD;
    for rf in 0..first_cold {
        if is_entry[rf] {
            current = owner[rf];
            continue;
        }
        if current == NO_METHOD {
            continue;
        }
        let m = &mut methods[current as usize];
        let proven = proofs.is_none_or(|p| p.contains(&(funcs[m.first as usize].0, funcs[rf].0)));
        if proven {
            owner[rf] = current;
            m.last = rf as u32;
        }
    }
    for (i, &(start, hot)) in cold.iter().enumerate() {
        let end = cold.get(i + 1).map_or(n, |c| c.0 as usize);
        // The hot index must be a known entry: anything else would borrow an unrelated name.
        let m = if is_entry[hot as usize] { owner[hot as usize] } else { NO_METHOD };
        for rf in start as usize..end {
            if !is_entry[rf] {
                owner[rf] = m;
            }
        }
    }
    owner
}

type Resolve<'a> = dyn Fn(u32) -> Option<Arc<Module>> + 'a;

/// `[instance ]RET [Assembly] Namespace.Type::Method(PARAMS)`, the runtime's perf-map spelling.
fn name_method(m: &Module, rid: u32, owner: Option<&Ty>, resolve: &Resolve) -> Result<String> {
    let b = m.b();
    let meta = &m.metadata;
    let name = meta.string_cell(b, md::METHOD_DEF, rid, 3)?;
    let blob = meta.cell(b, md::METHOD_DEF, rid, 4)?;
    let (sig_bytes, sig_at) = meta.blob(b, blob)?;
    let sig: MethodSig = SigReader::new(sig_bytes, 0, sig_at).method_sig()?;
    let owner_name = match owner {
        Some(ty) => {
            let mut s = String::new();
            clr_type(ty, m, resolve, &mut s, 0)?;
            s
        }
        None => type_def_name(m, meta.method_owner(b, rid)?, '+')?,
    };
    let mut out = String::with_capacity(96);
    if sig.has_this {
        out.push_str("instance ");
    }
    il_type(&sig.ret, m, &mut out, 0)?;
    out.push_str(" [");
    out.push_str(&m.assembly);
    out.push_str("] ");
    out.push_str(&owner_name);
    out.push_str("::");
    out.push_str(name);
    out.push('(');
    for (i, p) in sig.params.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        il_type(p, m, &mut out, 0)?;
    }
    out.push(')');
    Ok(out)
}

const MAX_NAME_DEPTH: u32 = 32;
/// Real names stay under 1 KiB; TypeSpecs that name themselves several times over would otherwise
/// grow a name exponentially within the depth limit.
const MAX_NAME_BYTES: usize = 16 * 1024;

fn too_deep(m: &Module) -> Error {
    Error { offset: 0, what: format!("{}: type names nest more than {MAX_NAME_DEPTH} deep or exceed {MAX_NAME_BYTES} bytes", m.assembly) }
}

/// `Namespace.Outer+Inner` (sep '+') or `Namespace.Outer/Inner` (sep '/').
fn type_def_name(m: &Module, row: u32, sep: char) -> Result<String> {
    let b = m.b();
    let meta = &m.metadata;
    let mut chain = vec![row];
    let mut cur = row;
    while let Some(outer) = meta.enclosing(b, cur)? {
        if chain.len() as u32 > MAX_NAME_DEPTH || chain.contains(&outer) {
            return Err(too_deep(m));
        }
        chain.push(outer);
        cur = outer;
    }
    let mut out = String::new();
    for (i, &t) in chain.iter().rev().enumerate() {
        if i == 0 {
            let ns = meta.string_cell(b, md::TYPE_DEF, t, 2)?;
            if !ns.is_empty() {
                out.push_str(ns);
                out.push('.');
            }
        } else {
            out.push(sep);
        }
        out.push_str(meta.string_cell(b, md::TYPE_DEF, t, 1)?);
    }
    Ok(out)
}

/// A TypeRef's name and, when it points into another assembly, that assembly's name.
fn type_ref_name(m: &Module, row: u32, sep: char, depth: u32) -> Result<(Option<String>, String)> {
    if depth > MAX_NAME_DEPTH {
        return Err(too_deep(m));
    }
    let b = m.b();
    let meta = &m.metadata;
    let name = meta.string_cell(b, md::TYPE_REF, row, 1)?;
    let ns = meta.string_cell(b, md::TYPE_REF, row, 2)?;
    let local = if ns.is_empty() { name.to_string() } else { format!("{ns}.{name}") };
    let (scope, scope_row) = meta.coded(b, md::TYPE_REF, row, 0)?;
    Ok(match scope {
        md::TYPE_REF if scope_row != 0 => {
            let (asm, outer) = type_ref_name(m, scope_row, sep, depth + 1)?;
            (asm, format!("{outer}{sep}{local}"))
        }
        md::ASSEMBLY_REF if scope_row != 0 => (Some(meta.string_cell(b, md::ASSEMBLY_REF, scope_row, 6)?.to_string()), local),
        _ => (None, local),
    })
}

fn type_spec(m: &Module, row: u32) -> Result<Ty> {
    let blob = m.metadata.cell(m.b(), md::TYPE_SPEC, row, 0)?;
    let (bytes, at) = m.metadata.blob(m.b(), blob)?;
    SigReader::new(bytes, 0, at).ty()
}

/// IL-style spelling used for signatures: `valuetype System.Span`1<uint8>`, `class [System.Runtime]System.Type`.
fn il_type(ty: &Ty, m: &Module, out: &mut String, depth: u32) -> Result<()> {
    if depth > MAX_NAME_DEPTH || out.len() > MAX_NAME_BYTES {
        return Err(too_deep(m));
    }
    let d = depth + 1;
    match ty {
        Ty::Prim(c) => out.push_str(sig::prim_il(*c)),
        Ty::Named { table, row, value_type, .. } => match *table {
            md::TYPE_SPEC => il_type(&type_spec(m, *row)?, m, out, d)?,
            _ => {
                out.push_str(if *value_type { "valuetype " } else { "class " });
                il_type_name(m, *table, *row, out)?;
            }
        },
        Ty::Ptr(t) => {
            il_type(t, m, out, d)?;
            out.push('*');
        }
        Ty::ByRef(t) => {
            il_type(t, m, out, d)?;
            out.push('&');
        }
        Ty::SzArray(t) => {
            il_type(t, m, out, d)?;
            out.push_str("[]");
        }
        Ty::Array(t, rank) => {
            il_type(t, m, out, d)?;
            out.push('[');
            for _ in 1..(*rank).min(32) {
                out.push(',');
            }
            out.push(']');
        }
        Ty::GenericInst(g, args) => {
            il_type(g, m, out, d)?;
            out.push('<');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                il_type(a, m, out, d)?;
            }
            out.push('>');
        }
        Ty::Var(n) => {
            out.push('!');
            out.push_str(&n.to_string());
        }
        Ty::MVar(n) => {
            out.push_str("!!");
            out.push_str(&n.to_string());
        }
        Ty::GenericParam(row) => {
            out.push_str("!GenericParam#");
            out.push_str(&row.to_string());
        }
        Ty::Canon => out.push_str("System.__Canon"),
        // As ILDASM and the runtime's perf map write it: `method unmanaged cdecl native int *(int64)`.
        Ty::FnPtr(sig) => {
            out.push_str("method ");
            if sig.has_this {
                out.push_str("instance ");
            }
            if sig.conv & 0x40 != 0 {
                out.push_str("explicit ");
            }
            out.push_str(match sig.conv & 0x0f {
                0x1 => "unmanaged cdecl ",
                0x2 => "unmanaged stdcall ",
                0x3 => "unmanaged thiscall ",
                0x4 => "unmanaged fastcall ",
                0x5 => "vararg ",
                0x9 => "unmanaged ",
                _ => "",
            });
            il_type(&sig.ret, m, out, d)?;
            out.push_str(" *(");
            for (i, p) in sig.params.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                il_type(p, m, out, d)?;
            }
            out.push(')');
        }
        Ty::Modified { ty, modifier, required } => {
            il_type(ty, m, out, d)?;
            out.push_str(if *required { " modreq(" } else { " modopt(" });
            if let Ty::Named { table, row, .. } = **modifier {
                il_type_name(m, table, row, out)?;
            }
            out.push(')');
        }
    }
    Ok(())
}

fn il_type_name(m: &Module, table: usize, row: u32, out: &mut String) -> Result<()> {
    match table {
        md::TYPE_DEF => out.push_str(&type_def_name(m, row, '/')?),
        _ => {
            let (asm, name) = type_ref_name(m, row, '/', 0)?;
            if let Some(a) = asm {
                out.push('[');
                out.push_str(&a);
                out.push(']');
            }
            out.push_str(&name);
        }
    }
    Ok(())
}

/// Reflection-style spelling used for the owning type: `System.Collections.Generic.List`1[System.Int32]`.
fn clr_type(ty: &Ty, m: &Module, resolve: &Resolve, out: &mut String, depth: u32) -> Result<()> {
    if depth > MAX_NAME_DEPTH || out.len() > MAX_NAME_BYTES {
        return Err(too_deep(m));
    }
    let d = depth + 1;
    match ty {
        Ty::Prim(c) => out.push_str(sig::prim_clr(*c)),
        Ty::Named { module, table, row, .. } => {
            let owner;
            let m = match module {
                None => m,
                Some(i) => match resolve(*i) {
                    Some(other) => {
                        owner = other;
                        &owner
                    }
                    None => {
                        out.push('?');
                        return Ok(());
                    }
                },
            };
            match *table {
                md::TYPE_DEF => out.push_str(&type_def_name(m, *row, '+')?),
                md::TYPE_REF => out.push_str(&type_ref_name(m, *row, '+', 0)?.1),
                _ => clr_type(&type_spec(m, *row)?, m, resolve, out, d)?,
            }
        }
        Ty::Ptr(t) => {
            clr_type(t, m, resolve, out, d)?;
            out.push('*');
        }
        Ty::ByRef(t) => {
            clr_type(t, m, resolve, out, d)?;
            out.push('&');
        }
        Ty::SzArray(t) => {
            clr_type(t, m, resolve, out, d)?;
            out.push_str("[]");
        }
        Ty::Array(t, rank) => {
            clr_type(t, m, resolve, out, d)?;
            out.push('[');
            for _ in 1..(*rank).min(32) {
                out.push(',');
            }
            out.push(']');
        }
        Ty::GenericInst(g, args) => {
            clr_type(g, m, resolve, out, d)?;
            out.push('[');
            for (i, a) in args.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                clr_type(a, m, resolve, out, d)?;
            }
            out.push(']');
        }
        Ty::Var(n) => {
            out.push('!');
            out.push_str(&n.to_string());
        }
        Ty::MVar(n) => {
            out.push_str("!!");
            out.push_str(&n.to_string());
        }
        Ty::GenericParam(row) => {
            out.push_str("!GenericParam#");
            out.push_str(&row.to_string());
        }
        Ty::Canon => out.push_str("System.__Canon"),
        // What the runtime's type names write for one (a type argument never is one in C#).
        Ty::FnPtr(_) => out.push_str("(fnptr)"),
        Ty::Modified { ty, .. } => clr_type(ty, m, resolve, out, d)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: u32) -> MethodEntry {
        MethodEntry { kind: MethodKind::Def(first + 1), first, last: first }
    }

    /// Five functions: a method with a funclet, an unknown method's entry and funclet, a method.
    const FUNCS: [(u32, u32); 5] = [(0x100, 0x180), (0x180, 0x190), (0x200, 0x280), (0x280, 0x290), (0x300, 0x380)];

    #[test]
    fn with_every_entry_known_functions_belong_to_the_entry_before_them() {
        let mut methods = [entry(0), entry(2), entry(4)];
        let owner = assign_owners(&FUNCS, &mut methods, &[], None);
        assert_eq!(owner, [0, 0, 1, 1, 2]);
        assert_eq!((methods[0].last, methods[1].last, methods[2].last), (1, 3, 4));
    }

    #[test]
    fn with_an_entry_missing_only_proven_funclets_are_named() {
        // Function 2 is the entry of a method we could not decode; 3 is its funclet.
        let mut methods = [entry(0), entry(4)];
        let proofs = HashSet::from([(0x100, 0x180), (0x200, 0x280)]);
        let owner = assign_owners(&FUNCS, &mut methods, &[], Some(&proofs));
        assert_eq!(owner, [0, 0, NO_METHOD, NO_METHOD, 1]);
        assert_eq!(methods[0].last, 1);
    }

    #[test]
    fn cold_parts_follow_the_hot_cold_map_not_the_entry_before_them() {
        // Functions 3 and 4 are cold parts of the methods at 0 and 2 (in that order).
        let mut methods = [entry(0), entry(2)];
        let owner = assign_owners(&FUNCS, &mut methods, &[(3, 0), (4, 2)], None);
        assert_eq!(owner, [0, 0, 1, 0, 1]);
        // A cold part whose hot index is not a known entry stays unnamed.
        let mut methods = [entry(0), entry(2)];
        let owner = assign_owners(&FUNCS, &mut methods, &[(3, 1), (4, 2)], None);
        assert_eq!(owner, [0, 0, 1, NO_METHOD, 1]);
    }

    fn corelib() -> Vec<u8> {
        std::fs::read(crate::test_common::corelib()).unwrap()
    }

    /// A chain of TypeSpecs, each a generic instantiation over four copies of the next, is small
    /// in the file and 4^15 leaves deep in a name: it must be cut off, not spelled out.
    #[test]
    fn type_specs_that_multiply_are_cut_off_not_spelled_out() {
        let mut data = corelib();
        let module = Module::parse(data.clone()).unwrap();
        let (b, meta) = (module.b(), &module.metadata);
        let rows: Vec<(u32, usize)> = (1..=meta.rows(md::TYPE_SPEC).min(0x1000))
            .filter_map(|row| {
                let (bytes, at) = meta.blob(b, meta.cell(b, md::TYPE_SPEC, row, 0).ok()?).ok()?;
                (bytes.len() >= 16).then_some((row, at))
            })
            .take(15)
            .collect();
        assert_eq!(rows.len(), 15);
        for pair in rows.windows(2) {
            let token = (pair[1].0 << 2) | 2; // TypeSpec coded index, in the two-byte form
            let next = [0x12, 0x80 | (token >> 8) as u8, token as u8];
            // GENERICINST CLASS TypeDef#2, four arguments, each the next TypeSpec.
            let blob = [&[0x15, 0x12, 0x08, 0x04][..], &next, &next, &next, &next].concat();
            data[pair[0].1..pair[0].1 + blob.len()].copy_from_slice(&blob);
        }
        let module = Module::parse(data).unwrap();
        let ty = Ty::Named { module: None, table: md::TYPE_SPEC, row: rows[0].0, value_type: false };
        let started = std::time::Instant::now();
        let mut out = String::new();
        assert!(il_type(&ty, &module, &mut out, 0).is_err());
        let mut out = String::new();
        assert!(clr_type(&ty, &module, &|_| None, &mut out, 0).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    }

    /// The entry RVA of the method owning each runtime function.
    fn owners(image: &R2rImage) -> Vec<Option<u32>> {
        image
            .owner
            .iter()
            .map(|&o| (o != NO_METHOD).then(|| image.funcs[image.methods[o as usize].first as usize].0))
            .collect()
    }

    /// An image opened with its saved method index names every method as one parsed anew; an
    /// index that does not fit (cut short, of another file, pointing past the image) is not
    /// used, and the image is parsed as if there were none.
    #[test]
    fn a_saved_method_index_names_as_a_fresh_parse_and_a_bad_one_is_rebuilt() {
        let path = crate::test_common::corelib();
        let cache = || Arc::new(ModuleCache::default());
        let fresh = R2rImage::open(&path, cache()).unwrap().unwrap();
        assert!(!fresh.index_reused());
        let index = fresh.index_bytes();
        let reused = R2rImage::open_indexed(&path, cache(), Some(&index)).unwrap().unwrap();
        assert!(reused.index_reused());
        assert_eq!(reused.stats, fresh.stats);
        assert_eq!(reused.methods().collect::<Vec<_>>(), fresh.methods().collect::<Vec<_>>());
        let mut past_the_image = index.clone();
        let last_kind = past_the_image.len() - 16;
        past_the_image[last_kind..last_kind + 8].copy_from_slice(&(u64::MAX >> 1 | INDEX_INSTANCE).to_le_bytes());
        let mut other_size = index.clone();
        other_size[8] ^= 1;
        for (what, bad) in [("cut short", &index[..index.len() - 1]), ("past the image", &past_the_image[..]), ("another file's", &other_size[..])] {
            let image = R2rImage::open_indexed(&path, cache(), Some(bad)).unwrap().unwrap();
            assert!(!image.index_reused(), "an index {what} was used");
            assert_eq!(image.stats, fresh.stats, "{what}");
        }
    }

    #[test]
    fn corelib_with_undecodable_instance_entries_loses_names_but_never_misnames() {
        let data = corelib();
        let full = R2rImage::parse(data.clone()).unwrap();
        assert_eq!(full.stats.instance_entries_skipped, 0);
        let cache = Arc::new(ModuleCache::default());
        let partial = R2rImage::parse_forgetting(Data::Owned(data), None, cache, &|i| i % 5 == 0).unwrap();
        assert!(partial.stats.instance_entries_skipped > 5_000, "{:?}", partial.stats);

        let known: HashSet<u32> = partial.methods().map(|m| m.rva).collect();
        let (full_owner, partial_owner) = (owners(&full), owners(&partial));
        let mut lost_funclets = 0;
        for (rf, (f, p)) in full_owner.iter().zip(&partial_owner).enumerate() {
            let f = f.expect("every CoreLib runtime function has an owner");
            match p {
                Some(p) => assert_eq!(*p, f, "runtime function {rf} at {:#x} moved to another method", full.funcs[rf].0),
                // Only the forgotten methods' code may lose its name.
                None => assert!(!known.contains(&f), "runtime function {rf} of a known method lost its name"),
            }
            if p.is_none() && full.funcs[rf].0 != f {
                lost_funclets += 1;
            }
        }
        // The forgotten methods' funclets did exist and were left unnamed, not given to a neighbour.
        assert!(lost_funclets > 0);
        assert_eq!(partial.stats.unowned_functions, full.stats.runtime_functions - known.len() - partial.stats.funclets);
    }
}
