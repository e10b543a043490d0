//! Metadata: the TSDL text (plain or packetized) compiled into decoding plans. Names a sequence
//! length or a variant tag refers to are resolved here, once, into slots the decoder fills as it
//! reads integers, so decoding never looks a name up.

use std::collections::HashMap;
use std::sync::Arc;

use crate::Error;
use crate::tsdl::{self, AttrValue, Block, ByteOrder, IntType, Type};

/// Magic of a packetized metadata stream (CTF 1.8 §4.1.4), as a little-endian u32.
const METADATA_MAGIC: u32 = 0x75D1_1D57;
const METADATA_HEADER_BYTES: usize = 37;

#[derive(Clone, Debug)]
pub struct Clock {
    pub name: String,
    pub freq: u64,
    pub offset_s: i64,
    pub offset: i64,
    pub uuid: Option<String>,
}

impl Clock {
    /// Nanoseconds since the clock's origin (the Unix epoch for LTTng's clocks).
    pub fn ns_from_origin(&self, cycles: u64) -> i64 {
        let cycles = cycles as i128 + self.offset as i128;
        let freq = self.freq.max(1) as i128;
        let ns = self.offset_s as i128 * 1_000_000_000 + cycles * 1_000_000_000 / freq;
        ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// Nanoseconds of the clock's own value, without the offset (CLOCK_MONOTONIC for LTTng).
    pub fn ns(&self, cycles: u64) -> u64 {
        if self.freq == 1_000_000_000 {
            cycles
        } else {
            (cycles as u128 * 1_000_000_000 / self.freq.max(1) as u128) as u64
        }
    }
}

/// What a field means to the reader, beyond its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    None,
    Magic,
    StreamId,
    EventId,
    ContentSize,
    PacketSize,
    EventsDiscarded,
    CpuId,
}

#[derive(Clone, Debug)]
pub(crate) struct IntNode {
    pub size: u32,
    pub align: u32,
    pub signed: bool,
    pub le: bool,
    /// Updates the stream's current clock value when read.
    pub clock: bool,
    pub role: Role,
    pub slot: usize,
    /// Byte-aligned, little-endian, 8/16/32/64 bits: LTTng's every payload and context integer,
    /// read with one fixed-size load.
    pub whole_le: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ByteKind {
    No,
    Bytes,
    Text,
}

/// Enum mappings: inclusive value range → label.
pub(crate) type Labels = Arc<[(i64, i64, Arc<str>)]>;

#[derive(Clone, Debug)]
pub(crate) enum Node {
    Int(IntNode),
    Float { bits: u32, align: u32, le: bool },
    Str,
    Enum { int: IntNode, labels: Labels },
    /// `align` is the effective alignment (the declared one and every field's).
    Struct { align: u32, fields: Vec<(Arc<str>, Node)> },
    Variant { tag_slot: usize, options: Vec<(Arc<str>, Node)>, select: Vec<(i64, i64, usize)> },
    Array { elem: Box<Node>, len: u64, bytes: ByteKind },
    Sequence { elem: Box<Node>, len_slot: usize, bytes: ByteKind },
}

impl Node {
    pub fn align(&self) -> u32 {
        match self {
            Node::Int(i) | Node::Enum { int: i, .. } => i.align,
            Node::Float { align, .. } => *align,
            Node::Str => 8,
            Node::Struct { align, .. } => *align,
            Node::Variant { .. } => 1,
            Node::Array { elem, .. } | Node::Sequence { elem, .. } => elem.align(),
        }
    }

    /// Fewest bits one value can take (bounds element counts before allocating).
    pub fn min_bits(&self) -> u64 {
        match self {
            Node::Int(i) | Node::Enum { int: i, .. } => i.size as u64,
            Node::Float { bits, .. } => *bits as u64,
            Node::Str => 8,
            Node::Struct { fields, .. } => fields.iter().map(|(_, n)| n.min_bits()).sum(),
            Node::Variant { options, .. } => options.iter().map(|(_, n)| n.min_bits()).min().unwrap_or(0),
            Node::Array { elem, len, .. } => elem.min_bits().saturating_mul(*len),
            Node::Sequence { .. } => 0,
        }
    }

