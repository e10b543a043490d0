//! An EventPipe trace (`.nettrace`) into the model: events with their fields, stacks resolved
//! through the trace's own method events, EventCounters as metrics.

use std::path::Path;

use anyhow::{Context, Result};

use model::{Collection, DsoClass, Event, Frame, Sample, Value};

/// Decodes a .nettrace file (ours or dotnet-trace's) into the model.
pub fn decode_nettrace(path: &Path, collector: &str) -> Result<Collection> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let decoded = eventpipe::decode(std::io::BufReader::new(file), &eventpipe::DecodeOptions::default())
        .with_context(|| format!("decoding {}", path.display()))?;
    let counters = eventpipe::counter_series(&decoded.events).with_context(|| format!("reading the counters in {}", path.display()))?;
    let mut coll = to_collection(decoded, collector);
    add_counter_metrics(&mut coll.metrics, &counters);
    coll.depth_limit = Some(eventpipe_depth_limit());
    Ok(coll)
}

/// The runtime walks an EventPipe stack (a sample's, an event's) into a fixed array of
/// `EP_MAX_STACK_DEPTH` = 100 frames and drops the rest: every EventPipe trace, whoever records
/// it, stops there.
pub fn eventpipe_depth_limit() -> model::DepthLimit {
    model::DepthLimit {
        frames: Some(100),
        cause: "the runtime keeps at most 100 frames of an EventPipe stack (EP_MAX_STACK_DEPTH; \
                dotnet/diagnostics#5954) and no setting raises it: for deeper stacks use perf-cpu with `call_graph = \"dwarf,65528\"` (or a raised `kernel.perf_event_max_stack`)"
            .into(),
    }
}

/// `counter.NAME.median|min|max|samples` of every counter, plus `total` and `rate` of a sum
/// counter (see the module docs).
pub fn add_counter_metrics(m: &mut std::collections::BTreeMap<String, f64>, counters: &[eventpipe::CounterSeries]) {
    for c in counters {
        let key = |stat: &str| format!("counter.{}.{stat}", c.name);
        m.insert(key("median"), c.median());
        m.insert(key("min"), c.min());
        m.insert(key("max"), c.max());
        m.insert(key("samples"), c.samples.len() as f64);
        if c.kind == eventpipe::CounterKind::Sum {
            m.insert(key("total"), c.total());
            m.insert(key("rate"), c.total() / c.seconds());
        }
    }
}

/// A stack's frames in the model, leaf first: managed frames named by the trace's method ranges.
fn model_frames(d: &eventpipe::Decoded, stack: u32) -> Vec<Frame> {
    d.frames(stack)
        .iter()
        .map(|f| match f.method {
            Some(m) => Frame {
                name: Some(m.qualified_name()),
                dso: f.module.map(String::from),
                class: if m.is_jitted() { DsoClass::Jit } else { DsoClass::R2r },
                addr: f.addr,
            },
            None => Frame { name: None, dso: None, class: DsoClass::Unknown, addr: f.addr },
        })
        .collect()
}

/// Turns a decoded trace into the model (see the module docs for the frame naming).
pub fn to_collection(mut d: eventpipe::Decoded, collector: &str) -> Collection {
    let mut coll = Collection::new(collector);
    // EventPipe's samples are SampleProfiler's: every managed thread at each tick of its timer.
    if !d.samples.is_empty() {
        coll.sampling = model::Sampling::WallClock;
    }
    let events = std::mem::take(&mut d.events);
    let pid = d.info.process_id;
    let mut frames_of: std::collections::HashMap<u32, Vec<Frame>> = Default::default();
    let mut frames = |stack: Option<u32>| match stack {
        Some(id) => frames_of.entry(id).or_insert_with(|| model_frames(&d, id)).clone(),
        None => Vec::new(),
    };
    for s in &d.samples {
        coll.samples.push(Sample {
            pid,
            tid: s.thread_id as u32,
            time_ns: s.time_ns,
            weight: 1,
            frames: frames(s.stack),
            kind: Some(s.kind.as_str().to_string()),
        });
    }
    for e in events {
        coll.events.push(Event {
            provider: e.provider,
            name: e.name,
            id: Some(e.event_id),
            version: Some(e.version),
            time_ns: e.time_ns,
            pid,
            tid: e.thread_id as u32,
            fields: e.fields.into_iter().map(|(k, v)| (k.into_owned(), model_value(v))).collect(),
            frames: frames(e.stack),
        });
    }
    coll.lost_events = d.stats.lost_events;
    let m = &mut coll.metrics;
    m.insert("sampling_interval_ms".into(), f64::from(d.info.sampling_interval_ns) / 1e6);
    m.insert("trace_bytes".into(), d.stats.bytes as f64);
    m.insert("events_total".into(), d.stats.events as f64);
    m.insert("methods_known".into(), d.methods.len() as f64);
    coll.method_names = d.methods.methods().iter().map(|m| m.qualified_name()).collect();
    m.insert("payload_errors".into(), d.payload_error_count as f64);
    coll
}

fn model_value(v: eventpipe::Value) -> Value {
    match v {
        eventpipe::Value::U64(v) => Value::U64(v),
        eventpipe::Value::I64(v) => Value::I64(v),
        eventpipe::Value::F64(v) => Value::F64(v),
        eventpipe::Value::Bool(b) => Value::U64(u64::from(b)),
        eventpipe::Value::Str(s) => Value::Str(s),
        eventpipe::Value::Guid(g) => Value::Str(eventpipe::guid_string(&g)),
        eventpipe::Value::Bytes(b) => Value::Bytes(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model view of a recorded trace: names without version suffix, decoded fields, frames.
    #[test]
    fn fixture_decodes_into_the_model() {
        let path = tracelab_fixtures::fixture("nettrace/fixture-dotnet-common.nettrace");
        let coll = decode_nettrace(&path, "eventpipe").unwrap();
        let gc_starts = coll.events.iter().filter(|e| e.name == "GCStart").count();
        assert_eq!(gc_starts, 22);
        let ex = coll.events.iter().find(|e| e.name == "ExceptionThrown").unwrap();
        assert_eq!(ex.fields["ExceptionType"].as_str(), Some("Fixture.FixtureException"));
        let managed = coll.samples.iter().filter(|s| s.kind.as_deref() == Some("managed")).count();
        assert_eq!((coll.samples.len(), managed), (2859, 1656));
        let hot = coll
            .samples
            .iter()
            .filter(|s| s.frames.first().and_then(|f| f.name.as_deref()) == Some("Fixture.Phases::CpuHot(int64)"))
            .count();
        assert_eq!(hot, 562);
        let leaf = &coll.samples.iter().find(|s| !s.frames.is_empty()).unwrap().frames[0];
        assert!(matches!(leaf.class, DsoClass::Jit | DsoClass::R2r), "{leaf:?}");
        assert_eq!(coll.lost_events, 0);
    }
}
