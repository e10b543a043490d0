use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};

const ELF_HEADER_LEN: usize = 64;
const PHDR_LEN: usize = 56;
const SHDR_LEN: usize = 64;
const ET_CORE: u16 = 4;
const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
/// `e_phnum` when the real count does not fit 16 bits: it is then section 0's `sh_info`.
const PN_XNUM: u16 = 0xffff;
const NT_PRSTATUS: u32 = 1;
const NT_PRPSINFO: u32 = 3;
const NT_FILE: u32 = 0x4649_4c45;
/// `elf_prstatus.pr_pid` sits after siginfo (12), cursig (2 + 2 padding), sigpend and sighold (8 each).
const PRSTATUS_PID_AT: usize = 32;
/// `elf_prpsinfo.pr_pid` after state, sname, zomb, nice (1 each), 4 padding, flag (8), uid, gid (4 each).
const PRPSINFO_PID_AT: usize = 24;
const PRPSINFO_FNAME_AT: usize = 40;
/// No note segment of a real core comes near this: a larger one is a corrupt size.
const MAX_NOTE_SEGMENT: u64 = 256 << 20;

/// A program header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub kind: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub file_size: u64,
    pub mem_size: u64,
}

/// One note of a `PT_NOTE` segment, where it is in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub name: String,
    pub kind: u32,
    /// Where its descriptor starts in the file.
    pub desc_offset: u64,
    pub desc_len: u64,
}

/// A thread of the dumped process (one `NT_PRSTATUS` note).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStatus {
    /// The thread id as the process's pid namespace saw it.
    pub tid: u32,
    /// The signal the thread was stopped by (`pr_cursig`).
    pub signal: u16,
}

/// A file mapped into the process (one entry of `NT_FILE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file, in bytes.
    pub file_offset: u64,
    pub path: String,
}

/// What a core file says about its process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreFile {
    /// `e_machine` (62 x86_64, 183 aarch64).
    pub machine: u16,
    pub file_len: u64,
    pub segments: Vec<Segment>,
    pub notes: Vec<Note>,
    pub threads: Vec<ThreadStatus>,
    pub mappings: Vec<Mapping>,
    /// `NT_PRPSINFO`: the process's pid (in its namespace) and short name.
    pub pid: Option<u32>,
    pub process_name: Option<String>,
}

impl CoreFile {
    /// Reads the core file at `path`: its headers and notes only.
    pub fn open(path: &Path) -> Result<CoreFile> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut read_at = |offset: u64, n: usize| -> std::io::Result<Vec<u8>> {
            let mut buf = vec![0u8; n];
            file.seek(SeekFrom::Start(offset))?;
            file.read_exact(&mut buf)?;
            Ok(buf)
        };
        parse_with(len, &mut read_at).map_err(|e| match e {
            Parse::Io(source) => Error::Io { path: path.to_path_buf(), source },
            Parse::Format(e) => e.in_file(path),
        })
    }

    /// Reads a core file held in memory.
    pub fn parse(bytes: &[u8]) -> Result<CoreFile> {
        let mut read_at = |offset: u64, n: usize| -> std::io::Result<Vec<u8>> {
            let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
            bytes.get(start..start.saturating_add(n)).map(<[u8]>::to_vec).ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
        };
        parse_with(bytes.len() as u64, &mut read_at).map_err(|e| match e {
            Parse::Io(e) => Error::at(0, format!("reading: {e}")),
            Parse::Format(e) => e,
        })
    }

    /// Whether a mapped file's name (the last path component) starts with `prefix`
    /// (`libcoreclr.so`).
    pub fn maps_file(&self, prefix: &str) -> bool {
        self.mappings.iter().any(|m| m.path.rsplit('/').next().is_some_and(|f| f.starts_with(prefix)))
    }

    /// The distinct mapped files, in order of first mapping.
    pub fn mapped_files(&self) -> Vec<&str> {
        let mut seen = Vec::new();
        for m in &self.mappings {
            if !seen.contains(&m.path.as_str()) {
                seen.push(m.path.as_str());
            }
        }
        seen
    }

    /// Bytes of memory the loadable segments hold in the file.
    pub fn loaded_bytes(&self) -> u64 {
        self.segments.iter().filter(|s| s.kind == PT_LOAD).map(|s| s.file_size).sum()
    }
}

