//! Decoding packets and events of the data streams, and merging streams by time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;
use std::path::Path;

use crate::metadata::{ByteKind, EventClass, IntNode, Metadata, Node, Role, StreamClass};
use crate::{Error, Value};

/// Magic of a data stream packet (CTF 1.8 §5).
const PACKET_MAGIC: u64 = 0xC1FC_1FC1;
/// A sequence of zero-size elements could spin for 2^64 iterations; nothing real needs more.
const MAX_ZERO_SIZE_ELEMENTS: u64 = 1 << 16;

/// One decoded event.
#[derive(Clone, Debug)]
pub struct Event<'t> {
    pub class: &'t EventClass,
    pub stream_class: &'t StreamClass,
    /// Index of the stream file the event came from.
    pub stream: usize,
    /// Timestamp in clock cycles (LTTng: CLOCK_MONOTONIC nanoseconds).
    pub cycles: u64,
    /// Timestamp in nanoseconds since the clock's origin (LTTng: the Unix epoch).
    pub ns_from_origin: i64,
    pub cpu_id: Option<u64>,
    /// Per-stream event context, named by `stream_class.event_context_names`.
    pub stream_context: Vec<Value>,
    /// Per-event context, named by `class.context_names`.
    pub context: Vec<Value>,
    /// Payload, named by `class.field_names`.
    pub payload: Vec<Value>,
}

