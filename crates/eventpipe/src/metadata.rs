//! Event metadata: what a `MetadataBlock` says about each metadata id (provider, event id,
//! version, and for EventSource events the field layout). Runtime providers send no names or
//! fields; [`EventMetadata::name`] and payload decoding then come from the runtime's manifest.

use crate::error::{Error, Result};
use crate::manifest;

/// A payload field's type as EventPipe metadata describes it (System.TypeCode values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldKind {
    Boolean,
    Char,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    Decimal,
    DateTime,
    Guid,
    String,
    /// A nested structure.
    Object(Vec<FieldDef>),
    /// An array (u16 count, then elements).
    Array(Box<FieldKind>),
    Unknown(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDef {
    pub name: String,
    pub kind: FieldKind,
}

/// One metadata definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventMetadata {
    pub metadata_id: u32,
    pub provider: String,
    pub event_id: u32,
    /// The name the metadata gives, else the runtime manifest's name without `_Vn`, else empty.
    pub name: String,
    pub keywords: u64,
    pub version: u32,
    pub level: u32,
    pub opcode: Option<u8>,
    /// Field layout from the metadata (EventSource events); empty for runtime events.
    pub fields: Vec<FieldDef>,
    /// The metadata's field list could not be read entirely.
    pub fields_incomplete: bool,
    pub(crate) template: Option<&'static manifest::Template>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &str) -> Error {
        Error::format(self.base + self.pos as u64, format_args!("event metadata: {what}"))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.buf.get(self.pos..self.pos + 4).ok_or_else(|| self.err(&format!("{what} runs past the definition")))?;
        self.pos += 4;
        Ok(u32::from_le_bytes(b.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.buf.get(self.pos..self.pos + 8).ok_or_else(|| self.err(&format!("{what} runs past the definition")))?;
        self.pos += 8;
        Ok(u64::from_le_bytes(b.try_into().unwrap()))
    }
    fn utf16z(&mut self, what: &str) -> Result<String> {
        match read_utf16z(&self.buf[self.pos.min(self.buf.len())..]) {
            Some((s, used)) => {
                self.pos += used;
                Ok(s)
            }
            None => Err(self.err(&format!("{what} has no terminating NUL"))),
        }
    }
}

/// Reads a NUL-terminated UTF-16LE string; returns it and the bytes used (terminator included).
pub(crate) fn read_utf16z(buf: &[u8]) -> Option<(String, usize)> {
    let len = buf.chunks_exact(2).position(|u| u == [0, 0])?;
    Some((utf16_text(&buf[..2 * len]), 2 * len + 2))
}

/// UTF-16LE bytes (no terminator) as text, unpaired surrogates as U+FFFD.
pub(crate) fn utf16_text(body: &[u8]) -> String {
    // Most strings of a trace (type names, paths, method names) are ASCII: one byte per unit, no
    // intermediate list of units (a quarter of a full decode's instructions went to allocating).
    let mut ascii = Vec::with_capacity(body.len() / 2);
    for u in body.chunks_exact(2) {
        if u[1] != 0 || u[0] >= 0x80 {
            return char::decode_utf16(body.chunks_exact(2).map(|u| u16::from_le_bytes([u[0], u[1]])))
                .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
                .collect();
        }
        ascii.push(u[0]);
    }
    String::from_utf8(ascii).expect("ASCII bytes are UTF-8")
}

impl EventMetadata {
    /// The metadata of a runtime event known only by its provider, id and version (what a V6
    /// trace of user_events carries: no name, no field list): named and laid out by the
    /// runtime's manifest, so [`crate::decode_payload`] reads its payload as in any trace.
    pub fn known(provider: &str, event_id: u32, version: u32) -> EventMetadata {
        let (name, template) = match crate::known::lookup(provider, event_id, version) {
            Some((name, template)) => (name.to_string(), template),
            None => (String::new(), None),
        };
        EventMetadata {
            metadata_id: 0,
            provider: provider.to_string(),
            event_id,
            name,
            keywords: 0,
            version,
            level: 0,
            opcode: None,
            fields: Vec::new(),
            fields_incomplete: false,
            template,
        }
    }

    /// Parses a metadata event's payload; `offset` is its position in the stream.
    pub fn parse(payload: &[u8], offset: u64) -> Result<EventMetadata> {
        let mut c = Cursor { buf: payload, pos: 0, base: offset };
        let metadata_id = c.u32("the metadata id")?;
        let provider = c.utf16z("the provider name")?;
        let event_id = c.u32("the event id")?;
        let mut name = c.utf16z("the event name")?;
        let keywords = c.u64("the keywords")?;
        let version = c.u32("the version")?;
        let level = c.u32("the level")?;
        let mut meta = EventMetadata {
            metadata_id,
            provider,
            event_id,
            name: String::new(),
            keywords,
            version,
            level,
            opcode: None,
            fields: Vec::new(),
            fields_incomplete: false,
            template: None,
        };
        // Field lists and tags are optional extras: a definition that ends early or holds an
        // unknown layout still names its event, so its events stay readable.
        if c.pos < payload.len() {
            match parse_fields(&mut c, 0) {
                Some(fields) => meta.fields = fields,
                None => meta.fields_incomplete = true,
            }
        }
        while !meta.fields_incomplete && c.pos + 5 <= payload.len() {
            let Ok(size) = c.u32("a tag size") else { break };
            let kind = payload[c.pos];
            c.pos += 1;
            let end = c.pos.saturating_add(size as usize).min(payload.len());
            if kind == 1 && c.pos < end {
                meta.opcode = Some(payload[c.pos]);
            }
            c.pos = end;
        }
        if let Some((known_name, template)) = crate::known::lookup(&meta.provider, event_id, version) {
            if name.is_empty() {
                name = known_name.to_string();
            }
            meta.template = template;
        }
        if name.is_empty() {
            name = match (meta.provider.as_str(), event_id) {
                ("Microsoft-DotNETCore-SampleProfiler", 0) => "ThreadSample".into(),
                ("Microsoft-DotNETCore-SampleProfiler", 1) => "ThreadStackWalk".into(),
                ("Microsoft-DotNETCore-EventPipe", 1) => "ProcessInfo".into(),
                _ => String::new(),
            };
        }
        meta.name = name;
        Ok(meta)
    }
}

fn parse_fields(c: &mut Cursor<'_>, depth: u32) -> Option<Vec<FieldDef>> {
    if depth > 8 {
        return None;
    }
    let count = c.u32("the field count").ok()?;
    if count as usize > c.buf.len() {
        return None;
    }
    let mut fields = Vec::with_capacity((count as usize).min(64));
    for _ in 0..count {
        let code = c.u32("a field type").ok()?;
        let kind = parse_kind(c, code, depth)?;
        let name = c.utf16z("a field name").ok()?;
        fields.push(FieldDef { name, kind });
    }
    Some(fields)
}

fn parse_kind(c: &mut Cursor<'_>, code: u32, depth: u32) -> Option<FieldKind> {
    Some(match code {
        1 => FieldKind::Object(parse_fields(c, depth + 1)?),
        3 => FieldKind::Boolean,
        4 => FieldKind::Char,
        5 => FieldKind::I8,
        6 => FieldKind::U8,
        7 => FieldKind::I16,
        8 => FieldKind::U16,
        9 => FieldKind::I32,
        10 => FieldKind::U32,
        11 => FieldKind::I64,
        12 => FieldKind::U64,
        13 => FieldKind::F32,
        14 => FieldKind::F64,
        15 => FieldKind::Decimal,
        16 => FieldKind::DateTime,
        17 => FieldKind::Guid,
        18 => FieldKind::String,
        19 => {
            let element = c.u32("an array element type").ok()?;
            FieldKind::Array(Box::new(parse_kind(c, element, depth + 1)?))
        }
        other => FieldKind::Unknown(other),
    })
}

#[cfg(test)]
mod tests {
    use super::read_utf16z;

    fn utf16z(s: &[u16]) -> Vec<u8> {
        s.iter().chain([&0u16]).flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn utf16_strings_read_to_their_nul() {
        let ascii = utf16z(&"System.Int32[]".encode_utf16().collect::<Vec<_>>());
        assert_eq!(read_utf16z(&ascii), Some(("System.Int32[]".to_string(), ascii.len())));
        // Non-ASCII, a surrogate pair, then bytes after the NUL that are not read.
        let mut mixed = utf16z(&"Größe 📦".encode_utf16().collect::<Vec<_>>());
        let used = mixed.len();
        mixed.extend([b'x', 0]);
        assert_eq!(read_utf16z(&mixed), Some(("Größe 📦".to_string(), used)));
        // An unpaired surrogate reads as U+FFFD, as String::from_utf16_lossy gives.
        assert_eq!(read_utf16z(&utf16z(&[0x41, 0xD800, 0x42])), Some(("A\u{FFFD}B".to_string(), 8)));
        assert_eq!(read_utf16z(&utf16z(&[])), Some((String::new(), 2)));
    }

    #[test]
    fn a_string_without_nul_is_none() {
        assert_eq!(read_utf16z(&[b'A', 0, b'B', 0]), None);
        // A NUL split across an odd end is no terminator.
        assert_eq!(read_utf16z(&[b'A', 0, 0]), None);
        assert_eq!(read_utf16z(&[]), None);
    }
}