enum Parse {
    Io(std::io::Error),
    Format(Error),
}

impl From<Error> for Parse {
    fn from(e: Error) -> Self {
        Parse::Format(e)
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks that `len` bytes at `offset` lie inside a file of `file_len` bytes; the error names
/// `field_at`, where the file says where they are (a header field), since `offset` itself may lie
/// anywhere.
fn inside(offset: u64, len: u64, file_len: u64, what: &str, field_at: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(Error::at(
            field_at,
            format!("{what} ({len} bytes at offset {offset}) runs past the end of the file ({file_len} bytes): the core is truncated or the header is corrupt"),
        )),
    }
}

fn parse_with(file_len: u64, read_at: &mut dyn FnMut(u64, usize) -> std::io::Result<Vec<u8>>) -> std::result::Result<CoreFile, Parse> {
    if file_len < ELF_HEADER_LEN as u64 {
        return Err(Error::at(0, format!("{file_len} bytes is shorter than an ELF header (64)")).into());
    }
    let h = read_at(0, ELF_HEADER_LEN).map_err(Parse::Io)?;
    if &h[0..4] != b"\x7fELF" {
        return Err(Error::at(0, format!("not an ELF file: it starts {:02x?}", &h[0..4])).into());
    }
    if h[4] != 2 {
        return Err(Error::at(4, format!("ELF class {} (only 64-bit cores, class 2, are read)", h[4])).into());
    }
    if h[5] != 1 {
        return Err(Error::at(5, format!("ELF data encoding {} (only little-endian, 1, is read)", h[5])).into());
    }
    let e_type = u16_at(&h, 16);
    if e_type != ET_CORE {
        return Err(Error::at(16, format!("ELF type {e_type}, not a core file (type 4): an executable or library, not a dump")).into());
    }
    let machine = u16_at(&h, 18);
    let phoff = u64_at(&h, 32);
    let shoff = u64_at(&h, 40);
    let phentsize = u16_at(&h, 54);
    let mut phnum = u64::from(u16_at(&h, 56));
    if phentsize as usize != PHDR_LEN {
        return Err(Error::at(54, format!("program header size {phentsize}, expected {PHDR_LEN}")).into());
    }
    if phnum == u64::from(PN_XNUM) {
        inside(shoff, SHDR_LEN as u64, file_len, "section header 0 (which holds the program header count)", 40)?;
        let s0 = read_at(shoff, SHDR_LEN).map_err(Parse::Io)?;
        phnum = u64::from(u32_at(&s0, 44));
    }
    if phnum == 0 {
        return Err(Error::at(56, "no program headers: a core file has at least its note segment").into());
    }
    let table_len = phnum * PHDR_LEN as u64;
    inside(phoff, table_len, file_len, &format!("the program header table ({phnum} entries)"), 32)?;
    let table = read_at(phoff, table_len as usize).map_err(Parse::Io)?;
    let mut core = CoreFile { machine, file_len, ..CoreFile::default() };
    for i in 0..phnum as usize {
        let p = &table[i * PHDR_LEN..(i + 1) * PHDR_LEN];
        let at = phoff + (i * PHDR_LEN) as u64;
        let seg = Segment { kind: u32_at(p, 0), offset: u64_at(p, 8), vaddr: u64_at(p, 16), file_size: u64_at(p, 32), mem_size: u64_at(p, 40) };
        if seg.kind == PT_LOAD || seg.kind == PT_NOTE {
            inside(seg.offset, seg.file_size, file_len, &format!("segment {i}"), at + 8)?;
        }
        if seg.kind == PT_LOAD && seg.file_size > seg.mem_size {
            return Err(Error::at(at + 32, format!("segment {i} holds {} bytes in the file but {} in memory", seg.file_size, seg.mem_size)).into());
        }
        core.segments.push(seg);
    }
    for seg in core.segments.clone().iter().filter(|s| s.kind == PT_NOTE) {
        if seg.file_size > MAX_NOTE_SEGMENT {
            return Err(Error::at(seg.offset, format!("a note segment of {} bytes (more than {MAX_NOTE_SEGMENT})", seg.file_size)).into());
        }
        let bytes = read_at(seg.offset, seg.file_size as usize).map_err(Parse::Io)?;
        read_notes(&bytes, seg.offset, &mut core)?;
    }
    if !core.segments.iter().any(|s| s.kind == PT_NOTE) {
        return Err(Error::at(phoff, "no note segment (PT_NOTE): nothing says which threads the process had").into());
    }
    Ok(core)
}

/// Notes are (namesz, descsz, type), the name and the descriptor, each padded to 4 bytes.
fn read_notes(b: &[u8], base: u64, core: &mut CoreFile) -> Result<()> {
    let mut pos = 0usize;
    while pos < b.len() {
        let at = base + pos as u64;
        if b.len() - pos < 12 {
            return Err(Error::at(at, format!("{} bytes left in the note segment, less than a note header (12)", b.len() - pos)));
        }
        let (namesz, descsz, kind) = (u32_at(b, pos) as usize, u32_at(b, pos + 4) as usize, u32_at(b, pos + 8));
        let name_at = pos + 12;
        let desc_at = name_at.checked_add(namesz.next_multiple_of(4)).filter(|d| *d <= b.len());
        let Some(desc_at) = desc_at else {
            return Err(Error::at(at, format!("note name of {namesz} bytes runs past the note segment")));
        };
        let end = desc_at.checked_add(descsz).filter(|e| *e <= b.len());
        let Some(end) = end else {
            return Err(Error::at(at + 4, format!("note descriptor of {descsz} bytes (type {kind:#x}) runs past the note segment")));
        };
        let name = String::from_utf8_lossy(&b[name_at..name_at + namesz]).trim_end_matches('\0').to_string();
        let desc = &b[desc_at..end];
        let desc_offset = base + desc_at as u64;
        if name == "CORE" {
            match kind {
                NT_PRSTATUS => {
                    if desc.len() < PRSTATUS_PID_AT + 4 {
                        return Err(Error::at(desc_offset, format!("NT_PRSTATUS of {} bytes has no pr_pid", desc.len())));
                    }
                    core.threads.push(ThreadStatus { tid: u32_at(desc, PRSTATUS_PID_AT), signal: u16_at(desc, 12) });
                }
                NT_PRPSINFO if desc.len() >= PRPSINFO_FNAME_AT + 16 => {
                    core.pid = Some(u32_at(desc, PRPSINFO_PID_AT));
                    let fname = &desc[PRPSINFO_FNAME_AT..PRPSINFO_FNAME_AT + 16];
                    let n = fname.iter().position(|c| *c == 0).unwrap_or(16);
                    core.process_name = Some(String::from_utf8_lossy(&fname[..n]).into_owned());
                }
                NT_FILE => read_nt_file(desc, desc_offset, &mut core.mappings)?,
                _ => {}
            }
        }
        core.notes.push(Note { name, kind, desc_offset, desc_len: descsz as u64 });
        pos = end.next_multiple_of(4).min(b.len());
    }
    Ok(())
}

/// `NT_FILE`: count, page size, count × (start, end, offset in pages), then count NUL-terminated
/// paths.
fn read_nt_file(d: &[u8], base: u64, out: &mut Vec<Mapping>) -> Result<()> {
    if d.len() < 16 {
        return Err(Error::at(base, format!("NT_FILE of {} bytes has no count and page size", d.len())));
    }
    let count = u64_at(d, 0);
    let page = u64_at(d, 8);
    let table_end = count.checked_mul(24).and_then(|n| n.checked_add(16)).filter(|e| *e <= d.len() as u64);
    let Some(table_end) = table_end else {
        return Err(Error::at(base, format!("NT_FILE lists {count} files, more than its {} bytes hold", d.len())));
    };
    let mut names = d[table_end as usize..].split(|c| *c == 0);
    let mut name_at = base + table_end;
    for i in 0..count as usize {
        let e = 16 + i * 24;
        let (start, end, pages) = (u64_at(d, e), u64_at(d, e + 8), u64_at(d, e + 16));
        if end < start {
            return Err(Error::at(base + e as u64, format!("NT_FILE entry {i} ends ({end:#x}) before it starts ({start:#x})")));
        }
        let Some(name) = names.next().filter(|_| name_at < base + d.len() as u64) else {
            return Err(Error::at(name_at, format!("NT_FILE names only {i} of its {count} files")));
        };
        name_at += name.len() as u64 + 1;
        out.push(Mapping { start, end, file_offset: pages.saturating_mul(page), path: String::from_utf8_lossy(name).into_owned() });
    }
    Ok(())
}
