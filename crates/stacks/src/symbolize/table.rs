//! A sorted address → name table shared by perf maps, jitdump, ELF symbols and kallsyms.

/// Address ranges with names. Ranges may overlap (the runtime reports stub blocks that contain
/// other stubs); a lookup returns the innermost-starting range that still contains the address.
#[derive(Debug, Default, Clone)]
pub struct SymbolTable {
    /// (start, end exclusive, name offset in `names`, name length), sorted by start.
    entries: Vec<(u64, u64, u32, u32)>,
    /// Every name, concatenated: one allocation instead of one per symbol (kallsyms has ~100 k).
    names: String,
    sorted: bool,
    /// A finished table read from an on-disk cache ([`SymbolTable::from_file`]) and searched
    /// where it lies; `entries` and `names` are then empty.
    image: Option<std::sync::Arc<Image>>,
}

/// [`SymbolTable::to_bytes`]'s layout, mapped and checked once: the rows are read in place.
/// Copying the running kernel's 6 MB into fresh heap pages cost a small recording's fold a sixth
/// of its time; a lookup touches a few pages of the map.
#[derive(Debug)]
struct Image {
    map: memmap2::Mmap,
    count: usize,
}

impl Image {
    const ROWS: usize = 24;

    fn row(&self, i: usize) -> (u64, u64, u32, u32) {
        row_at(&self.map[Self::ROWS + i * 24..Self::ROWS + i * 24 + 24])
    }

    fn name(&self, offset: u32, len: u32) -> &str {
        let at = Self::ROWS + self.count * 24 + offset as usize;
        // Checked by `check_image` when mapped: bounds, character boundaries, UTF-8.
        std::str::from_utf8(&self.map[at..at + len as usize]).unwrap_or_default()
    }
}

