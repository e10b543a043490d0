//! Firefox Profiler processed profiles of a collection (samply's format, written with the
//! `fxprof-processed-profile` crate): one thread per app thread with its name, samples with
//! timestamps and the weight their collector measures (a count of CPU-clock or thread-time
//! samples; blocked milliseconds for off-CPU), frame categories by [`DsoClass`], and markers for
//! garbage collections and exceptions from the run's runtime events. Frame labels are
//! [`frame_label`]'s, the folded stacks' own, so both always show one name for a frame.
//!
//! Every collector's clock is CLOCK_MONOTONIC (perf `-k 1`, LTTng's monotonic clock, EventPipe's
//! QPC on Linux), so events of one collector place as markers on another's timeline.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, Profile, ProcessHandle, ReferenceTimestamp, SamplingInterval, StaticSchemaMarker,
    StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp, WeightType,
};

use crate::fold::frame_label;
use model::{Collection, DsoClass, Event, FrameKind, Value};

/// The file a collection's profile goes to, beside its speedscope file.
pub fn file_name(collector: &str) -> String {
    format!("{collector}.firefox.json.gz")
}

/// Frame categories by where the code lives; `other` for addresses in no known mapping.
struct Categories {
    jit: CategoryPairHandle,
    r2r: CategoryPairHandle,
    runtime: CategoryPairHandle,
    stub: CategoryPairHandle,
    libc: CategoryPairHandle,
    other_native: CategoryPairHandle,
    kernel: CategoryPairHandle,
    unknown: CategoryPairHandle,
    gc: CategoryHandle,
    exception: CategoryHandle,
}

impl Categories {
    fn new(profile: &mut Profile) -> Categories {
        let jit = profile.add_category("JIT", colour(FrameKind::Jit));
        let r2r = profile.add_category("ReadyToRun", colour(FrameKind::ReadyToRun));
        let runtime = profile.add_category("Runtime native", colour(FrameKind::Runtime));
        let native = profile.add_category("Native", colour(FrameKind::Native));
        let kernel = profile.add_category("Kernel", colour(FrameKind::Kernel));
        // Marker categories take colours no frame kind has.
        let gc = profile.add_category("GC", CategoryColor::Purple);
        let exception = profile.add_category("Exception", CategoryColor::Magenta);
        Categories {
            jit: jit.into(),
            r2r: r2r.into(),
            runtime: runtime.into(),
            stub: profile.add_subcategory(runtime, "stubs"),
            libc: profile.add_subcategory(native, "libc"),
            other_native: profile.add_subcategory(native, "other native"),
            kernel: kernel.into(),
            unknown: CategoryHandle::OTHER.into(),
            gc,
            exception,
        }
    }

    fn of(&self, class: DsoClass) -> CategoryPairHandle {
        match class {
            DsoClass::Jit => self.jit,
            DsoClass::R2r => self.r2r,
            DsoClass::RuntimeNative => self.runtime,
            DsoClass::Stub => self.stub,
            DsoClass::Libc => self.libc,
            DsoClass::OtherNative => self.other_native,
            DsoClass::Kernel => self.kernel,
            DsoClass::Unknown => self.unknown,
        }
    }
}

/// A frame kind's category colour: the flame graphs' colour word for it ([`FrameKind::colour`]),
/// so both views have one legend (issue 38: native was red in one and yellow in the other).
fn colour(kind: FrameKind) -> CategoryColor {
    match kind.colour() {
        "green" => CategoryColor::Green,
        "blue" => CategoryColor::Blue,
        "orange" => CategoryColor::Orange,
        "red" => CategoryColor::Red,
        "yellow" => CategoryColor::Yellow,
        _ => CategoryColor::Gray,
    }
}

/// A garbage collection: GCStart to GCEnd of one `Count` on one thread.
struct GcMarker {
    name: StringHandle,
    reason: StringHandle,
    category: CategoryHandle,
    count: f64,
    depth: f64,
}