    pub fn field_names(&self) -> Vec<Arc<str>> {
        match self {
            Node::Struct { fields, .. } => fields.iter().map(|(n, _)| n.clone()).collect(),
            _ => Vec::new(),
        }
    }
}

#[derive(Debug)]
pub struct EventClass {
    pub name: String,
    pub id: u64,
    pub stream_id: u64,
    pub loglevel: Option<i64>,
    pub(crate) context: Option<Node>,
    pub(crate) fields: Option<Node>,
    /// Payload field names, in payload order (one leading underscore removed).
    pub field_names: Vec<Arc<str>>,
    pub context_names: Vec<Arc<str>>,
}

#[derive(Debug)]
pub struct StreamClass {
    pub id: u64,
    pub(crate) packet_context: Option<Node>,
    pub(crate) event_header: Option<Node>,
    pub(crate) event_context: Option<Node>,
    /// Names of the per-stream event context fields (`vpid`, `vtid`, `procname` …).
    pub event_context_names: Vec<Arc<str>>,
    pub(crate) events: HashMap<u64, usize>,
    /// `events` for the small ids LTTng gives (0, 1, 2 …): an index instead of a hash per event.
    pub(crate) dense_events: Vec<Option<usize>>,
    /// The clock event timestamps map to.
    pub clock: Option<usize>,
}

/// Event ids below this are looked up in [`StreamClass::dense_events`].
const DENSE_EVENT_IDS: u64 = 1 << 16;

impl StreamClass {
    #[inline]
    pub(crate) fn event_index(&self, id: u64) -> Option<usize> {
        if id < DENSE_EVENT_IDS {
            self.dense_events.get(id as usize).copied().flatten()
        } else {
            self.events.get(&id).copied()
        }
    }
}

pub struct Metadata {
    pub little_endian: bool,
    pub uuid: Option<String>,
    pub env: Vec<(String, String)>,
    pub clocks: Vec<Clock>,
    pub streams: Vec<StreamClass>,
    pub events: Vec<EventClass>,
    pub(crate) packet_header: Option<Node>,
    pub(crate) slot_count: usize,
    pub(crate) stream_index: HashMap<u64, usize>,
    /// The metadata text, after unpacking.
    pub text: String,
}

impl Metadata {
    pub fn from_bytes(raw: &[u8]) -> Result<Metadata, Error> {
        let text = unpack(raw)?;
        Metadata::from_text(&text)
    }