impl Event<'_> {
    pub fn name(&self) -> &str {
        &self.class.name
    }
    /// A payload field by name (leading underscore already removed).
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.class.field_names.iter().position(|n| &**n == name).and_then(|i| self.payload.get(i))
    }
    /// A context field (per-event first, then per-stream).
    pub fn context_field(&self, name: &str) -> Option<&Value> {
        self.class
            .context_names
            .iter()
            .position(|n| &**n == name)
            .and_then(|i| self.context.get(i))
            .or_else(|| {
                self.stream_class.event_context_names.iter().position(|n| &**n == name).and_then(|i| self.stream_context.get(i))
            })
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    /// Bit position within `data`, and the end of readable content.
    pos: u64,
    end: u64,
    /// File offset of `data[0]`, for error messages.
    base: u64,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Stream { path: self.path.to_path_buf(), offset: self.base + self.pos / 8, msg: msg.into() }
    }

    #[inline]
    fn align(&mut self, a: u32) -> Result<(), Error> {
        let a = a as u64;
        let p = (self.pos + a - 1) & !(a - 1);
        if p > self.end {
            return Err(self.err("packet content ends inside alignment padding"));
        }
        self.pos = p;
        Ok(())
    }

    #[inline]
    fn uint(&mut self, size: u32, le: bool) -> Result<u64, Error> {
        if self.pos + size as u64 > self.end {
            return Err(self.err(format!("a {size}-bit field runs past the packet's content")));
        }
        let byte = (self.pos / 8) as usize;
        let bit = (self.pos % 8) as u32;
        let d = self.data;
        // The widths events use get fixed-size loads: a variable-length copy is a memcpy call.
        let v = if bit == 0 && matches!(size, 8 | 16 | 32 | 64) {
            match (size, le) {
                (8, _) => d[byte] as u64,
                (16, true) => u16::from_le_bytes([d[byte], d[byte + 1]]) as u64,
                (16, false) => u16::from_be_bytes([d[byte], d[byte + 1]]) as u64,
                (32, true) => u32::from_le_bytes(d[byte..byte + 4].try_into().expect("4 bytes")) as u64,
                (32, false) => u32::from_be_bytes(d[byte..byte + 4].try_into().expect("4 bytes")) as u64,
                (_, true) => u64::from_le_bytes(d[byte..byte + 8].try_into().expect("8 bytes")),
                (_, false) => u64::from_be_bytes(d[byte..byte + 8].try_into().expect("8 bytes")),
            }
        } else if le && bit + size <= 64 && byte + 8 <= d.len() {
            // A little-endian bit field (LTTng's compact event header: 5-bit id, 27-bit time)
            // within one 8-byte load.
            (u64::from_le_bytes(d[byte..byte + 8].try_into().expect("8 bytes")) >> bit) & ((1u64 << size) - 1)
        } else if bit == 0 && size.is_multiple_of(8) {
            let n = (size / 8) as usize;
            let b = &self.data[byte..byte + n];
            let mut buf = [0u8; 8];
            if le {
                buf[..n].copy_from_slice(b);
                u64::from_le_bytes(buf)
            } else {
                buf[8 - n..].copy_from_slice(b);
                u64::from_be_bytes(buf)
            }
        } else {
            // CTF bit fields: little-endian fields fill each byte from its least significant bit,
            // big-endian ones from its most significant bit.
            let nbytes = ((bit + size).div_ceil(8)) as usize;
            let b = &self.data[byte..byte + nbytes];
            let mask: u128 = (1u128 << size) - 1;
            let mut acc: u128 = 0;
            if le {
                for (i, x) in b.iter().enumerate() {
                    acc |= (*x as u128) << (8 * i);
                }
                ((acc >> bit) & mask) as u64
            } else {
                for x in b {
                    acc = (acc << 8) | *x as u128;
                }
                ((acc >> (nbytes as u32 * 8 - bit - size)) & mask) as u64
            }
        };
        self.pos += size as u64;
        Ok(v)
    }

    /// [`Cursor::uint`] for a byte-aligned little-endian 8/16/32/64-bit integer.
    #[inline(always)]
    fn whole_le(&mut self, size: u32) -> Result<u64, Error> {
        let end = self.pos + size as u64;
        if end > self.end || !self.pos.is_multiple_of(8) {
            return self.uint(size, true);
        }
        let byte = (self.pos / 8) as usize;
        let d = self.data;
        let v = match size {
            8 => d[byte] as u64,
            16 => u16::from_le_bytes([d[byte], d[byte + 1]]) as u64,
            32 => u32::from_le_bytes(d[byte..byte + 4].try_into().expect("4 bytes")) as u64,
            _ => u64::from_le_bytes(d[byte..byte + 8].try_into().expect("8 bytes")),
        };
        self.pos = end;
        Ok(v)
    }

    fn bytes(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let bits = n.checked_mul(8).filter(|b| self.pos + b <= self.end);
        let Some(bits) = bits else {
            return Err(self.err(format!("{n} bytes run past the packet's content")));
        };
        let start = (self.pos / 8) as usize;
        self.pos += bits;
        Ok(&self.data[start..start + n as usize])
    }

    fn cstring(&mut self) -> Result<&'a [u8], Error> {
        self.align(8)?;
        let start = (self.pos / 8) as usize;
        let limit = (self.end / 8) as usize;
        // memchr searches a word (or vector) at a time; a byte loop was a tenth of all decoding.
        let Some(len) = memchr::memchr(0, &self.data[start..limit]) else {
            return Err(self.err("string without its terminating NUL before the packet's end"));
        };
        self.pos += (len as u64 + 1) * 8;
        Ok(&self.data[start..start + len])
    }
}

