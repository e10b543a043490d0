//! The streaming nettrace reader (format versions 4 and 5, what .NET 5–10 write for EventPipe
//! sessions): `Nettrace`, `!FastSerialization.1`, then a `Trace` object and a sequence of
//! `MetadataBlock`, `StackBlock`, `EventBlock` and `SPBlock` objects, ended by a null reference.
//! Format reference: microsoft/perfview `src/TraceEvent/EventPipe/EventPipeFormat.md`.
//!
//! Memory stays bounded whatever the input: one block at a time (≤ [`Limits::max_block`]), the
//! stacks since the last sequence point (≤ [`Limits::max_stack_bytes`]) and the metadata
//! definitions (≤ [`Limits::max_metadata`]); [`NettraceReader::read_ahead`] adds the chunks of
//! input read ahead on a second thread (512 KB each, at most 8 alive: 4 MB), and
//! [`NettraceReader::from_file`] the pages of the file mapped around the parser (≤ 16 MB).

mod input;

use crate::fxhash::{FxHashMap, IdMap};
use std::io::Read;

use input::{Input, PageSteps, ReadAhead};

use crate::error::{Error, Result};
use crate::metadata::EventMetadata;
use crate::varint::{self, Shifts, Squeeze};

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

/// QPC ticks at `frequency` per second as nanoseconds (a frequency of 0, as some writers leave
/// it, means the ticks are nanoseconds already).
pub(crate) fn qpc_ticks_to_ns(qpc: u64, frequency: u64) -> u64 {
    if frequency == 0 || frequency == 1_000_000_000 {
        return qpc;
    }
    (u128::from(qpc) * 1_000_000_000 / u128::from(frequency)) as u64
}

impl TraceInfo {
    /// Converts an event timestamp (QPC ticks) to nanoseconds of the same clock
    /// (CLOCK_MONOTONIC on Linux, so comparable with `perf record -k 1`).
    pub fn qpc_to_ns(&self, qpc: u64) -> u64 {
        qpc_ticks_to_ns(qpc, self.qpc_frequency)
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
    /// The stacks defined since the last sequence point, where [`EventRef::stack`] looks
    /// `stack_id` up: only when asked, as most consumers want a stack for few events.
    stacks: &'a StackTable,
    pub stack_id: u32,
    /// Sequence points read before this event: the writer restarts stack ids after each, so
    /// (`stack_epoch`, `stack_id`) names one stack for the whole stream.
    pub stack_epoch: u32,
    pub payload: &'a [u8],
    /// Byte offset of `payload` in the stream (for error messages).
    pub payload_offset: u64,
}

impl<'a> EventRef<'a> {
    /// Instruction pointers, leaf first (managed frames only); empty when the event has none or
    /// its stack id is not defined.
    #[inline]
    pub fn stack(&self) -> &'a [u64] {
        self.stacks.stack(self.stack_id)
    }
}

/// The stacks defined since the last sequence point: `ranges[id - base]` indexes `ips`.
#[derive(Default)]
struct StackTable {
    base: u32,
    ranges: Vec<(u32, u32)>,
    ips: Vec<u64>,
}

impl std::fmt::Debug for StackTable {
    /// Its size, not its contents: an event's Debug output shows the table it refers to.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StackTable {{ base: {}, stacks: {} }}", self.base, self.ranges.len())
    }
}

impl StackTable {
    /// The stack `id` (leaf first); empty when unknown or 0.
    #[inline]
    fn stack(&self, id: u32) -> &[u64] {
        if id == 0 || id < self.base {
            return &[];
        }
        match self.ranges.get((id - self.base) as usize) {
            Some(&(start, len)) => &self.ips[start as usize..(start + len) as usize],
            None => &[],
        }
    }
}

/// How far ahead of the event it parses the reader asks for the cache line of the input
/// (`_mm_prefetch`): the hardware's prefetcher stops at page ends, and a mapped file's next page
/// then cost a cache miss on the first byte of an event header (9–15 % of a parse-only pass). 2 KB,
/// some 20–40 events: faster than 1 or 4 KB on 42 and 271 MB traces.
const PREFETCH: usize = 2048;
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

