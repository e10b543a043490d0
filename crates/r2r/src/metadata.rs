//! A small ECMA-335 metadata reader: the `#~` table stream and the heaps, enough to name methods.
//! Every table's row size depends on heap index sizes and on the row counts of the tables its
//! columns index (ECMA-335 II.24.2.6), so all 45 table layouts are described even though few are read.

use crate::error::{Bytes, Result, bad};

pub const MODULE: usize = 0x00;
pub const TYPE_REF: usize = 0x01;
pub const TYPE_DEF: usize = 0x02;
pub const METHOD_DEF: usize = 0x06;
pub const TYPE_SPEC: usize = 0x1b;
pub const ASSEMBLY: usize = 0x20;
pub const ASSEMBLY_REF: usize = 0x23;
pub const NESTED_CLASS: usize = 0x29;

#[derive(Clone, Copy)]
enum Col {
    U16,
    U32,
    Str,
    Guid,
    Blob,
    /// An index into one table.
    Table(usize),
    /// A coded index over these tables (None = unused tag).
    Coded(&'static [Option<usize>]),
}

use Col::*;

const TYPE_DEF_OR_REF: &[Option<usize>] = &[Some(TYPE_DEF), Some(TYPE_REF), Some(TYPE_SPEC)];
const HAS_CONSTANT: &[Option<usize>] = &[Some(0x04), Some(0x08), Some(0x17)];
const HAS_CUSTOM_ATTRIBUTE: &[Option<usize>] = &[
    Some(0x06), Some(0x04), Some(0x01), Some(0x02), Some(0x08), Some(0x09), Some(0x0a), Some(0x00), Some(0x0e),
    Some(0x17), Some(0x14), Some(0x11), Some(0x1a), Some(0x1b), Some(0x20), Some(0x23), Some(0x26), Some(0x27),
    Some(0x28), Some(0x2a), Some(0x2c), Some(0x2b),
];
const HAS_FIELD_MARSHAL: &[Option<usize>] = &[Some(0x04), Some(0x08)];
const HAS_DECL_SECURITY: &[Option<usize>] = &[Some(0x02), Some(0x06), Some(0x20)];
const MEMBER_REF_PARENT: &[Option<usize>] = &[Some(0x02), Some(0x01), Some(0x1a), Some(0x06), Some(0x1b)];
const HAS_SEMANTICS: &[Option<usize>] = &[Some(0x14), Some(0x17)];
const METHOD_DEF_OR_REF: &[Option<usize>] = &[Some(0x06), Some(0x0a)];
const MEMBER_FORWARDED: &[Option<usize>] = &[Some(0x04), Some(0x06)];
const IMPLEMENTATION: &[Option<usize>] = &[Some(0x26), Some(0x23), Some(0x27)];
const CUSTOM_ATTRIBUTE_TYPE: &[Option<usize>] = &[None, None, Some(0x06), Some(0x0a), None];
const RESOLUTION_SCOPE: &[Option<usize>] = &[Some(0x00), Some(0x1a), Some(0x23), Some(0x01)];
const TYPE_OR_METHOD_DEF: &[Option<usize>] = &[Some(0x02), Some(0x06)];

fn schema(table: usize) -> &'static [Col] {
    match table {
        0x00 => &[U16, Str, Guid, Guid, Guid],
        0x01 => &[Coded(RESOLUTION_SCOPE), Str, Str],
        0x02 => &[U32, Str, Str, Coded(TYPE_DEF_OR_REF), Table(0x04), Table(0x06)],
        0x03 => &[Table(0x04)],
        0x04 => &[U16, Str, Blob],
        0x05 => &[Table(0x06)],
        0x06 => &[U32, U16, U16, Str, Blob, Table(0x08)],
        0x07 => &[Table(0x08)],
        0x08 => &[U16, U16, Str],
        0x09 => &[Table(0x02), Coded(TYPE_DEF_OR_REF)],
        0x0a => &[Coded(MEMBER_REF_PARENT), Str, Blob],
        0x0b => &[U16, Coded(HAS_CONSTANT), Blob],
        0x0c => &[Coded(HAS_CUSTOM_ATTRIBUTE), Coded(CUSTOM_ATTRIBUTE_TYPE), Blob],
        0x0d => &[Coded(HAS_FIELD_MARSHAL), Blob],
        0x0e => &[U16, Coded(HAS_DECL_SECURITY), Blob],
        0x0f => &[U16, U32, Table(0x02)],
        0x10 => &[U32, Table(0x04)],
        0x11 => &[Blob],
        0x12 => &[Table(0x02), Table(0x14)],
        0x13 => &[Table(0x14)],
        0x14 => &[U16, Str, Coded(TYPE_DEF_OR_REF)],
        0x15 => &[Table(0x02), Table(0x17)],
        0x16 => &[Table(0x17)],
        0x17 => &[U16, Str, Blob],
        0x18 => &[U16, Table(0x06), Coded(HAS_SEMANTICS)],
        0x19 => &[Table(0x02), Coded(METHOD_DEF_OR_REF), Coded(METHOD_DEF_OR_REF)],
        0x1a => &[Str],
        0x1b => &[Blob],
        0x1c => &[U16, Coded(MEMBER_FORWARDED), Str, Table(0x1a)],
        0x1d => &[U32, Table(0x04)],
        0x1e => &[U32, U32],
        0x1f => &[U32],
        0x20 => &[U32, U16, U16, U16, U16, U32, Blob, Str, Str],
        0x21 => &[U32],
        0x22 => &[U32, U32, U32],
        0x23 => &[U16, U16, U16, U16, U32, Blob, Str, Str, Blob],
        0x24 => &[U32, Table(0x23)],
        0x25 => &[U32, U32, U32, Table(0x23)],
        0x26 => &[U32, Str, Blob],
        0x27 => &[U32, U32, Str, Str, Coded(IMPLEMENTATION)],
        0x28 => &[U32, U32, Str, Coded(IMPLEMENTATION)],
        0x29 => &[Table(0x02), Table(0x02)],
        0x2a => &[U16, U16, Coded(TYPE_OR_METHOD_DEF), Str],
        0x2b => &[Coded(METHOD_DEF_OR_REF), Blob],
        0x2c => &[Table(0x2a), Coded(TYPE_DEF_OR_REF)],
        _ => &[],
    }
}

