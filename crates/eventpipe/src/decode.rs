//! Whole-trace decoding: events with decoded fields, SampleProfiler samples with interned
//! stacks, per-event counts, lost events and method ranges — what a profiler front end needs.

use std::collections::{BTreeMap, HashMap};

use crate::fxhash::{FxHashMap, IdMap};
use std::io::Read;

use crate::error::Result;
use crate::metadata::EventMetadata;
use crate::nettrace::{EventRef, NettraceReader, Stats, TraceInfo};
use crate::payload::{FieldCount, Fields, PayloadLayout, Value, decode_payload};
use crate::symbols::{Method, MethodMap};

pub const SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";

/// What to keep besides counts.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// Keep every event other than SampleProfiler samples, with decoded fields.
    pub keep_events: bool,
    /// Keep SampleProfiler samples (thread, time, kind, stack).
    pub keep_samples: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { keep_events: true, keep_samples: true }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DecodedEvent {
    pub provider: String,
    pub name: String,
    pub event_id: u32,
    pub version: u32,
    pub time_ns: u64,
    pub thread_id: u64,
    /// Index into [`Decoded::stacks`], or `None`.
    pub stack: Option<u32>,
    /// Where the payload starts in the stream (for errors about its fields).
    pub payload_offset: u64,
    pub fields: Fields,
}

/// ThreadSample's payload: where the sampled thread was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// 1: not running managed code (blocked, in native code).
    External,
    /// 2: running managed code.
    Managed,
    Other(u32),
}

impl SampleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SampleKind::External => "external",
            SampleKind::Managed => "managed",
            SampleKind::Other(_) => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DecodedSample {
    pub thread_id: u64,
    pub time_ns: u64,
    pub kind: SampleKind,
    pub stack: Option<u32>,
}

/// A resolved frame of a managed stack.
#[derive(Clone, Copy, Debug)]
pub struct ResolvedFrame<'a> {
    pub addr: u64,
    pub method: Option<&'a Method>,
    /// The method's module short name (`System.Private.CoreLib`).
    pub module: Option<&'a str>,
}

#[derive(Clone, Debug, Default)]
pub struct EventCount {
    pub name: String,
    pub count: u64,
}

#[derive(Clone, Debug)]
pub struct Decoded {
    pub info: TraceInfo,
    pub stats: Stats,
    /// Events per (provider, event id).
    pub counts: BTreeMap<(String, u32), EventCount>,
    pub events: Vec<DecodedEvent>,
    pub samples: Vec<DecodedSample>,
    /// Distinct stacks (leaf first), referenced by index.
    pub stacks: Vec<Vec<u64>>,
    pub methods: MethodMap,
    /// Events whose payload did not match their layout: (offset, message), first 100.
    pub payload_errors: Vec<(u64, String)>,
    pub payload_error_count: u64,
}

/// One item of a [`StreamDecoder`]: a SampleProfiler sample, or any other event with its payload
/// decoded (when the decoder was asked for fields).
#[derive(Debug)]
pub enum StreamItem<'a> {
    Sample(DecodedSample),
    Event(StreamEvent<'a>),
}

/// An event of a streaming decode. Its fields are owned and handed over: keep them or drop them,
/// nothing of the event stays in the decoder.
#[derive(Debug)]
pub struct StreamEvent<'a> {
    pub metadata: &'a EventMetadata,
    pub time_ns: u64,
    pub thread_id: u64,
    /// Index into [`StreamDecoder::stacks`], or `None`.
    pub stack: Option<u32>,
    /// The payload's fields, or empty when fields were not asked for or the payload did not
    /// match its layout (then counted in [`StreamDecoder::payload_error_count`]).
    pub fields: Fields,
    /// Fields and strings counted by walking the payload's layout, for an event whose values were
    /// not built ([`StreamDecoder::decode_fields_of`]); None when `fields` holds them.
    counted: Option<FieldCount>,
    pub payload: &'a [u8],
    pub payload_offset: u64,
}