/// The current block's bytes: where they are in the input's buffer, or the copy in `block`. A
/// macro, not a method, so that it borrows only those two fields.
macro_rules! block_bytes {
    ($reader:expr) => {
        match $reader.block_at {
            Some((start, end)) => &$reader.input.bytes()[start..end],
            None => &$reader.block[..],
        }
    };
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
    /// The current block, copied; or, for [`NettraceReader::for_each_event`], where it is in the
    /// input's buffer when it is whole there (`block_at`; see [`block_bytes!`]).
    block: Vec<u8>,
    block_at: Option<(usize, usize)>,
    block_offset: u64,
    block_pos: usize,
    block_kind: BlockKind,
    state: HeaderState,
    metadata: Vec<EventMetadata>,
    /// Index into `metadata` of each id's definition.
    metadata_index: IdMap<usize>,
    /// The metadata id of the previous event in the block and its definition's index.
    meta: (u32, Option<usize>),
    /// Stacks since the last sequence point.
    stacks: StackTable,
    /// Sequence points read so far ([`EventRef::stack_epoch`]).
    stack_epoch: u32,
    /// Last sequence number seen per capture thread.
    sequences: FxHashMap<u64, u32>,
    /// The capture thread of the previous event and its sequence number (most events continue
    /// the previous one's thread: no map access then).
    last_thread: Option<(u64, u32)>,
    finished: bool,
}

impl<R: Read + Send + 'static> NettraceReader<R> {
    /// Reads the rest of the input on a thread of its own, a chunk ahead of the parser, so that
    /// reading (the kernel's copy, 20–30 % of a parse-only pass over a large file) runs beside
    /// parsing; on a machine with one CPU, or if no thread can be started, the reader stays as it
    /// is. For files and pipes: dropping the reader waits for the read in progress.
    pub fn read_ahead(self) -> Self {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return self;
        }
        self.read_ahead_in_chunks(ReadAhead::CHUNK)
    }

    fn read_ahead_in_chunks(mut self, chunk_size: usize) -> Self {
        self.input.read_ahead(chunk_size);
        self
    }
}

impl NettraceReader<std::fs::File> {
    /// Reads a trace file through a read-only map of it, with its pages mapped ahead of the
    /// parser on a second thread and released behind it (at most 16 MB of the file resident):
    /// no copy of the file at all, where [`read_ahead`](Self::read_ahead) has the kernel copy it
    /// on a second thread. A file that cannot be mapped (a pipe, a device) is read ahead. The
    /// file must not shrink while it is read (its pages past the new end would fault with
    /// SIGBUS); a trace still being written is read up to where it ended when it was opened.
    pub fn from_file(file: std::fs::File) -> Result<Self> {
        let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        Self::from_file_with(file, PageSteps::DEFAULT, two_cpus)
    }

    /// [`from_file`](Self::from_file) with the pages' steps, and with or without the pager thread.
    fn from_file_with(file: std::fs::File, steps: PageSteps, pager: bool) -> Result<Self> {
        let is_file = file.metadata().is_ok_and(|m| m.is_file());
        match is_file.then(|| Input::mapped(&file, steps, pager)) {
            Some(Ok(input)) => Self::from_input(input, Limits::default()),
            // Not a regular file, or not mappable: read it as a stream.
            _ => Ok(Self::new(file)?.read_ahead()),
        }
    }
}

impl<R: Read> NettraceReader<R> {
    /// Reads the stream's preamble and `Trace` object.
    pub fn new(inner: R) -> Result<Self> {
        Self::with_limits(inner, Limits::default())
    }

    pub fn with_limits(inner: R, limits: Limits) -> Result<Self> {
        Self::from_input(Input::new(inner), limits)
    }