fn row_at(row: &[u8]) -> (u64, u64, u32, u32) {
    let u64_at = |at: usize| u64::from_le_bytes(row[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(row[at..at + 4].try_into().expect("4 bytes"));
    (u64_at(0), u64_at(8), u32_at(16), u32_at(20))
}

/// How far back a lookup walks to find an enclosing range when the closest start does not
/// contain the address (nested stub blocks are shallow).
const MAX_BACKTRACK: usize = 64;

impl SymbolTable {
    pub fn new() -> Self {
        SymbolTable::default()
    }

    /// An empty table with room for `symbols` symbols whose names total `name_bytes`.
    pub fn with_capacity(symbols: usize, name_bytes: usize) -> Self {
        SymbolTable { entries: Vec::with_capacity(symbols), names: String::with_capacity(name_bytes), ..SymbolTable::default() }
    }

    /// A symbol covering `start..end`. A sized symbol keeps its size, however small: libc's
    /// `__libc_init_first` is one byte (`ret`), and widening it named the function after it.
    /// An empty range (`end <= start`) is taken as one byte; use [`SymbolTable::push_unsized`]
    /// for a symbol whose size is unknown.
    pub fn push(&mut self, start: u64, end: u64, name: &str) {
        self.push_entry(start, end.max(start.saturating_add(1)), name);
    }

    /// A symbol whose size is unknown (ELF size 0: hand-written assembly; every kallsyms line):
    /// [`SymbolTable::finish`] extends it to the next symbol's start, as perf does
    /// (`symbols__fixup_end`).
    pub fn push_unsized(&mut self, start: u64, name: &str) {
        // `end == start` marks the entry as open until `finish`; `push` never stores it.
        self.push_entry(start, start, name);
    }

    fn push_entry(&mut self, start: u64, end: u64, name: &str) {
        assert!(self.image.is_none(), "a table read from a cache is finished");
        let offset = self.names.len() as u32;
        self.names.push_str(name);
        self.entries.push((start, end, offset, name.len() as u32));
        self.sorted = false;
    }

    fn name(&self, e: &(u64, u64, u32, u32)) -> &str {
        match &self.image {
            Some(image) => image.name(e.2, e.3),
            None => &self.names[e.2 as usize..(e.2 + e.3) as usize],
        }
    }

    fn row(&self, i: usize) -> (u64, u64, u32, u32) {
        match &self.image {
            Some(image) => image.row(i),
            None => self.entries[i],
        }
    }

    /// Sorts, and gives every unsized entry ([`SymbolTable::push_unsized`]) the range up to the
    /// next distinct start (one byte when nothing follows).
    pub fn finish(&mut self) {
        if self.image.is_some() {
            return;
        }
        self.entries.sort_by_key(|e| (e.0, std::cmp::Reverse(e.1)));
        let n = self.entries.len();
        for i in 0..n {
            let (start, end, _, _) = self.entries[i];
            if end == start {
                let next = self.entries[i + 1..].iter().map(|e| e.0).find(|&s| s > start);
                self.entries[i].1 = next.unwrap_or(start.saturating_add(1));
            }
        }
        // Widening changed ends: restore the (start, longest first) order lookups rely on.
        self.entries.sort_by_key(|e| (e.0, std::cmp::Reverse(e.1)));
        self.sorted = true;
    }

    pub fn len(&self) -> usize {
        match &self.image {
            Some(image) => image.count,
            None => self.entries.len(),
        }
    }

    /// Every symbol as (start, end, name), in the table's order.
    pub fn symbols(&self) -> impl Iterator<Item = (u64, u64, &str)> {
        (0..self.len()).map(|i| {
            let row = self.row(i);
            (row.0, row.1, self.name(&row))
        })
    }

    /// Every name in the table (in no particular order; a name listed twice comes twice).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.name(&self.row(i)))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        self.lookup_range(addr).map(|(_, _, name)| name)
    }

    /// Start address of the range containing `addr`.
    pub fn lookup_range(&self, addr: u64) -> Option<(u64, u64, &str)> {
        debug_assert!(self.sorted || self.is_empty());
        // The first row starting after `addr` (rows are sorted by start).
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.row(mid).0 <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let upto = lo;
        (upto.saturating_sub(MAX_BACKTRACK)..upto).rev().map(|i| self.row(i)).find(|e| addr < e.1).map(|e| (e.0, e.1, self.name(&e)))
    }
}

/// Magic and version of [`SymbolTable::to_bytes`]'s layout.
const SERIALIZED_MAGIC: &[u8; 8] = b"TLSYMT01";

impl SymbolTable {
    /// A flat little-endian image of a finished table (for on-disk caches): magic, entry count,
    /// names length, 24-byte entries, the names.
    pub fn to_bytes(&self) -> Vec<u8> {
        debug_assert!(self.sorted || self.is_empty());
        if let Some(image) = &self.image {
            return image.map.to_vec();
        }
        let mut out = Vec::with_capacity(24 + self.entries.len() * 24 + self.names.len());
        out.extend_from_slice(SERIALIZED_MAGIC);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.names.len() as u64).to_le_bytes());
        for &(start, end, offset, len) in &self.entries {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&end.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(self.names.as_bytes());
        out
    }

    /// Reads what [`SymbolTable::to_bytes`] wrote; `None` for anything else (a stale or damaged
    /// cache is rebuilt, never trusted): see [`check_image`].
    pub fn from_bytes(bytes: &[u8]) -> Option<SymbolTable> {
        let count = check_image(bytes)?;
        let names = std::str::from_utf8(&bytes[Image::ROWS + count * 24..]).ok()?.to_string();
        let entries = bytes[Image::ROWS..Image::ROWS + count * 24].chunks_exact(24).map(row_at).collect();
        Some(SymbolTable { entries, names, sorted: true, image: None })
    }

    /// As [`SymbolTable::from_bytes`], from a file that is mapped, checked once and then searched
    /// in place; `None` when it cannot be read or is not such a table.
    pub fn from_file(path: &std::path::Path) -> Option<SymbolTable> {
        let map = super::map_file(path).ok()?;
        let count = check_image(&map)?;
        Some(SymbolTable { entries: Vec::new(), names: String::new(), sorted: true, image: Some(std::sync::Arc::new(Image { map, count })) })
    }
}

