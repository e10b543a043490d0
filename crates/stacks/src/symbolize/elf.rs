//! ELF symbols (object crate): `.symtab` when the file has one, else `.dynsym` (what a stripped
//! libcoreclr.so still exports), plus kernel symbols from a kallsyms text.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::table::SymbolTable;

/// Symbols of one ELF file and the load segments that turn a file offset into a symbol address.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    pub path: PathBuf,
    pub build_id: Option<Vec<u8>>,
    /// (file offset, file size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    pub table: SymbolTable,
    /// True when the names came from `.symtab` (full), false for `.dynsym` (exports only).
    pub full_symtab: bool,
}

/// This process's vDSO as an ELF image: its `[vdso]` range from /proc/self/maps, its bytes from
/// /proc/self/mem (the image in memory is the whole file).
pub fn running_vdso() -> Result<ElfSymbols> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").context("cannot read /proc/self/maps")?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]")).context("this process has no [vdso] mapping")?;
    let range = line.split_whitespace().next().unwrap_or("");
    let (start, end) = range.split_once('-').context("a /proc/self/maps line without a range")?;
    let (start, end) = (u64::from_str_radix(start, 16)?, u64::from_str_radix(end, 16)?);
    let mut mem = std::fs::File::open("/proc/self/mem").context("cannot open /proc/self/mem")?;
    mem.seek(SeekFrom::Start(start))?;
    let mut image = vec![0u8; usize::try_from(end.saturating_sub(start))?];
    mem.read_exact(&mut image).context("cannot read the vDSO from /proc/self/mem")?;
    ElfSymbols::parse(&image, Path::new("[vdso]"))
}

impl ElfSymbols {
    pub fn read(path: &Path) -> Result<ElfSymbols> {
        let data = super::map_file(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&data, path)
    }

    pub fn parse(data: &[u8], path: &Path) -> Result<ElfSymbols> {
        let file = object::File::parse(data).with_context(|| format!("{} is not a readable ELF file", path.display()))?;
        let segments = file
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .collect();
        let mut table = SymbolTable::new();
        let mut full_symtab = false;
        for (symbols, full) in [(file.symbols().collect::<Vec<_>>(), true), (file.dynamic_symbols().collect(), false)] {
            let mut candidates: Vec<Candidate> = symbols
                .iter()
                .filter(|sym| sym.kind() == SymbolKind::Text && sym.address() != 0 && sym.is_definition())
                .filter_map(|sym| {
                    let name = sym.name().ok().filter(|n| !n.is_empty())?;
                    Some(Candidate { start: sym.address(), size: sym.size(), weak: sym.is_weak(), global: sym.is_global(), name })
                })
                .collect();
            if candidates.is_empty() {
                continue;
            }
            // Stable: among equals, the first in the file wins, as in perf.
            candidates.sort_by_key(|c| c.start);
            for same_start in candidates.chunk_by(|a, b| a.start == b.start) {
                let best = same_start.iter().reduce(|best, next| if next.beats(best) { next } else { best }).unwrap();
                // Kept mangled: demangling every symbol of libcoreclr was a twentieth of a fold;
                // a name is demangled when a frame is named by it (`name_at_file_offset`).
                let name = best.name;
                // Size 0 means unknown (hand-written assembly), not empty: such a symbol reaches
                // up to the next one. Any other size is kept, one byte included.
                if best.size == 0 {
                    table.push_unsized(best.start, name);
                } else {
                    table.push(best.start, best.start + best.size, name);
                }
            }
            full_symtab = full;
            break;
        }
        table.finish();
        Ok(ElfSymbols {
            path: path.to_path_buf(),
            build_id: file.build_id().ok().flatten().map(<[u8]>::to_vec),
            segments,
            table,
            full_symtab,
        })
    }

    /// The address the symbol table uses for a byte at `file_offset` of the file.
    pub fn svma_of_file_offset(&self, file_offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(off, size, _)| file_offset >= *off && file_offset < off + size)
            .map(|(off, _, vaddr)| file_offset - off + vaddr)
    }

    /// Uses another file's segments (a split debug file's program headers can lack file sizes).
    pub fn with_segments_of(mut self, other: &ElfSymbols) -> ElfSymbols {
        if !other.segments.is_empty() {
            self.segments = other.segments.clone();
        }
        self
    }

    /// The (demangled) name of the function holding the byte at `file_offset`.
    pub fn name_at_file_offset(&self, file_offset: u64) -> Option<std::borrow::Cow<'_, str>> {
        self.table.lookup(self.svma_of_file_offset(file_offset)?).map(demangle)
    }
}

