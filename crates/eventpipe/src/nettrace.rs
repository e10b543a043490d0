//! The streaming nettrace reader (format versions 4 and 5, what .NET 5–10 write for EventPipe
//! sessions): `Nettrace`, `!FastSerialization.1`, then a `Trace` object and a sequence of
//! `MetadataBlock`, `StackBlock`, `EventBlock` and `SPBlock` objects, ended by a null reference.
//! Format reference: microsoft/perfview `src/TraceEvent/EventPipe/EventPipeFormat.md`.
//!
//! Memory stays bounded whatever the input: one block at a time (≤ [`Limits::max_block`]), the
//! stacks since the last sequence point (≤ [`Limits::max_stack_bytes`]) and the metadata
//! definitions (≤ [`Limits::max_metadata`]).

use crate::fxhash::FxHashMap;
use std::io::Read;

use crate::error::{Error, Result};
use crate::metadata::EventMetadata;
use crate::varint;

/// Upper bounds on what a stream may make the reader hold.
#[derive(Clone, Debug)]
pub struct Limits {
    /// One block's size. The runtime flushes blocks of at most 100 KB.
    pub max_block: u32,
    /// Stack bytes kept between two sequence points.
    pub max_stack_bytes: usize,
    /// Distinct event metadata definitions.
    pub max_metadata: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_block: 64 << 20, max_stack_bytes: 512 << 20, max_metadata: 1 << 20 }
    }
}

/// The `Trace` object: what the writer says about the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInfo {
    /// Format version of the `Trace` object (4 for V4/V5 streams).
    pub version: u32,
    /// Session start, UTC: (year, month, day, hour, minute, second, millisecond).
    pub start_time: [u16; 7],
    /// QPC value at `start_time`.
    pub sync_time_qpc: u64,
    /// QPC ticks per second (1e9 on Linux, where QPC is CLOCK_MONOTONIC in ns).
    pub qpc_frequency: u64,
    pub pointer_size: u32,
    pub process_id: u32,
    pub processor_count: u32,
    /// SampleProfiler's sampling interval, ns.
    pub sampling_interval_ns: u32,
}

impl TraceInfo {
    /// Converts an event timestamp (QPC ticks) to nanoseconds of the same clock
    /// (CLOCK_MONOTONIC on Linux, so comparable with `perf record -k 1`).
    pub fn qpc_to_ns(&self, qpc: u64) -> u64 {
        if self.qpc_frequency == 0 || self.qpc_frequency == 1_000_000_000 {
            return qpc;
        }
        (u128::from(qpc) * 1_000_000_000 / u128::from(self.qpc_frequency)) as u64
    }

    /// Session start as Unix time in nanoseconds (from the header's SYSTEMTIME).
    pub fn start_unix_ns(&self) -> u64 {
        let [y, mo, d, h, mi, s, ms] = self.start_time.map(i64::from);
        // Days from civil (Howard Hinnant's algorithm).
        let y2 = if mo <= 2 { y - 1 } else { y };
        let era = y2.div_euclid(400);
        let yoe = y2 - era * 400;
        let mp = (mo + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let secs = days * 86_400 + h * 3600 + mi * 60 + s;
        (secs.max(0) as u64) * 1_000_000_000 + (ms.max(0) as u64) * 1_000_000
    }
}

/// Counters of what the reader saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes: u64,
    pub events: u64,
    pub metadata_events: u64,
    pub event_blocks: u64,
    pub metadata_blocks: u64,
    pub stack_blocks: u64,
    pub stacks: u64,
    pub sequence_points: u64,
    /// Events the writer dropped (buffers full), from gaps in per-thread sequence numbers.
    pub lost_events: u64,
}