impl StaticSchemaMarker for GcMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "DotNetGC";
    const DESCRIPTION: Option<&'static str> = Some(".NET garbage collection, GCStart to GCEnd");
    const CHART_LABEL: Option<&'static str> = Some("gen {marker.data.depth} #{marker.data.count}");
    const TABLE_LABEL: Option<&'static str> = Some("GC #{marker.data.count} gen {marker.data.depth} ({marker.data.reason})");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField { key: "reason", label: "Reason", format: MarkerFieldFormat::String, flags: MarkerFieldFlags::SEARCHABLE },
        StaticSchemaMarkerField { key: "count", label: "Count", format: MarkerFieldFormat::Integer, flags: MarkerFieldFlags::empty() },
        StaticSchemaMarkerField { key: "depth", label: "Generation", format: MarkerFieldFormat::Integer, flags: MarkerFieldFlags::empty() },
    ];

    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut Profile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, _: u32) -> StringHandle {
        self.reason
    }
    fn number_field_value(&self, field_index: u32) -> f64 {
        if field_index == 1 { self.count } else { self.depth }
    }
}

/// An exception thrown (ExceptionThrown), with its type and message.
struct ExceptionMarker {
    name: StringHandle,
    category: CategoryHandle,
    kind: StringHandle,
    message: StringHandle,
}

impl StaticSchemaMarker for ExceptionMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "DotNetException";
    const DESCRIPTION: Option<&'static str> = Some(".NET exception thrown");
    const CHART_LABEL: Option<&'static str> = Some("{marker.data.exceptionType}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.data.exceptionType}: {marker.data.message}");
    // Not `type`: the marker's data already has a `type`, its schema's name, which a field of that
    // key overwrote (two `"type"` keys in one object, and the profiler lost the schema).
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField { key: "exceptionType", label: "Type", format: MarkerFieldFormat::String, flags: MarkerFieldFlags::SEARCHABLE },
        StaticSchemaMarkerField { key: "message", label: "Message", format: MarkerFieldFormat::String, flags: MarkerFieldFlags::SEARCHABLE },
    ];

    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut Profile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, field_index: u32) -> StringHandle {
        if field_index == 0 { self.kind } else { self.message }
    }
    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

/// The CLOCK_MONOTONIC nanoseconds a collection's samples and events span.
fn span(c: &Collection) -> Option<(u64, u64)> {
    let times = c.samples.iter().map(|s| s.time_ns).chain(c.events.iter().map(|e| e.time_ns));
    times.fold(None, |acc, t| Some(match acc {
        None => (t, t),
        Some((a, b)) => (a.min(t), b.max(t)),
    }))
}

/// Whether `other` watched the same launch of the app as `coll`: their recordings overlap in
/// time. A scenario's launches follow one another (on-vs-off-cpu runs the app twice) and every
/// collector stamps CLOCK_MONOTONIC, so time tells launches apart where ids cannot: a
/// container's app has the same pid in every launch, and its thread ids repeat (issue 38: a
/// profile's threads were named, and its markers placed, from the other launch). A collection
/// with neither samples nor events has nothing to lend.
pub(crate) fn same_launch(coll: &Collection, other: &Collection) -> bool {
    match (span(coll), span(other)) {
        (Some((a0, a1)), Some((b0, b1))) => a0 <= b1 && b0 <= a1,
        (None, _) => true,
        (_, None) => false,
    }
}

/// A thread's name: the collector's own, else that of another collector of the same launch
/// (EventPipe names no threads; perf does, from its COMM records).
pub(crate) fn thread_name<'a>(coll: &'a Collection, run: &'a [Collection], tid: u32) -> Option<&'a str> {
    coll.thread_names
        .get(&tid)
        .or_else(|| run.iter().filter(|c| same_launch(coll, c)).find_map(|c| c.thread_names.get(&tid)))
        .map(String::as_str)
}

/// The collection whose GC and exception events mark `coll`'s profile: its own when it has any,
/// else the first of the other collections of the same launch that has them (LTTng, then
/// EventPipe, then dotnet-trace: the order in which they disturb the app least).
pub fn marker_source<'a>(coll: &'a Collection, run: &'a [Collection]) -> Option<&'a Collection> {
    let has = |c: &Collection| c.events.iter().any(|e| is_marker_event(e));
    if has(coll) {
        return Some(coll);
    }
    let rank = |c: &Collection| match c.collector.as_str() {
        n if n.starts_with("lttng") => 0,
        n if n.starts_with("eventpipe") => 1,
        n if n.starts_with("dotnet-trace") => 2,
        _ => 3,
    };
    let mut others: Vec<&Collection> = run.iter().filter(|c| c.collector != coll.collector && has(c) && same_launch(coll, c)).collect();
    others.sort_by_key(|c| rank(c));
    others.first().copied()
}