/// One of several ELF symbols that may share an address (libc's `write`, `__write`,
/// `__libc_write`, `__GI___libc_write`, …).
struct Candidate<'data> {
    start: u64,
    size: u64,
    weak: bool,
    global: bool,
    name: &'data str,
}

impl Candidate<'_> {
    /// Whether this alias names the address rather than `other`: perf's `choose_best_symbol`
    /// (tools/perf/util/symbol.c), so that a frame gets the name perf users see — a sized
    /// symbol, then non-weak, then global, then fewer leading underscores, then the longer name.
    fn beats(&self, other: &Candidate) -> bool {
        let underscores = |n: &str| n.bytes().take_while(|&b| b == b'_').count();
        let key = |c: &Candidate| {
            (c.size > 0, !c.weak, c.global, std::cmp::Reverse(underscores(c.name)), c.name.len())
        };
        key(self) > key(other)
    }
}

/// A symbol name as perf prints it: an Itanium C++ name (`_Z…`, what g++ and clang emit)
/// demangled without parameters or return type (perf's default, `DMGL_NO_OPTS`, and what flame
/// graphs show), anything else as it is. A name cpp_demangle cannot read stays mangled.
pub fn demangle(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.starts_with("_Z") {
        return std::borrow::Cow::Borrowed(name);
    }
    let options = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
    match cpp_demangle::Symbol::new(name).ok().and_then(|symbol| symbol.demangle_with_options(&options).ok()) {
        Some(demangled) => std::borrow::Cow::Owned(demangled),
        None => std::borrow::Cow::Borrowed(name),
    }
}

/// Build id as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Kernel text symbols from a kallsyms text (`ADDR TYPE NAME [MODULE]`); `.xz` files are
/// decompressed first.
pub fn read_kallsyms(path: &Path) -> Result<SymbolTable> {
    let raw = read_whole(path).with_context(|| format!("cannot read {}", path.display()))?;
    let text = if path.extension().is_some_and(|e| e == "xz") {
        let mut out = Vec::new();
        lzma_rs::xz_decompress(&mut std::io::Cursor::new(&raw), &mut out)
            .map_err(|e| anyhow::anyhow!("{}: not a valid xz file: {e}", path.display()))?;
        out
    } else {
        raw
    };
    parse_kallsyms(&text, path)
}

/// Reads a whole file into a buffer that is not zero-filled first: /proc/kallsyms reports size
/// 0, so `std::fs::read` cannot size it, and a zeroed scratch buffer per chunk costs more than
/// the kernel's formatting.
fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut out = Vec::with_capacity(8 << 20);
    file.read_to_end(&mut out)?;
    Ok(out)
}

/// The running kernel's text symbols, from an on-disk cache when this boot's kernel and module
/// set were read before, else from /proc/kallsyms (then cached).
///
/// The kernel formats /proc/kallsyms anew on every read — ~120 k lines, 60–80 ms here, more than
/// decoding a 77 k-sample recording — while its contents only change at boot (KASLR) and when
/// modules load; perf keeps copies for the same reason (`~/.debug/[kernel.kallsyms]`). The key
/// is the boot id, the release and /proc/modules' names and load addresses. Symbols the kernel
/// adds at run time (BPF programs, ftrace trampolines) are not in a cached copy.
///
/// Returns the table and, when it was read fresh, the cache file to save it to
/// ([`save_kallsyms`]): the caller hands the table to its waiters first.
pub fn running_kallsyms() -> Result<(SymbolTable, Option<PathBuf>)> {
    let cache = kallsyms_cache_path();
    // Mapped, not read: a lookup touches a few of its pages.
    if let Some(table) = cache.as_deref().and_then(SymbolTable::from_file) {
        return Ok((table, None));
    }
    let table = read_kallsyms(Path::new("/proc/kallsyms"))?;
    Ok((table, cache))
}

/// Saves a freshly read running kernel's table where [`running_kallsyms`] said. Best effort: a
/// read-only home only costs the next run a fresh read.
pub fn save_kallsyms(table: &SymbolTable, path: &Path) {
    let _ = write_atomically(path, &table.to_bytes());
}

