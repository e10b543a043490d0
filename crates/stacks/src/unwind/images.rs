//! Executable images (ELF shared objects, ReadyToRun PE assemblies) as the unwinder and the
//! namer need them: unwind sections, the layout that turns a mapping into a base address, and
//! symbols. Images are read once per path and shared between processes.

use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use crate::symbolize::debug_file::DebugFiles;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

/// A shared slice of one loaded file: framehop keeps section data by value, and several
/// sections (and several processes' modules) point into the same bytes.
#[derive(Clone)]
pub struct Bytes {
    data: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl Bytes {
    fn new(data: &Arc<Vec<u8>>, range: Range<usize>) -> Option<Bytes> {
        (range.start <= range.end && range.end <= data.len()).then(|| Bytes { data: data.clone(), range })
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data[self.range.clone()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    Elf,
    /// A PE file as the .NET loader maps it on Linux (ReadyToRun code, Windows x64 unwind info).
    Pe,
}

/// A part of the file that is loaded at a fixed offset from the image base.
#[derive(Clone, Debug)]
struct LoadedRange {
    file_offset: u64,
    file_size: u64,
    /// Address relative to the image base (ELF: the stated vaddr; PE: the RVA).
    relative: u64,
}

#[derive(Clone, Debug)]
struct Symbol {
    start: u64,
    size: u64,
    name: String,
}

pub struct Image {
    pub path: PathBuf,
    pub format: ImageFormat,
    /// ELF: the file as is. PE: the image laid out by RVA, so unwind data is found by RVA.
    data: Arc<Vec<u8>>,
    /// The stated address of relative address 0 (ELF: 0; PE: ImageBase).
    base_svma: u64,
    loaded: Vec<LoadedRange>,
    /// Section name → (relative address range, byte range in `data`).
    sections: Vec<(&'static [u8], Range<u64>, Range<usize>)>,
    symbols: Vec<Symbol>,
    /// ELF: each function's range from `.eh_frame`, for code no symbol covers: such a frame is
    /// `fn@0x…` here as in the symbolizer's views (issue 38: off-CPU and off-wake views said
    /// `[unknown] (libcoreclr.so)` where the CPU views said `libcoreclr.so!fn@0x…`).
    functions: crate::symbolize::fde::FunctionRanges,
}

const ELF_SECTIONS: [&[u8]; 5] = [b".text", b".eh_frame", b".eh_frame_hdr", b".got", b".debug_frame"];

impl Image {
    /// Reads an ELF or PE file found at `path` for the file a process mapped as `recorded`.
    /// An ELF file's separate debug file ([`DebugFiles`], the symbolizer's lookup) names what
    /// the stripped file cannot.
    pub fn load(path: &Path, recorded: &Path, debug_files: &DebugFiles) -> Result<Image> {
        let bytes = std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        Self::parse(path, recorded, bytes, debug_files)
    }

    pub fn parse(path: &Path, recorded: &Path, bytes: Vec<u8>, debug_files: &DebugFiles) -> Result<Image> {
        let file = object::File::parse(&*bytes)
            .with_context(|| format!("{} is neither an ELF nor a PE file object can read", path.display()))?;
        match file.format() {
            object::BinaryFormat::Elf => Self::parse_elf(path, recorded, &file, &bytes, debug_files),
            object::BinaryFormat::Pe => Self::parse_pe(path, &file, &bytes),
            other => bail!("{}: unsupported object format {other:?}", path.display()),
        }
        .map(|mut image| {
            if image.format == ImageFormat::Elf {
                image.data = Arc::new(bytes);
            }
            image
        })
    }

    fn parse_elf(path: &Path, recorded: &Path, file: &object::File, bytes: &[u8], debug_files: &DebugFiles) -> Result<Image> {
        let loaded = file
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                (size > 0).then_some(LoadedRange { file_offset: off, file_size: size, relative: s.address() })
            })
            .collect();
        let mut sections = Vec::new();
        for name in ELF_SECTIONS {
            let Some(section) = file.section_by_name_bytes(name) else { continue };
            let addr = section.address()..section.address() + section.size();
            let bytes_range = match section.file_range() {
                Some((off, size)) if off.saturating_add(size) <= bytes.len() as u64 => {
                    off as usize..(off + size) as usize
                }
                _ => continue,
            };
            sections.push((name, addr, bytes_range));
        }
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let mut symbols = elf_symbols(file);
        let debug_symbols = debug_files.find(recorded, build_id.as_deref(), |_, debug| {
            object::File::parse(debug).ok().map(|f| elf_symbols(&f)).filter(|more| more.len() > symbols.len())
        });
        if let Some((_, more)) = debug_symbols {
            symbols = more;
        }
        Ok(Image {
            path: path.to_path_buf(),
            format: ImageFormat::Elf,
            data: Arc::new(Vec::new()),
            base_svma: 0,
            loaded,
            sections,
            symbols,
            functions: crate::symbolize::fde::FunctionRanges::parse(bytes).unwrap_or_default(),
        })
    }

    fn parse_pe(path: &Path, file: &object::File, bytes: &[u8]) -> Result<Image> {
        let base_svma = file.relative_address_base();
        let mut loaded = Vec::new();
        let mut image_len = 0u64;
        for section in file.sections() {
            let rva = section.address().wrapping_sub(base_svma);
            if let Some((off, size)) = section.file_range() {
                loaded.push(LoadedRange { file_offset: off, file_size: size, relative: rva });
                image_len = image_len.max(rva.saturating_add(size));
            }
            image_len = image_len.max(rva.saturating_add(section.size()));
        }
        // A PE image larger than a gigabyte is not a ReadyToRun assembly we could have mapped.
        if image_len > 1 << 30 {
            bail!("{}: PE sections span {image_len} bytes; refusing to lay it out", path.display());
        }
        let mut image = vec![0u8; image_len as usize];
        for r in &loaded {
            let src = bytes
                .get(r.file_offset as usize..(r.file_offset + r.file_size) as usize)
                .with_context(|| format!("{}: section at file offset {:#x} runs past the end", path.display(), r.file_offset))?;
            image[r.relative as usize..r.relative as usize + src.len()].copy_from_slice(src);
        }
        let pe = object::read::pe::PeFile64::parse(bytes)
            .with_context(|| format!("{}: not a PE32+ image", path.display()))?;
        let mut sections = Vec::new();
        let whole = 0..image_len;
        sections.push((b".text".as_slice(), whole.clone(), 0..image_len as usize));
        sections.push((b".rdata".as_slice(), whole, 0..image_len as usize));
        if let Some(dir) = pe.data_directory(object::pe::IMAGE_DIRECTORY_ENTRY_EXCEPTION) {
            let rva = dir.virtual_address.get(object::LittleEndian) as u64;
            let size = dir.size.get(object::LittleEndian) as u64;
            if size > 0 && rva + size <= image_len {
                sections.push((b".pdata".as_slice(), rva..rva + size, rva as usize..(rva + size) as usize));
            }
        }
        Ok(Image {
            path: path.to_path_buf(),
            format: ImageFormat::Pe,
            data: Arc::new(image),
            base_svma,
            loaded,
            sections,
            symbols: Vec::new(),
            functions: Default::default(),
        })
    }

    /// The process address of relative address 0, given one mapping of this file
    /// (`start` mapped from file offset `pgoff`, `len` bytes).
    pub fn base_avma(&self, start: u64, pgoff: u64, len: u64) -> Option<u64> {
        let end = pgoff.checked_add(len)?;
        // The loaded range this mapping mostly holds. Not simply the one containing pgoff: a
        // page-aligned text mapping starts inside the preceding read-only segment's last page
        // (libcoreclr: r-x @0x1c8000, text segment at file offset 0x1c89a0 = vaddr 0x1c99a0),
        // and the .NET loader maps a PE file's text from offset 0, headers first.
        let overlap = |r: &LoadedRange| {
            let lo = r.file_offset.max(pgoff);
            let hi = r.file_offset.saturating_add(r.file_size).min(end);
            hi.saturating_sub(lo)
        };
        let r = self.loaded.iter().filter(|r| overlap(r) > 0).max_by_key(|r| overlap(r))?;
        let avma_of_range = start.checked_add(r.file_offset)?.checked_sub(pgoff)?;
        avma_of_range.checked_sub(r.relative)
    }

    /// True when the image has unwind information framehop can use.
    pub fn has_unwind_info(&self) -> bool {
        self.sections.iter().any(|(n, ..)| matches!(*n, b".eh_frame" | b".pdata" | b".debug_frame"))
    }

    pub fn module(self: &Arc<Self>, name: String, avma: Range<u64>, base_avma: u64) -> framehop::Module<Bytes> {
        framehop::Module::new(name, avma, base_avma, SectionInfo { image: self.clone() })
    }

    /// Names the function containing `relative` (an address relative to the image base).
    /// The start of the function (from `.eh_frame`) holding `relative`, for code no symbol covers.
    pub fn function_start(&self, relative: u64) -> Option<u64> {
        self.functions.function_at(relative)
    }

    pub fn symbol(&self, relative: u64) -> Option<&str> {
        let i = self.symbols.partition_point(|s| s.start <= relative);
        let s = self.symbols.get(i.checked_sub(1)?)?;
        (s.size == 0 || relative < s.start + s.size).then_some(s.name.as_str())
    }
}

fn elf_symbols(file: &object::File) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| Some(Symbol { start: s.address(), size: s.size(), name: crate::symbolize::elf::demangle(s.name().ok()?).into_owned() }))
        .collect();
    symbols.sort_by(|a, b| a.start.cmp(&b.start).then(b.size.cmp(&a.size)));
    symbols.dedup_by_key(|s| s.start);
    symbols
}

