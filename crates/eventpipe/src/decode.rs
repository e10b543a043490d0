//! Whole-trace decoding: events with decoded fields, SampleProfiler samples with interned
//! stacks, per-event counts, lost events and method ranges — what a profiler front end needs.

use std::collections::{BTreeMap, HashMap};

use crate::fxhash::FxHashMap;
use std::io::Read;

use crate::error::Result;
use crate::nettrace::{NettraceReader, Stats, TraceInfo};
use crate::payload::{Fields, Value, decode_payload};
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

/// Reads a whole stream. Errors of the stream's framing end decoding; an event payload that
/// does not fit its layout is recorded in [`Decoded::payload_errors`] and decoding goes on.
pub fn decode<R: Read>(input: R, options: &DecodeOptions) -> Result<Decoded> {
    let mut reader = NettraceReader::new(input)?;
    let info = reader.info().clone();
    let pointer_size = info.pointer_size;
    let mut counts: BTreeMap<(String, u32), EventCount> = BTreeMap::new();
    // Counting by metadata id first avoids a string key per event.
    let mut by_meta: FxHashMap<u32, u64> = FxHashMap::default();
    let mut events = Vec::new();
    let mut samples = Vec::new();
    let mut stacks: Vec<Vec<u64>> = Vec::new();
    let mut stack_ids: FxHashMap<Vec<u64>, u32> = FxHashMap::default();
    let mut methods = MethodMap::default();
    let mut payload_errors = Vec::new();
    let mut payload_error_count = 0u64;
    while let Some(ev) = reader.next_event()? {
        let meta = ev.metadata;
        *by_meta.entry(meta.metadata_id).or_default() += 1;
        let is_sample = meta.provider == SAMPLE_PROFILER && meta.event_id == 0;
        let wants_methods = MethodMap::wants(&meta.provider, meta.event_id);
        if !(wants_methods || (is_sample && options.keep_samples) || (!is_sample && options.keep_events)) {
            continue;
        }
        let mut intern = |stack: &[u64]| -> Option<u32> {
            if stack.is_empty() {
                return None;
            }
            if let Some(&id) = stack_ids.get(stack) {
                return Some(id);
            }
            let id = stacks.len() as u32;
            stacks.push(stack.to_vec());
            stack_ids.insert(stack.to_vec(), id);
            Some(id)
        };
        let time_ns = info.qpc_to_ns(ev.timestamp);
        if is_sample {
            let kind = match ev.payload.get(0..4) {
                Some(b) => match u32::from_le_bytes(b.try_into().unwrap()) {
                    1 => SampleKind::External,
                    2 => SampleKind::Managed,
                    n => SampleKind::Other(n),
                },
                None => SampleKind::Other(0),
            };
            samples.push(DecodedSample { thread_id: ev.thread_id, time_ns, kind, stack: intern(ev.stack) });
            continue;
        }
        let fields = match decode_payload(meta, ev.payload, pointer_size, ev.payload_offset) {
            Ok(f) => f,
            Err(e) => {
                payload_error_count += 1;
                if payload_errors.len() < 100 {
                    payload_errors.push((e.offset(), format!("{}/{} v{}: {e}", meta.provider, meta.event_id, meta.version)));
                }
                Fields::new()
            }
        };
        if wants_methods {
            methods.observe(&meta.provider, meta.event_id, &fields);
        }
        if options.keep_events {
            events.push(DecodedEvent {
                provider: meta.provider.clone(),
                name: meta.name.clone(),
                event_id: meta.event_id,
                version: meta.version,
                time_ns,
                thread_id: ev.thread_id,
                stack: intern(ev.stack),
                payload_offset: ev.payload_offset,
                fields,
            });
        }
    }
    for meta in reader.metadata() {
        if let Some(&n) = by_meta.get(&meta.metadata_id) {
            let c = counts.entry((meta.provider.clone(), meta.event_id)).or_default();
            c.count += n;
            if c.name.is_empty() {
                c.name = meta.name.clone();
            }
        }
    }
    methods.finish();
    Ok(Decoded {
        info,
        stats: reader.stats().clone(),
        counts,
        events,
        samples,
        stacks,
        methods,
        payload_errors,
        payload_error_count,
    })
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