const TABLE_COUNT: usize = 0x2d;

#[derive(Clone, Default, Debug)]
struct TableLayout {
    rows: u32,
    offset: usize,
    row_size: usize,
    /// (offset in row, width) per column.
    cols: Vec<(usize, usize)>,
}

/// The metadata of one assembly. Offsets are file offsets.
pub(crate) struct Metadata {
    tables: Vec<TableLayout>,
    strings: (usize, usize),
    blob: (usize, usize),
    guid: (usize, usize),
}

/// A decoded coded index: (table, 1-based row); row 0 means null.
pub type Token = (usize, u32);

impl Metadata {
    /// Reads the metadata root at `root` (file offset) of `len` bytes.
    pub fn parse(b: Bytes, root: usize, len: usize) -> Result<Metadata> {
        b.slice(root, len, "metadata")?;
        if b.u32(root, "metadata signature")? != 0x424a_5342 {
            return bad(root as u64, "metadata root has no BSJB signature");
        }
        let version_len = b.u32(root + 12, "metadata version length")? as usize;
        if version_len > 256 {
            return bad(root as u64 + 12, format!("metadata version string of {version_len} bytes"));
        }
        let mut at = root + 16 + version_len;
        let streams = b.u16(at + 2, "metadata stream count")?;
        at += 4;
        let (mut tables_at, mut strings, mut blob, mut guid) = (None, None, None, None);
        for _ in 0..streams {
            let off = b.u32(at, "stream offset")? as usize;
            let size = b.u32(at + 4, "stream size")? as usize;
            let name_at = at + 8;
            let name_bytes = b.slice(name_at, 32.min(b.len().saturating_sub(name_at)), "stream name")?;
            let nul = name_bytes
                .iter()
                .position(|&c| c == 0)
                .ok_or_else(|| crate::error::Error { offset: name_at as u64, what: "unterminated stream name".into() })?;
            let name = &name_bytes[..nul];
            if off > len || size > len - off {
                return bad(at as u64, format!("metadata stream {} lies outside the metadata", String::from_utf8_lossy(name)));
            }
            let range = (root + off, size);
            match name {
                b"#~" | b"#-" => tables_at = Some(range),
                b"#Strings" => strings = Some(range),
                b"#Blob" => blob = Some(range),
                b"#GUID" => guid = Some(range),
                _ => {}
            }
            at = name_at + (nul + 4) / 4 * 4;
        }
        let Some((t, t_len)) = tables_at else { return bad(root as u64, "metadata has no #~ table stream") };
        let strings = strings.unwrap_or((0, 0));
        let blob = blob.unwrap_or((0, 0));
        let guid = guid.unwrap_or((0, 0));
        let heap_sizes = b.u8(t + 6, "metadata heap sizes")?;
        let valid = u64::from(b.u32(t + 8, "valid tables")?) | (u64::from(b.u32(t + 12, "valid tables")?) << 32);
        let mut rows = [0u32; 64];
        let mut at = t + 24;
        for (i, r) in rows.iter_mut().enumerate() {
            if valid & (1 << i) != 0 {
                *r = b.u32(at, "table row count")?;
                at += 4;
                if i >= TABLE_COUNT {
                    return bad(at as u64 - 4, format!("metadata table {i:#x} is not an ECMA-335 assembly table"));
                }
            }
        }
        if heap_sizes & 0x40 != 0 {
            at += 4; // extra data present in EnC deltas
        }
        let str_w = if heap_sizes & 1 != 0 { 4 } else { 2 };
        let guid_w = if heap_sizes & 2 != 0 { 4 } else { 2 };
        let blob_w = if heap_sizes & 4 != 0 { 4 } else { 2 };
        let width = |c: Col| -> usize {
            match c {
                U16 => 2,
                U32 => 4,
                Str => str_w,
                Guid => guid_w,
                Blob => blob_w,
                Table(t) => if rows[t] < 1 << 16 { 2 } else { 4 },
                Coded(tables) => {
                    let tag_bits = usize::BITS - (tables.len() - 1).leading_zeros();
                    let max = tables.iter().flatten().map(|&t| rows[t]).max().unwrap_or(0);
                    if (max as u64) < 1u64 << (16 - tag_bits) { 2 } else { 4 }
                }
            }
        };
        let mut tables = vec![TableLayout::default(); TABLE_COUNT];
        for (i, layout) in tables.iter_mut().enumerate() {
            let mut cols = Vec::new();
            let mut size = 0;
            for &c in schema(i) {
                let w = width(c);
                cols.push((size, w));
                size += w;
            }
            let bytes = rows[i] as u64 * size as u64;
            if at as u64 + bytes > (t + t_len) as u64 {
                return bad(at as u64, format!("metadata table {i:#x} ({} rows of {size} bytes) runs past the #~ stream", rows[i]));
            }
            *layout = TableLayout { rows: rows[i], offset: at, row_size: size, cols };
            at += bytes as usize;
        }
        Ok(Metadata { tables, strings, blob, guid })
    }

