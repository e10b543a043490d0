//! Payload decoding: runtime events by their manifest template (provider, id, version),
//! EventSource events by the field layout in their metadata.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::metadata::{EventMetadata, FieldKind, utf16_text};
use crate::manifest::Template;

/// Field types of the runtime manifest (`win:*` in-types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    U8,
    U16,
    U32,
    U64,
    I32,
    I64,
    /// Pointer-sized (the trace header's pointer size).
    Ptr,
    /// `win:Boolean`: 4 bytes.
    Bool,
    F32,
    F64,
    Guid,
    Utf16,
    Ansi,
}

/// A decoded field value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
    Str(String),
    Guid([u8; 16]),
    Bytes(Vec<u8>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) if *v >= 0 => Some(*v as u64),
            Value::Bool(b) => Some(u64::from(*b)),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Formats a GUID the usual way (`3c530d44-97ae-513a-1e6d-783e8f8e03a9`).
pub fn guid_string(g: &[u8; 16]) -> String {
    format!(
        "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        u32::from_le_bytes(g[0..4].try_into().unwrap()),
        u16::from_le_bytes([g[4], g[5]]),
        u16::from_le_bytes([g[6], g[7]]),
        g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]
    )
}

pub type Fields = Vec<(Cow<'static, str>, Value)>;

static THREAD_SAMPLE: Template = Template { fields: &[("Type", FieldType::U32)], complete: true };
static PROCESS_INFO: Template = Template {
    fields: &[("CommandLine", FieldType::Utf16), ("OSInformation", FieldType::Utf16), ("ArchInformation", FieldType::Utf16)],
    complete: true,
};

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    offset: u64,
    pointer_size: u32,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        match self.buf.get(self.pos..self.pos + n) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(Error::format(
                self.offset + self.pos as u64,
                format_args!("payload field `{field}` needs {n} bytes, {} left", self.buf.len() - self.pos),
            )),
        }
    }
    fn fixed<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        Ok(self.take(N, field)?.try_into().unwrap())
    }
    fn read(&mut self, ty: FieldType, field: &str) -> Result<Value> {
        Ok(match ty {
            FieldType::U8 => Value::U64(self.fixed::<1>(field)?[0].into()),
            FieldType::U16 => Value::U64(u16::from_le_bytes(self.fixed(field)?).into()),
            FieldType::U32 => Value::U64(u32::from_le_bytes(self.fixed(field)?).into()),
            FieldType::U64 => Value::U64(u64::from_le_bytes(self.fixed(field)?)),
            FieldType::I32 => Value::I64(i32::from_le_bytes(self.fixed(field)?).into()),
            FieldType::I64 => Value::I64(i64::from_le_bytes(self.fixed(field)?)),
            FieldType::Ptr if self.pointer_size == 4 => Value::U64(u32::from_le_bytes(self.fixed(field)?).into()),
            FieldType::Ptr => Value::U64(u64::from_le_bytes(self.fixed(field)?)),
            FieldType::Bool => Value::Bool(u32::from_le_bytes(self.fixed(field)?) != 0),
            FieldType::F32 => Value::F64(f32::from_le_bytes(self.fixed(field)?).into()),
            FieldType::F64 => Value::F64(f64::from_le_bytes(self.fixed(field)?)),
            FieldType::Guid => Value::Guid(self.fixed(field)?),
            FieldType::Utf16 => Value::Str(utf16_text(self.string(true, field)?)),
            FieldType::Ansi => Value::Str(String::from_utf8_lossy(self.string(false, field)?).into_owned()),
        })
    }

    /// A NUL-terminated string's bytes (UTF-16 when `wide`), the reader moved past its NUL.
    fn string(&mut self, wide: bool, field: &str) -> Result<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let (len, nul) = if wide {
            (find_utf16_nul(rest), 2)
        } else {
            (rest.iter().position(|&b| b == 0), 1)
        };
        let len = len.ok_or_else(|| {
            Error::format(self.offset + self.pos as u64, format_args!("payload string `{field}` has no terminating NUL"))
        })?;
        self.pos += len + nul;
        Ok(&rest[..len])
    }
}

