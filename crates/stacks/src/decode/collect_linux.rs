//! A `dotnet-trace collect-linux` trace (nettrace V6, written by one-collect's record-trace) into
//! the model.
//!
//! What the trace holds, as recorded on a user_events kernel (tests/data/collect-linux in the
//! `eventpipe` crate): perf samples of the traced process (`Universal.Events/cpu`, one event per
//! sample, its stack the instruction pointers leaf first, kernel ones first) and, with
//! `thread-time`, context switches (`Universal.Events/cswitch`); the process's mappings
//! (`Universal.System/ProcessMapping`, in the order they appeared: a later one replaces what it
//! overlaps, as the JIT's double-mapped region grows) and the symbols the recorder resolved for
//! the addresses it saw (`ProcessSymbol`: JIT code and stubs as the runtime's perf map names them,
//! the kernel's from vmlinux, some of libc's); and the runtime's events as it wrote them to
//! user_events, named by nothing but their manifest id and version, each with the stack of the
//! write: the kernel's user_events path first, then the thread's user frames.
//!
//! Frames are named through the same [`Symbolizer`] perf recordings use — mappings as MMAP
//! records, ReadyToRun images by their method tables, ELF symbols — with the recorder's JIT and
//! kernel symbols as its perf map and kallsyms: so a frame is spelled as in every other view.

use std::path::Path;

use anyhow::{Context, Result, bail};

use eventpipe::{V6Event, V6Trace};
use model::{Collection, Event, Frame, Sample};
use perfdata::PerfMmap;

use crate::symbolize::table::SymbolTable;
use crate::symbolize::{DecodeContext, Symbolizer};

/// Where user space ends on x86-64: addresses above are the kernel's.
const KERNEL_START: u64 = 0xffff_8000_0000_0000;

/// A mapping of a `ProcessMapping` event.
struct V6Mapping {
    id: u64,
    pid: u32,
    start: u64,
    end: u64,
    file_offset: u64,
    path: String,
}

/// Decodes a collect-linux trace into the model; `collector` names it.
pub fn decode_collect_linux(path: &Path, collector: &str, ctx: &DecodeContext) -> Result<Collection> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let trace = eventpipe::read_v6(&bytes).with_context(|| format!("reading {}", path.display()))?;
    let mut c = v6_to_collection(&trace, collector, ctx).with_context(|| format!("decoding {}", path.display()))?;
    c.metrics.insert("trace_bytes".into(), bytes.len() as f64);
    Ok(c)
}

/// The provider and name of an event's metadata ("" where it has none).
fn provider_and_name<'a>(t: &'a V6Trace, e: &V6Event) -> (&'a str, &'a str) {
    t.metadata_of(e).map_or(("", ""), |m| (m.provider.as_str(), m.name.as_str()))
}