fn is_marker_event(e: &Event) -> bool {
    matches!(e.name.as_str(), "GCStart" | "GCEnd" | "ExceptionThrown")
}

fn field_u64(e: &Event, key: &str) -> Option<u64> {
    e.fields.get(key).and_then(Value::as_u64)
}

fn field_str(e: &Event, key: &str) -> String {
    match e.fields.get(key) {
        Some(Value::Str(s)) => s.clone(),
        Some(Value::U64(v)) => v.to_string(),
        Some(Value::I64(v)) => v.to_string(),
        Some(Value::F64(v)) => v.to_string(),
        _ => String::new(),
    }
}

/// GC reasons as the runtime's manifest names them (GCReason map of ClrEtwAll.man).
fn gc_reason(code: Option<u64>) -> String {
    const REASONS: [&str; 18] = [
        "AllocSmall", "Induced", "LowMemory", "Empty", "AllocLarge", "OutOfSpaceSOH", "OutOfSpaceLOH",
        "InducedNotForced", "Internal", "InducedLowMemory", "InducedCompacting", "LowMemoryHost",
        "PMFullGC", "LowMemoryHostBlocking", "BGCTuning", "FinalizersEnded", "InducedAggressive", "NonBlocking",
    ];
    match code {
        Some(c) => REASONS.get(c as usize).map(|s| s.to_string()).unwrap_or_else(|| format!("reason {c}")),
        None => String::new(),
    }
}

/// What a profile is written from: the collection, the run's other collections (thread names and
/// events they saw) and the profile's product name (the scenario).
pub struct ProfileInput<'a> {
    pub collection: &'a Collection,
    pub run: &'a [Collection],
    pub product: &'a str,
}

/// Builds the Firefox Profiler profile of one collection.
pub fn profile(input: &ProfileInput) -> Profile {
    let coll = input.collection;
    let markers = marker_source(coll, input.run);
    let events: Vec<&Event> = markers.map(|m| m.events.iter().filter(|e| is_marker_event(e)).collect()).unwrap_or_default();
    let start_ns = coll.samples.iter().map(|s| s.time_ns).chain(events.iter().map(|e| e.time_ns)).min().unwrap_or(0);
    let at = |ns: u64| Timestamp::from_nanos_since_reference(ns.saturating_sub(start_ns));

    let (interval, cpu_per_sample) = sampling(coll);
    let mut profile = Profile::new(input.product, reference_timestamp(start_ns), interval);
    profile.set_product(&format!("{} — {} (tracelab)", input.product, coll.collector));
    profile.set_os_name("Linux");
    let cats = Categories::new(&mut profile);

    let name_of = |tid: u32| thread_name(coll, input.run, tid).map(String::from);
    let weight_type = if coll.weight_ns { WeightType::TracingMs } else { WeightType::Samples };
    let mut processes: BTreeMap<u32, ProcessHandle> = BTreeMap::new();
    let mut threads: BTreeMap<u32, ThreadHandle> = BTreeMap::new();
    let mut thread_for = |profile: &mut Profile, pid: u32, tid: u32| -> ThreadHandle {
        if let Some(t) = threads.get(&tid) {
            return *t;
        }
        let process = *processes.entry(pid).or_insert_with(|| {
            let name = name_of(pid).unwrap_or_else(|| format!("pid {pid}"));
            profile.add_process(&name, pid, Timestamp::from_nanos_since_reference(0))
        });
        let thread = profile.add_thread(process, tid, Timestamp::from_nanos_since_reference(0), tid == pid);
        profile.set_thread_name(thread, &name_of(tid).unwrap_or_else(|| format!("thread {tid}")));
        profile.set_thread_samples_weight_type(thread, weight_type.clone());
        threads.insert(tid, thread);
        thread
    };

    // Off-CPU weights are blocked nanoseconds, the profile's are whole milliseconds: round each
    // (thread, stack)'s running total, so every stack keeps its total to within a millisecond.
    let mut ns_carried: HashMap<(u32, fxprof_processed_profile::StackHandle), (u64, u64)> = HashMap::new();
    let mut samples: Vec<&model::Sample> = coll.samples.iter().collect();
    samples.sort_by_key(|s| s.time_ns);
    for s in samples {
        let thread = thread_for(&mut profile, s.pid, s.tid);
        let frames: Vec<FrameInfo> = s
            .frames
            .iter()
            .rev()
            .map(|f| FrameInfo {
                frame: FxFrame::Label(profile.intern_string(&frame_label(f))),
                category_pair: cats.of(f.class),
                // The profiler's "JavaScript only" filter then shows managed frames alone.
                flags: if matches!(f.class, DsoClass::Jit | DsoClass::R2r) { FrameFlags::IS_JS } else { FrameFlags::empty() },
            })
            .collect();
        let stack = profile.intern_stack_frames(thread, frames.into_iter());
        let weight = if coll.weight_ns {
            let Some(key) = stack.map(|st| (s.tid, st)) else {
                profile.add_sample(thread, at(s.time_ns), None, CpuDelta::ZERO, (s.weight / 1_000_000) as i32);
                continue;
            };
            let (total_ns, written_ms) = ns_carried.entry(key).or_default();
            *total_ns += s.weight;
            let due = (*total_ns + 500_000) / 1_000_000;
            let w = due - *written_ms;
            *written_ms = due;
            w
        } else {
            s.weight
        };
        profile.add_sample(thread, at(s.time_ns), stack, cpu_per_sample, weight.min(i32::MAX as u64) as i32);
    }

    add_markers(&mut profile, &cats, &events, &at, |p, pid, tid| thread_for(p, pid, tid));
    profile
}