impl Reader<'_> {
    /// Steps over one field the way [`Reader::read`] reads it (same sizes, same errors), without
    /// building its value; true for a string.
    fn skip(&mut self, ty: FieldType, field: &str) -> Result<bool> {
        let size = match ty {
            FieldType::U8 => 1,
            FieldType::U16 => 2,
            FieldType::U32 | FieldType::I32 | FieldType::Bool | FieldType::F32 => 4,
            FieldType::U64 | FieldType::I64 | FieldType::F64 => 8,
            FieldType::Ptr if self.pointer_size == 4 => 4,
            FieldType::Ptr => 8,
            FieldType::Guid => 16,
            FieldType::Utf16 | FieldType::Ansi => {
                self.string(ty == FieldType::Utf16, field)?;
                return Ok(true);
            }
        };
        self.take(size, field)?;
        Ok(false)
    }
}

/// How many fields a payload holds, and how many of them are strings: what [`decode_payload`]
/// would give (`fields.len()` and its [`Value::Str`]s), with the same errors (a field of a nested
/// object named without its parent's prefix), found by walking the
/// layout without building values. A full decode that needs the values of a few events only
/// (`inspect --full`) checks every other payload against its layout this way: no allocation per
/// event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldCount {
    pub fields: u32,
    pub strings: u32,
}

/// The layout of an event's payload: its manifest template, or one of the two events the runtime
/// writes without a manifest (thread samples, process info).
fn template_of(meta: &EventMetadata) -> Option<&'static Template> {
    let builtin = match (meta.provider.as_str(), meta.event_id) {
        ("Microsoft-DotNETCore-SampleProfiler", 0) => Some(&THREAD_SAMPLE),
        ("Microsoft-DotNETCore-EventPipe", 1) => Some(&PROCESS_INFO),
        _ => None,
    };
    meta.template.or(builtin)
}

/// What is known of a payload's layout before reading one, worked out once per metadata id: its
/// fields as runs of fixed-size bytes and strings, for a layout without arrays or objects
/// nested too deep. A full decode then checks a payload with one step per run (one length
/// comparison for the many fixed-size runtime events) instead of one per field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PayloadLayout {
    /// The runs, and the count of a payload that holds exactly all of them; None: walk fields.
    runs: Option<(Box<[Run]>, FieldCount)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    Fixed(usize),
    /// A NUL-terminated string, UTF-16 when `wide`.
    String { wide: bool },
}

impl PayloadLayout {
    pub fn of(meta: &EventMetadata, pointer_size: u32) -> PayloadLayout {
        fn push(runs: &mut Vec<Run>, count: &mut FieldCount, ty: FieldType, pointer_size: u32) {
            count.fields += 1;
            let size = match ty {
                FieldType::U8 => 1,
                FieldType::U16 => 2,
                FieldType::U32 | FieldType::I32 | FieldType::Bool | FieldType::F32 => 4,
                FieldType::U64 | FieldType::I64 | FieldType::F64 => 8,
                FieldType::Ptr => pointer_size as usize,
                FieldType::Guid => 16,
                FieldType::Utf16 | FieldType::Ansi => {
                    count.strings += 1;
                    runs.push(Run::String { wide: ty == FieldType::Utf16 });
                    return;
                }
            };
            match runs.last_mut() {
                Some(Run::Fixed(n)) => *n += size,
                _ => runs.push(Run::Fixed(size)),
            }
        }
        fn of_fields(fields: &[crate::metadata::FieldDef], runs: &mut Vec<Run>, count: &mut FieldCount, pointer_size: u32, depth: u32) -> bool {
            fields.iter().all(|f| match (&f.kind, field_type(&f.kind)) {
                (_, Some(ty)) => {
                    push(runs, count, ty, pointer_size);
                    true
                }
                (FieldKind::Object(inner), None) if depth < 8 => of_fields(inner, runs, count, pointer_size, depth + 1),
                _ => false,
            })
        }
        let (mut runs, mut count) = (Vec::new(), FieldCount::default());
        let known = match template_of(meta) {
            Some(t) => {
                t.fields.iter().for_each(|&(_, ty)| push(&mut runs, &mut count, ty, pointer_size));
                true
            }
            None => of_fields(&meta.fields, &mut runs, &mut count, pointer_size, 0),
        };
        PayloadLayout { runs: known.then(|| (runs.into_boxed_slice(), count)) }
    }