impl StreamEvent<'_> {
    /// Fields and strings of the payload, whether decoded or only counted; zero when the payload
    /// did not match its layout or fields were not asked for.
    pub fn field_count(&self) -> FieldCount {
        self.counted.unwrap_or_else(|| FieldCount {
            fields: self.fields.len() as u32,
            strings: self.fields.iter().filter(|(_, v)| matches!(v, Value::Str(_))).count() as u32,
        })
    }
}

/// Fields and strings summed over many payloads ([`StreamDecoder::field_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldCount64 {
    pub fields: u64,
    pub strings: u64,
}

/// How the decoder treats events with one metadata id (decided once per id, not per event).
#[derive(Clone, Default)]
struct MetaClass {
    count: u64,
    is_sample: bool,
    wants_methods: bool,
    /// MethodDetails / BulkType: read from the payload's bytes into the method map.
    wants_bytes: bool,
    /// Fields built as values (else the payload is only checked and counted).
    wants_values: bool,
    /// Handed out to the caller (else checked, counted and passed over inside the decoder).
    hand_out: bool,
    layout: PayloadLayout,
}

/// Decodes a trace event by event with memory bounded by what is distinct in it (metadata, stacks,
/// methods), not by its length: nothing per event is kept. [`decode()`] is this with every item
/// collected; `inspect --full` aggregates as it goes.
pub struct StreamDecoder<R> {
    reader: NettraceReader<R>,
    info: TraceInfo,
    judge: Judge,
    stacks: StackInterner,
}

/// What the decoder does with each event before it is handed out (or not): counts it, decodes
/// or checks its payload, observes method events.
struct Judge {
    /// Decode payload fields of events other than samples.
    fields: bool,
    /// Hand out samples / other events (method events are always observed).
    samples: bool,
    events: bool,
    pointer_size: u32,
    /// How events of each metadata id are treated.
    classes: IdMap<MetaClass>,
    methods: MethodMap,
    payload_errors: Vec<(u64, String)>,
    payload_error_count: u64,
    /// Events whose fields are built as values; others are checked against their layout and
    /// counted only. None: every event's.
    values_of: Option<fn(&EventMetadata) -> bool>,
    /// Events handed out; the others are checked and counted only. None: every event.
    hand_out_of: Option<fn(&EventMetadata) -> bool>,
    /// Fields and strings of every payload checked so far (handed out or not).
    field_totals: FieldCount64,
}

/// What [`Judge::judge`] decided about one event.
#[derive(Default)]
struct Verdict {
    hand_out: bool,
    is_sample: bool,
    decoded: Option<Fields>,
    counted: Option<FieldCount>,
}

/// Distinct stacks of the handed-out items, by content.
#[derive(Default)]
struct StackInterner {
    stacks: Vec<Vec<u64>>,
    stack_ids: FxHashMap<Vec<u64>, u32>,
    /// The stream's stack ids of the current epoch → index into `stacks`.
    stack_by_id: FxHashMap<u32, Option<u32>>,
    stack_epoch: u32,
}

