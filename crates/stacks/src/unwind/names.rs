//! Address → name tables that are plain text: the runtime's perf map (JIT code and stubs) and
//! the kernel's kallsyms.

use std::path::Path;

use anyhow::{Context, Result};

#[derive(Clone, Debug)]
struct Range {
    start: u64,
    end: u64,
    name: String,
}

/// Sorted, possibly overlapping address ranges with names (perf maps list stub blocks that
/// contain smaller stubs; the smallest range containing an address names it).
#[derive(Clone, Debug, Default)]
pub struct RangeNames {
    ranges: Vec<Range>,
    /// Longest range: bounds how far back a lookup scans for an enclosing entry.
    max_len: u64,
}

impl RangeNames {
    fn from_ranges(mut ranges: Vec<Range>) -> RangeNames {
        ranges.sort_by_key(|r| (r.start, r.end));
        let max_len = ranges.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        RangeNames { ranges, max_len }
    }

    /// Parses `/tmp/perf-PID.map` text: `START SIZE NAME` per line, hex numbers with or
    /// without `0x`. Lines that do not parse are skipped (the runtime may still be writing).
    pub fn parse_perf_map(text: &str) -> RangeNames {
        let ranges = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let start = parse_hex(parts.next()?)?;
                let size = parse_hex(parts.next()?)?;
                let name = parts.next()?.trim();
                let end = start.checked_add(size.max(1))?;
                (!name.is_empty()).then(|| Range { start, end, name: name.to_string() })
            })
            .collect();
        RangeNames::from_ranges(ranges)
    }

    pub fn read_perf_map(path: &Path) -> Result<RangeNames> {
        let text = std::fs::read(path).with_context(|| format!("could not read perf map {}", path.display()))?;
        Ok(Self::parse_perf_map(&String::from_utf8_lossy(&text)))
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let mut i = self.ranges.partition_point(|r| r.start <= addr);
        let mut best: Option<&Range> = None;
        while i > 0 {
            i -= 1;
            let r = &self.ranges[i];
            if addr.saturating_sub(r.start) > self.max_len {
                break;
            }
            if addr < r.end && best.is_none_or(|b| r.end - r.start < b.end - b.start) {
                best = Some(r);
            }
        }
        best.map(|r| r.name.as_str())
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// Kernel text symbols (`/proc/kallsyms` format: `ADDR TYPE NAME [MODULE]`).
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<(u64, String)>,
}

impl Kallsyms {
    pub fn parse(text: &str) -> Kallsyms {
        let mut symbols: Vec<(u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
                let kind = parts.next()?;
                let name = parts.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
            })
            .collect();
        symbols.sort();
        Kallsyms { symbols }
    }

    /// Reads a kallsyms file, plain or xz-compressed (`.xz`, as the fixtures keep it).
    pub fn read(path: &Path) -> Result<Kallsyms> {
        let raw = std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        let text = if raw.starts_with(b"\xfd7zXZ") {
            let mut out = Vec::new();
            lzma_rs::xz_decompress(&mut &raw[..], &mut out)
                .map_err(|e| anyhow::anyhow!("{} is not a valid xz stream: {e:?}", path.display()))?;
            out
        } else {
            raw
        };
        Ok(Self::parse(&String::from_utf8_lossy(&text)))
    }

    /// The running kernel's symbols, when readable with addresses (root, or kptr_restrict 0).
    pub fn live() -> Option<Kallsyms> {
        let k = Self::read(Path::new("/proc/kallsyms")).ok()?;
        (!k.symbols.is_empty()).then_some(k)
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        self.symbols.get(i.checked_sub(1)?).map(|(_, n)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smallest_enclosing_range_names_an_address() {
        let map = RangeNames::parse_perf_map(
            "0x1000 1000 stub ReportStubBlock<X>\n0x1010 10 stub Precode\n2000 20 void A::B()[QuickJitted]\nbad line\n",
        );
        assert_eq!(map.ranges.len(), 3);
        assert_eq!(map.lookup(0x1015), Some("stub Precode"));
        assert_eq!(map.lookup(0x1500), Some("stub ReportStubBlock<X>"));
        assert_eq!(map.lookup(0x2010), Some("void A::B()[QuickJitted]"));
        assert_eq!(map.lookup(0x2020), None);
        assert_eq!(map.lookup(0x10), None);
    }

    #[test]
    fn kallsyms_text_symbols_only() {
        let k = Kallsyms::parse("ffffffff81000000 T _stext\nffffffff81000100 D data\nffffffff81000200 t foo [mod]\n");
        assert_eq!(k.lookup(0xffffffff81000150), Some("_stext"));
        assert_eq!(k.lookup(0xffffffff81000250), Some("foo"));
        assert_eq!(k.lookup(0x10), None);
    }
}