/// Text as UTF-8; invalid bytes become U+FFFD (valid text, the common case, is checked fast).
fn text(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// Writes text into `slot`, reusing its string's buffer when it holds one (a recycled event).
fn set_text(slot: &mut Value, b: &[u8]) {
    match slot {
        Value::Str(s) => {
            s.clear();
            match std::str::from_utf8(b) {
                Ok(t) => s.push_str(t),
                Err(_) => s.push_str(&String::from_utf8_lossy(b)),
            }
        }
        _ => *slot = Value::Str(text(b)),
    }
}

/// Values a stream's decoding tracks across fields and packets.
struct State {
    slots: Vec<i64>,
    clock: u64,
    magic: Option<u64>,
    stream_id: Option<u64>,
    event_id: Option<u64>,
    content_size: Option<u64>,
    packet_size: Option<u64>,
    events_discarded: Option<u64>,
    cpu_id: Option<u64>,
}

impl State {
    #[inline]
    fn int(&mut self, n: &IntNode, cur: &mut Cursor) -> Result<(u64, i64), Error> {
        cur.align(n.align)?;
        let raw = if n.whole_le { cur.whole_le(n.size)? } else { cur.uint(n.size, n.le)? };
        let signed = if n.signed && n.size < 64 {
            let shift = 64 - n.size;
            ((raw << shift) as i64) >> shift
        } else {
            raw as i64
        };
        self.slots[n.slot] = signed;
        if n.clock {
            if n.size >= 64 {
                self.clock = raw;
            } else {
                // CTF 1.8 §8: an N-bit timestamp replaces the clock's low N bits; a smaller value
                // than those bits means they wrapped once.
                let mask = (1u64 << n.size) - 1;
                let mut c = (self.clock & !mask) | raw;
                if raw < self.clock & mask {
                    c = c.wrapping_add(1u64 << n.size);
                }
                self.clock = c;
            }
        }
        match n.role {
            Role::None => {}
            Role::Magic => self.magic = Some(raw),
            Role::StreamId => self.stream_id = Some(raw),
            Role::EventId => self.event_id = Some(raw),
            Role::ContentSize => self.content_size = Some(raw),
            Role::PacketSize => self.packet_size = Some(raw),
            Role::EventsDiscarded => self.events_discarded = Some(raw),
            Role::CpuId => self.cpu_id = Some(raw),
        }
        Ok((raw, signed))
    }

    /// Reads a node into a new value: [`State::read_into`] over an empty slot, so one decoder
    /// serves fresh and recycled events alike.
    fn read(&mut self, node: &Node, cur: &mut Cursor) -> Result<Value, Error> {
        let mut value = Value::UInt(0);
        self.read_into(node, cur, &mut value)?;
        Ok(value)
    }

    fn check_count(&self, elem: &Node, len: u64, cur: &Cursor) -> Result<(), Error> {
        let min = elem.min_bits();
        let left = cur.end - cur.pos;
        if (min == 0 && len > MAX_ZERO_SIZE_ELEMENTS) || min.saturating_mul(len) > left {
            return Err(cur.err(format!("{len} elements cannot fit in the {left} bits left in the packet")));
        }
        Ok(())
    }

    fn select(&self, tag_slot: usize, select: &[(i64, i64, usize)], cur: &Cursor) -> Result<usize, Error> {
        let tag = self.slots[tag_slot];
        select
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&tag))
            .map(|s| s.2)
            .ok_or_else(|| cur.err(format!("variant tag value {tag} selects no option")))
    }

    /// Reads a node for its side effects only (slots, clock, roles): headers need no values.
    fn skip(&mut self, node: &Node, cur: &mut Cursor) -> Result<(), Error> {
        match node {
            Node::Int(n) | Node::Enum { int: n, .. } => {
                self.int(n, cur)?;
            }
            Node::Float { bits, align, le } => {
                cur.align(*align)?;
                cur.uint(*bits, *le)?;
            }
            Node::Str => {
                cur.cstring()?;
            }
            Node::Struct { fields, .. } => {
                cur.align(node.align())?;
                for (_, f) in fields {
                    self.skip(f, cur)?;
                }
            }
            Node::Variant { tag_slot, options, select } => {
                let i = self.select(*tag_slot, select, cur)?;
                self.skip(&options[i].1, cur)?;
            }
            Node::Array { elem, len, bytes } => self.skip_elements(elem, *len, *bytes, cur)?,
            Node::Sequence { elem, len_slot, bytes } => {
                let len = self.slots[*len_slot];
                if len < 0 {
                    return Err(cur.err(format!("sequence length {len} is negative")));
                }
                self.skip_elements(elem, len as u64, *bytes, cur)?
            }
        }
        Ok(())
    }

    fn skip_elements(&mut self, elem: &Node, len: u64, bytes: ByteKind, cur: &mut Cursor) -> Result<(), Error> {
        if bytes != ByteKind::No {
            cur.align(8)?;
            cur.bytes(len)?;
            return Ok(());
        }
        self.check_count(elem, len, cur)?;
        for _ in 0..len {
            self.skip(elem, cur)?;
        }
        Ok(())
    }

    /// Reads a node into `slot`, reusing the strings, byte buffers and lists `slot` holds from a
    /// recycled event: allocation and freeing were a quarter of all decoding instructions.
    fn read_into(&mut self, node: &Node, cur: &mut Cursor, slot: &mut Value) -> Result<(), Error> {
        match node {
            Node::Int(n) => {
                let (raw, signed) = self.int(n, cur)?;
                // Overwriting a number in place skips dropping the old value.
                match (slot, n.signed) {
                    (Value::UInt(x), false) => *x = raw,
                    (Value::SInt(x), true) => *x = signed,
                    (slot, _) => *slot = if n.signed { Value::SInt(signed) } else { Value::UInt(raw) },
                }
            }
            Node::Str => set_text(slot, cur.cstring()?),
            Node::Struct { fields, .. } => {
                cur.align(node.align())?;
                let mut out = match std::mem::replace(slot, Value::UInt(0)) {
                    Value::Struct(v) => v,
                    _ => Vec::with_capacity(fields.len()),
                };
                out.truncate(fields.len());
                for (i, (name, f)) in fields.iter().enumerate() {
                    match out.get_mut(i) {
                        Some((n, v)) => {
                            if !std::sync::Arc::ptr_eq(n, name) {
                                *n = name.clone();
                            }
                            self.read_into(f, cur, v)?;
                        }
                        None => out.push((name.clone(), self.read(f, cur)?)),
                    }
                }
                *slot = Value::Struct(out);
            }
            Node::Array { elem, len, bytes } => self.elements_into(elem, *len, *bytes, cur, slot)?,
            Node::Sequence { elem, len_slot, bytes } => {
                let len = self.slots[*len_slot];
                if len < 0 {
                    return Err(cur.err(format!("sequence length {len} is negative")));
                }
                self.elements_into(elem, len as u64, *bytes, cur, slot)?
            }
            // Enums, floats and variants hold nothing worth reusing.
            Node::Enum { int, labels } => {
                let (raw, signed) = self.int(int, cur)?;
                let value = if int.signed { signed } else { raw as i64 };
                let label = labels.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&value)).map(|l| l.2.clone());
                *slot = Value::Enum { value, label };
            }
            Node::Float { bits, align, le } => {
                cur.align(*align)?;
                let raw = cur.uint(*bits, *le)?;
                *slot = Value::Float(if *bits == 32 { f32::from_bits(raw as u32) as f64 } else { f64::from_bits(raw) });
            }
            Node::Variant { tag_slot, options, select } => {
                let i = self.select(*tag_slot, select, cur)?;
                let (name, n) = &options[i];
                *slot = Value::Variant { option: name.clone(), value: Box::new(self.read(n, cur)?) };
            }
        }
        Ok(())
    }

    fn elements_into(&mut self, elem: &Node, len: u64, bytes: ByteKind, cur: &mut Cursor, slot: &mut Value) -> Result<(), Error> {
        match bytes {
            ByteKind::Bytes => {
                cur.align(8)?;
                let b = cur.bytes(len)?;
                match slot {
                    Value::Bytes(v) => {
                        v.clear();
                        v.extend_from_slice(b);
                    }
                    _ => *slot = Value::Bytes(b.to_vec()),
                }
            }
            ByteKind::Text => {
                cur.align(8)?;
                let b = cur.bytes(len)?;
                set_text(slot, &b[..memchr::memchr(0, b).unwrap_or(b.len())]);
            }
            ByteKind::No => {
                self.check_count(elem, len, cur)?;
                let mut out = match std::mem::replace(slot, Value::UInt(0)) {
                    Value::Array(v) => v,
                    _ => Vec::with_capacity(len.min(cur.end - cur.pos + 1) as usize),
                };
                out.truncate(len as usize);
                for i in 0..len as usize {
                    match out.get_mut(i) {
                        Some(v) => self.read_into(elem, cur, v)?,
                        None => out.push(self.read(elem, cur)?),
                    }
                }
                *slot = Value::Array(out);
            }
        }
        Ok(())
    }

    /// A top-level scope (always a struct) as a flat list of its field values, written over `out`
    /// (a recycled event's list, or an empty one).
    fn read_scope_into(&mut self, node: &Option<Node>, cur: &mut Cursor, out: &mut Vec<Value>) -> Result<(), Error> {
        let Some(node) = node else {
            out.clear();
            return Ok(());
        };
        let Node::Struct { fields, .. } = node else {
            out.clear();
            return Ok(());
        };
        cur.align(node.align())?;
        out.truncate(fields.len());
        for (i, (_, f)) in fields.iter().enumerate() {
            match out.get_mut(i) {
                Some(v) => self.read_into(f, cur, v)?,
                None => out.push(self.read(f, cur)?),
            }
        }
        Ok(())
    }
}