    pub fn from_text(text: &str) -> Result<Metadata, Error> {
        let ast = tsdl::parse(text)?;
        let mut c = Compiler::default();
        let trace = ast.trace.as_ref().ok_or_else(|| merr("no `trace` block"))?;
        c.little_endian = match trace.attrs.get("byte_order").map(AttrValue::text).as_deref() {
            Some("le") | Some("little_endian") => true,
            Some("be") | Some("big_endian") | Some("network") => false,
            other => return Err(merr(&format!("trace byte_order {other:?}: expected le or be"))),
        };
        let mut clocks = Vec::new();
        for b in &ast.clocks {
            let int = |k: &str| b.attrs.get(k).and_then(AttrValue::as_int);
            let name = b.attrs.get("name").map(AttrValue::text).ok_or_else(|| merr("clock without a name"))?;
            let freq = int("freq").unwrap_or(1_000_000_000);
            if freq <= 0 || freq > u64::MAX as i128 {
                return Err(merr(&format!("clock {name}: freq {freq} out of range")));
            }
            clocks.push(Clock {
                name,
                freq: freq as u64,
                offset_s: int("offset_s").unwrap_or(0).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                offset: int("offset").unwrap_or(0).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
                uuid: b.attrs.get("uuid").map(AttrValue::text),
            });
        }
        c.clock_names = clocks.iter().map(|k| k.name.clone()).collect();

        let packet_header = c.scope(trace, "packet.header", "trace.packet.header", Scope::PacketHeader)?;
        let mut streams = Vec::new();
        let mut stream_index = HashMap::new();
        let stream_blocks: Vec<Block> = if ast.streams.is_empty() { vec![Block::default()] } else { ast.streams.clone() };
        for b in &stream_blocks {
            let id = b.attrs.get("id").and_then(AttrValue::as_int).unwrap_or(0) as u64;
            c.roots.retain(|k, _| k.starts_with("trace."));
            c.used_clock = None;
            let packet_context = c.scope(b, "packet.context", "stream.packet.context", Scope::PacketContext)?;
            c.used_clock = None;
            let event_header = c.scope(b, "event.header", "stream.event.header", Scope::EventHeader)?;
            let clock = c.used_clock.or(if clocks.len() == 1 { Some(0) } else { None });
            let event_context = c.scope(b, "event.context", "stream.event.context", Scope::Other)?;
            let roots = c.roots.clone();
            let mut events = HashMap::new();
            for (i, e) in ast.events.iter().enumerate() {
                let sid = e.attrs.get("stream_id").and_then(AttrValue::as_int).map(|v| v as u64).unwrap_or(id);
                if sid != id {
                    continue;
                }
                let eid = e.attrs.get("id").and_then(AttrValue::as_int).unwrap_or(0) as u64;
                events.insert(eid, i);
            }
            if stream_index.insert(id, streams.len()).is_some() {
                return Err(merr(&format!("stream id {id} declared twice")));
            }
            let dense_len = events.keys().filter(|&&k| k < DENSE_EVENT_IDS).map(|&k| k as usize + 1).max().unwrap_or(0);
            let mut dense_events = vec![None; dense_len];
            for (&k, &i) in &events {
                if k < DENSE_EVENT_IDS {
                    dense_events[k as usize] = Some(i);
                }
            }
            streams.push((StreamClass {
                id,
                event_context_names: event_context.as_ref().map(Node::field_names).unwrap_or_default(),
                packet_context,
                event_header,
                event_context,
                events,
                dense_events,
                clock,
            }, roots));
        }

        let mut events = Vec::new();
        for e in &ast.events {
            let name = e.attrs.get("name").map(AttrValue::text).ok_or_else(|| merr("event without a name"))?;
            let id = e.attrs.get("id").and_then(AttrValue::as_int).unwrap_or(0) as u64;
            let stream_id = e
                .attrs
                .get("stream_id")
                .and_then(AttrValue::as_int)
                .map(|v| v as u64)
                .unwrap_or_else(|| streams.first().map(|s| s.0.id).unwrap_or(0));
            let Some(&si) = stream_index.get(&stream_id) else {
                return Err(merr(&format!("event {name} names stream {stream_id}, which is not declared")));
            };
            c.roots = streams[si].1.clone();
            let context = c.scope(e, "context", "event.context", Scope::Other)?;
            let fields = c.scope(e, "fields", "event.fields", Scope::Other)?;
            events.push(EventClass {
                name,
                id,
                stream_id,
                loglevel: e.attrs.get("loglevel").and_then(AttrValue::as_int).map(|v| v as i64),
                field_names: fields.as_ref().map(Node::field_names).unwrap_or_default(),
                context_names: context.as_ref().map(Node::field_names).unwrap_or_default(),
                context,
                fields,
            });
        }
        let env = ast
            .env
            .map(|b| {
                let mut v: Vec<_> = b.attrs.into_iter().map(|(k, v)| (k, v.text())).collect();
                v.sort();
                v
            })
            .unwrap_or_default();
        Ok(Metadata {
            little_endian: c.little_endian,
            uuid: trace.attrs.get("uuid").map(AttrValue::text),
            env,
            clocks,
            streams: streams.into_iter().map(|s| s.0).collect(),
            events,
            packet_header,
            slot_count: c.slots,
            stream_index,
            text: text.to_string(),
        })
    }