    pub fn rows(&self, table: usize) -> u32 {
        self.tables.get(table).map_or(0, |t| t.rows)
    }

    /// Column `col` of 1-based `row`.
    pub fn cell(&self, b: Bytes, table: usize, row: u32, col: usize) -> Result<u32> {
        let t = &self.tables[table];
        if row == 0 || row > t.rows {
            return bad(t.offset as u64, format!("row {row} of metadata table {table:#x}, which has {} rows", t.rows));
        }
        let (c_off, w) = t.cols[col];
        let at = t.offset + (row as usize - 1) * t.row_size + c_off;
        if w == 2 { Ok(b.u16(at, "metadata cell")? as u32) } else { b.u32(at, "metadata cell") }
    }

    /// A coded index cell, decoded.
    pub fn coded(&self, b: Bytes, table: usize, row: u32, col: usize) -> Result<Token> {
        let raw = self.cell(b, table, row, col)?;
        let Coded(tables) = schema(table)[col] else { return Ok((0, raw)) };
        let tag_bits = usize::BITS - (tables.len() - 1).leading_zeros();
        let tag = (raw & ((1 << tag_bits) - 1)) as usize;
        match tables.get(tag).copied().flatten() {
            Some(t) => Ok((t, raw >> tag_bits)),
            None => bad(self.tables[table].offset as u64, format!("coded index tag {tag} is undefined")),
        }
    }