/// The sampling interval the collector asked for, and the CPU time one sample stands for (only
/// cpu-clock samples stand for CPU time: a thread-time sample may be of a blocked thread).
fn sampling(coll: &Collection) -> (SamplingInterval, CpuDelta) {
    if let Some(hz) = coll.metrics.get("frequency_hz").filter(|hz| **hz > 0.0) {
        let ns = (1e9 / hz) as u64;
        return (SamplingInterval::from_nanos(ns), if coll.weight_ns { CpuDelta::ZERO } else { CpuDelta::from_nanos(ns) });
    }
    if let Some(ms) = coll.metrics.get("sampling_interval_ms").filter(|ms| **ms > 0.0) {
        return (SamplingInterval::from_nanos((ms * 1e6) as u64), CpuDelta::ZERO);
    }
    (SamplingInterval::from_millis(1), CpuDelta::ZERO)
}

/// The wall-clock time of monotonic `start_ns`.
fn reference_timestamp(start_ns: u64) -> ReferenceTimestamp {
    ReferenceTimestamp::from_millis_since_unix_epoch(unix_ns_of_monotonic(start_ns) as f64 / 1e6)
}

/// Unix nanoseconds of a CLOCK_MONOTONIC time, by the clocks' offset now (viewer files are
/// written right after their run, so the offset has not moved by more than NTP's slew).
pub(crate) fn unix_ns_of_monotonic(monotonic_ns: u64) -> i64 {
    let now = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime only writes the timespec it is given.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
    };
    let offset = now(libc::CLOCK_REALTIME) - now(libc::CLOCK_MONOTONIC);
    offset + monotonic_ns as i64
}