    /// [`count_payload`], with this layout worked out beforehand: a payload that holds exactly
    /// every run holds every field (the walk would read them all and find nothing after them);
    /// any other payload (ended early, longer, damaged) is walked field by field.
    pub fn count(&self, meta: &EventMetadata, payload: &[u8], pointer_size: u32, offset: u64) -> Result<FieldCount> {
        if let Some((runs, count)) = &self.runs {
            let mut pos = 0;
            let whole = runs.iter().all(|run| {
                let rest = &payload[pos.min(payload.len())..];
                let len = match *run {
                    Run::Fixed(n) => n,
                    Run::String { wide: true } => match find_utf16_nul(rest) {
                        Some(i) => i + 2,
                        None => return false,
                    },
                    Run::String { wide: false } => match rest.iter().position(|&b| b == 0) {
                        Some(i) => i + 1,
                        None => return false,
                    },
                };
                pos += len;
                pos <= payload.len()
            });
            if whole && pos == payload.len() {
                return Ok(*count);
            }
        }
        walk_payload(meta, payload, pointer_size, offset)
    }
}

/// Byte index of the first UTF-16 NUL unit (two zero bytes at an even index), four units at a time.
pub(crate) fn find_utf16_nul(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0001_0001_0001_0001;
    const HIGHS: u64 = 0x8000_8000_8000_8000;
    let mut chunks = bytes.chunks_exact(8);
    for (i, chunk) in chunks.by_ref().enumerate() {
        let w = u64::from_le_bytes(chunk.try_into().unwrap());
        // The lowest flagged lane is the first zero unit (a borrow only runs upwards from one).
        let zero = w.wrapping_sub(ONES) & !w & HIGHS;
        if zero != 0 {
            return Some(i * 8 + (zero.trailing_zeros() / 16) as usize * 2);
        }
    }
    let done = bytes.len() - chunks.remainder().len();
    chunks.remainder().chunks_exact(2).position(|u| u == [0, 0]).map(|u| done + 2 * u)
}

/// [`decode_payload`]'s walk without the values (see [`FieldCount`]).
pub fn count_payload(meta: &EventMetadata, payload: &[u8], pointer_size: u32, offset: u64) -> Result<FieldCount> {
    PayloadLayout::of(meta, pointer_size).count(meta, payload, pointer_size, offset)
}

fn walk_payload(meta: &EventMetadata, payload: &[u8], pointer_size: u32, offset: u64) -> Result<FieldCount> {
    let mut r = Reader { buf: payload, pos: 0, offset, pointer_size };
    let template = template_of(meta);
    let mut count = FieldCount::default();
    if let Some(t) = template {
        for &(name, ty) in t.fields {
            if r.pos == payload.len() && count.fields > 0 {
                break;
            }
            count.strings += u32::from(r.skip(ty, name)?);
            count.fields += 1;
        }
    } else if !meta.fields.is_empty() {
        count_fields(&mut r, &meta.fields, &mut count, 0)?;
    }
    if r.pos < payload.len() && (template.is_some() || !meta.fields.is_empty()) {
        count.fields += 1;
    }
    Ok(count)
}