impl Judge {
    fn judge(&mut self, ev: &EventRef<'_>) -> Verdict {
        let (samples, events, fields, pointer_size) = (self.samples, self.events, self.fields, self.pointer_size);
        let (values_of, hand_out_of) = (self.values_of, self.hand_out_of);
        let meta = ev.metadata;
        let class = self.classes.get_or_insert_with(meta.metadata_id, || MetaClass {
            count: 0,
            is_sample: meta.provider == SAMPLE_PROFILER && meta.event_id == 0,
            wants_methods: MethodMap::wants(&meta.provider, meta.event_id),
            wants_bytes: MethodMap::wants_bytes(&meta.provider, meta.event_id),
            wants_values: values_of.is_none_or(|wanted| wanted(meta)),
            hand_out: hand_out_of.is_none_or(|wanted| wanted(meta)),
            layout: PayloadLayout::of(meta, pointer_size),
        });
        class.count += 1;
        if class.is_sample {
            return Verdict { hand_out: samples, is_sample: true, ..Verdict::default() };
        }
        if class.wants_bytes {
            self.methods.observe_bytes(&meta.provider, meta.event_id, ev.payload);
        }
        if !(class.wants_methods || (fields && events)) {
            return Verdict { hand_out: events, ..Verdict::default() };
        }
        let (errors, error_count) = (&mut self.payload_errors, &mut self.payload_error_count);
        let mut note = |e: crate::Error| {
            *error_count += 1;
            if errors.len() < 100 {
                errors.push((e.offset(), format!("{}/{} v{}: {e}", meta.provider, meta.event_id, meta.version)));
            }
        };
        if !(class.wants_methods || class.wants_values) {
            let c = class.layout.count(meta, ev.payload, pointer_size, ev.payload_offset).unwrap_or_else(|e| {
                note(e);
                FieldCount::default()
            });
            if fields && events {
                self.field_totals.fields += u64::from(c.fields);
                self.field_totals.strings += u64::from(c.strings);
            }
            return Verdict { hand_out: events && class.hand_out, counted: Some(c), ..Verdict::default() };
        }
        let f = match decode_payload(meta, ev.payload, pointer_size, ev.payload_offset) {
            Ok(f) => f,
            Err(e) => {
                note(e);
                Fields::new()
            }
        };
        if class.wants_methods {
            self.methods.observe(&meta.provider, meta.event_id, &f);
        }
        if fields && events {
            self.field_totals.fields += f.len() as u64;
            self.field_totals.strings += f.iter().filter(|(_, v)| matches!(v, Value::Str(_))).count() as u64;
        }
        Verdict { hand_out: events && class.hand_out, decoded: Some(f), ..Verdict::default() }
    }
}

impl StackInterner {
    /// The item of an event `judge` handed out.
    fn item<'a>(&mut self, info: &TraceInfo, ev: EventRef<'a>, verdict: Verdict) -> StreamItem<'a> {
        let time_ns = info.qpc_to_ns(ev.timestamp);
        // Events of one stack id share its content until the next sequence point: the content is
        // hashed once per (epoch, id), not once per event.
        if ev.stack_epoch != self.stack_epoch {
            self.stack_epoch = ev.stack_epoch;
            self.stack_by_id.clear();
        }
        let stack = match self.stack_by_id.get(&ev.stack_id) {
            Some(&known) => known,
            None => {
                let id = intern(&mut self.stacks, &mut self.stack_ids, ev.stack());
                // An id not defined yet (empty now) may be defined by a later stack block.
                if id.is_some() || ev.stack_id == 0 {
                    self.stack_by_id.insert(ev.stack_id, id);
                }
                id
            }
        };
        if verdict.is_sample {
            let kind = match ev.payload.get(0..4) {
                Some(b) => match u32::from_le_bytes(b.try_into().unwrap()) {
                    1 => SampleKind::External,
                    2 => SampleKind::Managed,
                    n => SampleKind::Other(n),
                },
                None => SampleKind::Other(0),
            };
            return StreamItem::Sample(DecodedSample { thread_id: ev.thread_id, time_ns, kind, stack });
        }
        StreamItem::Event(StreamEvent {
            metadata: ev.metadata,
            time_ns,
            thread_id: ev.thread_id,
            stack,
            fields: verdict.decoded.unwrap_or_default(),
            counted: verdict.counted,
            payload: ev.payload,
            payload_offset: ev.payload_offset,
        })
    }
}

impl<R: Read> StreamDecoder<R> {
    /// Builds field values only for events `wanted` says yes to (decided once per metadata id);
    /// every other payload is still checked against its layout, its errors counted, its fields
    /// counted into [`StreamEvent::field_count`], with nothing allocated. Method events are always
    /// decoded (the method map needs them).
    pub fn decode_fields_of(mut self, wanted: fn(&EventMetadata) -> bool) -> Self {
        self.judge.values_of = Some(wanted);
        self
    }