/// `<cache>/kallsyms-<key>.bin` for the running kernel, `None` when no cache folder can be named.
fn kallsyms_cache_path() -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let dir = cache_dir()?;
    let mut key = Sha256::new();
    for file in ["/proc/sys/kernel/osrelease", "/proc/sys/kernel/random/boot_id"] {
        key.update(std::fs::read(file).ok()?);
    }
    // Name and load address of each module; its use count and state change without moving text.
    if let Ok(modules) = std::fs::read_to_string("/proc/modules") {
        for line in modules.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            key.update(fields.first().copied().unwrap_or_default());
            key.update(fields.last().copied().unwrap_or_default());
        }
    }
    let digest = key.finalize();
    Some(dir.join(format!("kallsyms-{}.bin", hex(&digest[..12]))))
}

/// tracelab's cache folder: `$TRACELAB_CACHE_DIR`, else `$XDG_CACHE_HOME/tracelab`, else
/// `~/.cache/tracelab`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TRACELAB_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("tracelab"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("tracelab"))
}

/// Writes the cache file whole or not at all, making its folder first.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    crate::files::write_whole(path, |out| out.write_all(bytes))
}

pub fn parse_kallsyms(text: &[u8], path: &Path) -> Result<SymbolTable> {
    let text = std::str::from_utf8(text).map_err(|e| {
        anyhow::anyhow!("{}: not UTF-8 text at byte offset {}: not a kallsyms file", path.display(), e.valid_up_to())
    })?;
    // ~45 bytes a line, a name about half of it: sized once instead of grown by doubling.
    let mut table = SymbolTable::with_capacity(text.len() / 40, text.len() / 2);
    let mut offset = 0;
    let mut nonzero = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let at = offset;
        offset += line.len();
        // The common line, `ADDR T NAME\n`, read by bytes: the kernel's read of /proc/kallsyms
        // outlasts the rest of a cold fold, and this parse came after it. Anything else (a
        // module's symbol, odd spacing) goes the general way below.
        match kallsyms_line(line) {
            Some(KallsymsLine::Other) => continue,
            Some(KallsymsLine::Text { addr, name }) => {
                nonzero |= addr != 0;
                table.push_unsized(addr, name);
                continue;
            }
            None => {}
        }
        let mut parts = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            if line.trim().is_empty() {
                continue;
            }
            bail!("{}: line {} at byte offset {at} is not `ADDR TYPE NAME`", path.display(), i + 1);
        };
        let addr = u64::from_str_radix(addr, 16)
            .map_err(|_| anyhow::anyhow!("{}: line {} at byte offset {at}: `{addr}` is not an address", path.display(), i + 1))?;
        if !matches!(kind, "t" | "T" | "w" | "W") {
            continue;
        }
        nonzero |= addr != 0;
        // kallsyms gives no sizes: each symbol reaches the next, as perf reads it.
        match parts.next() {
            Some(module) => table.push_unsized(addr, &format!("{name} {module}")),
            None => table.push_unsized(addr, name),
        }
    }
    if !nonzero && !table.is_empty() {
        bail!(
            "{}: every address is 0 (kallsyms read without privilege: run as root or set kernel.kptr_restrict=0)",
            path.display()
        );
    }
    table.finish();
    Ok(table)
}

/// One /proc/kallsyms line read the quick way (see [`parse_kallsyms`]).
enum KallsymsLine<'a> {
    /// A text symbol (`t`, `T`, `w`, `W`) with no module.
    Text { addr: u64, name: &'a str },
    /// Any other well-formed symbol: not a function.
    Other,
}