    pub fn string<'a>(&self, b: Bytes<'a>, index: u32) -> Result<&'a str> {
        let (start, len) = self.strings;
        if index as usize >= len.max(1) {
            return bad(start as u64, format!("#Strings index {index:#x} is past the heap ({len} bytes)"));
        }
        let heap = b.slice(start, len, "#Strings heap")?;
        let s = &heap[index as usize..];
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        std::str::from_utf8(&s[..end])
            .or_else(|_| bad(start as u64 + index as u64, "#Strings entry is not UTF-8"))
    }

    pub fn string_cell<'a>(&self, b: Bytes<'a>, table: usize, row: u32, col: usize) -> Result<&'a str> {
        let i = self.cell(b, table, row, col)?;
        self.string(b, i)
    }

    /// A #GUID entry (1-based index, ECMA-335 II.24.2.5), as its 16 bytes.
    pub fn guid(&self, b: Bytes, index: u32) -> Result<[u8; 16]> {
        let (start, len) = self.guid;
        if index == 0 || index as usize * 16 > len {
            return bad(start as u64, format!("#GUID index {index} is past the heap ({len} bytes)"));
        }
        let at = start + (index as usize - 1) * 16;
        Ok(b.slice(at, 16, "#GUID entry")?.try_into().expect("16 bytes"))
    }

    /// A #Blob entry (its compressed length prefix removed), with its file offset.
    pub fn blob<'a>(&self, b: Bytes<'a>, index: u32) -> Result<(&'a [u8], usize)> {
        let (start, len) = self.blob;
        let heap = b.slice(start, len, "#Blob heap")?;
        let at = index as usize;
        if at >= heap.len() {
            return bad(start as u64, format!("#Blob index {index:#x} is past the heap ({len} bytes)"));
        }
        let (n, used) = crate::sig::uncompress(&heap[at..])
            .ok_or_else(|| crate::error::Error { offset: (start + at) as u64, what: "bad #Blob length".into() })?;
        let data_at = at + used;
        if n as usize > heap.len() - data_at {
            return bad((start + at) as u64, "#Blob entry runs past the heap");
        }
        Ok((&heap[data_at..data_at + n as usize], start + data_at))
    }

    /// The TypeDef owning MethodDef `rid`: the last type whose MethodList starts at or before it.
    pub fn method_owner(&self, b: Bytes, rid: u32) -> Result<u32> {
        let (mut lo, mut hi) = (1u32, self.rows(TYPE_DEF));
        let mut found = 0;
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            if self.cell(b, TYPE_DEF, mid, 5)? <= rid {
                found = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        // Types with empty method lists share their successor's start; the last such one owns.
        if found == 0 {
            return bad(self.tables[TYPE_DEF].offset as u64, format!("MethodDef {rid} belongs to no TypeDef"));
        }
        Ok(found)
    }

    /// The enclosing TypeDef of a nested TypeDef (NestedClass is sorted by its first column).
    pub fn enclosing(&self, b: Bytes, type_def: u32) -> Result<Option<u32>> {
        let (mut lo, mut hi) = (1u32, self.rows(NESTED_CLASS));
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            let nested = self.cell(b, NESTED_CLASS, mid, 0)?;
            if nested == type_def {
                return Ok(Some(self.cell(b, NESTED_CLASS, mid, 1)?));
            }
            if nested < type_def { lo = mid + 1 } else { hi = mid - 1 }
        }
        Ok(None)
    }
}