    /// Hands out only the events `wanted` says yes to (and samples); every other event's payload
    /// is still checked and counted ([`StreamDecoder::field_totals`]) but passed over inside the
    /// decoder, with no item built for it. For callers that aggregate a few kinds of event.
    pub fn hand_out_only(mut self, wanted: fn(&EventMetadata) -> bool) -> Self {
        self.judge.hand_out_of = Some(wanted);
        self
    }

    /// Fields and strings in every payload checked so far, whether the event was handed out or
    /// not (what [`StreamEvent::field_count`] gives, summed); zero unless fields are decoded.
    pub fn field_totals(&self) -> FieldCount64 {
        self.judge.field_totals
    }

    /// `options` says which items to hand out; `fields` whether to decode payloads of events.
    pub fn new(input: R, options: &DecodeOptions, fields: bool) -> Result<Self> {
        Ok(Self::from_reader(NettraceReader::new(input)?, options, fields))
    }

    /// As [`new`](Self::new), on a reader made as the input needs (a file:
    /// [`NettraceReader::from_file`]; a pipe: [`NettraceReader::read_ahead`]).
    pub fn from_reader(reader: NettraceReader<R>, options: &DecodeOptions, fields: bool) -> Self {
        let judge = Judge {
            fields,
            samples: options.keep_samples,
            events: options.keep_events,
            pointer_size: reader.info().pointer_size,
            classes: IdMap::default(),
            methods: MethodMap::default(),
            payload_errors: Vec::new(),
            payload_error_count: 0,
            values_of: None,
            hand_out_of: None,
            field_totals: FieldCount64::default(),
        };
        StreamDecoder { info: reader.info().clone(), reader, judge, stacks: StackInterner::default() }
    }

    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    /// Distinct stacks so far (leaf first), referenced by index.
    pub fn stacks(&self) -> &[Vec<u64>] {
        &self.stacks.stacks
    }

    pub fn payload_error_count(&self) -> u64 {
        self.judge.payload_error_count
    }

    /// The next sample or event, or `None` at the end of the stream. Errors of the stream's
    /// framing end decoding; a payload that does not fit its layout is counted and decoding goes on.
    pub fn next_item(&mut self) -> Result<Option<StreamItem<'_>>> {
        // Method events are observed inside the reader's loop, whether or not they are handed out.
        let judge = &mut self.judge;
        let mut verdict = Verdict::default();
        let Some(ev) = self.reader.next_event_where(|ev| {
            verdict = judge.judge(ev);
            verdict.hand_out
        })?
        else {
            return Ok(None);
        };
        Ok(Some(self.stacks.item(&self.info, ev, verdict)))
    }

    /// Hands every remaining sample and event to `each`, in order: what a loop over
    /// [`next_item`](Self::next_item) does, ~8 % faster on a full decode
    /// ([`NettraceReader::for_each_event`]).
    pub fn for_each_item(&mut self, mut each: impl FnMut(StreamItem<'_>)) -> Result<()> {
        let (judge, stacks, info) = (&mut self.judge, &mut self.stacks, &self.info);
        self.reader.for_each_event(|ev| {
            let verdict = judge.judge(ev);
            if verdict.hand_out {
                each(stacks.item(info, *ev, verdict));
            }
        })
    }

    /// Ends decoding: counts, stats, stacks and methods (sorted for lookups); events and samples
    /// empty (they were handed out).
    pub fn finish(self) -> Decoded {
        let mut counts: BTreeMap<(String, u32), EventCount> = BTreeMap::new();
        for meta in self.reader.metadata() {
            if let Some(c) = self.judge.classes.get(meta.metadata_id) {
                let e = counts.entry((meta.provider.clone(), meta.event_id)).or_default();
                e.count += c.count;
                if e.name.is_empty() {
                    e.name = meta.name.clone();
                }
            }
        }
        let mut methods = self.judge.methods;
        methods.finish();
        Decoded {
            info: self.info,
            stats: self.reader.stats().clone(),
            counts,
            events: Vec::new(),
            samples: Vec::new(),
            stacks: self.stacks.stacks,
            methods,
            payload_errors: self.judge.payload_errors,
            payload_error_count: self.judge.payload_error_count,
        }
    }
}

