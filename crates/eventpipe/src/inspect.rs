//! A human-readable summary of a decoded trace, and its stacks as folded lines and speedscope.
//!
//! [`full`] decodes every payload of a trace of any size by streaming ([`StreamDecoder`]):
//! samples are counted per (thread, stack) as they come, nothing per event is kept, so memory
//! follows what is distinct in the trace (metadata, stacks, methods), not its length.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::decode::{DecodeOptions, Decoded, SampleKind, StreamDecoder, StreamItem, frame_label};
use crate::fxhash::FxHashMap;
use crate::metadata::utf16_text;
use crate::nettrace::NettraceReader;
use crate::symbols::RUNTIME_PROVIDER;

/// Samples counted per (thread, stack): what the summary, folded stacks and speedscope need,
/// at the size of the distinct stacks rather than of the samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleCounts {
    /// (thread id, stack) → samples.
    pub by_stack: BTreeMap<(u64, Option<u32>), u64>,
    pub managed: u64,
    pub external: u64,
    pub other: u64,
}

impl SampleCounts {
    pub fn add(&mut self, thread_id: u64, stack: Option<u32>, kind: SampleKind) {
        *self.by_stack.entry((thread_id, stack)).or_default() += 1;
        match kind {
            SampleKind::Managed => self.managed += 1,
            SampleKind::External => self.external += 1,
            SampleKind::Other(_) => self.other += 1,
        }
    }

    pub fn of(d: &Decoded) -> SampleCounts {
        let mut c = SampleCounts::default();
        for s in &d.samples {
            c.add(s.thread_id, s.stack, s.kind);
        }
        c
    }

    pub fn total(&self) -> u64 {
        self.managed + self.external + self.other
    }

    pub fn with_stacks(&self) -> u64 {
        self.by_stack.iter().filter(|((_, s), _)| s.is_some()).map(|(_, n)| n).sum()
    }

    /// Folded lines (`thread T;root;…;leaf` → samples), as [`Decoded::folded`] writes them.
    pub fn folded(&self, d: &Decoded) -> BTreeMap<String, u64> {
        let mut names: BTreeMap<u32, String> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for (&(thread, stack), &n) in &self.by_stack {
            let key = match stack {
                Some(id) => names
                    .entry(id)
                    .or_insert_with(|| d.frames(id).iter().rev().map(frame_label).collect::<Vec<_>>().join(";"))
                    .clone(),
                None => "[no managed stack]".to_string(),
            };
            *out.entry(format!("thread {thread};{key}")).or_insert(0) += n;
        }
        out
    }
}

/// A GCStart's payload: what TraceEvent's `GCStartTraceData` exposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcStart {
    pub count: u64,
    pub depth: u64,
    pub reason: u64,
    pub kind: u64,
}

/// What a full decode found besides counts: every payload decoded, samples counted, GCs and
/// exceptions as TraceEvent's reference program reports them.
#[derive(Clone, Debug)]
pub struct FullDecode {
    /// Counts, stats, stacks and methods; `events` and `samples` are empty (streamed).
    pub decoded: Decoded,
    pub samples: SampleCounts,
    /// Payload fields decoded, and how many of them were strings.
    pub fields: u64,
    pub string_fields: u64,
    /// GCStart events, and the first [`FullDecode::GC_DETAIL`] of them.
    pub gc_starts: u64,
    pub gc_start_detail: Vec<GcStart>,
    /// ExceptionThrown by `type: message`.
    pub exceptions: BTreeMap<String, u64>,
}

impl FullDecode {
    /// GCStarts kept in detail (TraceDump `summary` keeps 200).
    pub const GC_DETAIL: usize = 200;
}