fn count_fields(r: &mut Reader<'_>, fields: &[crate::metadata::FieldDef], count: &mut FieldCount, depth: u32) -> Result<bool> {
    for f in fields {
        let Some(ty) = field_type(&f.kind) else {
            match &f.kind {
                FieldKind::Object(inner) if depth < 8 => {
                    if !count_fields(r, inner, count, depth + 1)? {
                        return Ok(false);
                    }
                    continue;
                }
                _ => return Ok(false),
            }
        };
        count.strings += u32::from(r.skip(ty, &f.name)?);
        count.fields += 1;
    }
    Ok(true)
}

/// The wire type of an EventSource field, or None for objects, arrays and unknown codes.
fn field_type(kind: &FieldKind) -> Option<FieldType> {
    Some(match kind {
        FieldKind::Boolean => FieldType::Bool,
        FieldKind::Char | FieldKind::I16 | FieldKind::U16 => FieldType::U16,
        FieldKind::I8 | FieldKind::U8 => FieldType::U8,
        FieldKind::I32 => FieldType::I32,
        FieldKind::U32 => FieldType::U32,
        FieldKind::I64 => FieldType::I64,
        FieldKind::U64 | FieldKind::DateTime => FieldType::U64,
        FieldKind::F32 => FieldType::F32,
        FieldKind::F64 => FieldType::F64,
        FieldKind::Guid => FieldType::Guid,
        FieldKind::String => FieldType::Utf16,
        _ => return None,
    })
}

/// Decodes an event's payload into named fields. `offset` is the payload's stream offset (for
/// errors). Events without a known layout give no fields; bytes past a template's fixed fields
/// (counted arrays, fields added by a newer runtime) are kept as `__rest__`.
pub fn decode_payload(meta: &EventMetadata, payload: &[u8], pointer_size: u32, offset: u64) -> Result<Fields> {
    let mut r = Reader { buf: payload, pos: 0, offset, pointer_size };
    let template = template_of(meta);
    // Sized once (fields, plus `__rest__`): growing the list by pushes reallocated it per event.
    let mut out = Fields::with_capacity(template.map_or(meta.fields.len(), |t| t.fields.len()) + 1);
    if let Some(t) = template {
        for &(name, ty) in t.fields {
            // Older writers end some payloads early (optional trailing fields).
            if r.pos == payload.len() && !out.is_empty() {
                break;
            }
            out.push((Cow::Borrowed(name), r.read(ty, name)?));
        }
    } else if !meta.fields.is_empty() {
        decode_fields(&mut r, &meta.fields, "", &mut out, 0)?;
    }
    if r.pos < payload.len() && (template.is_some() || !meta.fields.is_empty()) {
        out.push((Cow::Borrowed("__rest__"), Value::Bytes(payload[r.pos..].to_vec())));
    }
    Ok(out)
}

fn decode_fields(r: &mut Reader<'_>, fields: &[crate::metadata::FieldDef], prefix: &str, out: &mut Fields, depth: u32) -> Result<bool> {
    for f in fields {
        let name = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}.{}", f.name) };
        let Some(ty) = field_type(&f.kind) else {
            match &f.kind {
                FieldKind::Object(inner) if depth < 8 => {
                    if !decode_fields(r, inner, &name, out, depth + 1)? {
                        return Ok(false);
                    }
                    continue;
                }
                // Arrays, decimals and unknown codes: the rest of the payload stays raw bytes.
                _ => return Ok(false),
            }
        };
        let v = r.read(ty, &name)?;
        out.push((Cow::Owned(name), v));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::find_utf16_nul;

    proptest! {
        /// The word-at-a-time search finds what a unit-by-unit search finds, wherever the NUL is
        /// (or is not), including NUL bytes that straddle two units.
        #[test]
        fn utf16_nul_search_agrees_with_unit_by_unit(bytes in proptest::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..64)) {
            let plain = bytes.chunks_exact(2).position(|u| u == [0, 0]).map(|u| 2 * u);
            prop_assert_eq!(find_utf16_nul(&bytes), plain);
        }
    }
}