fn add_markers(
    profile: &mut Profile,
    cats: &Categories,
    events: &[&Event],
    at: &dyn Fn(u64) -> Timestamp,
    mut thread_for: impl FnMut(&mut Profile, u32, u32) -> ThreadHandle,
) {
    // GCStart waits for the GCEnd of the same Count (and process).
    let mut open: HashMap<(u32, u64), &Event> = HashMap::new();
    let gc_marker = |profile: &mut Profile, start: &Event| GcMarker {
        name: profile.intern_string("GC"),
        reason: profile.intern_string(&gc_reason(field_u64(start, "Reason"))),
        category: cats.gc,
        count: field_u64(start, "Count").unwrap_or(0) as f64,
        depth: field_u64(start, "Depth").unwrap_or(0) as f64,
    };
    for e in events {
        match e.name.as_str() {
            "GCStart" => {
                if let Some(earlier) = open.insert((e.pid, field_u64(e, "Count").unwrap_or(u64::MAX)), e) {
                    let thread = thread_for(profile, earlier.pid, earlier.tid);
                    let marker = gc_marker(profile, earlier);
                    profile.add_marker(thread, MarkerTiming::Instant(at(earlier.time_ns)), marker);
                }
            }
            "GCEnd" => {
                let key = (e.pid, field_u64(e, "Count").unwrap_or(u64::MAX));
                // A GCEnd without its GCStart (the provider registered mid-GC) marks nothing.
                if let Some(start) = open.remove(&key) {
                    let thread = thread_for(profile, start.pid, start.tid);
                    let marker = gc_marker(profile, start);
                    profile.add_marker(thread, MarkerTiming::Interval(at(start.time_ns), at(e.time_ns)), marker);
                }
            }
            "ExceptionThrown" => {
                let thread = thread_for(profile, e.pid, e.tid);
                let marker = ExceptionMarker {
                    name: profile.intern_string("Exception"),
                    category: cats.exception,
                    kind: profile.intern_string(&field_str(e, "ExceptionType")),
                    message: profile.intern_string(&field_str(e, "ExceptionMessage")),
                };
                profile.add_marker(thread, MarkerTiming::Instant(at(e.time_ns)), marker);
            }
            _ => {}
        }
    }
    let mut left: Vec<&Event> = open.into_values().collect();
    left.sort_by_key(|e| e.time_ns);
    for start in left {
        let thread = thread_for(profile, start.pid, start.tid);
        let marker = gc_marker(profile, start);
        profile.add_marker(thread, MarkerTiming::IntervalStart(at(start.time_ns)), marker);
    }
}