/// Decodes every payload that `reader` reads, streaming: bounded memory at any trace size. A
/// file is best read through [`NettraceReader::from_file`], a pipe through
/// [`NettraceReader::read_ahead`]: either way the input comes in beside the decoding.
pub fn full<R: Read>(reader: NettraceReader<R>) -> crate::Result<FullDecode> {
    // Values for the events the summary reads in full (GCStart); every other payload is checked
    // against its layout and its fields counted without building them.
    let mut decoder = StreamDecoder::from_reader(reader, &DecodeOptions::default(), true)
        .decode_fields_of(|m| m.provider == RUNTIME_PROVIDER && m.event_id == 1)
        .hand_out_only(|m| m.provider == RUNTIME_PROVIDER && matches!(m.event_id, 1 | 80));
    // Samples by (thread, stack) in a hash map, sorted once at the end (a B-tree insert per
    // sample was ~5 % of the decode).
    let mut by_stack: FxHashMap<(u64, Option<u32>), u64> = FxHashMap::default();
    let mut samples = SampleCounts::default();
    let mut gc_starts = 0u64;
    let mut gc_start_detail = Vec::new();
    // ExceptionThrown by its payload's leading bytes (ExceptionType and ExceptionMessage, as
    // UTF-16 with their NULs): a repeated exception is a lookup by bytes, not two strings and a
    // formatted key per event; the text is made once per distinct exception, at the end.
    // An app throws a few exceptions again and again: the first few distinct ones are counted
    // aside, and a repeat of one costs a comparison, not a hash of its text.
    let mut thrown = ThrownCounts::default();
    decoder.for_each_item(|item| match item {
        StreamItem::Sample(s) => {
            *by_stack.entry((s.thread_id, s.stack)).or_default() += 1;
            match s.kind {
                SampleKind::Managed => samples.managed += 1,
                SampleKind::External => samples.external += 1,
                SampleKind::Other(_) => samples.other += 1,
            }
        }
        StreamItem::Event(e) => {
            let count = e.field_count();
            if e.metadata.event_id == 80 {
                // A payload that did not match its layout counts as an exception without text.
                let key = if count.fields == 0 { &[][..] } else { &e.payload[..exception_text_len(e.payload)] };
                thrown.count(key);
                return;
            }
            let num = |name: &str| e.fields.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_u64()).unwrap_or(0);
            gc_starts += 1;
            if gc_start_detail.len() < FullDecode::GC_DETAIL {
                gc_start_detail.push(GcStart { count: num("Count"), depth: num("Depth"), reason: num("Reason"), kind: num("Type") });
            }
        }
    })?;
    samples.by_stack = by_stack.into_iter().collect();
    let mut exceptions: BTreeMap<String, u64> = BTreeMap::new();
    for (key, n) in thrown.all() {
        let (kind, rest) = utf16z(&key);
        let (message, _) = utf16z(rest);
        *exceptions.entry(format!("{}: {}", utf16_text(kind), utf16_text(message))).or_default() += n;
    }
    let totals = decoder.field_totals();
    Ok(FullDecode { decoded: decoder.finish(), samples, fields: totals.fields, string_fields: totals.strings, gc_starts, gc_start_detail, exceptions })
}

/// Exceptions thrown, by the bytes of their type and message: the first few distinct ones in a
/// short list, compared by length and bytes (hashing a long text at every exception was 6 % of
/// a full decode where an app throws a few exceptions again and again), the others in a map.
#[derive(Default)]
struct ThrownCounts {
    first: Vec<(Vec<u8>, u64)>,
    others: FxHashMap<Vec<u8>, u64>,
}

impl ThrownCounts {
    /// Entries of the list: few, so that an exception not in it (an app that throws many
    /// distinct ones) costs little more than the map's lookup.
    const FIRST: usize = 4;

    fn count(&mut self, key: &[u8]) {
        if let Some((_, n)) = self.first.iter_mut().find(|(k, _)| k[..] == *key) {
            *n += 1;
        } else if self.first.len() < Self::FIRST {
            self.first.push((key.to_vec(), 1));
        } else if let Some(n) = self.others.get_mut(key) {
            *n += 1;
        } else {
            self.others.insert(key.to_vec(), 1);
        }
    }

    /// Every distinct exception and its count.
    fn all(mut self) -> FxHashMap<Vec<u8>, u64> {
        self.others.extend(self.first);
        self.others
    }
}

/// A NUL-terminated UTF-16 string at the start of `bytes`: its units' bytes, and what follows
/// its NUL (empty when it has none: the rest is the string).
fn utf16z(bytes: &[u8]) -> (&[u8], &[u8]) {
    match crate::payload::find_utf16_nul(bytes) {
        Some(at) => (&bytes[..at], &bytes[at + 2..]),
        None => (&bytes[..bytes.len() & !1], &[]),
    }
}

/// How many leading bytes of an ExceptionThrown payload hold its two strings (ExceptionType,
/// ExceptionMessage) with their NULs.
fn exception_text_len(payload: &[u8]) -> usize {
    let (_, rest) = utf16z(payload);
    let (_, after) = utf16z(rest);
    payload.len() - after.len()
}