fn intern(stacks: &mut Vec<Vec<u64>>, ids: &mut FxHashMap<Vec<u64>, u32>, stack: &[u64]) -> Option<u32> {
    if stack.is_empty() {
        return None;
    }
    if let Some(&id) = ids.get(stack) {
        return Some(id);
    }
    let id = stacks.len() as u32;
    stacks.push(stack.to_vec());
    ids.insert(stack.to_vec(), id);
    Some(id)
}

/// Reads a whole stream into memory ([`StreamDecoder`] with every item kept). Errors of the
/// stream's framing end decoding; an event payload that does not fit its layout is recorded in
/// [`Decoded::payload_errors`] and decoding goes on.
pub fn decode<R: Read>(input: R, options: &DecodeOptions) -> Result<Decoded> {
    let mut decoder = StreamDecoder::new(input, options, true)?;
    let (mut events, mut samples) = (Vec::new(), Vec::new());
    while let Some(item) = decoder.next_item()? {
        match item {
            StreamItem::Sample(s) => samples.push(s),
            StreamItem::Event(e) => events.push(DecodedEvent {
                provider: e.metadata.provider.clone(),
                name: e.metadata.name.clone(),
                event_id: e.metadata.event_id,
                version: e.metadata.version,
                time_ns: e.time_ns,
                thread_id: e.thread_id,
                stack: e.stack,
                payload_offset: e.payload_offset,
                fields: e.fields,
            }),
        }
    }
    let mut decoded = decoder.finish();
    decoded.events = events;
    decoded.samples = samples;
    Ok(decoded)
}

impl Decoded {
    /// Frames of a stack, leaf first.
    pub fn frames(&self, stack: u32) -> Vec<ResolvedFrame<'_>> {
        self.stacks[stack as usize]
            .iter()
            .map(|&addr| {
                let method = self.methods.resolve(addr);
                let module = method.and_then(|m| self.methods.module(m.module_id)).map(|m| m.short_name());
                ResolvedFrame { addr, method, module }
            })
            .collect()
    }

    /// Count of events of `provider` with `event_id`.
    pub fn count(&self, provider: &str, event_id: u32) -> u64 {
        self.counts.get(&(provider.to_string(), event_id)).map_or(0, |c| c.count)
    }

    /// Sampled stacks folded (root first, `;`-separated, frames named `Namespace.Type::Method(params)`,
    /// unresolved frames `[unknown]`) → sample count, for flame graphs.
    pub fn folded(&self) -> BTreeMap<String, u64> {
        let mut names: HashMap<u32, String> = HashMap::new();
        let mut out = BTreeMap::new();
        for s in &self.samples {
            let key = match s.stack {
                Some(id) => names
                    .entry(id)
                    .or_insert_with(|| {
                        let frames = self.frames(id);
                        frames.iter().rev().map(|f| frame_label(f)).collect::<Vec<_>>().join(";")
                    })
                    .clone(),
                None => "[no managed stack]".to_string(),
            };
            let thread = format!("thread {}", s.thread_id);
            *out.entry(format!("{thread};{key}")).or_insert(0) += 1;
        }
        out
    }

    /// Field value of an event by name.
    pub fn field<'a>(event: &'a DecodedEvent, name: &str) -> Option<&'a Value> {
        event.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

/// A frame's label in folded stacks and speedscope: the qualified method name, else `[unknown]`.
pub fn frame_label(f: &ResolvedFrame<'_>) -> String {
    match f.method {
        Some(m) => m.qualified_name(),
        None => "[unknown]".to_string(),
    }
}