/// A trace read by [`eventpipe::read_v6`] into the model (see the module docs).
pub fn v6_to_collection(t: &V6Trace, collector: &str, ctx: &DecodeContext) -> Result<Collection> {
    let field_error = |e: &V6Event, err: eventpipe::Error| {
        let (p, n) = provider_and_name(t, e);
        anyhow::anyhow!("{p}/{n} of pid {} at {} ns: {err}", e.pid, e.timestamp)
    };
    let mut mappings: Vec<V6Mapping> = Vec::new();
    // (pid, mapping id, start, end, name) of every symbol the recorder resolved.
    let mut symbols: Vec<(u32, u64, u64, u64, String)> = Vec::new();
    for e in &t.events {
        let (provider, name) = provider_and_name(t, e);
        if provider != "Universal.System" || !matches!(name, "ProcessMapping" | "ProcessSymbol") {
            continue;
        }
        let fields = t.fields(e).map_err(|err| field_error(e, err))?;
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        let num = |k: &str| get(k).and_then(|v| v.as_u64());
        let text = |k: &str| get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
        match name {
            "ProcessMapping" => {
                let (Some(id), Some(start), Some(end)) = (num("Id"), num("StartAddress"), num("EndAddress")) else {
                    bail!("a ProcessMapping event of pid {} without Id, StartAddress or EndAddress: {fields:?}", e.pid);
                };
                let path = match text("FileName") {
                    // perf's name for anonymous memory, so the mapping reads as in perf's views.
                    p if p.is_empty() => "//anon".to_string(),
                    p => p,
                };
                mappings.push(V6Mapping { id, pid: e.pid, start, end, file_offset: num("FileOffset").unwrap_or(0), path });
            }
            _ => {
                let (Some(mapping), Some(start), Some(end)) = (num("MappingId"), num("StartAddress"), num("EndAddress")) else {
                    bail!("a ProcessSymbol event of pid {} without MappingId, StartAddress or EndAddress: {fields:?}", e.pid);
                };
                symbols.push((e.pid, mapping, start, end, text("Name")));
            }
        }
    }
    let mmaps: Vec<PerfMmap> = mappings
        .iter()
        .map(|m| PerfMmap {
            pid: m.pid,
            tid: m.pid,
            time_ns: None,
            start: m.start,
            len: m.end.saturating_sub(m.start),
            pgoff: m.file_offset,
            path: m.path.clone(),
            build_id: None,
            executable: true,
            in_kernel: m.start >= KERNEL_START,
        })
        .filter(|m| !m.in_kernel)
        .collect();
    let mut pids: Vec<u32> = mappings.iter().map(|m| m.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    let mut sym = Symbolizer::for_mappings(ctx, &mmaps, &pids, false, None)?;
    sym.set_name_doublemapped(true);
    // The recorder's symbols: JIT code (anonymous or double-mapped memory) per process, the
    // kernel's once. File-backed ones are left to the files themselves, as for perf.
    let by_id: std::collections::HashMap<u64, &V6Mapping> = mappings.iter().map(|m| (m.id, m)).collect();
    let mut jit: std::collections::BTreeMap<u32, SymbolTable> = Default::default();
    let mut kernel = SymbolTable::new();
    for (pid, mapping, start, end, name) in &symbols {
        // Addresses are the process's (every symbol of the recordings lies in its mapping).
        let Some(m) = by_id.get(mapping) else { continue };
        if m.start >= KERNEL_START {
            kernel.push(*start, *end, name);
        } else if m.path == "//anon" || m.path.contains("memfd:") {
            jit.entry(*pid).or_insert_with(SymbolTable::new).push(*start, *end, name);
        }
    }
    for (pid, mut table) in jit {
        table.finish();
        let n = table.len();
        sym.use_jit_symbols(pid, table, format!("pid {pid}: {n} JIT symbols from the trace's ProcessSymbol events"));
    }
    kernel.finish();
    if !kernel.is_empty() {
        let n = kernel.len();
        sym.use_kernel_symbols(kernel, format!("kernel: {n} symbols from the trace's ProcessSymbol events"));
    }

    let mut c = Collection::new(collector);
    c.sampling = model::Sampling::CpuTime;
    let ns = |qpc: u64| t.qpc_to_ns(qpc);
    let mut frames = |pid: u32, stack: &[u64], skip_kernel: bool| -> Vec<Frame> {
        let user = if skip_kernel { stack.iter().position(|&a| a < KERNEL_START).unwrap_or(stack.len()) } else { 0 };
        stack[user..].iter().map(|&a| sym.frame(pid, a, a >= KERNEL_START)).collect()
    };
    let (mut samples, mut switches, mut payload_errors) = (0u64, 0u64, 0u64);
    for e in &t.events {
        let Some(meta) = t.metadata_of(e) else { continue };
        match (meta.provider.as_str(), meta.name.as_str()) {
            ("Universal.Events", "cpu") => {
                samples += 1;
                c.samples.push(Sample { cpu: Some(e.processor), ..Sample::new(e.pid, e.tid, ns(e.timestamp), frames(e.pid, &e.stack, false)) });
            }
            ("Universal.Events", "cswitch") => {
                // A switch away from the thread: its stack is where it blocked, its value (the
                // metric one-collect exports for it) how long, in QPC ticks.
                switches += 1;
                let value = t.fields(e).ok().and_then(|f| f.first().and_then(|(_, v)| v.as_u64())).unwrap_or(0);
                c.samples.push(Sample {
                    weight: ns(value),
                    kind: Some("blocked".into()),
                    cpu: Some(e.processor),
                    ..Sample::new(e.pid, e.tid, ns(e.timestamp), frames(e.pid, &e.stack, false))
                });
            }
            (p, _) if p.starts_with("Microsoft-") || p.starts_with("System.") => {
                let version = e.labels.iter().find(|(k, _)| k == "Version").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
                let known = eventpipe::EventMetadata::known(&meta.provider, meta.event_id, version);
                let name = if known.name.is_empty() { meta.name.clone() } else { known.name.clone() };
                // A trace block that gave no pointer size is a 64-bit writer's (all record-trace builds).
                let pointer_size = if t.pointer_size == 0 { 8 } else { t.pointer_size };
                let fields = match eventpipe::decode_payload(&known, &e.payload, pointer_size, 0) {
                    Ok(f) => f.into_iter().map(|(k, v)| (k.into_owned(), super::nettrace::model_value(v))).collect(),
                    Err(_) => {
                        payload_errors += 1;
                        Default::default()
                    }
                };
                c.events.push(Event {
                    provider: meta.provider.clone(),
                    name,
                    id: Some(meta.event_id),
                    version: Some(version),
                    time_ns: ns(e.timestamp),
                    pid: e.pid,
                    tid: e.tid,
                    fields,
                    frames: frames(e.pid, &e.stack, true),
                });
            }
            _ => {}
        }
    }
    // With thread-time, CPU samples and switches are two kinds: the CPU ones say so.
    // Weights are then nanoseconds: a CPU sample stands for the sampling period (the trace's
    // `ExpectedCPUSamplingRate`, in ns: 1 ms at record-trace's 1,000 Hz).
    if switches > 0 {
        c.sampling = model::Sampling::Other;
        c.weight_ns = true;
        let period = t.keys.get("ExpectedCPUSamplingRate").and_then(|v| v.parse::<u64>().ok()).filter(|&p| p > 0).unwrap_or(1_000_000);
        for s in c.samples.iter_mut().filter(|s| s.kind.is_none()) {
            s.kind = Some("cpu".into());
            s.weight = period;
        }
    }
    c.lost_events = t.lost_events;
    let m = &mut c.metrics;
    m.insert("events_total".into(), t.events.len() as f64);
    m.insert("cpu_samples".into(), samples as f64);
    m.insert("context_switches".into(), switches as f64);
    m.insert("process_mappings".into(), mappings.len() as f64);
    m.insert("process_symbols".into(), symbols.len() as f64);
    m.insert("payload_errors".into(), payload_errors as f64);
    for (k, v) in sym.metrics() {
        m.insert(k, v);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Read;
    use std::path::PathBuf;

    use model::{Collection, DsoClass};

    /// A recording of the `eventpipe` crate's tests/data/collect-linux (README there), decoded as
    /// on a machine that has none of the guest's files: names come from the trace alone.
    fn decode(name: &str) -> Collection {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../eventpipe/tests/data/collect-linux").join(format!("{name}.nettrace.gz"));
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
        let trace = eventpipe::read_v6(&bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let nowhere = |_: &std::path::Path| -> Option<PathBuf> { None };
        let ctx = crate::DecodeContext {
            artifacts: dir.path(),
            app_tmp_dir: dir.path(),
            host_pid: 0,
            target_pid: 0,
            path_map: &nowhere,
            symbol_dirs: &[],
        };
        super::v6_to_collection(&trace, "collect-linux", &ctx).unwrap()
    }

    /// cpu-bound: every perf sample with its stack, the JIT leaf frames named by the recorder's
    /// symbols in the perf map's spelling, HotLoop ≈ 70 % of HotLoop + ColdLoop as the app ran it
    /// (68.2 %: 1,796 and 836 samples). The trace alone names 90 % of the JIT leaf frames (1,934
    /// of 2,144): the recorder wrote no symbol for the rest (code jitted after it last read the
    /// runtime's perf map, and the precode stubs); a run names them from that map (see
    /// `Symbolizer::use_jit_symbols`).
    #[test]
    fn cpu_samples_name_their_jit_frames_from_the_trace() {
        let c = decode("cpu-bound");
        assert_eq!(c.samples.len(), 13314);
        assert_eq!(c.sampling, model::Sampling::CpuTime);
        let jit: Vec<_> = c.samples.iter().filter_map(|s| s.frames.first()).filter(|f| f.class == DsoClass::Jit).collect();
        let named = jit.iter().filter(|f| f.name.is_some()).count();
        assert!(named as f64 >= 0.85 * jit.len() as f64 && jit.len() > 2000, "{named} of {} JIT leaf frames named", jit.len());
        let on = |pat: &str| c.samples.iter().filter(|s| s.frames.iter().any(|f| f.name.as_deref().is_some_and(|n| n.contains(pat)))).count() as f64;
        let (hot, cold) = (on("::HotLoop("), on("::ColdLoop("));
        let share = hot / (hot + cold);
        assert!(hot + cold > 2000.0 && (share - 0.7).abs() < 0.05, "HotLoop {hot}, ColdLoop {cold}: {share:.3}");
        assert!(c.samples.iter().flat_map(|s| &s.frames).any(|f| f.class == DsoClass::Kernel && f.name.is_some()), "a named kernel frame");
        assert!(c.samples.iter().all(|s| s.cpu.is_some_and(|cpu| cpu < 2)));
    }

    /// gc-heavy and exceptions: the runtime's events by name with their fields, as EventPipe's.
    #[test]
    fn runtime_events_are_named_and_decoded_by_the_manifest() {
        fn by_name(c: &Collection) -> BTreeMap<&str, usize> {
            c.events.iter().fold(BTreeMap::new(), |mut m, e| {
                *m.entry(e.name.as_str()).or_default() += 1;
                m
            })
        }
        let gc = decode("gc-heavy");
        let names = by_name(&gc);
        assert_eq!((names.get("GCStart"), names.get("GCEnd")), (Some(&10), Some(&10)), "{names:?}");
        let induced = gc.events.iter().filter(|e| e.name == "GCStart" && e.fields.get("Reason").and_then(|v| v.as_u64()) == Some(1)).count();
        assert_eq!(induced, 10);
        let ex = decode("exceptions");
        let thrown: Vec<_> = ex.events.iter().filter(|e| e.name == "ExceptionThrown").collect();
        assert_eq!(thrown.len(), 873, "{:?}", by_name(&ex));
        assert!(thrown.iter().all(|e| e.fields.get("ExceptionType").and_then(|v| v.as_str()).is_some_and(|t| t.starts_with("Tracelab."))), "{:?}", thrown[0]);
        // The stack of the write, without the kernel's user_events path.
        assert!(thrown.iter().all(|e| !e.frames.is_empty() && e.frames.iter().all(|f| f.class != DsoClass::Kernel)));
        assert_eq!(ex.metrics["payload_errors"], 0.0);
    }
}