/// The summary of a full decode: [`summary`]'s lines, then what only a full decode knows.
pub fn full_summary(f: &FullDecode, title: &str) -> String {
    let mut out = summary_of(&f.decoded, &f.samples, title);
    let _ = writeln!(
        out,
        "  full decode: {} payload fields ({} strings), {} payloads did not match their layout",
        f.fields, f.string_fields, f.decoded.payload_error_count
    );
    if f.gc_starts > 0 {
        let _ = writeln!(out, "  GCStart: {} (first: {:?})", f.gc_starts, f.gc_start_detail.first());
    }
    if !f.exceptions.is_empty() {
        let _ = writeln!(out, "  exceptions thrown (type: message):");
        let mut v: Vec<_> = f.exceptions.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        for (k, n) in v.iter().take(10) {
            let _ = writeln!(out, "    {n:>7}  {k}");
        }
    }
    out
}

/// Events by provider and name, lost events, sampling interval, process, top leaf frames.
pub fn summary(d: &Decoded, title: &str) -> String {
    summary_of(d, &SampleCounts::of(d), title)
}

fn summary_of(d: &Decoded, samples: &SampleCounts, title: &str) -> String {
    let mut out = String::new();
    let i = &d.info;
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "  process {} · {} processors · pointer size {} · sampling interval {:.3} ms · Trace object V{}",
        i.process_id,
        i.processor_count,
        i.pointer_size,
        f64::from(i.sampling_interval_ns) / 1e6,
        i.version
    );
    let [y, mo, dd, h, mi, s, ms] = i.start_time;
    let _ = writeln!(out, "  session start {y:04}-{mo:02}-{dd:02} {h:02}:{mi:02}:{s:02}.{ms:03} UTC");
    let _ = writeln!(
        out,
        "  {} events, {} lost, {} bytes, {} stacks, {} sequence points",
        d.stats.events, d.stats.lost_events, d.stats.bytes, d.stats.stacks, d.stats.sequence_points
    );
    if d.payload_error_count > 0 {
        let _ = writeln!(out, "  {} payloads did not match their layout; first: {:?}", d.payload_error_count, d.payload_errors.first());
    }
    let mut by_provider: BTreeMap<&str, Vec<(u32, &str, u64)>> = BTreeMap::new();
    for ((p, id), c) in &d.counts {
        by_provider.entry(p).or_default().push((*id, &c.name, c.count));
    }
    for (p, mut events) in by_provider {
        events.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let _ = writeln!(out, "  {p}: {} events", events.iter().map(|e| e.2).sum::<u64>());
        for (id, name, n) in events {
            let _ = writeln!(out, "    {n:>9}  {id:>5} {}", if name.is_empty() { "?" } else { name });
        }
    }
    if samples.total() > 0 {
        let _ = writeln!(
            out,
            "  SampleProfiler: {} samples ({} managed, {} external), {} method ranges known",
            samples.total(),
            samples.managed,
            samples.external,
            d.methods.len()
        );
        let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
        for (&(_, stack), &n) in &samples.by_stack {
            if let Some(id) = stack {
                *leaves.entry(frame_label(&d.frames(id)[0])).or_default() += n;
            }
        }
        let mut leaves: Vec<_> = leaves.into_iter().collect();
        leaves.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let _ = writeln!(out, "  top leaf frames:");
        for (name, n) in leaves.iter().take(10) {
            let _ = writeln!(out, "    {n:>7}  {name}");
        }
    }
    out
}

/// Writes `DIR/STEM.folded` and `DIR/STEM.speedscope.json`; returns both paths.
pub fn write_stacks(d: &Decoded, dir: &Path, stem: &str) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let folded_path = dir.join(format!("{stem}.folded"));
    let folded: String = d.folded().into_iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    std::fs::write(&folded_path, folded)?;
    let ss_path = dir.join(format!("{stem}.speedscope.json"));
    let doc = crate::speedscope::to_speedscope(d, stem);
    std::fs::write(&ss_path, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
    Ok((folded_path, ss_path))
}