/// `ADDR K NAME\n` with single spaces, a hex address of at most 16 digits and a name with no
/// whitespace; `None` for anything else (which the general parse then reads or rejects).
fn kallsyms_line(line: &str) -> Option<KallsymsLine<'_>> {
    let bytes = line.as_bytes();
    let space = bytes.iter().position(|&b| b == b' ')?;
    if space == 0 || space > 16 || bytes.get(space + 2) != Some(&b' ') {
        return None;
    }
    let mut addr = 0u64;
    for &b in &bytes[..space] {
        let digit = (b as char).to_digit(16)?;
        addr = addr << 4 | digit as u64;
    }
    let body = line.get(space + 3..)?.strip_suffix('\n')?;
    if body.is_empty() || body.bytes().any(|b| b.is_ascii_whitespace()) {
        return None;
    }
    Some(match bytes[space + 1] {
        b't' | b'T' | b'w' | b'W' => KallsymsLine::Text { addr, name: body },
        b if b.is_ascii_whitespace() => return None,
        _ => KallsymsLine::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick line reader and the general one agree: same table, same refusals.
    #[test]
    fn kallsyms_lines_read_alike_the_quick_and_the_general_way() {
        let text = "ffffffff81000000 T _stext\nffffffff81000010 t helper\nffffffff81000020 D some_data\n\
                    ffffffff81000030 W weak_one\nffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n\
                    ffffffffc0202000 t  spaced\nffffffffc0203000 T last";
        let table = parse_kallsyms(text.as_bytes(), Path::new("k")).unwrap();
        assert_eq!(table.len(), 6, "text symbols only");
        let names: Vec<Option<&str>> =
            [0xffffffff81000000, 0xffffffff81000010, 0xffffffff81000030, 0xffffffffc0201000, 0xffffffffc0202000, 0xffffffffc0203000]
                .into_iter()
                .map(|a| table.lookup(a))
                .collect();
        let want = ["_stext", "helper", "weak_one", "ftrace_trampoline [__builtin__ftrace]", "spaced", "last"];
        assert_eq!(names, want.map(Some));
        assert!(matches!(kallsyms_line("ffffffff81000000 T _stext\n"), Some(KallsymsLine::Text { addr: 0xffffffff81000000, name: "_stext" })));
        assert!(matches!(kallsyms_line("ffffffff81000020 D some_data\n"), Some(KallsymsLine::Other)));
        assert!(kallsyms_line("ffffffffc0201000 t tramp\t[mod]\n").is_none(), "a module's symbol goes the general way");
        assert!(kallsyms_line("zzzz T x\n").is_none());
        assert!(kallsyms_line("ffffffff81000000 T \n").is_none());
        let err = parse_kallsyms(b"ffffffff81000000 T a\nzzzz T x\n", Path::new("k")).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("`zzzz` is not an address"), "{err}");
        let err = parse_kallsyms(b"0000000000000000 T a\n0000000000000000 T b\n", Path::new("k")).unwrap_err().to_string();
        assert!(err.contains("every address is 0"), "{err}");
    }

    /// The recorded libc (fixtures/perf/dsos, Debian 2.36-9+deb12u14, stripped: .dynsym only).
    /// Its `__libc_init_first` is one byte; the main thread's caller frame at 0x2724a lies in the
    /// static `__libc_start_call_main` just after it, which .dynsym does not list. Stretching the
    /// one-byte symbol named nearly every main-thread stack `__libc_init_first`.
    #[test]
    fn a_one_byte_symbol_does_not_name_the_function_after_it() {
        let libc = ElfSymbols::read(&tracelab_fixtures::fixture("perf/dsos/libc.so.6")).unwrap();
        assert!(!libc.full_symtab, "the fixture is the stripped libc");
        assert_eq!(libc.name_at_file_offset(0x271c0).as_deref(), Some("__libc_init_first"));
        assert_eq!(libc.name_at_file_offset(0x271c1).as_deref(), None);
        assert_eq!(libc.name_at_file_offset(0x2724a).as_deref(), None, "perf script: 2724a __libc_start_call_main");
        assert_eq!(libc.name_at_file_offset(0x27280).as_deref(), Some("__libc_start_main"));
    }

    #[test]
    fn cpp_names_are_demangled_as_perf_prints_them() {
        // perf-cpu.script.txt: `b89f0 std::ios_base::Init::Init (/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30)`.
        assert_eq!(demangle("_ZNSt8ios_base4InitC2Ev"), "std::ios_base::Init::Init");
        assert_eq!(demangle("_ZN7CorUnix12InternalFreeEPv"), "CorUnix::InternalFree");
        assert_eq!(demangle("__libc_start_main"), "__libc_start_main");
        assert_eq!(demangle("_Znot-a-name"), "_Znot-a-name");
    }
}

#[cfg(test)]
mod vdso_tests {
    /// The running kernel's vDSO names its clock functions (what `[vdso]` frames run).
    #[test]
    fn the_running_vdso_names_its_functions() {
        let v = super::running_vdso().unwrap();
        let names: Vec<&str> = v.table.names().collect();
        assert!(names.iter().any(|n| n.contains("clock_gettime")), "{names:?}");
    }
}