/// Where a stream's bytes come from: memory (fuzzing, tests), or a file read packet by packet.
pub(crate) enum Source<'t> {
    Memory(&'t [u8]),
    /// The file and its length. Only the current packet is held (in [`StreamReader::buf`]), so
    /// memory follows the packet size (LTTng's sub-buffer, ≤ a few MB), never the file size.
    File(&'t std::fs::File, u64),
}

/// A packet header and context fit in this many bytes (LTTng's take under 100); more is read
/// only when they do not.
const HEADER_CHUNK: usize = 4096;
/// The largest packet read from a file: memory per stream is bounded by it.
const MAX_PACKET_BYTES: usize = 64 << 20;

/// Decodes one stream file, packet after packet.
struct StreamReader<'t> {
    meta: &'t Metadata,
    index: usize,
    path: &'t Path,
    source: Source<'t>,
    /// The current packet's bytes, for a file source (reused from packet to packet): the first
    /// `filled` bytes are the packet's; the rest is an earlier packet's, never read.
    buf: Vec<u8>,
    filled: usize,
    /// Byte offset of the next packet.
    next_packet: u64,
    /// The current packet: its start, content end (bits from its start), and stream class.
    packet: Option<(u64, u64, u64, &'t StreamClass)>,
    state: State,
    discarded: u64,
}

impl<'t> StreamReader<'t> {
    fn new(meta: &'t Metadata, index: usize, path: &'t Path, source: Source<'t>) -> Self {
        StreamReader {
            meta,
            index,
            path,
            source,
            buf: Vec::new(),
            filled: 0,
            next_packet: 0,
            packet: None,
            state: State {
                slots: vec![0; meta.slot_count],
                clock: 0,
                magic: None,
                stream_id: None,
                event_id: None,
                content_size: None,
                packet_size: None,
                events_discarded: None,
                cpu_id: None,
            },
            discarded: 0,
        }
    }

    fn len(&self) -> u64 {
        match self.source {
            Source::Memory(m) => m.len() as u64,
            Source::File(_, len) => len,
        }
    }

    /// Makes `buf` hold the `n` bytes at `start` of a file source (those already there are kept).
    fn load(&mut self, start: u64, n: usize) -> Result<(), Error> {
        let Source::File(file, _) = self.source else { return Ok(()) };
        if self.filled >= n {
            return Ok(());
        }
        use std::os::unix::fs::FileExt as _;
        let have = self.filled;
        // Zeroed once when the buffer grows, not for every packet.
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        file.read_exact_at(&mut self.buf[have..n], start + have as u64)
            .map_err(|source| Error::Io { path: self.path.to_path_buf(), source })?;
        self.filled = n;
        Ok(())
    }

    fn open_packet(&mut self) -> Result<bool, Error> {
        let start = self.next_packet;
        let left = self.len().saturating_sub(start);
        if left == 0 {
            return Ok(false);
        }
        self.filled = 0;
        let mut chunk = (HEADER_CHUNK as u64).min(left) as usize;
        let (header_bits, packet_bits, content_bits, sc) = loop {
            self.load(start, chunk)?;
            match self.read_packet_header(start, chunk, left) {
                // The header and context ran past the bytes read: read more, up to a limit.
                Err(Error::Stream { offset, .. })
                    if offset + 64 >= start + chunk as u64 && (chunk as u64) < left && chunk < MAX_PACKET_BYTES =>
                {
                    chunk = (chunk as u64 * 16).min(left).min(MAX_PACKET_BYTES as u64) as usize
                }
                other => break other?,
            }
        };
        if matches!(self.source, Source::File(..)) && packet_bits / 8 > MAX_PACKET_BYTES as u64 {
            return Err(Error::Stream {
                path: self.path.to_path_buf(),
                offset: start,
                msg: format!(
                    "packet of {} bytes, above the reader's limit of {MAX_PACKET_BYTES} (LTTng's sub-buffers are a few MB): corrupt packet size?",
                    packet_bits / 8
                ),
            });
        }
        if packet_bits == 0
            || !packet_bits.is_multiple_of(8)
            || packet_bits > left * 8
            || content_bits > packet_bits
            || content_bits < header_bits
        {
            return Err(Error::Stream {
                path: self.path.to_path_buf(),
                offset: start,
                msg: format!(
                    "packet sizes do not fit: content {content_bits} bits, packet {packet_bits} bits, header {header_bits} bits, {} bits left in the file",
                    left * 8
                ),
            });
        }
        if let Some(d) = self.state.events_discarded {
            self.discarded = d;
        }
        // Only the content is decoded; padding after it is never read.
        self.load(start, content_bits.div_ceil(8) as usize)?;
        self.next_packet = start + packet_bits / 8;
        self.packet = Some((start, header_bits, content_bits, sc));
        Ok(true)
    }

    /// Reads the packet header and context from the `chunk` bytes at `start`: (header bits,
    /// packet bits, content bits), sizes defaulting to the rest of the file (`left` bytes).
    fn read_packet_header(&mut self, start: u64, chunk: usize, left: u64) -> Result<(u64, u64, u64, &'t StreamClass), Error> {
        let data = match self.source {
            Source::Memory(m) => &m[start as usize..],
            Source::File(..) => &self.buf[..chunk],
        };
        let mut cur = Cursor { data, pos: 0, end: data.len() as u64 * 8, base: start, path: self.path };
        let st = &mut self.state;
        st.magic = None;
        st.stream_id = None;
        st.content_size = None;
        st.packet_size = None;
        st.cpu_id = None;
        if let Some(h) = &self.meta.packet_header {
            st.skip(h, &mut cur)?;
        }
        if let Some(m) = st.magic
            && m != PACKET_MAGIC
        {
            return Err(Error::Stream {
                path: self.path.to_path_buf(),
                offset: start,
                msg: format!("packet magic {m:#x}, expected {PACKET_MAGIC:#x}: not a CTF data stream, or corrupt"),
            });
        }
        let sid = st.stream_id.unwrap_or_else(|| self.meta.streams.first().map(|s| s.id).unwrap_or(0));
        let Some(&si) = self.meta.stream_index.get(&sid) else {
            return Err(Error::Stream {
                path: self.path.to_path_buf(),
                offset: start,
                msg: format!("packet of stream class {sid}, which the metadata does not declare"),
            });
        };
        let sc = &self.meta.streams[si];
        if let Some(pc) = &sc.packet_context {
            st.skip(pc, &mut cur)?;
        }
        let packet_bits = st.packet_size.unwrap_or(left * 8);
        Ok((cur.pos, packet_bits, st.content_size.unwrap_or(packet_bits), sc))
    }

    /// The stream's next event; `spare` (a recycled event) lends its allocations.
    fn next_event(&mut self, spare: Option<Event<'t>>) -> Result<Option<Event<'t>>, Error> {
        loop {
            let (start, pos, end, sc) = match self.packet {
                Some(p) if p.1 < p.2 => p,
                _ => {
                    if !self.open_packet()? {
                        return Ok(None);
                    }
                    continue;
                }
            };
            let data = match self.source {
                Source::Memory(m) => &m[start as usize..start as usize + end.div_ceil(8) as usize],
                Source::File(..) => &self.buf[..end.div_ceil(8) as usize],
            };
            let mut cur = Cursor { data, pos, end, base: start, path: self.path };
            let meta = self.meta;
            let st = &mut self.state;
            st.event_id = None;
            if let Some(h) = &sc.event_header {
                st.skip(h, &mut cur)?;
            }
            let id = st.event_id.unwrap_or(0);
            let Some(ci) = sc.event_index(id) else {
                return Err(cur.err(format!("event id {id} of stream class {} is not in the metadata", sc.id)));
            };
            let class = &meta.events[ci];
            let cycles = st.clock;
            let (mut stream_context, mut context, mut payload) = match spare {
                Some(e) => (e.stream_context, e.context, e.payload),
                None => Default::default(),
            };
            st.read_scope_into(&sc.event_context, &mut cur, &mut stream_context)?;
            st.read_scope_into(&class.context, &mut cur, &mut context)?;
            st.read_scope_into(&class.fields, &mut cur, &mut payload)?;
            self.packet = Some((start, cur.pos, end, sc));
            let ns_from_origin = match sc.clock {
                Some(c) => meta.clocks[c].ns_from_origin(cycles),
                None => cycles as i64,
            };
            return Ok(Some(Event {
                class,
                stream_class: sc,
                stream: self.index,
                cycles,
                ns_from_origin,
                cpu_id: st.cpu_id,
                stream_context,
                context,
                payload,
            }));
        }
    }
}

/// The events of all streams of a trace, in time order.
pub struct Events<'t> {
    readers: Vec<StreamReader<'t>>,
    pending: Vec<Option<Event<'t>>>,
    /// Events handed back by [`Events::recycle`], whose allocations the next events reuse.
    spare: Vec<Event<'t>>,
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    started: bool,
    failed: bool,
}

impl<'t> Events<'t> {
    pub(crate) fn new(meta: &'t Metadata, streams: Vec<(&'t Path, Source<'t>)>) -> Self {
        let readers: Vec<_> = streams.into_iter().enumerate().map(|(i, (p, d))| StreamReader::new(meta, i, p, d)).collect();
        let pending = readers.iter().map(|_| None).collect();
        Events { readers, pending, spare: Vec::new(), heap: BinaryHeap::new(), started: false, failed: false }
    }

    /// Events the tracer reports it discarded (ring buffer full), summed over streams; complete
    /// once the iterator is exhausted.
    pub fn discarded(&self) -> u64 {
        self.readers.iter().map(|r| r.discarded).sum()
    }

    /// Hands back an event the caller is done with: the next events are decoded into its strings
    /// and lists instead of new ones (`while let Some(ev) = events.next() { …; events.recycle(ev) }`).
    /// Optional; iterating without it gives the same events.
    pub fn recycle(&mut self, ev: Event<'t>) {
        if self.spare.len() < 4 {
            self.spare.push(ev);
        }
    }

    fn refill(&mut self, i: usize) -> Result<(), Error> {
        if let Some(ev) = self.readers[i].next_event(None)? {
            self.heap.push(Reverse((ev.ns_from_origin, i)));
            self.pending[i] = Some(ev);
        }
        Ok(())
    }
}

impl<'t> Iterator for Events<'t> {
    type Item = Result<Event<'t>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if !self.started {
            self.started = true;
            for i in 0..self.readers.len() {
                if let Err(e) = self.refill(i) {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
        // Replacing the top in place sifts once, instead of a pop and a push per event.
        let mut top = self.heap.peek_mut()?;
        let i = top.0.1;
        let ev = self.pending[i].take();
        match self.readers[i].next_event(self.spare.pop()) {
            Ok(Some(next)) => {
                *top = Reverse((next.ns_from_origin, i));
                self.pending[i] = Some(next);
            }
            Ok(None) => {
                PeekMut::pop(top);
            }
            Err(e) => {
                PeekMut::pop(top);
                self.failed = true;
                return Some(Err(e));
            }
        }
        ev.map(Ok)
    }
}