/// One event, borrowed from the reader until the next call to [`NettraceReader::next_event`].
#[derive(Clone, Copy, Debug)]
pub struct EventRef<'a> {
    pub metadata: &'a EventMetadata,
    pub thread_id: u64,
    pub capture_thread_id: u64,
    pub processor: u32,
    pub sequence: u32,
    /// QPC ticks; see [`TraceInfo::qpc_to_ns`].
    pub timestamp: u64,
    pub activity_id: [u8; 16],
    pub related_activity_id: [u8; 16],
    /// Instruction pointers, leaf first (managed frames only); empty when the event has none.
    pub stack: &'a [u64],
    pub stack_id: u32,
    /// Sequence points read before this event: the writer restarts stack ids after each, so
    /// (`stack_epoch`, `stack_id`) names one stack for the whole stream.
    pub stack_epoch: u32,
    pub payload: &'a [u8],
    /// Byte offset of `payload` in the stream (for error messages).
    pub payload_offset: u64,
}

const TAG_NULL: u8 = 1;
const TAG_BEGIN_OBJECT: u8 = 5;
const TAG_END_OBJECT: u8 = 6;

const FLAG_METADATA_ID: u8 = 1 << 0;
const FLAG_CAPTURE_THREAD_AND_SEQUENCE: u8 = 1 << 1;
const FLAG_THREAD_ID: u8 = 1 << 2;
const FLAG_STACK_ID: u8 = 1 << 3;
const FLAG_ACTIVITY_ID: u8 = 1 << 4;
const FLAG_RELATED_ACTIVITY_ID: u8 = 1 << 5;
const FLAG_DATA_LENGTH: u8 = 1 << 7;

/// The compressed header's running state; reset at the start of every block.
#[derive(Clone, Copy, Default)]
struct HeaderState {
    metadata_id: u32,
    sequence: u32,
    capture_thread_id: u64,
    processor: u32,
    thread_id: u64,
    stack_id: u32,
    timestamp: u64,
    activity_id: [u8; 16],
    related_activity_id: [u8; 16],
    payload_size: u32,
}

/// Buffered input that knows its stream offset.
struct Input<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
}