struct SectionInfo {
    image: Arc<Image>,
}

impl SectionInfo {
    fn find(&self, name: &[u8]) -> Option<&(&'static [u8], Range<u64>, Range<usize>)> {
        self.image.sections.iter().find(|(n, ..)| *n == name)
    }
}

impl framehop::ModuleSectionInfo<Bytes> for SectionInfo {
    fn base_svma(&self) -> u64 {
        self.image.base_svma
    }
    fn section_svma_range(&mut self, name: &[u8]) -> Option<Range<u64>> {
        let base = self.image.base_svma;
        self.find(name).map(|(_, r, _)| r.start + base..r.end + base)
    }
    fn section_data(&mut self, name: &[u8]) -> Option<Bytes> {
        self.find(name).and_then(|(_, _, b)| Bytes::new(&self.image.data, b.clone()))
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded stripped libc (fixtures/perf/dsos): `__libc_start_call_main` at 0x2724a has no
    /// symbol, yet its `.eh_frame` entry gives its start, so the unwinder's views name it
    /// `fn@0x…` as the symbolizer's do (not `[unknown] (libc.so.6)`).
    #[test]
    fn code_no_symbol_covers_has_its_function_start() {
        let libc = tracelab_fixtures::fixture("perf/dsos/libc.so.6");
        // No debug files: this machine's /usr/lib/debug may hold libc's, which names it.
        let image = Image::load(&libc, &libc, &DebugFiles::with_system_dirs(Vec::new(), &[])).unwrap();
        assert_eq!(image.symbol(0x2724a), None);
        let start = image.function_start(0x2724a).expect("an FDE covers __libc_start_call_main");
        assert!(start <= 0x2724a && start > 0x271c0, "{start:#x}");
    }
}