/// Writes `<run_dir>/<collector>.firefox.json.gz`; returns its path.
pub fn write(input: &ProfileInput, run_dir: &Path) -> Result<PathBuf> {
    let path = run_dir.join(file_name(&input.collection.collector));
    let profile = profile(input);
    let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::default());
    serde_json::to_writer(&mut gz, &profile).with_context(|| format!("cannot write {}", path.display()))?;
    // `finish` writes the gzip trailer: on a full disk it is what fails, and the error names the file.
    gz.finish().and_then(|mut w| w.flush()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn json(coll: &Collection, run: &[Collection]) -> Json {
        let profile = profile(&ProfileInput { collection: coll, run, product: "fixture" });
        serde_json::to_value(&profile).unwrap()
    }

    fn strings(thread: &Json) -> Vec<&str> {
        thread["stringArray"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect()
    }

    fn categories(j: &Json) -> Vec<&str> {
        j["meta"]["categories"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
    }

    /// Marker names and data of every thread.
    fn markers(j: &Json) -> Vec<(String, Json)> {
        let mut out = Vec::new();
        for t in j["threads"].as_array().unwrap() {
            let strings = strings(t);
            let m = &t["markers"];
            for (name, data) in m["name"].as_array().unwrap().iter().zip(m["data"].as_array().unwrap()) {
                // String fields (`unique-string`) are indexes into the thread's string table.
                let mut data = data.clone();
                for key in ["reason", "exceptionType", "message"] {
                    if let Some(i) = data.get(key).and_then(Json::as_u64) {
                        data[key] = Json::from(strings[i as usize]);
                    }
                }
                out.push((strings[name.as_u64().unwrap() as usize].to_string(), data));
            }
        }
        out
    }

    #[test]
    fn cpu_profile_has_named_threads_frame_categories_and_sample_weights() {
        let d = crate::perf_fixtures::decode_fixture("perf-cpu", 16459, 16459, &[], &|_| None);
        let mut coll = d.collection;
        coll.metrics.insert("frequency_hz".into(), 999.0);
        let j = json(&coll, &[]);
        assert_eq!(j["meta"]["preprocessedProfileVersion"], 55, "the processed format's version");
        assert_eq!(j["meta"]["interval"], 1.001001, "milliseconds between samples at 999 Hz");
        let cats = categories(&j);
        for c in ["JIT", "ReadyToRun", "Runtime native", "Native", "Kernel"] {
            assert!(cats.contains(&c), "{c} missing from {cats:?}");
        }
        let threads = j["threads"].as_array().unwrap();
        let names: Vec<&str> = threads.iter().map(|t| t["name"].as_str().unwrap()).collect();
        // perf's COMM records: the main thread is `dotnet`, the runtime names its own threads.
        assert!(names.contains(&"dotnet"), "{names:?}");
        assert!(names.iter().all(|n| !n.starts_with("thread ")), "every thread has its name: {names:?}");
        let total: u64 = threads.iter().map(|t| t["samples"]["length"].as_u64().unwrap()).sum();
        assert_eq!(total, coll.samples.len() as u64);
        for t in threads {
            assert_eq!(t["samples"]["weightType"], "samples", "{}", t["name"]);
        }
        // The hot method, named as the folded stacks name it, in the JIT category.
        let main = threads.iter().find(|t| t["tid"] == "16459").unwrap();
        let strings = strings(main);
        let hot = strings.iter().position(|s| s.ends_with("Fixture.Phases::CpuHot(int64)")).expect("CpuHot is a frame");
        let funcs = &main["funcTable"];
        let func = funcs["name"].as_array().unwrap().iter().position(|n| n.as_u64() == Some(hot as u64)).unwrap();
        let frames = &main["frameTable"];
        let frame = frames["func"].as_array().unwrap().iter().position(|f| f.as_u64() == Some(func as u64)).unwrap();
        let cat = frames["category"][frame].as_u64().unwrap() as usize;
        assert_eq!(cats[cat], "JIT");
        assert_eq!(strings[hot], crate::fold::frame_label(coll.samples.iter().flat_map(|s| &s.frames).find(|f| f.name.as_deref().is_some_and(|n| n.contains("CpuHot"))).unwrap()));
    }

    #[test]
    fn eventpipe_profile_marks_each_gc_and_exception() {
        let path = tracelab_fixtures::fixture("nettrace/fixture-dotnet-common.nettrace");
        let coll = crate::decode::decode_nettrace(&path, "eventpipe").unwrap();
        let j = json(&coll, &[]);
        let m = markers(&j);
        let gcs: Vec<&Json> = m.iter().filter(|(n, _)| n == "GC").map(|(_, d)| d).collect();
        let exceptions: Vec<&Json> = m.iter().filter(|(n, _)| n == "Exception").map(|(_, d)| d).collect();
        let starts = coll.events.iter().filter(|e| e.name == "GCStart").count();
        let thrown = coll.events.iter().filter(|e| e.name == "ExceptionThrown").count();
        assert!(starts >= 10, "the fixture induces 10 GCs: {starts}");
        assert_eq!(gcs.len(), starts, "one GC marker per GCStart");
        assert_eq!(exceptions.len(), thrown);
        assert_eq!(thrown, 1000, "FixtureApp throws 1000");
        assert!(gcs.iter().any(|g| g["reason"] == "Induced"), "{:?}", gcs.first());
        assert_eq!(exceptions.iter().filter(|e| e["exceptionType"] == "Fixture.FixtureException").count(), 1000, "{:?}", exceptions.first());
        // The data's own `type` names its schema, once.
        assert!(exceptions.iter().all(|e| e["type"] == "DotNetException"), "{:?}", exceptions.first());
        assert!(exceptions.iter().any(|e| e["message"] == "fixture 1"));
        // EventPipe names no threads: without a perf collection in the run its process and
        // threads go by their ids, with one they take perf's names (its COMM records).
        let t = &j["threads"][0];
        assert_eq!(t["processName"], format!("pid {}", t["pid"].as_str().unwrap()));
        let mut perf = Collection::new("perf-cpu");
        let tid: u32 = t["tid"].as_str().unwrap().parse().unwrap();
        perf.thread_names.insert(tid, "dotnet".into());
        // Of the same launch: it recorded while the trace did.
        let during = coll.samples[coll.samples.len() / 2].clone();
        perf.samples.push(during);
        let j = json(&coll, &[perf]);
        assert_eq!(j["threads"][0]["processName"], "dotnet");
        assert_eq!(j["threads"][0]["name"], "dotnet");
    }

    #[test]
    fn collectors_without_events_take_markers_from_the_run() {
        let path = tracelab_fixtures::fixture("nettrace/fixture-exceptions.nettrace");
        let mut events = crate::decode::decode_nettrace(&path, "eventpipe").unwrap();
        let d = crate::perf_fixtures::decode_fixture("perf-cpu", 16459, 16459, &[], &|_| None);
        // The two fixtures were recorded apart: as they are, they are two launches.
        let j = json(&d.collection, &[d.collection.clone(), events.clone()]);
        assert_eq!(markers(&j).iter().filter(|(n, _)| n == "Exception").count(), 0, "markers of another launch");
        // Moved onto the perf recording's time, they watched the same launch.
        let (perf_from, _) = span(&d.collection).unwrap();
        let (from, _) = span(&events).unwrap();
        for e in &mut events.events {
            e.time_ns = e.time_ns - from + perf_from;
        }
        for s in &mut events.samples {
            s.time_ns = s.time_ns - from + perf_from;
        }
        let j = json(&d.collection, &[d.collection.clone(), events]);
        assert_eq!(markers(&j).iter().filter(|(n, _)| n == "Exception").count(), 1000);
    }

    /// Two launches of one scenario (on-vs-off-cpu): perf-cpu watched the first, EventPipe and
    /// perf-offcpu the second, and the thread ids repeat (a container's app). Each exporter takes
    /// thread names and markers only from its own launch; speedscope's unit is a time; the
    /// Firefox categories' colours are the flame graphs' legend.
    #[test]
    fn every_exporter_takes_names_and_markers_from_its_own_launch() {
        const S: u64 = 1_000_000_000;
        let frame = |n: &str, class: DsoClass| model::Frame { name: Some(n.into()), dso: None, class, addr: 0 };
        let sample = |tid: u32, t: u64| model::Sample {
            pid: 6,
            tid,
            time_ns: t,
            weight: 1,
            frames: vec![frame("W::Hot()", DsoClass::Jit), frame("syscall", DsoClass::Kernel), frame("fn@0x10", DsoClass::RuntimeNative)],
            kind: None,
            cpu: None,
        };
        let mut cpu = Collection::new("perf-cpu");
        cpu.metrics.insert("frequency_hz".into(), 999.0);
        cpu.thread_names = [(6, "dotnet".to_string()), (30, "cpu-worker".to_string())].into();
        cpu.samples = (0..100).map(|i| sample(30, S + i * S / 100)).collect();
        let mut ep = Collection::new("eventpipe");
        ep.metrics.insert("sampling_interval_ms".into(), 1.0);
        ep.samples = (0..100).map(|i| sample(30, 10 * S + i * S / 50)).collect();
        let gc = |name: &str, t: u64| Event {
            provider: "Microsoft-Windows-DotNETRuntime".into(),
            name: name.into(),
            id: None,
            version: None,
            time_ns: t,
            pid: 6,
            tid: 30,
            fields: [("Count".to_string(), Value::U64(1)), ("Depth".to_string(), Value::U64(0))].into(),
            frames: vec![],
        };
        ep.events = vec![gc("GCStart", 11 * S), gc("GCEnd", 11 * S + 5_000_000)];
        let mut off = Collection::new("perf-offcpu");
        off.weight_ns = true;
        off.thread_names = [(6, "dotnet".to_string()), (30, "blocked-worker".to_string())].into();
        off.samples = (0..10).map(|i| model::Sample { weight: 1_000_000, ..sample(30, 10 * S + i * S / 10) }).collect();
        let run = [cpu.clone(), ep.clone(), off.clone()];
        let thread_names = |j: &Json| -> Vec<String> { j["threads"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect() };

        // Firefox: perf-cpu's profile has no marker of the other launch and its own names.
        let j = json(&cpu, &run);
        assert!(markers(&j).is_empty(), "{:?}", markers(&j));
        assert_eq!(thread_names(&j), ["cpu-worker"]);
        let j = json(&ep, &run);
        assert_eq!(markers(&j).iter().filter(|(n, _)| n == "GC").count(), 1);
        assert_eq!(thread_names(&j), ["blocked-worker"], "named by perf-offcpu, which watched the same launch");
        // Its colours are the flame graphs' legend words.
        for c in j["meta"]["categories"].as_array().unwrap() {
            let kind = match c["name"].as_str().unwrap() {
                "JIT" => FrameKind::Jit,
                "ReadyToRun" => FrameKind::ReadyToRun,
                "Runtime native" => FrameKind::Runtime,
                "Native" => FrameKind::Native,
                "Kernel" => FrameKind::Kernel,
                _ => continue,
            };
            assert_eq!(c["color"], kind.colour(), "{c}");
        }

        // pprof and trace.zip name threads the same way.
        let threads_of = |coll: &Collection| -> Vec<String> {
            let p = crate::export::pprof::profile(coll, &run).unwrap();
            let mut names: Vec<String> = p.sample.iter().flat_map(|s| &s.label).filter(|l| p.string(l.key) == "thread").map(|l| p.string(l.str).to_string()).collect();
            names.dedup();
            names
        };
        assert_eq!(threads_of(&cpu), ["cpu-worker"]);
        assert_eq!(threads_of(&ep), ["blocked-worker"]);
        assert_eq!(thread_name(&ep, &run, 30), Some("blocked-worker"));
        assert_eq!(thread_name(&cpu, &run, 30), Some("cpu-worker"));

        // speedscope: a time unit, one sample worth its period.
        let sp: Json = serde_json::from_str(&crate::fold::speedscope_json(&cpu).unwrap()).unwrap();
        assert_eq!(sp["profiles"][0]["unit"], "microseconds");
        assert_eq!(sp["profiles"][0]["weights"][0], 1001, "1 / 999 Hz in µs");
        let sp: Json = serde_json::from_str(&crate::fold::speedscope_json(&ep).unwrap()).unwrap();
        assert_eq!((sp["profiles"][0]["unit"].as_str(), sp["profiles"][0]["weights"][0].as_u64()), (Some("microseconds"), Some(1000)));
        let sp: Json = serde_json::from_str(&crate::fold::speedscope_json(&off).unwrap()).unwrap();
        assert_eq!(sp["profiles"][0]["unit"], "nanoseconds");
    }

    #[test]
    fn offcpu_samples_weigh_blocked_milliseconds() {
        let mut coll = Collection::new("perf-offcpu");
        coll.weight_ns = true;
        let frame = |n: &str| model::Frame { name: Some(n.into()), dso: None, class: DsoClass::Jit, addr: 0 };
        // 2000 waits of 0.4 ms in one stack: 800 ms, though each rounds to 0 ms alone.
        for i in 0..2000u64 {
            coll.samples.push(model::Sample { weight: 400_000, kind: Some("blocked".into()), ..model::Sample::new(1, 2, i * 1_000_000, vec![frame("W::Wait()")]) });
        }
        coll.samples.push(model::Sample { weight: 3_000_000_000, kind: Some("blocked".into()), ..model::Sample::new(1, 2, 5, vec![frame("W::Sleep()")]) });
        let j = json(&coll, &[]);
        let t = &j["threads"][0];
        assert_eq!(t["samples"]["weightType"], "tracing-ms");
        let strings = strings(t);
        let stacks = &t["stackTable"];
        let frames = &t["frameTable"];
        let funcs = &t["funcTable"];
        let mut by_name: BTreeMap<&str, i64> = BTreeMap::new();
        let weights = t["samples"]["weight"].as_array().unwrap();
        for (stack, w) in t["samples"]["stack"].as_array().unwrap().iter().zip(weights) {
            let frame = stacks["frame"][stack.as_u64().unwrap() as usize].as_u64().unwrap() as usize;
            let func = frames["func"][frame].as_u64().unwrap() as usize;
            let name = strings[funcs["name"][func].as_u64().unwrap() as usize];
            *by_name.entry(name).or_default() += w.as_i64().unwrap();
        }
        assert_eq!(by_name["W::Wait()"], 800);
        assert_eq!(by_name["W::Sleep()"], 3000);
    }
}
