//! Function ranges from an ELF file's `.eh_frame`: every FDE (frame description entry) covers one
//! function's code, whether or not the file names it. A stripped library such as libcoreclr.so
//! exports a few hundred symbols in `.dynsym` yet describes ~17,000 functions for unwinding.
//!
//! A fallback source, used only where no symbol covers an address ([`super::Symbolizer`] asks it
//! after the ELF and debug-file symbols): it gives a function's start, never a name, and the
//! frame is named `fn@0x…` ([`model::anonymous_function`]), which resolution figures count
//! as unnamed. Symbol sources proper (`.symtab`/`.dynsym`, debug files) are `elf`, `debug_file`.

use std::path::Path;

use anyhow::{Context, Result};
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection};

/// Function ranges `[start, end)` in the file's own addresses, sorted by start.
#[derive(Debug, Default)]
pub struct FunctionRanges {
    ranges: Vec<(u64, u64)>,
    pub build_id: Option<Vec<u8>>,
}

impl FunctionRanges {
    pub fn read(path: &Path) -> Result<FunctionRanges> {
        let data = super::map_file(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&data).with_context(|| format!("{}: cannot read .eh_frame", path.display()))
    }

    /// Reads every FDE of `.eh_frame`. An entry that does not parse ends the walk: the ranges
    /// read so far are kept (a damaged table must not cost the functions before the damage).
    pub fn parse(data: &[u8]) -> Result<FunctionRanges> {
        let file = object::File::parse(data)?;
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let Some(section) = file.section_by_name(".eh_frame") else {
            return Ok(FunctionRanges { ranges: Vec::new(), build_id });
        };
        let bytes = section.data()?;
        let eh = EhFrame::new(bytes, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = file.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = file.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let mut ranges = Vec::new();
        let mut entries = eh.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else { continue };
            let Ok(fde) = partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset)) else { continue };
            if fde.len() > 0 && fde.initial_address() > 0 {
                ranges.push((fde.initial_address(), fde.initial_address() + fde.len()));
            }
        }
        ranges.sort_unstable();
        ranges.dedup();
        Ok(FunctionRanges { ranges, build_id })
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The start of the function whose code holds `svma` (the file's own address).
    pub fn function_at(&self, svma: u64) -> Option<u64> {
        let i = self.ranges.partition_point(|(start, _)| *start <= svma);
        // Ranges do not nest in practice; a few steps back cover a hot/cold split's neighbour.
        self.ranges[..i].iter().rev().take(4).find(|(start, end)| svma >= *start && svma < *end).map(|(start, _)| *start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded libc (fixtures/perf/dsos, stripped): `__libc_start_call_main` at 0x2724a has
    /// no symbol in .dynsym (see elf.rs), yet its FDE covers it.
    #[test]
    fn stripped_libc_functions_have_ranges() {
        let libc = FunctionRanges::read(&tracelab_fixtures::fixture("perf/dsos/libc.so.6")).unwrap();
        assert!(libc.len() > 1000, "{} FDEs", libc.len());
        let start = libc.function_at(0x2724a).expect("an FDE covers __libc_start_call_main");
        assert!(start <= 0x2724a && start > 0x271c0, "{start:#x}");
        assert_eq!(libc.function_at(0x2724b), Some(start));
        assert_eq!(libc.function_at(0), None);
    }

    #[test]
    fn not_elf_is_an_error_and_no_eh_frame_is_empty() {
        assert!(FunctionRanges::parse(b"not an elf file").is_err());
    }
}