/// Writes `DIR/STEM.folded` and `DIR/STEM.speedscope.json` of a full decode's counted samples
/// (speedscope gets one sample per distinct stack, weighted by its count); returns both paths.
pub fn write_full_stacks(f: &FullDecode, dir: &Path, stem: &str) -> std::io::Result<(PathBuf, PathBuf)> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)?;
    let folded_path = dir.join(format!("{stem}.folded"));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&folded_path)?);
    for (k, v) in f.samples.folded(&f.decoded) {
        writeln!(w, "{k} {v}")?;
    }
    w.flush()?;
    let d = &f.decoded;
    let interval = u64::from(d.info.sampling_interval_ns.max(1));
    let mut frames: Vec<serde_json::Value> = Vec::new();
    let mut frame_index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut per_thread: BTreeMap<u64, (Vec<Vec<usize>>, Vec<u64>)> = BTreeMap::new();
    for (&(thread, stack), &n) in &f.samples.by_stack {
        let ids: Vec<usize> = match stack {
            Some(id) => d
                .frames(id)
                .iter()
                .rev()
                .map(|fr| {
                    let label = frame_label(fr);
                    *frame_index.entry(label.clone()).or_insert_with(|| {
                        frames.push(serde_json::json!({ "name": label, "file": fr.module.unwrap_or("") }));
                        frames.len() - 1
                    })
                })
                .collect(),
            None => Vec::new(),
        };
        let e = per_thread.entry(thread).or_default();
        e.0.push(ids);
        e.1.push(n * interval);
    }
    let profiles: Vec<_> = per_thread
        .into_iter()
        .map(|(tid, (samples, weights))| {
            let total: u64 = weights.iter().sum();
            serde_json::json!({ "type": "sampled", "name": format!("thread {tid}"), "unit": "nanoseconds",
                "startValue": 0, "endValue": total, "samples": samples, "weights": weights })
        })
        .collect();
    let doc = serde_json::json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": stem,
        "exporter": concat!("eventpipe ", env!("CARGO_PKG_VERSION")),
        "shared": { "frames": frames },
        "profiles": profiles,
    });
    let ss_path = dir.join(format!("{stem}.speedscope.json"));
    std::fs::write(&ss_path, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
    Ok((folded_path, ss_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming full decode agrees with the in-memory decode on every recorded fixture:
    /// counts, stats, folded stacks, GCs and exceptions.
    #[test]
    fn full_decode_streams_what_decode_keeps() {
        let traces = tracelab_fixtures::fixtures_with_extension("nettrace", "nettrace");
        assert!(traces.len() >= 5, "expected the recorded nettrace fixtures, found {traces:?}");
        for path in traces {
            let bytes = std::fs::read(&path).unwrap();
            let whole = crate::decode(&bytes[..], &DecodeOptions::default()).unwrap();
            // The file mapped, as `trace inspect --full` reads it; a stream read ahead is checked
            // against it in nettrace's tests.
            let f = full(NettraceReader::from_file(std::fs::File::open(&path).unwrap()).unwrap()).unwrap();
            let name = path.display();
            assert_eq!(f.decoded.counts.iter().map(|(k, c)| (k.clone(), c.count)).collect::<Vec<_>>(),
                whole.counts.iter().map(|(k, c)| (k.clone(), c.count)).collect::<Vec<_>>(), "{name}: counts");
            assert_eq!(f.decoded.stats.events, whole.stats.events, "{name}");
            // Stack ids differ (a full decode interns only the stacks of what it hands out):
            // samples are compared by their stacks' addresses.
            let by_content = |c: &SampleCounts, d: &Decoded| -> BTreeMap<(u64, Vec<u64>), u64> {
                c.by_stack.iter().map(|(&(t, s), &n)| ((t, s.map_or_else(Vec::new, |id| d.stacks[id as usize].clone())), n)).collect()
            };
            let of_whole = SampleCounts::of(&whole);
            assert_eq!(by_content(&f.samples, &f.decoded), by_content(&of_whole, &whole), "{name}: samples");
            assert_eq!((f.samples.managed, f.samples.external, f.samples.other), (of_whole.managed, of_whole.external, of_whole.other), "{name}: sample kinds");
            assert_eq!(f.samples.folded(&f.decoded), whole.folded(), "{name}: folded");
            assert_eq!(f.fields, whole.events.iter().map(|e| e.fields.len() as u64).sum::<u64>(), "{name}: fields");
            let gcs = whole.events.iter().filter(|e| e.name == "GCStart").count() as u64;
            assert_eq!(f.gc_starts, gcs, "{name}: GCStart");
            let thrown = whole.events.iter().filter(|e| e.name == "ExceptionThrown").count() as u64;
            assert_eq!(f.exceptions.values().sum::<u64>(), thrown, "{name}: exceptions");
            assert_eq!(summary_of(&f.decoded, &f.samples, "t"), summary(&whole, "t"), "{name}: summary");
        }
    }

    proptest::proptest! {
        /// Exceptions are counted as a map of every one would count them, however many distinct
        /// ones there are (more than the short list holds: some go through the map) and in any
        /// order; keys of one length that differ only in their last byte included.
        #[test]
        fn thrown_counts_are_a_plain_count(keys in proptest::collection::vec(0u8..24, 0..300)) {
            let text = |k: u8| { let mut t = vec![b'x'; usize::from(k % 5) * 7]; t.push(k); t };
            let mut counts = ThrownCounts::default();
            let mut plain: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
            for &k in &keys {
                counts.count(&text(k));
                *plain.entry(text(k)).or_default() += 1;
            }
            proptest::prop_assert_eq!(counts.all(), plain);
        }
    }
}