impl<R: Read> Input<R> {
    fn new(inner: R) -> Self {
        Input { inner, buf: vec![0; 256 << 10].into_boxed_slice(), pos: 0, len: 0, base: 0 }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Refills; returns false at end of input.
    fn fill(&mut self) -> Result<bool> {
        if self.pos < self.len {
            return Ok(true);
        }
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Error::Io { offset: self.offset(), source }),
            }
        }
    }

    fn read_exact(&mut self, out: &mut [u8], what: &str) -> Result<()> {
        let mut done = 0;
        while done < out.len() {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let n = (self.len - self.pos).min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            done += n;
        }
        Ok(())
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        if !self.fill()? {
            return Err(Error::truncated(self.offset(), what));
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Replaces `out` with the next `n` bytes, growing it only as data arrives (a corrupt size
    /// on a short file costs no more memory than the file holds).
    fn read_vec(&mut self, n: usize, out: &mut Vec<u8>, what: &str) -> Result<()> {
        out.clear();
        while out.len() < n {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let k = (self.len - self.pos).min(n - out.len());
            out.extend_from_slice(&self.buf[self.pos..self.pos + k]);
            self.pos += k;
        }
        Ok(())
    }

    fn skip(&mut self, mut n: usize, what: &str) -> Result<()> {
        while n > 0 {
            if !self.fill()? {
                return Err(Error::truncated(self.offset(), what));
            }
            let k = (self.len - self.pos).min(n);
            self.pos += k;
            n -= k;
        }
        Ok(())
    }

    fn expect_tag(&mut self, tag: u8, what: &str) -> Result<()> {
        let at = self.offset();
        let got = self.u8(what)?;
        if got != tag {
            return Err(Error::format(at, format_args!("expected tag {tag} ({what}), found {got}")));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    None,
    Events,
}

/// Reads a nettrace stream event by event.
///
/// ```no_run
/// let file = std::fs::File::open("trace.nettrace")?;
/// let mut reader = eventpipe::NettraceReader::new(file)?;
/// while let Some(event) = reader.next_event()? {
///     println!("{}/{} {} bytes", event.metadata.provider, event.metadata.event_id, event.payload.len());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NettraceReader<R> {
    input: Input<R>,
    limits: Limits,
    info: TraceInfo,
    stats: Stats,
    /// The current event block.
    block: Vec<u8>,
    block_offset: u64,
    block_pos: usize,
    block_kind: BlockKind,
    state: HeaderState,
    metadata: Vec<EventMetadata>,
    metadata_index: FxHashMap<u32, usize>,
    current_meta: Option<usize>,
    /// Stacks since the last sequence point: `stack_ranges[id - stack_base]` indexes `stack_ips`.
    stack_base: u32,
    /// Sequence points read so far ([`EventRef::stack_epoch`]).
    stack_epoch: u32,
    stack_ranges: Vec<(u32, u32)>,
    stack_ips: Vec<u64>,
    /// Last sequence number seen per capture thread.
    sequences: FxHashMap<u64, u32>,
    /// The capture thread of the previous event and its sequence number (most events continue
    /// the previous one's thread: no map access then).
    last_thread: Option<(u64, u32)>,
    finished: bool,
}

impl<R: Read> NettraceReader<R> {
    /// Reads the stream's preamble and `Trace` object.
    pub fn new(inner: R) -> Result<Self> {
        Self::with_limits(inner, Limits::default())
    }

    pub fn with_limits(inner: R, limits: Limits) -> Result<Self> {
        let mut input = Input::new(inner);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic, "the `Nettrace` magic")?;
        if &magic != b"Nettrace" {
            return Err(Error::format(
                0,
                format_args!(
                    "not a nettrace stream: starts with {:02x?}, expected `Nettrace` (V3 and older .netperf files are not supported)",
                    magic
                ),
            ));
        }
        let at = input.offset();
        let len = input.u32("the serializer signature length")?;
        if len != 20 {
            return Err(Error::format(at, format_args!("serializer signature length {len}, expected 20")));
        }
        let mut sig = [0u8; 20];
        input.read_exact(&mut sig, "the serializer signature")?;
        if &sig != b"!FastSerialization.1" {
            return Err(Error::format(at + 4, "expected the `!FastSerialization.1` signature"));
        }
        let at = input.offset();
        let (name, version) = read_object_header(&mut input)?.ok_or_else(|| {
            Error::format(at, "the stream ends before its `Trace` object")
        })?;
        if name != "Trace" {
            return Err(Error::format(at, format_args!("the first object is `{name}`, expected `Trace`")));
        }
        if version >= 6 {
            return Err(Error::format(
                at,
                format_args!("nettrace format version {version} (written by `dotnet-trace collect-linux`) is not supported; V4/V5 are"),
            ));
        }
        let mut h = [0u8; 48];
        input.read_exact(&mut h, "the Trace header")?;
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap());
        // SYSTEMTIME: year, month, day-of-week, day, hour, minute, second, millisecond.
        let info = TraceInfo {
            version,
            start_time: [u16_at(0), u16_at(2), u16_at(6), u16_at(8), u16_at(10), u16_at(12), u16_at(14)],
            sync_time_qpc: u64_at(16),
            qpc_frequency: u64_at(24),
            pointer_size: u32_at(32),
            process_id: u32_at(36),
            processor_count: u32_at(40),
            sampling_interval_ns: u32_at(44),
        };
        if info.pointer_size != 4 && info.pointer_size != 8 {
            return Err(Error::format(at, format_args!("pointer size {} in the Trace header, expected 4 or 8", info.pointer_size)));
        }
        input.expect_tag(TAG_END_OBJECT, "end of the Trace object")?;
        Ok(NettraceReader {
            input,
            limits,
            info,
            stats: Stats::default(),
            block: Vec::new(),
            block_offset: 0,
            block_pos: 0,
            block_kind: BlockKind::None,
            state: HeaderState::default(),
            metadata: Vec::new(),
            metadata_index: FxHashMap::default(),
            current_meta: None,
            stack_base: 0,
            stack_epoch: 0,
            stack_ranges: Vec::new(),
            stack_ips: Vec::new(),
            sequences: FxHashMap::default(),
            last_thread: None,
            finished: false,
        })
    }

    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Every metadata definition seen so far.
    pub fn metadata(&self) -> &[EventMetadata] {
        &self.metadata
    }

    /// The next event, or `None` at the end of the stream.
    pub fn next_event(&mut self) -> Result<Option<EventRef<'_>>> {
        self.next_event_where(|_| true)
    }

    /// The next event `keep` accepts (`keep` sees every event, in order), or `None` at the end of
    /// the stream. Skipped events are counted in [`Stats`] too.
    pub fn next_event_where(&mut self, mut keep: impl FnMut(&EventRef<'_>) -> bool) -> Result<Option<EventRef<'_>>> {
        loop {
            if self.block_kind == BlockKind::Events && self.block_pos < self.block.len() {
                let start = self.block_pos;
                let (payload_start, payload_len) = self.parse_header(start)?;
                let Some(meta_index) = self.current_meta else {
                    return Err(Error::format(
                        self.block_offset + start as u64,
                        format_args!("event refers to metadata id {} that was never defined", self.state.metadata_id),
                    ));
                };
                self.block_pos = payload_start + payload_len;
                self.stats.events += 1;
                self.account_sequence();
                if keep(&self.event_at(meta_index, payload_start, payload_len)) {
                    return Ok(Some(self.event_at(meta_index, payload_start, payload_len)));
                }
                continue;
            }
            self.block_kind = BlockKind::None;
            if self.finished || !self.next_object()? {
                self.finished = true;
                self.stats.bytes = self.input.offset();
                return Ok(None);
            }
        }
    }

    /// The event whose header is in `state` and whose payload is at `payload_start`.
    #[inline]
    fn event_at(&self, meta_index: usize, payload_start: usize, payload_len: usize) -> EventRef<'_> {
        let s = &self.state;
        EventRef {
            metadata: &self.metadata[meta_index],
            thread_id: s.thread_id,
            capture_thread_id: s.capture_thread_id,
            processor: s.processor,
            sequence: s.sequence,
            timestamp: s.timestamp,
            activity_id: s.activity_id,
            related_activity_id: s.related_activity_id,
            stack: self.stack(s.stack_id),
            stack_id: s.stack_id,
            stack_epoch: self.stack_epoch,
            payload: &self.block[payload_start..payload_start + payload_len],
            payload_offset: self.block_offset + payload_start as u64,
        }
    }

    /// Stack by id (leaf first); empty when unknown or 0.
    #[inline]
    fn stack(&self, id: u32) -> &[u64] {
        if id == 0 || id < self.stack_base {
            return &[];
        }
        match self.stack_ranges.get((id - self.stack_base) as usize) {
            Some(&(start, len)) => &self.stack_ips[start as usize..(start + len) as usize],
            None => &[],
        }
    }

    #[inline]
    fn account_sequence(&mut self) {
        let (thread, seq) = (self.state.capture_thread_id, self.state.sequence);
        if thread == 0 && seq == 0 {
            return;
        }
        let last = match self.last_thread {
            Some((t, last)) if t == thread => Some(last),
            previous => {
                if let Some((t, last)) = previous {
                    self.sequences.insert(t, last);
                }
                self.sequences.get(&thread).copied()
            }
        };
        self.last_thread = Some((thread, seq));
        if let Some(last) = last {
            let gap = seq.wrapping_sub(last).wrapping_sub(1);
            // A huge "gap" is the counter going backwards (reordered data), not a loss.
            if gap != 0 && gap < u32::MAX / 2 {
                self.stats.lost_events += u64::from(gap);
            }
        }
    }

    /// Parses one compressed event header at `pos` of the current block; returns the payload's
    /// position and length.
    #[inline]
    fn parse_header(&mut self, pos: usize) -> Result<(usize, usize)> {
        let buf = &self.block;
        let mut p = pos;
        let off = self.block_offset;
        let vint = |e: varint::VarIntError, p: usize| match e {
            varint::VarIntError::Truncated => Error::truncated(off + p as u64, "an event header runs past its block"),
            varint::VarIntError::TooLong => Error::format(off + p as u64, "over-long varint in an event header"),
        };
        let flags = buf[p];
        p += 1;
        let s = &mut self.state;
        if flags & FLAG_METADATA_ID != 0 {
            s.metadata_id = varint::read_u32(buf, &mut p).map_err(|e| vint(e, p))?;
            self.current_meta = self.metadata_index.get(&s.metadata_id).copied();
        }
        if flags & FLAG_CAPTURE_THREAD_AND_SEQUENCE != 0 {
            let delta = varint::read_u32(buf, &mut p).map_err(|e| vint(e, p))?;
            s.sequence = s.sequence.wrapping_add(delta).wrapping_add(1);
            s.capture_thread_id = varint::read_u64(buf, &mut p).map_err(|e| vint(e, p))?;
            s.processor = varint::read_u32(buf, &mut p).map_err(|e| vint(e, p))?;
        } else if s.metadata_id != 0 {
            s.sequence = s.sequence.wrapping_add(1);
        }
        if flags & FLAG_THREAD_ID != 0 {
            s.thread_id = varint::read_u64(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        if flags & FLAG_STACK_ID != 0 {
            s.stack_id = varint::read_u32(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        let delta = varint::read_u64(buf, &mut p).map_err(|e| vint(e, p))?;
        s.timestamp = s.timestamp.wrapping_add(delta);
        if flags & FLAG_ACTIVITY_ID != 0 {
            let Some(g) = buf.get(p..p + 16) else {
                return Err(Error::truncated(off + p as u64, "an activity id runs past its block"));
            };
            s.activity_id.copy_from_slice(g);
            p += 16;
        }
        if flags & FLAG_RELATED_ACTIVITY_ID != 0 {
            let Some(g) = buf.get(p..p + 16) else {
                return Err(Error::truncated(off + p as u64, "a related activity id runs past its block"));
            };
            s.related_activity_id.copy_from_slice(g);
            p += 16;
        }
        if flags & FLAG_DATA_LENGTH != 0 {
            s.payload_size = varint::read_u32(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        let len = s.payload_size as usize;
        if buf.len() - p < len {
            return Err(Error::format(
                off + p as u64,
                format_args!("event payload of {len} bytes runs past its block ({} bytes left)", buf.len() - p),
            ));
        }
        Ok((p, len))
    }

    /// Reads the next object; false at the end-of-stream null reference.
    fn next_object(&mut self) -> Result<bool> {
        let at = self.input.offset();
        let Some((name, _version)) = read_object_header(&mut self.input)? else {
            return Ok(false);
        };
        match name.as_str() {
            "EventBlock" | "MetadataBlock" | "StackBlock" | "SPBlock" => {}
            "Trace" => return Err(Error::format(at, "a second `Trace` object")),
            other => return Err(Error::format(at, format_args!("unknown object type `{other}`"))),
        }
        let size_at = self.input.offset();
        let size = self.input.u32("a block size")?;
        if size > self.limits.max_block {
            return Err(Error::TooLarge { offset: size_at, what: "a block", size: size.into(), limit: self.limits.max_block.into() });
        }
        // Block contents start 4-byte aligned in the stream.
        let pad = (4 - (self.input.offset() % 4) as usize) % 4;
        self.input.skip(pad, "block padding")?;
        self.block_offset = self.input.offset();
        let mut block = std::mem::take(&mut self.block);
        self.input.read_vec(size as usize, &mut block, &format!("a {name} of {size} bytes at offset {size_at}"))?;
        self.block = block;
        self.input.expect_tag(TAG_END_OBJECT, "end of a block object")?;
        match name.as_str() {
            "EventBlock" => {
                self.stats.event_blocks += 1;
                self.block_pos = self.event_block_start()?;
                self.block_kind = BlockKind::Events;
            }
            "MetadataBlock" => {
                self.stats.metadata_blocks += 1;
                self.read_metadata_block()?;
            }
            "StackBlock" => {
                self.stats.stack_blocks += 1;
                self.read_stack_block()?;
            }
            _ => {
                self.stats.sequence_points += 1;
                self.read_sequence_point()?;
            }
        }
        Ok(true)
    }

    /// Checks an event or metadata block's header; returns where its events start.
    fn event_block_start(&mut self) -> Result<usize> {
        self.state = HeaderState::default();
        self.current_meta = None;
        let b = &self.block;
        if b.len() < 4 {
            return Err(Error::truncated(self.block_offset, "a block shorter than its header"));
        }
        let header_size = u16::from_le_bytes([b[0], b[1]]) as usize;
        let flags = u16::from_le_bytes([b[2], b[3]]);
        if header_size < 4 || header_size > b.len() {
            return Err(Error::format(self.block_offset, format_args!("block header size {header_size} (block is {} bytes)", b.len())));
        }
        if flags & 1 == 0 {
            return Err(Error::format(
                self.block_offset,
                "uncompressed event blocks (written by .NET Core 3.x) are not supported: this reader handles the compressed rows of .NET 5 and later",
            ));
        }
        Ok(header_size)
    }

    fn read_metadata_block(&mut self) -> Result<()> {
        let mut pos = self.event_block_start()?;
        while pos < self.block.len() {
            let (start, len) = self.parse_header(pos)?;
            pos = start + len;
            let offset = self.block_offset + start as u64;
            let meta = EventMetadata::parse(&self.block[start..start + len], offset)?;
            self.stats.metadata_events += 1;
            if let Some(&i) = self.metadata_index.get(&meta.metadata_id) {
                self.metadata[i] = meta;
            } else {
                if self.metadata.len() >= self.limits.max_metadata {
                    return Err(Error::TooLarge {
                        offset,
                        what: "the number of metadata definitions",
                        size: self.metadata.len() as u64 + 1,
                        limit: self.limits.max_metadata as u64,
                    });
                }
                self.metadata_index.insert(meta.metadata_id, self.metadata.len());
                self.metadata.push(meta);
            }
        }
        Ok(())
    }

    fn read_stack_block(&mut self) -> Result<()> {
        let b = &self.block;
        let off = self.block_offset;
        if b.len() < 8 {
            return Err(Error::truncated(off, "a stack block shorter than its header"));
        }
        let first_id = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let count = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if self.stack_ranges.is_empty() {
            self.stack_base = first_id;
        }
        let next_id = self.stack_base as u64 + self.stack_ranges.len() as u64;
        if u64::from(first_id) < next_id {
            return Err(Error::format(off, format_args!("stack block starts at id {first_id}, but ids up to {} are already defined", next_id - 1)));
        }
        // Ids are consecutive in what the runtime writes; a small gap is filled with empty
        // stacks, a large one is corrupt data (filling it would cost memory the input never paid for).
        let gap = u64::from(first_id) - next_id;
        if gap > 4096 {
            return Err(Error::format(off, format_args!("stack block starts at id {first_id}, far after the last id {}", next_id.saturating_sub(1))));
        }
        for _ in 0..gap {
            self.stack_ranges.push((0, 0));
        }
        let ptr = self.info.pointer_size as usize;
        let mut p = 8usize;
        for i in 0..count {
            let Some(sz) = b.get(p..p + 4) else {
                return Err(Error::truncated(off + p as u64, format_args!("stack {} of {count} runs past its block", i + 1)));
            };
            let size = u32::from_le_bytes(sz.try_into().unwrap()) as usize;
            p += 4;
            if !size.is_multiple_of(ptr) || b.len() - p < size {
                return Err(Error::format(off + p as u64 - 4, format_args!("stack of {size} bytes (pointer size {ptr}, {} bytes left in block)", b.len() - p)));
            }
            if (self.stack_ips.len() + size / ptr) * 8 > self.limits.max_stack_bytes {
                return Err(Error::TooLarge {
                    offset: off + p as u64,
                    what: "the stacks between two sequence points",
                    size: ((self.stack_ips.len() + size / ptr) * 8) as u64,
                    limit: self.limits.max_stack_bytes as u64,
                });
            }
            let start = self.stack_ips.len() as u32;
            if ptr == 8 {
                self.stack_ips.extend(b[p..p + size].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
            } else {
                self.stack_ips.extend(b[p..p + size].chunks_exact(4).map(|c| u64::from(u32::from_le_bytes(c.try_into().unwrap()))));
            }
            self.stack_ranges.push((start, (size / ptr) as u32));
            p += size;
        }
        self.stats.stacks += u64::from(count);
        Ok(())
    }

    fn read_sequence_point(&mut self) -> Result<()> {
        let b = &self.block;
        let off = self.block_offset;
        if b.len() < 12 {
            return Err(Error::truncated(off, "a sequence point block shorter than its header"));
        }
        let threads = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        if (b.len() - 12) / 12 < threads {
            return Err(Error::format(off + 8, format_args!("sequence point lists {threads} threads, its block holds at most {}", (b.len() - 12) / 12)));
        }
        if let Some((t, last)) = self.last_thread.take() {
            self.sequences.insert(t, last);
        }
        let mut seen = FxHashMap::default();
        for i in 0..threads {
            let e = &b[12 + i * 12..24 + i * 12];
            let thread = u64::from_le_bytes(e[0..8].try_into().unwrap());
            let seq = u32::from_le_bytes(e[8..12].try_into().unwrap());
            if let Some(&last) = self.sequences.get(&thread) {
                let gap = seq.wrapping_sub(last);
                if gap != 0 && gap < u32::MAX / 2 {
                    self.stats.lost_events += u64::from(gap);
                }
            }
            seen.insert(thread, seq);
        }
        self.sequences = seen;
        // The writer restarts stack ids after each sequence point (ep-file.c).
        self.stack_ranges.clear();
        self.stack_ips.clear();
        self.stack_base = 0;
        self.stack_epoch = self.stack_epoch.wrapping_add(1);
        Ok(())
    }
}

/// Reads `BeginObject, BeginObject(type), NullReference, version, minReaderVersion, name,
/// EndObject`; `None` at the end-of-stream null reference.
fn read_object_header<R: Read>(input: &mut Input<R>) -> Result<Option<(String, u32)>> {
    let at = input.offset();
    let tag = input.u8("the next object (the stream has no end marker)")?;
    if tag == TAG_NULL {
        return Ok(None);
    }
    if tag != TAG_BEGIN_OBJECT {
        return Err(Error::format(at, format_args!("expected an object (tag 5) or the end marker (tag 1), found byte {tag:#04x}")));
    }
    input.expect_tag(TAG_BEGIN_OBJECT, "begin of a type description")?;
    input.expect_tag(TAG_NULL, "the type's type (null)")?;
    let version = input.u32("an object version")?;
    let _min_reader = input.u32("an object's minimum reader version")?;
    let len_at = input.offset();
    let len = input.u32("an object type name length")?;
    if len == 0 || len > 64 {
        return Err(Error::format(len_at, format_args!("object type name length {len}, expected 1..64")));
    }
    let mut name = vec![0u8; len as usize];
    input.read_exact(&mut name, "an object type name")?;
    let name = String::from_utf8(name).map_err(|_| Error::format(len_at + 4, "object type name is not UTF-8"))?;
    input.expect_tag(TAG_END_OBJECT, "end of a type description")?;
    Ok(Some((name, version)))
}