    pub fn env(&self, key: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn merr(msg: &str) -> Error {
    Error::Metadata { line: 0, msg: msg.to_string() }
}

/// The metadata text: packetized metadata is unwrapped (each packet's content after its
/// 37-byte header), plain text is taken as is.
fn unpack(raw: &[u8]) -> Result<String, Error> {
    let magic_le = raw.get(..4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let magic_be = raw.get(..4).map(|b| u32::from_be_bytes(b.try_into().unwrap()));
    let le = match (magic_le, magic_be) {
        (Some(METADATA_MAGIC), _) => true,
        (_, Some(METADATA_MAGIC)) => false,
        _ => return String::from_utf8(raw.to_vec()).map_err(|e| merr(&format!("metadata is neither packetized nor UTF-8 text: {e}"))),
    };
    let u32_at = |o: usize| {
        let b: [u8; 4] = raw[o..o + 4].try_into().unwrap();
        if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }
    };
    let mut text = Vec::new();
    let mut off = 0usize;
    while off < raw.len() {
        if raw.len() - off < METADATA_HEADER_BYTES {
            return Err(merr(&format!("metadata packet at byte {off}: truncated header")));
        }
        if u32_at(off) != METADATA_MAGIC {
            return Err(merr(&format!("metadata packet at byte {off}: bad magic {:#x}", u32_at(off))));
        }
        let content = u32_at(off + 24) as usize / 8;
        let packet = u32_at(off + 28) as usize / 8;
        if raw[off + 32] != 0 || raw[off + 33] != 0 {
            return Err(merr(&format!("metadata packet at byte {off}: compressed or encrypted metadata is not supported")));
        }
        if content < METADATA_HEADER_BYTES || content > packet || packet > raw.len() - off {
            return Err(merr(&format!(
                "metadata packet at byte {off}: content size {content} / packet size {packet} bytes do not fit the {} bytes left",
                raw.len() - off
            )));
        }
        text.extend_from_slice(&raw[off + METADATA_HEADER_BYTES..off + content]);
        off += packet;
    }
    String::from_utf8(text).map_err(|e| merr(&format!("metadata text is not UTF-8: {e}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    PacketHeader,
    PacketContext,
    EventHeader,
    Other,
}

/// A name visible to later fields: its slot (integers and enums), enum labels, members.
#[derive(Clone, Debug)]
struct Visible {
    name: String,
    slot: Option<usize>,
    labels: Option<Labels>,
    members: Vec<Visible>,
}

#[derive(Default)]
struct Compiler {
    little_endian: bool,
    slots: usize,
    clock_names: Vec<String>,
    used_clock: Option<usize>,
    /// Top-level fields of the scopes compiled so far, by absolute prefix.
    roots: HashMap<String, Vec<Visible>>,
    frames: Vec<Vec<Visible>>,
}

/// One leading underscore is the TSDL escape LTTng adds to every field name; readers drop it.
fn display_name(name: &str) -> Arc<str> {
    Arc::from(name.strip_prefix('_').unwrap_or(name))
}

impl Compiler {
    fn scope(&mut self, block: &Block, key: &str, root: &str, scope: Scope) -> Result<Option<Node>, Error> {
        let Some(t) = block.types.get(key) else { return Ok(None) };
        if !matches!(t, Type::Struct { .. }) {
            return Err(merr(&format!("{root} must be a struct")));
        }
        self.frames.clear();
        let (node, vis) = self.compile(t, scope, "")?;
        self.roots.insert(root.to_string(), vis.members);
        Ok(Some(node))
    }

    fn int(&mut self, t: &IntType, scope: Scope, name: &str) -> Result<IntNode, Error> {
        let le = match t.byte_order {
            ByteOrder::Native => self.little_endian,
            ByteOrder::Little => true,
            ByteOrder::Big => false,
        };
        let role = match (scope, name) {
            (Scope::PacketHeader, "magic") => Role::Magic,
            (Scope::PacketHeader, "stream_id") => Role::StreamId,
            (Scope::PacketContext, "content_size") => Role::ContentSize,
            (Scope::PacketContext, "packet_size") => Role::PacketSize,
            (Scope::PacketContext, "events_discarded") => Role::EventsDiscarded,
            (Scope::PacketContext, "cpu_id") => Role::CpuId,
            (Scope::EventHeader, "id") => Role::EventId,
            _ => Role::None,
        };
        // Only a packet's beginning timestamp sets the clock; its end timestamp is a summary.
        let clock = match &t.clock {
            Some(c) if !(scope == Scope::PacketContext && name == "timestamp_end") => {
                let idx = self
                    .clock_names
                    .iter()
                    .position(|n| n == c)
                    .ok_or_else(|| merr(&format!("field {name} maps to clock {c}, which is not declared")))?;
                if scope == Scope::EventHeader {
                    self.used_clock = Some(idx);
                }
                true
            }
            _ => false,
        };
        let slot = self.slots;
        self.slots += 1;
        let whole_le = le && t.align.is_multiple_of(8) && matches!(t.size, 8 | 16 | 32 | 64);
        Ok(IntNode { size: t.size, align: t.align, signed: t.signed, le, clock, role, slot, whole_le })
    }

    fn compile(&mut self, t: &Type, scope: Scope, name: &str) -> Result<(Node, Visible), Error> {
        let mut vis = Visible { name: name.to_string(), slot: None, labels: None, members: Vec::new() };
        let node = match t {
            Type::Int(i) => {
                let n = self.int(i, scope, name)?;
                vis.slot = Some(n.slot);
                Node::Int(n)
            }
            Type::Float { exp, align, byte_order, .. } => Node::Float {
                bits: if *exp == 8 { 32 } else { 64 },
                align: *align,
                le: match byte_order {
                    ByteOrder::Native => self.little_endian,
                    ByteOrder::Little => true,
                    ByteOrder::Big => false,
                },
            },
            Type::Str => Node::Str,
            Type::Enum { int, mappings } => {
                let n = self.int(int, scope, name)?;
                let labels: Labels = mappings
                    .iter()
                    .map(|m| (clamp64(m.lo), clamp64(m.hi), Arc::from(m.label.as_str())))
                    .collect();
                vis.slot = Some(n.slot);
                vis.labels = Some(labels.clone());
                Node::Enum { int: n, labels }
            }
            Type::Struct { fields, align } => {
                self.frames.push(Vec::new());
                let mut out = Vec::with_capacity(fields.len());
                for (fname, ft) in fields {
                    let (n, v) = match self.compile(ft, scope, fname) {
                        Ok(r) => r,
                        Err(e) => {
                            self.frames.pop();
                            return Err(e);
                        }
                    };
                    self.frames.last_mut().unwrap().push(v);
                    out.push((display_name(fname), n));
                }
                vis.members = self.frames.pop().unwrap_or_default();
                // A struct aligns like its most aligned field (CTF 1.8 §4.2.1); computed once here.
                let align = out.iter().map(|(_, n)| n.align()).fold(*align, u32::max);
                Node::Struct { align, fields: out }
            }
            Type::Variant { tag, options } => {
                let tag = tag.as_deref().ok_or_else(|| merr(&format!("variant {name} has no tag")))?;
                let target = self.resolve(tag).ok_or_else(|| merr(&format!("variant {name}: tag `{tag}` names no earlier field")))?;
                let (Some(tag_slot), Some(labels)) = (target.slot, target.labels.clone()) else {
                    return Err(merr(&format!("variant {name}: tag `{tag}` is not an enum")));
                };
                let mut out = Vec::new();
                let mut select = Vec::new();
                for (oname, ot) in options {
                    let (n, v) = self.compile(ot, scope, oname)?;
                    for (lo, hi, label) in labels.iter() {
                        if &**label == oname.as_str() {
                            select.push((*lo, *hi, out.len()));
                        }
                    }
                    vis.members.push(v);
                    out.push((display_name(oname), n));
                }
                Node::Variant { tag_slot, options: out, select }
            }
            Type::Array { elem, len } => {
                let (n, _) = self.compile(elem, scope, name)?;
                let bytes = byte_kind(&n, elem);
                Node::Array { elem: Box::new(n), len: *len, bytes }
            }
            Type::Sequence { elem, len_path } => {
                let target = self
                    .resolve(len_path)
                    .ok_or_else(|| merr(&format!("sequence {name}: length `{len_path}` names no earlier field")))?;
                let len_slot = target.slot.ok_or_else(|| merr(&format!("sequence {name}: length `{len_path}` is not an integer")))?;
                let (n, _) = self.compile(elem, scope, name)?;
                let bytes = byte_kind(&n, elem);
                Node::Sequence { elem: Box::new(n), len_slot, bytes }
            }
        };
        Ok((node, vis))
    }

    /// A relative path looks outward from the innermost struct; an absolute one starts at a
    /// scope root (`stream.event.header.id`).
    fn resolve(&self, path: &str) -> Option<Visible> {
        let parts: Vec<&str> = path.split('.').collect();
        let descend = |mut v: &Visible, rest: &[&str]| -> Option<Visible> {
            for p in rest {
                v = v.members.iter().rev().find(|m| m.name == *p)?;
            }
            Some(v.clone())
        };
        for frame in self.frames.iter().rev() {
            if let Some(v) = frame.iter().rev().find(|v| v.name == parts[0]) {
                return descend(v, &parts[1..]);
            }
        }
        for (root, members) in &self.roots {
            let rparts: Vec<&str> = root.split('.').collect();
            if parts.len() > rparts.len() && parts[..rparts.len()] == rparts[..] {
                let first = members.iter().rev().find(|v| v.name == parts[rparts.len()])?;
                return descend(first, &parts[rparts.len() + 1..]);
            }
        }
        None
    }
}

fn clamp64(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn byte_kind(n: &Node, t: &Type) -> ByteKind {
    match (n, t) {
        (Node::Int(i), Type::Int(it)) if i.size == 8 && i.align == 8 => {
            if it.text { ByteKind::Text } else { ByteKind::Bytes }
        }
        _ => ByteKind::No,
    }
}