    fn from_input(mut input: Input<R>, limits: Limits) -> Result<Self> {
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
            block_at: None,
            block_offset: 0,
            block_pos: 0,
            block_kind: BlockKind::None,
            state: HeaderState::default(),
            metadata: Vec::new(),
            metadata_index: IdMap::default(),
            meta: (0, None),
            stacks: StackTable::default(),
            stack_epoch: 0,
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
                let (payload_start, payload_len) = self.state.parse(&self.block, start, self.block_offset)?;
                let meta_index = self.metadata_of_state(start)?;
                self.block_pos = payload_start + payload_len;
                self.stats.events += 1;
                self.stats.lost_events += account_sequence(&mut self.sequences, &mut self.last_thread, self.state.capture_thread_id, self.state.sequence);
                if keep(&self.event_at(meta_index, payload_start, payload_len)) {
                    return Ok(Some(self.event_at(meta_index, payload_start, payload_len)));
                }
                continue;
            }
            self.block_kind = BlockKind::None;
            if self.finished || !self.next_object(false)? {
                self.finished = true;
                self.stats.bytes = self.input.offset();
                return Ok(None);
            }
        }
    }

    /// Hands every remaining event to `each`, in order: what a loop over
    /// [`next_event`](Self::next_event) does, with the header state of a block kept in locals and
    /// a block read where it lies in the input's buffer, not copied (with
    /// [`read_ahead`](Self::read_ahead): a quarter less time per event than pulling). Events
    /// before an error are handed out; after an error the reader is at its end.
    pub fn for_each_event(&mut self, mut each: impl FnMut(&EventRef<'_>)) -> Result<()> {
        let result = self.hand_out_all(&mut each);
        // A block read in place is gone once the buffer moves on: nothing of it is left to pull.
        self.block_at = None;
        if result.is_err() {
            (self.block_kind, self.finished) = (BlockKind::None, true);
        }
        result
    }

    fn hand_out_all(&mut self, each: &mut impl FnMut(&EventRef<'_>)) -> Result<()> {
        if self.block_at.is_none() && self.block_kind == BlockKind::Events {
            self.events_of_block(each)?;
        }
        loop {
            self.block_kind = BlockKind::None;
            if self.finished || !self.next_object(true)? {
                self.finished = true;
                self.stats.bytes = self.input.offset();
                return Ok(());
            }
            if self.block_kind == BlockKind::Events {
                self.events_of_block(each)?;
            }
        }
    }

    /// The rest of the current event block, handed to `each`: with `pext` where it is fast.
    #[inline]
    fn events_of_block(&mut self, each: &mut impl FnMut(&EventRef<'_>)) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        if varint::fast_pext() {
            // SAFETY: the CPU has BMI2.
            return unsafe { self.events_of_block_bmi2(each) };
        }
        self.events_of_block_with::<Shifts>(each)
    }

    /// [`events_of_block_with`](Self::events_of_block_with) built for BMI2: only on a CPU with it.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi2")]
    unsafe fn events_of_block_bmi2(&mut self, each: &mut impl FnMut(&EventRef<'_>)) -> Result<()> {
        self.events_of_block_with::<varint::Pext>(each)
    }

    #[inline(always)]
    fn events_of_block_with<S: Squeeze>(&mut self, each: &mut impl FnMut(&EventRef<'_>)) -> Result<()> {
        let (buf, off) = (block_bytes!(self), self.block_offset);
        let mut state = self.state;
        let mut pos = self.block_pos;
        let mut meta = self.meta;
        let (mut events, mut lost) = (0u64, 0u64);
        let mut result = Ok(());
        while pos < buf.len() {
            prefetch(buf, pos + PREFETCH);
            let (payload_start, payload_len) = match state.parse_with::<S>(buf, pos, off) {
                Ok(at) => at,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if state.metadata_id != meta.0 {
                meta = (state.metadata_id, self.metadata_index.get(state.metadata_id).copied());
            }
            let Some(meta_index) = meta.1 else {
                result = Err(undefined_metadata(off + pos as u64, state.metadata_id));
                break;
            };
            pos = payload_start + payload_len;
            events += 1;
            lost += account_sequence(&mut self.sequences, &mut self.last_thread, state.capture_thread_id, state.sequence);
            each(&state.event(
                &self.metadata[meta_index],
                &self.stacks,
                self.stack_epoch,
                &buf[payload_start..payload_start + payload_len],
                off + payload_start as u64,
            ));
        }
        (self.state, self.block_pos, self.meta) = (state, pos, meta);
        self.stats.events += events;
        self.stats.lost_events += lost;
        result
    }

    /// The index of the metadata named by the header state (of the header at `start`).
    #[inline]
    fn metadata_of_state(&mut self, start: usize) -> Result<usize> {
        let id = self.state.metadata_id;
        if id != self.meta.0 {
            self.meta = (id, self.metadata_index.get(id).copied());
        }
        self.meta.1.ok_or_else(|| undefined_metadata(self.block_offset + start as u64, id))
    }

    /// The event whose header is in `state` and whose payload is at `payload_start`.
    #[inline]
    fn event_at(&self, meta_index: usize, payload_start: usize, payload_len: usize) -> EventRef<'_> {
        self.state.event(
            &self.metadata[meta_index],
            &self.stacks,
            self.stack_epoch,
            &self.block[payload_start..payload_start + payload_len],
            self.block_offset + payload_start as u64,
        )
    }

    /// Reads the next object; false at the end-of-stream null reference.
    /// `in_place`: a block whole in the input's buffer is read there (`block_at`), not copied.
    fn next_object(&mut self, in_place: bool) -> Result<bool> {
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
        self.block_at = if in_place { self.input.take_in_place(size as usize) } else { None };
        if self.block_at.is_none() {
            let mut block = std::mem::take(&mut self.block);
            self.input.read_vec(size as usize, &mut block, &format!("a {name} of {size} bytes at offset {size_at}"))?;
            self.block = block;
        }
        self.input.expect_tag(TAG_END_OBJECT, "end of a block object")?;
        self.input.passed();
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
        // An event before any metadata id in its block has id 0, never defined.
        self.meta = (0, None);
        let b = block_bytes!(self);
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
        while pos < block_bytes!(self).len() {
            let (start, len) = self.state.parse(block_bytes!(self), pos, self.block_offset)?;
            pos = start + len;
            let offset = self.block_offset + start as u64;
            let meta = EventMetadata::parse(&block_bytes!(self)[start..start + len], offset)?;
            self.stats.metadata_events += 1;
            if let Some(&i) = self.metadata_index.get(meta.metadata_id) {
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
        let b = block_bytes!(self);
        let off = self.block_offset;
        if b.len() < 8 {
            return Err(Error::truncated(off, "a stack block shorter than its header"));
        }
        let first_id = u32::from_le_bytes(b[0..4].try_into().unwrap());
        let count = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if self.stacks.ranges.is_empty() {
            self.stacks.base = first_id;
        }
        let next_id = self.stacks.base as u64 + self.stacks.ranges.len() as u64;
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
            self.stacks.ranges.push((0, 0));
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
            if (self.stacks.ips.len() + size / ptr) * 8 > self.limits.max_stack_bytes {
                return Err(Error::TooLarge {
                    offset: off + p as u64,
                    what: "the stacks between two sequence points",
                    size: ((self.stacks.ips.len() + size / ptr) * 8) as u64,
                    limit: self.limits.max_stack_bytes as u64,
                });
            }
            let start = self.stacks.ips.len() as u32;
            if ptr == 8 {
                self.stacks.ips.extend(b[p..p + size].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
            } else {
                self.stacks.ips.extend(b[p..p + size].chunks_exact(4).map(|c| u64::from(u32::from_le_bytes(c.try_into().unwrap()))));
            }
            self.stacks.ranges.push((start, (size / ptr) as u32));
            p += size;
        }
        self.stats.stacks += u64::from(count);
        Ok(())
    }

    fn read_sequence_point(&mut self) -> Result<()> {
        let b = block_bytes!(self);
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
        self.stacks.ranges.clear();
        self.stacks.ips.clear();
        self.stacks.base = 0;
        self.stack_epoch = self.stack_epoch.wrapping_add(1);
        Ok(())
    }
}

/// Asks the CPU for the cache line of `buf[at]` (`at` may be past the end: a prefetch of any
/// address is only a hint, it never faults).
#[inline(always)]
fn prefetch(buf: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees, and `wrapping_add` makes an address
    // without claiming it is in `buf`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(buf.as_ptr().wrapping_add(at).cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}

fn undefined_metadata(offset: u64, id: u32) -> Error {
    Error::format(offset, format_args!("event refers to metadata id {id} that was never defined"))
}


/// Notes that `thread` wrote event `seq`; returns how many events of the thread's numbering
/// were skipped since its previous one (events the writer dropped). `last` is the previous
/// event's thread and number: most events continue it, with no map access then.
#[inline(always)]
fn account_sequence(sequences: &mut FxHashMap<u64, u32>, last: &mut Option<(u64, u32)>, thread: u64, seq: u32) -> u64 {
    if thread == 0 && seq == 0 {
        return 0;
    }
    let before = match *last {
        Some((t, before)) if t == thread => Some(before),
        previous => {
            if let Some((t, before)) = previous {
                sequences.insert(t, before);
            }
            sequences.get(&thread).copied()
        }
    };
    *last = Some((thread, seq));
    let Some(before) = before else { return 0 };
    let gap = seq.wrapping_sub(before).wrapping_sub(1);
    // A huge "gap" is the counter going backwards (reordered data), not a loss.
    if gap != 0 && gap < u32::MAX / 2 { u64::from(gap) } else { 0 }
}

impl HeaderState {
    /// The event this header state describes, with what the reader knows beside it.
    #[inline]
    fn event<'a>(&self, metadata: &'a EventMetadata, stacks: &'a StackTable, stack_epoch: u32, payload: &'a [u8], payload_offset: u64) -> EventRef<'a> {
        EventRef {
            metadata,
            thread_id: self.thread_id,
            capture_thread_id: self.capture_thread_id,
            processor: self.processor,
            sequence: self.sequence,
            timestamp: self.timestamp,
            activity_id: self.activity_id,
            related_activity_id: self.related_activity_id,
            stacks,
            stack_id: self.stack_id,
            stack_epoch,
            payload,
            payload_offset,
        }
    }

    /// Parses the compressed event header at `pos` of `buf` (a block at stream offset `off`)
    /// into the running state; returns the payload's position and length.
    #[inline(always)]
    fn parse(&mut self, buf: &[u8], pos: usize, off: u64) -> Result<(usize, usize)> {
        self.parse_with::<Shifts>(buf, pos, off)
    }

    /// [`parse`](Self::parse), squeezing varints with `S`.
    #[inline(always)]
    fn parse_with<S: Squeeze>(&mut self, buf: &[u8], pos: usize, off: u64) -> Result<(usize, usize)> {
        let mut p = pos;
        let vint = |e: varint::VarIntError, p: usize| match e {
            varint::VarIntError::Truncated => Error::truncated(off + p as u64, "an event header runs past its block"),
            varint::VarIntError::TooLong => Error::format(off + p as u64, "over-long varint in an event header"),
        };
        let flags = buf[p];
        p += 1;
        let s = self;
        if flags & FLAG_METADATA_ID != 0 {
            s.metadata_id = varint::read_u32_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        if flags & FLAG_CAPTURE_THREAD_AND_SEQUENCE != 0 {
            let delta = varint::read_u32_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
            s.sequence = s.sequence.wrapping_add(delta).wrapping_add(1);
            s.capture_thread_id = varint::read_u64_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
            s.processor = varint::read_u32_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
        } else if s.metadata_id != 0 {
            s.sequence = s.sequence.wrapping_add(1);
        }
        if flags & FLAG_THREAD_ID != 0 {
            s.thread_id = varint::read_u64_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        if flags & FLAG_STACK_ID != 0 {
            s.stack_id = varint::read_u32_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
        }
        let delta = varint::read_u64_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
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
            s.payload_size = varint::read_u32_with::<S>(buf, &mut p).map_err(|e| vint(e, p))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn describe(e: &EventRef<'_>) -> String {
        format!(
            "{} {} {} {} {} {} {:?} {:?} {:?} {:?} {} {}",
            e.metadata.metadata_id,
            e.thread_id,
            e.capture_thread_id,
            e.processor,
            e.sequence,
            e.timestamp,
            e.activity_id,
            e.related_activity_id,
            e.stack(),
            e.payload,
            e.payload_offset,
            e.stack_epoch
        )
    }

    /// What a pass over a stream sees: every event's fields, then the stats or the error.
    fn pass<R: Read>(mut reader: NettraceReader<R>) -> (Vec<String>, String) {
        let mut events = Vec::new();
        loop {
            match reader.next_event() {
                Ok(Some(e)) => events.push(describe(&e)),
                Ok(None) => return (events, format!("{:?}", reader.stats())),
                Err(e) => return (events, e.to_string()),
            }
        }
    }

    /// Reading ahead on a thread hands out exactly what reading in line does, pulled or pushed (a
    /// pushed block is read in place when whole in a chunk), at any chunk size (chunk ends fall
    /// inside headers, varints and blocks), on every recorded fixture whole and cut short: the
    /// same events, stats, and errors at the same offsets.
    #[test]
    fn reading_ahead_changes_nothing() {
        let traces = tracelab_fixtures::fixtures_with_extension("nettrace", "nettrace");
        assert!(traces.len() >= 5, "expected the recorded nettrace fixtures, found {traces:?}");
        for path in traces {
            let bytes = std::fs::read(&path).unwrap();
            for cut in [bytes.len(), bytes.len() * 2 / 3, bytes.len() / 3 + 1] {
                let input = &bytes[..cut];
                let inline = pass(NettraceReader::new(input).unwrap());
                assert!(cut < bytes.len() || inline.1.starts_with("Stats"), "{}: {}", path.display(), inline.1);
                for chunk in [13, 4093, ReadAhead::CHUNK] {
                    let ahead = || NettraceReader::new(std::io::Cursor::new(input.to_vec())).unwrap().read_ahead_in_chunks(chunk);
                    for (how, got) in [("pulled", pass(ahead())), ("pushed", pushed(ahead()))] {
                        assert_eq!(got.0.len(), inline.0.len(), "{} cut at {cut}, chunks of {chunk}, {how}", path.display());
                        assert!(got == inline, "{} cut at {cut}, chunks of {chunk}, {how}: {} / {}", path.display(), got.1, inline.1);
                    }
                }
            }
        }
    }

    /// Reading a file through a map gives exactly what reading it in line does, pulled or pushed,
    /// with the pager thread or without (a machine with one CPU), and with pages released a
    /// page behind the parser (so that a block is read across released pages), on every
    /// fixture whole and cut short.
    #[test]
    fn mapping_a_file_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let tight = PageSteps { step: 4096, ahead: 8192, behind: 4096 };
        for path in tracelab_fixtures::fixtures_with_extension("nettrace", "nettrace") {
            let bytes = std::fs::read(&path).unwrap();
            for cut in [bytes.len(), bytes.len() * 2 / 3, bytes.len() / 3 + 1, 5] {
                let copy = dir.path().join("cut.nettrace");
                std::fs::write(&copy, &bytes[..cut]).unwrap();
                let inline = pass_or_error(NettraceReader::new(&bytes[..cut]), pass);
                for (steps, pager) in [(tight, true), (tight, false), (PageSteps::DEFAULT, true)] {
                    let mapped = || NettraceReader::from_file_with(std::fs::File::open(&copy).unwrap(), steps, pager);
                    for (how, got) in [("pulled", pass_or_error(mapped(), pass)), ("pushed", pass_or_error(mapped(), pushed))] {
                        assert_eq!(got.0.len(), inline.0.len(), "{} cut at {cut}, {steps:?}, pager {pager}, {how}", path.display());
                        assert!(got == inline, "{} cut at {cut}, {steps:?}, pager {pager}, {how}: {} / {}", path.display(), got.1, inline.1);
                    }
                }
            }
        }
    }

    /// A pass, or the error of opening the stream.
    fn pass_or_error<R: Read>(reader: Result<NettraceReader<R>>, pass: fn(NettraceReader<R>) -> (Vec<String>, String)) -> (Vec<String>, String) {
        reader.map_or_else(|e| (Vec::new(), e.to_string()), pass)
    }

    /// A file that cannot be mapped (here a pipe) is read as a stream, with the same result.
    #[test]
    fn a_pipe_given_as_a_file_is_read_as_a_stream() {
        let path = tracelab_fixtures::fixture("nettrace/fixture-gc-verbose.nettrace");
        let bytes = std::fs::read(&path).unwrap();
        let (from_pipe, mut to_pipe) = std::io::pipe().unwrap();
        let writer = std::thread::spawn({
            let bytes = bytes.clone();
            move || std::io::Write::write_all(&mut to_pipe, &bytes)
        });
        let file = std::fs::File::from(std::os::fd::OwnedFd::from(from_pipe));
        let got = pass(NettraceReader::from_file(file).unwrap());
        writer.join().unwrap().unwrap();
        assert!(got == pass(NettraceReader::new(&bytes[..]).unwrap()), "{}", got.1);
    }

    /// What `for_each_event` hands out, with its stats or error at the end.
    fn pushed<R: Read>(mut reader: NettraceReader<R>) -> (Vec<String>, String) {
        let mut events = Vec::new();
        let end = reader.for_each_event(|e| events.push(describe(e)));
        (events, end.map_or_else(|e| e.to_string(), |()| format!("{:?}", reader.stats())))
    }

    /// Handing events to a callback gives exactly the events, stats and errors of pulling them,
    /// on every fixture whole and cut short.
    #[test]
    fn pushing_events_agrees_with_pulling_them() {
        for path in tracelab_fixtures::fixtures_with_extension("nettrace", "nettrace") {
            let bytes = std::fs::read(&path).unwrap();
            for cut in [bytes.len(), bytes.len() * 2 / 3, bytes.len() / 3 + 1, bytes.len() / 7] {
                let input = &bytes[..cut];
                let pulled = pass(NettraceReader::new(input).unwrap());
                let pushed = pushed(NettraceReader::new(input).unwrap());
                assert_eq!(pushed.0.len(), pulled.0.len(), "{} cut at {cut}", path.display());
                assert!(pushed == pulled, "{} cut at {cut}: {} / {}", path.display(), pushed.1, pulled.1);
            }
        }
    }

    /// A reader dropped before the end stops its thread (the thread is joined, so this returns),
    /// whether it reads ahead or maps pages ahead.
    #[test]
    fn dropping_a_reader_mid_stream_ends_its_thread() {
        let path = tracelab_fixtures::fixture("nettrace/fixture-gc-verbose.nettrace");
        let mut reader = NettraceReader::new(std::fs::File::open(&path).unwrap()).unwrap().read_ahead_in_chunks(64);
        assert!(reader.next_event().unwrap().is_some());
        drop(reader);
        let mut mapped = NettraceReader::from_file_with(std::fs::File::open(path).unwrap(), PageSteps { step: 4096, ahead: 4096, behind: 0 }, true).unwrap();
        assert!(mapped.next_event().unwrap().is_some());
        drop(mapped);
    }
}
