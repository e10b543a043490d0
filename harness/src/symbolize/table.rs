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
}

/// How far back a lookup walks to find an enclosing range when the closest start does not
/// contain the address (nested stub blocks are shallow).
const MAX_BACKTRACK: usize = 64;

impl SymbolTable {
    pub fn new() -> Self {
        SymbolTable::default()
    }

    pub fn push(&mut self, start: u64, end: u64, name: &str) {
        let offset = self.names.len() as u32;
        self.names.push_str(name);
        self.entries.push((start, end.max(start.saturating_add(1)), offset, name.len() as u32));
        self.sorted = false;
    }

    fn name(&self, e: &(u64, u64, u32, u32)) -> &str {
        &self.names[e.2 as usize..(e.2 + e.3) as usize]
    }

    /// Sorts; ranges with no size (end == start + 1 from `push`) may be widened to the next
    /// start by `fill_open_ends`.
    pub fn finish(&mut self) {
        self.entries.sort_by_key(|e| (e.0, std::cmp::Reverse(e.1)));
        self.sorted = true;
    }

    /// Gives every entry flagged `open` (size unknown) the range up to the next distinct start.
    pub fn finish_with_open_ends(&mut self, open: impl Fn(u64, u64) -> bool) {
        self.finish();
        let n = self.entries.len();
        for i in 0..n {
            let (start, end, _, _) = self.entries[i];
            if open(start, end) {
                let next = self.entries[i + 1..].iter().map(|e| e.0).find(|&s| s > start);
                if let Some(next) = next {
                    self.entries[i].1 = next;
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        debug_assert!(self.sorted || self.entries.is_empty());
        let upto = self.entries.partition_point(|e| e.0 <= addr);
        let lo = upto.saturating_sub(MAX_BACKTRACK);
        self.entries[lo..upto]
            .iter()
            .rev()
            .find(|e| addr < e.1)
            .map(|e| self.name(e))
    }

    /// Start address of the range containing `addr`.
    pub fn lookup_range(&self, addr: u64) -> Option<(u64, u64, &str)> {
        let upto = self.entries.partition_point(|e| e.0 <= addr);
        let lo = upto.saturating_sub(MAX_BACKTRACK);
        self.entries[lo..upto]
            .iter()
            .rev()
            .find(|e| addr < e.1)
            .map(|e| (e.0, e.1, self.name(e)))
    }
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
}
