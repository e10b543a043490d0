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

/// Names the frames an EventPipe trace left unnamed that ran in a ReadyToRun image, from the
/// app's memory map (`maps`: /proc/PID/maps text, as the collector saw it while the app ran) and
/// the image's own method table — the reader perf's stacks use. The runtime reports no load
/// event for some precompiled code (a P/Invoke's marshalling method, `Interop+Sys::…`), so its
/// frames read `[unknown]` in EventPipe where perf names them. `path_map` turns a path as the app
/// saw it into one readable here (a container's). Returns the frames named.
pub fn name_ready_to_run_frames(c: &mut Collection, maps: &str, path_map: &dyn Fn(&Path) -> Option<std::path::PathBuf>) -> u64 {
    // (start, end, file offset, path) of every file-backed .dll mapping.
    let mut images: Vec<(u64, u64, u64, &str)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, offset) = (f.next()?, f.next()?, f.next()?);
            let path = f.nth(2)?;
            if !path.ends_with(".dll") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?, u64::from_str_radix(offset, 16).ok()?, path))
        })
        .collect();
    images.sort_unstable();
    images.dedup();
    if images.is_empty() {
        return 0;
    }
    let mut r2r = crate::symbolize::r2r::R2rResolver::new();
    let mut named_at: std::collections::HashMap<u64, Option<(String, String)>> = Default::default();
    let mut named = 0u64;
    let frames = c.samples.iter_mut().flat_map(|s| s.frames.iter_mut()).chain(c.events.iter_mut().flat_map(|e| e.frames.iter_mut()));
    for f in frames.filter(|f| f.name.is_none()) {
        let found = named_at.entry(f.addr).or_insert_with(|| {
            let at = images.partition_point(|m| m.0 <= f.addr).checked_sub(1)?;
            let (start, end, offset, path) = images[at];
            if f.addr >= end {
                return None;
            }
            let host = path_map(Path::new(path)).unwrap_or_else(|| Path::new(path).to_path_buf());
            let name = r2r.name(&host, f.addr - start + offset)?;
            Some((name, path.to_string()))
        });
        if let Some((name, path)) = found {
            f.name = Some(name.clone());
            f.dso = Some(path.clone());
            f.class = DsoClass::R2r;
            named += 1;
        }
    }
    c.metrics.insert("r2r_frames_named_from_maps".into(), named as f64);
    named
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
            cpu: None,
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

/// A decoded payload field in the model (a GUID in its usual spelling, a bool as 0 or 1).
pub fn model_value(v: eventpipe::Value) -> Value {
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

    /// A frame EventPipe left bare in the runtime's own precompiled CoreLib is named from the
    /// app's map and the image: the method the image lists at that file offset, class R2R.
    #[test]
    fn bare_frames_in_a_ready_to_run_image_are_named_from_the_map() {
        let runtime = match tracelab_fixtures::recorded_runtime_dir() {
            Ok(r) => r,
            Err(why) => return tracelab_fixtures::skip("nettrace::bare_frames_in_a_ready_to_run_image_are_named_from_the_map", why),
        };
        let corelib = runtime.join("System.Private.CoreLib.dll");
        let mut r2r = crate::symbolize::r2r::R2rResolver::new();
        let (offset, name) = (0x10_000u64..).step_by(0x1000).take(4096).find_map(|o| Some((o, r2r.name(&corelib, o)?))).expect("a method in CoreLib");
        let base = 0x7f00_0000_0000u64;
        let maps = format!(
            "{base:x}-{:x} r-xp 00000000 08:01 1234 {}\n7f1000000000-7f1000001000 r--p 00000000 08:01 99 /usr/lib/libc.so.6\n",
            base + 0x1000_0000,
            corelib.display()
        );
        let mut c = Collection::new("eventpipe");
        let bare = |addr| Frame { name: None, dso: None, class: DsoClass::Unknown, addr };
        c.samples.push(Sample::new(1, 1, 0, vec![bare(base + offset), bare(0x7f10_0000_0010)]));
        let identity = |p: &Path| Some(p.to_path_buf());
        assert_eq!(name_ready_to_run_frames(&mut c, &maps, &identity), 1);
        let f = &c.samples[0].frames[0];
        assert_eq!((f.name.as_deref(), f.class), (Some(name.as_str()), DsoClass::R2r), "{f:?}");
        assert!(c.samples[0].frames[1].name.is_none(), "a frame outside every .dll stays bare");
    }

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