/// The row count of a [`SymbolTable::to_bytes`] image, or `None` when it is anything else: wrong
/// magic or size, names not UTF-8, out of bounds or not on character boundaries, rows out of
/// order.
fn check_image(bytes: &[u8]) -> Option<usize> {
    let rest = bytes.strip_prefix(SERIALIZED_MAGIC)?;
    let u64_at = |b: &[u8], at: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)) };
    let count = usize::try_from(u64_at(rest, 0)?).ok()?;
    let names_len = usize::try_from(u64_at(rest, 8)?).ok()?;
    let table_len = count.checked_mul(24)?;
    let body = rest.get(16..)?;
    if body.len() != table_len.checked_add(names_len)? {
        return None;
    }
    let names = std::str::from_utf8(&body[table_len..]).ok()?;
    let mut previous = (0u64, u64::MAX);
    for row in body[..table_len].chunks_exact(24) {
        let (start, end, offset, len) = row_at(row);
        let name_end = (offset as usize).checked_add(len as usize)?;
        if end <= start || name_end > names.len() || !names.is_char_boundary(offset as usize) || !names.is_char_boundary(name_end) {
            return None;
        }
        if (start, std::cmp::Reverse(end)) < (previous.0, std::cmp::Reverse(previous.1)) {
            return None;
        }
        previous = (start, end);
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_ranges_resolve_to_the_innermost() {
        let mut t = SymbolTable::new();
        t.push(0x1000, 0x11000, "block");
        t.push(0x1018, 0x1418, "inner");
        t.push(0x20000, 0x20010, "after");
        t.finish();
        assert_eq!(t.lookup(0x1020), Some("inner"));
        assert_eq!(t.lookup(0x2000), Some("block"));
        assert_eq!(t.lookup(0x20010), None);
        assert_eq!(t.lookup(0xfff), None);
    }

    /// A one-byte symbol stays one byte; only an unsized one reaches the next symbol. (libc 2.36:
    /// `__libc_init_first` is 1 byte at 0x271c0, the static `__libc_start_call_main` follows at
    /// 0x271d0 and is absent from .dynsym.)
    #[test]
    fn one_byte_symbols_keep_their_size_and_unsized_ones_reach_the_next() {
        let mut t = SymbolTable::new();
        t.push(0x271c0, 0x271c1, "__libc_init_first");
        t.push_unsized(0x30000, "asm_entry");
        t.push(0x30040, 0x30080, "next");
        t.push_unsized(0x40000, "last");
        t.finish();
        assert_eq!(t.lookup(0x271c0), Some("__libc_init_first"));
        assert_eq!(t.lookup(0x271c1), None);
        assert_eq!(t.lookup(0x2724a), None, "a call site in the function after the 1-byte symbol");
        assert_eq!(t.lookup(0x3003f), Some("asm_entry"));
        assert_eq!(t.lookup(0x30040), Some("next"));
        assert_eq!(t.lookup(0x40000), Some("last"));
        assert_eq!(t.lookup(0x40001), None);
        // A symbol pushed with no size through `push` is one byte, not open.
        let mut t = SymbolTable::new();
        t.push(0x1000, 0x1000, "zero");
        t.push(0x2000, 0x2010, "after");
        t.finish();
        assert_eq!((t.lookup(0x1000), t.lookup(0x1001)), (Some("zero"), None));
    }

    #[test]
    fn serialized_tables_read_back_and_damage_is_refused() {
        let mut t = SymbolTable::new();
        t.push(0x1000, 0x11000, "block");
        t.push(0x1018, 0x1418, "inner ✓");
        t.push(0x20000, 0x20010, "after");
        t.finish();
        let bytes = t.to_bytes();
        let back = SymbolTable::from_bytes(&bytes).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back.lookup(0x1020), Some("inner ✓"));
        assert_eq!(back.lookup(0x2000), Some("block"));
        assert_eq!(back.lookup(0x20010), None);
        for cut in [0, 7, 8, 30, bytes.len() - 1] {
            assert!(SymbolTable::from_bytes(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(SymbolTable::from_bytes(&bad).is_none());
        // A name that ends inside a multi-byte character.
        let mut bad = bytes.clone();
        let second_len = 24 + 24 + 20;
        bad[second_len] -= 1;
        assert!(SymbolTable::from_bytes(&bad).is_none());
    }

    /// A cache file is searched where it lies, with the answers of the table it was written from;
    /// a damaged one is refused as its bytes are.
    #[test]
    fn mapped_tables_answer_as_the_table_written() {
        let mut t = SymbolTable::new();
        t.push(0x1000, 0x11000, "block");
        t.push(0x1018, 0x1418, "inner ✓");
        t.push_unsized(0x20000, "after");
        t.push_unsized(0x20100, "last");
        t.finish();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("table.bin");
        std::fs::write(&file, t.to_bytes()).unwrap();
        let mapped = SymbolTable::from_file(&file).unwrap();
        assert_eq!(mapped.len(), t.len());
        for addr in [0xfff, 0x1000, 0x1018, 0x1020, 0x1418, 0x2000, 0x1ffff, 0x20000, 0x200ff, 0x20100, 0x20101] {
            assert_eq!(mapped.lookup_range(addr), t.lookup_range(addr), "{addr:#x}");
        }
        assert_eq!(mapped.names().collect::<Vec<_>>(), t.names().collect::<Vec<_>>());
        assert_eq!(mapped.to_bytes(), t.to_bytes());
        let mut bad = t.to_bytes();
        bad.pop();
        std::fs::write(&file, bad).unwrap();
        assert!(SymbolTable::from_file(&file).is_none());
        assert!(SymbolTable::from_file(&dir.path().join("absent.bin")).is_none());
    }
}
