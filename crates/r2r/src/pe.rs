//! The PE layer: headers and section table (through `object`), RVA ↔ file offset, the CLI header.

use object::LittleEndian as LE;
use object::pe;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};

use crate::error::{Bytes, Result, bad};

/// One section as mapped: file range `[raw, raw + len)` holds RVAs `[rva, rva + len)`.
#[derive(Clone, Copy, Debug)]
pub struct Section {
    pub rva: u32,
    pub raw: u32,
    pub len: u32,
}

/// What naming needs from the PE headers.
#[derive(Debug)]
pub struct PeInfo {
    /// The COFF machine with the operating-system XOR of ReadyToRun images undone.
    pub machine: u16,
    pub sections: Vec<Section>,
    /// The CLI header (IMAGE_COR20_HEADER), as a file offset.
    pub cli_header: usize,
}

/// ReadyToRun images XOR the machine with a per-OS constant so Windows refuses to load Linux code.
pub const MACHINE_AMD64: u16 = pe::IMAGE_FILE_MACHINE_AMD64.0;
pub const MACHINE_I386: u16 = pe::IMAGE_FILE_MACHINE_I386.0;
const MACHINE_ARM64: u16 = pe::IMAGE_FILE_MACHINE_ARM64.0;
const MACHINE_ARMNT: u16 = pe::IMAGE_FILE_MACHINE_ARMNT.0;

const OS_MACHINE_XORS: [u16; 6] = [0, 0x4644, 0xadc4, 0x7b79, 0x1993, 0x1992];

pub fn parse(data: &[u8]) -> Result<PeInfo> {
    let dos = pe::ImageDosHeader::parse(data).or_else(|e| bad(0, format!("not a PE file: {e}")))?;
    let nt_offset = u64::from(dos.nt_headers_offset());
    let magic_at = nt_offset as usize + 4 + 20;
    let magic = Bytes(data).u16(magic_at, "PE optional header magic")?;
    match magic {
        pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC => parse_nt::<pe::ImageNtHeaders64>(data, nt_offset),
        pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC => parse_nt::<pe::ImageNtHeaders32>(data, nt_offset),
        other => bad(magic_at as u64, format!("unknown PE optional header magic {other:#x}")),
    }
}

fn parse_nt<Nt: ImageNtHeaders>(data: &[u8], nt_offset: u64) -> Result<PeInfo> {
    let mut offset = nt_offset;
    let (nt, dirs) = Nt::parse(data, &mut offset).or_else(|e| bad(nt_offset, format!("bad PE headers: {e}")))?;
    let raw_machine = nt.file_header().machine.get(LE).0;
    let machine = OS_MACHINE_XORS
        .iter()
        .map(|x| raw_machine ^ x)
        .find(|m| [MACHINE_AMD64, MACHINE_ARM64, MACHINE_I386, MACHINE_ARMNT].contains(m))
        .unwrap_or(raw_machine);
    let table = nt.sections(data, offset).or_else(|e| bad(offset, format!("bad PE section table: {e}")))?;
    let sections = table
        .iter()
        .map(|s| {
            let (raw, len) = s.pe_file_range();
            Section { rva: s.virtual_address.get(LE), raw, len }
        })
        .collect::<Vec<_>>();
    let _ = nt.optional_header().magic();
    let cli = dirs.get(pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR).map(|d| (d.virtual_address.get(LE), d.size.get(LE)));
    let (cli_rva, cli_size) = match cli {
        Some((rva, size)) if rva != 0 && size != 0 => (rva, size),
        _ => return bad(nt_offset, "no CLI header: not a .NET assembly"),
    };
    let info = PeInfo { machine, sections, cli_header: 0 };
    let cli_header = info.rva_to_offset(cli_rva, cli_size.max(72), "CLI header", data.len())?;
    Ok(PeInfo { cli_header, ..info })
}

impl PeInfo {
    /// The file offset of `rva`, checking that `len` bytes from there lie in one section and the file.
    pub fn rva_to_offset(&self, rva: u32, len: u32, what: &str, file_len: usize) -> Result<usize> {
        for s in &self.sections {
            if let Some(delta) = rva.checked_sub(s.rva)
                && delta < s.len
            {
                let off = s.raw as u64 + delta as u64;
                if delta as u64 + len as u64 > s.len as u64 || off + len as u64 > file_len as u64 {
                    return bad(off, format!("{what} (RVA {rva:#x}, {len} bytes) runs past the end of its section"));
                }
                return Ok(off as usize);
            }
        }
        bad(0, format!("{what}: RVA {rva:#x} lies in no section"))
    }

    /// The RVA at which the byte at file offset `off` is mapped, if a section holds it.
    pub fn offset_to_rva(&self, off: u64) -> Option<u32> {
        self.sections.iter().find_map(|s| {
            let delta = off.checked_sub(s.raw as u64)?;
            (delta < s.len as u64).then(|| s.rva.wrapping_add(delta as u32))
        })
    }
}
