//! Collector `perf-offwake`: off-CPU time with the reason it ended — for every blocked interval
//! of the app's threads, who woke it (an app thread and its managed stack, a kernel timer or
//! interrupt, another process) and how long the woken thread then waited for a CPU.
//!
//! `sched:sched_waking` fires in the waker's context (try_to_wake_up, before the wakee runs), so
//! the sample's stack is the waker's. Two perf processes record it:
//! - the app's own (`-p PID`, as `perf-offcpu`): sched_switch + sched_waking with dwarf stacks,
//!   which our unwinder walks to the managed frames — of the blocked thread at its switch-out,
//!   of the waking thread at its wake-up call;
//! - a system-wide one (`-a`) of sched_waking alone, kernel call chains only (no stack copy):
//!   wake-ups from outside the app — a timer interrupt while the CPU idled, another process —
//!   are recorded nowhere else (a per-process event counts only while an app thread runs).
//!
//! The tracepoint's `common_flags` say whether the waking ran in interrupt context
//! (TRACE_FLAG_HARDIRQ 0x08, SOFTIRQ 0x10, NMI 0x40: include/linux/trace_events.h); there the
//! "current" thread is only the one the interrupt landed on, so such a waker is the kernel, and
//! its user stack is not used. Raw tracepoint pids are global (host) pids; the app's samples give
//! the mapping to the app's namespace (each sample's tid beside its raw `common_pid`).
//!
//! The output is the off-wake view (Brendan Gregg's, as bcc's offwaketime folds it): each
//! blocked interval's stack root first, then `--`, then the waker's stack from its leaf back to
//! its root and the waker's name on top, weighted by the blocked time. Samples carry the waker's
//! kind (`thread`, `kernel`, `process`, `none`); the per-interval list is written as
//! `<name>.wakeups.tsv` beside the recordings.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use super::offcpu::{self, CallGraph};
use super::perf_record::{self, PerfRecord};
use super::{Collector, DecodeContext};
use model::{Collection, DsoClass, Frame};
use crate::run::{RunningApp, Target};
use stacks::{Unwound, UnwoundSample};
use model::{WakerKind, Wakeup, nearest_managed, offwake_sample, wakeups_tsv};

/// `common_flags` bits of a tracepoint record written in interrupt context.
const IRQ_FLAGS: u64 = 0x08 | 0x10 | 0x40;
/// How far before a switch-out a waking may be stamped and still end that wait: try_to_wake_up
/// can trace the waking while the wakee is still on its way off the CPU.
const EARLY_WAKING_NS: u64 = 100_000;

/// perf_event_open, the system-wide recording and the tracefs mount need SYS_ADMIN in a
/// container (as `perf-offcpu`).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN"];

/// `[[collector]] kind = "perf-offwake"` options.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OffWakeOptions {
    /// `dwarf,BYTES` (default `dwarf,16384`) or `fp`, for the app's recording.
    #[serde(default)]
    pub call_graph: Option<String>,
    #[serde(default)]
    pub perf_binary: Option<String>,
    /// The app recording's ring buffer per CPU, pages (default as `perf-offcpu`).
    #[serde(default)]
    pub mmap_pages: Option<u64>,
    /// Also record every waking of the machine (no stacks) to name wakers outside the app
    /// (default true). Without it, a wait no app thread ended has waker `none`.
    #[serde(default)]
    pub system_wide: Option<bool>,
}

pub(crate) fn probe_options() -> OffWakeOptions {
    OffWakeOptions::default()
}

pub fn from_spec(name: &str, options: &OffWakeOptions) -> Result<Box<dyn Collector>> {
    let call_graph = CallGraph::parse(options.call_graph.as_deref().unwrap_or("dwarf,16384"))
        .map_err(|e| super::bad_option("call_graph", format!("collector `{name}`: {e:#}")))?;
    if options.mmap_pages == Some(0) {
        return Err(super::bad_option("mmap_pages", "perf-offwake mmap_pages = 0: perf needs at least one page per CPU"));
    }
    Ok(Box::new(OffWakeCollector {
        name: name.to_string(),
        call_graph,
        options: options.clone(),
        app_recording: None,
        wakers_recording: None,
        commands: Vec::new(),
        target_root: None,
    }))
}

pub(crate) struct OffWakeCollector {
    name: String,
    call_graph: CallGraph,
    options: OffWakeOptions,
    app_recording: Option<PerfRecord>,
    wakers_recording: Option<PerfRecord>,
    commands: Vec<String>,
    target_root: Option<std::fs::File>,
}

impl OffWakeCollector {
    fn app_data(&self, artifacts: &Path) -> PathBuf {
        artifacts.join(format!("{}.data", self.name))
    }
    fn wakers_data(&self, artifacts: &Path) -> PathBuf {
        artifacts.join(format!("{}-wakers.data", self.name))
    }
}

impl Collector for OffWakeCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        perf_record::perf_map_env()
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        perf_record::ensure_tracefs(target, app, "sched:sched_switch and sched:sched_waking", &mut self.commands)?;
        self.target_root = perf_record::open_target_root(app);
        let perf = perf_record::perf_binary(self.options.perf_binary.as_deref(), app)?;
        if self.options.system_wide.unwrap_or(true) {
            let out = self.wakers_data(artifacts);
            let argv: Vec<String> = vec![
                perf.clone(),
                "record".into(),
                "-k".into(),
                "1".into(),
                "-a".into(),
                "-e".into(),
                "sched:sched_waking".into(),
                "--call-graph".into(),
                "fp".into(),
                "--kernel-callchains".into(),
                "-o".into(),
                perf_record::target_view(&out, app).display().to_string(),
            ];
            self.commands.push(crate::host::proc::quoted(&argv));
            let log = artifacts.join(format!("{}-wakers.record.txt", self.name));
            self.wakers_recording = Some(PerfRecord::start(target, app, argv, out, log)?);
        }
        let out = self.app_data(artifacts);
        let mut argv: Vec<String> = vec![
            perf,
            "record".into(),
            "-k".into(),
            "1".into(),
            "-e".into(),
            "sched:sched_switch".into(),
            "-e".into(),
            "sched:sched_waking".into(),
            "--switch-events".into(),
            "--call-graph".into(),
            self.call_graph.perf_arg(),
        ];
        argv.extend(perf_record::app_recording_args(self.options.mmap_pages, app, &out));
        self.commands.push(crate::host::proc::quoted(&argv));
        let log = artifacts.join(format!("{}.record.txt", self.name));
        match PerfRecord::start(target, app, argv, out, log) {
            Ok(r) => self.app_recording = Some(r),
            Err(e) => {
                if let Some(w) = self.wakers_recording.take() {
                    let _ = w.stop(app);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        // The app's recording ends with the app; the system-wide one only when told.
        let app_result = self.app_recording.take().map_or(Ok(()), |r| r.stop(app));
        let wakers_result = self.wakers_recording.take().map_or(Ok(()), |r| r.stop(app));
        app_result.and(wakers_result)
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let app_pids: BTreeSet<u32> = [ctx.host_pid, ctx.target_pid].into_iter().collect();
        let app_data = self.app_data(ctx.artifacts);
        let app = offcpu::unwind_app_recording(&app_data, ctx, self.target_root.as_ref(), Some(&app_pids))?;
        let wakers_data = self.wakers_data(ctx.artifacts);
        let wakers = if self.options.system_wide.unwrap_or(true) {
            let opts = stacks::UnwindOptions {
                pids: Some(BTreeSet::new()),
                kallsyms: stacks::Kallsyms::live(),
                ..Default::default()
            };
            Some(stacks::unwind_perf_data(&wakers_data, opts)?)
        } else {
            None
        };
        let wakeups = join_wakeups(&app, wakers.as_ref(), &app_pids)
            .map_err(|e| e.context(format!("{} (with {})", app_data.display(), wakers_data.display())))?;
        let tsv = ctx.artifacts.join(format!("{}.wakeups.tsv", self.name));
        std::fs::write(&tsv, wakeups_tsv(&wakeups)).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tsv.display()))?;
        let mut collection = offwake_collection(&self.name, &app, &wakeups, &app_pids);
        let m = &mut collection.metrics;
        m.insert("perf_data_bytes".into(), std::fs::metadata(&app_data).map(|m| m.len()).unwrap_or(0) as f64);
        let mut recorded = app.samples.len() + app.switches.len();
        if let Some(w) = &wakers {
            m.insert("wakers_perf_data_bytes".into(), std::fs::metadata(&wakers_data).map(|m| m.len()).unwrap_or(0) as f64);
            m.insert("wakers_system_wide_events".into(), w.samples.len() as f64);
            recorded += w.samples.len();
            collection.lost_events += w.lost;
        }
        // Every record written (the cost): app switch-outs and wakings, switch-ins, system-wide wakings.
        collection.metrics.insert("events_recorded".into(), recorded as f64);
        Ok(collection)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// One sched_waking record: when, who (global pid of `current`), in interrupt context or not,
/// and the sample's index (kept by wakee).
#[derive(Clone, Copy, Debug)]
struct Waking {
    time_ns: u64,
    waker: u32,
    flags: u64,
    sample: usize,
}

impl Waking {
    fn in_interrupt(&self) -> bool {
        self.flags & IRQ_FLAGS != 0
    }
}

/// The sched_waking records of a recording, by wakee (global pid), time-sorted.
fn wakings(unwound: &Unwound) -> Result<HashMap<u32, Vec<Waking>>> {
    let mut out: HashMap<u32, Vec<Waking>> = HashMap::new();
    let Some(event) = unwound.event_names.iter().position(|n| n.ends_with("sched_waking")) else { return Ok(out) };
    let name = &unwound.event_names[event];
    let format = unwound.formats.get(name);
    for (i, s) in unwound.samples.iter().enumerate().filter(|(_, s)| s.event == event) {
        let Some(format) = format else {
            // Where the format should have come from: the tracing data when the file has one
            // (then it is damaged), else the header's feature bits that should list it.
            let place = match unwound.tracing_data_at {
                Some((start, end)) => format!("HEADER_TRACING_DATA at byte offsets {start}..{end} holds no readable format for it"),
                None => "HEADER_TRACING_DATA is missing: the header's feature bits at byte offsets 72..104 do not list it".to_string(),
            };
            bail!("the recording has {name} samples but no format for them ({place}): the file is corrupt; re-record with perf record");
        };
        let field = |f: &str| format.read_u64(&s.raw, f);
        let (Some(flags), Some(waker), Some(wakee)) = (field("common_flags"), field("common_pid"), field("pid")) else {
            // The unwinder refused records shorter than the format, so here the format itself
            // names no usable common_flags/common_pid/pid: the tracing data is damaged.
            let place = match unwound.tracing_data_at {
                Some((start, end)) => format!("HEADER_TRACING_DATA at byte offsets {start}..{end}"),
                None => "HEADER_TRACING_DATA".to_string(),
            };
            bail!(
                "{name} sample {i} at {} ns: its format (read from {place}) has no readable common_flags, common_pid and pid                  within the record's {} bytes: the file is corrupt; re-record with perf record",
                s.time_ns,
                s.raw.len()
            );
        };
        out.entry(wakee as u32).or_default().push(Waking { time_ns: s.time_ns, waker: waker as u32, flags, sample: i });
    }
    for v in out.values_mut() {
        v.sort_by_key(|w| w.time_ns);
    }
    Ok(out)
}

/// The last waking of `wakee` that can have ended the wait from `from` to `to`: stamped before
/// `to`, and after both `from − EARLY_WAKING_NS` and `after` (the thread's previous switch-in:
/// the waking that ended its previous wait came before it).
fn waking_for(map: &HashMap<u32, Vec<Waking>>, wakee: u32, from: u64, to: u64, after: Option<u64>) -> Option<Waking> {
    let v = map.get(&wakee)?;
    let end = v.partition_point(|w| w.time_ns <= to);
    let w = *v.get(end.checked_sub(1)?)?;
    (w.time_ns + EARLY_WAKING_NS > from && after.is_none_or(|a| w.time_ns > a)).then_some(w)
}

/// Global pid → the app's namespace tid, from the app's samples (each sample's tid beside the
/// raw `common_pid`, or sched_switch's `prev_pid`).
fn namespace_tids(app: &Unwound, app_pids: &BTreeSet<u32>) -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    for s in app.samples.iter().filter(|s| app_pids.contains(&s.pid)) {
        if let Some(sw) = s.sched_switch {
            map.insert(sw.prev_pid, s.tid);
        } else if let Some(f) = app.formats.get(&app.event_names[s.event])
            && let Some(g) = f.read_u64(&s.raw, "common_pid")
        {
            map.insert(g as u32, s.tid);
        }
    }
    map
}

fn kernel_only(frames: &[Frame]) -> Vec<Frame> {
    frames.iter().filter(|f| f.class == DsoClass::Kernel).cloned().collect()
}

fn interrupt_name(flags: u64) -> &'static str {
    if flags & 0x40 != 0 {
        "[kernel: nmi]"
    } else if flags & 0x08 != 0 {
        "[kernel: hardirq]"
    } else {
        "[kernel: softirq]"
    }
}

/// Joins each blocked interval of the app's threads with the waking that ended it: the app's
/// own waking sample (with the waker's stack) first, else the system-wide record.
pub(crate) fn join_wakeups(app: &Unwound, wakers: Option<&Unwound>, app_pids: &BTreeSet<u32>) -> Result<Vec<Wakeup>> {
    let app_wakings = wakings(app)?;
    let all_wakings = wakers.map(wakings).transpose()?.unwrap_or_default();
    let ns_tid = namespace_tids(app, app_pids);
    let thread_name = |tid: u32| app.thread_names.get(&tid).cloned().unwrap_or_else(|| format!("tid {tid}"));
    let mut out = Vec::new();
    let mut last_switch_in: HashMap<u32, u64> = HashMap::new();
    for interval in offcpu::switch_out_intervals(app, app_pids) {
        let s: &UnwoundSample = &app.samples[interval.sample];
        let Some(sw) = s.sched_switch else { continue };
        let (from, to) = (s.time_ns, interval.end_ns);
        let after = last_switch_in.insert(s.tid, to).filter(|t| *t <= from);
        if !interval.blocked {
            continue;
        }
        let mut w = Wakeup {
            pid: s.pid,
            tid: s.tid,
            thread: thread_name(s.tid),
            from_ns: from,
            blocked_ns: to - from,
            blocked_frames: s.frames.clone(),
            waker_kind: WakerKind::None,
            waker: "[no waking recorded]".into(),
            waker_tid: None,
            waker_frames: Vec::new(),
            latency_ns: None,
        };
        let own = waking_for(&app_wakings, sw.prev_pid, from, to, after);
        let system = waking_for(&all_wakings, sw.prev_pid, from, to, after);
        if let Some(k) = own.or(system) {
            w.latency_ns = Some(to.saturating_sub(k.time_ns));
            let system_frames = || system.map(|k| kernel_only(&wakers.expect("system waking has a recording").samples[k.sample].frames));
            if k.in_interrupt() || k.waker == 0 {
                w.waker_kind = WakerKind::Kernel;
                w.waker = if k.in_interrupt() { interrupt_name(k.flags).into() } else { "[kernel: idle]".into() };
                w.waker_frames = match own {
                    Some(o) => kernel_only(&app.samples[o.sample].frames),
                    None => system_frames().unwrap_or_default(),
                };
            } else if let Some(tid) = ns_tid.get(&k.waker).copied() {
                w.waker_kind = WakerKind::Thread;
                w.waker = thread_name(tid);
                w.waker_tid = Some(tid);
                w.waker_frames = match own {
                    Some(o) => app.samples[o.sample].frames.clone(),
                    None => system_frames().unwrap_or_default(),
                };
            } else {
                w.waker_kind = WakerKind::Process;
                w.waker = format!("[process {}]", k.waker);
                w.waker_tid = Some(k.waker);
                w.waker_frames = system_frames().unwrap_or_default();
            }
        }
        out.push(w);
    }
    Ok(out)
}

/// The collection: the off-wake view's samples, the stack-completeness report of the app's
/// recording and the wake-up figures in its metrics.
pub(crate) fn offwake_collection(name: &str, app: &Unwound, wakeups: &[Wakeup], app_pids: &BTreeSet<u32>) -> Collection {
    let mut collection = Collection::new(name);
    collection.samples = wakeups.iter().map(offwake_sample).collect();
    collection.lost_events = app.lost;
    collection.weight_ns = true;
    let app_samples: Vec<&UnwoundSample> = app.samples.iter().filter(|s| app_pids.contains(&s.pid)).collect();
    stacks::completeness_of_unwound(app_samples.iter().copied()).add_metrics(&mut collection.metrics);
    let m = &mut collection.metrics;
    m.insert("samples_total".into(), wakeups.len() as f64);
    m.insert("app_events".into(), app_samples.len() as f64);
    m.insert("offcpu_blocked_ns".into(), wakeups.iter().map(|w| w.blocked_ns).sum::<u64>() as f64);
    for kind in [WakerKind::Thread, WakerKind::Kernel, WakerKind::Process, WakerKind::None] {
        let of_kind = wakeups.iter().filter(|w| w.waker_kind == kind);
        m.insert(format!("wakeups_{}", kind.as_str()), of_kind.clone().count() as f64);
        m.insert(format!("blocked_ns_{}", kind.as_str()), of_kind.map(|w| w.blocked_ns).sum::<u64>() as f64);
    }
    let mut latencies: Vec<u64> = wakeups.iter().filter_map(|w| w.latency_ns).collect();
    latencies.sort_unstable();
    if !latencies.is_empty() {
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize] as f64;
        m.insert("wake_latency_p50_ns".into(), at(0.5));
        m.insert("wake_latency_p99_ns".into(), at(0.99));
    }
    let thread_wakers: Vec<&Wakeup> = wakeups.iter().filter(|w| w.waker_kind == WakerKind::Thread).collect();
    if !thread_wakers.is_empty() {
        let named = thread_wakers.iter().filter(|w| nearest_managed(&w.waker_frames).is_some()).count();
        m.insert("waker_managed_named_ratio".into(), named as f64 / thread_wakers.len() as f64);
    }
    m.insert("images_unreadable".into(), app.missing_images.len() as f64);
    collection
}

#[cfg(test)]
mod tests {
    use super::*;
    use stacks::{SchedSwitch, StackEnd, ThreadSwitch, TracepointFormat};

    fn waking_format() -> TracepointFormat {
        let mut f = TracepointFormat::default();
        f.fields.insert("common_flags".into(), (2, 1));
        f.fields.insert("common_pid".into(), (4, 4));
        f.fields.insert("pid".into(), (24, 4));
        f
    }

    fn raw(flags: u8, waker: u32, wakee: u32) -> Vec<u8> {
        let mut r = vec![0u8; 36];
        r[2] = flags;
        r[4..8].copy_from_slice(&waker.to_le_bytes());
        r[24..28].copy_from_slice(&wakee.to_le_bytes());
        r
    }

    fn jit(name: &str) -> Frame {
        Frame { name: Some(name.into()), dso: Some("[jit]".into()), class: DsoClass::Jit, addr: 1 }
    }

    fn sample(event: usize, tid: u32, t: u64, frames: Vec<Frame>) -> UnwoundSample {
        UnwoundSample {
            event,
            pid: 10,
            tid,
            cpu: Some(0),
            time_ns: t,
            period: 1,
            frames,
            user_frames: 0,
            end: StackEnd::Root,
            sched_switch: None,
            user_stack_bytes: 0,
            raw: Vec::new(),
        }
    }

    /// Thread 11 (global 1011) blocks twice: thread 12 (global 1012) wakes it from `W::Feed`,
    /// then a hard interrupt does while thread 12 happens to run (its user stack must not count).
    /// A third wait has no waking in the app's recording; the system-wide one says another
    /// process (global 4242) ended it.
    #[test]
    fn each_blocked_interval_gets_its_waker() {
        let mut app = Unwound { event_names: vec!["sched:sched_switch".into(), "sched:sched_waking".into()], ..Default::default() };
        app.formats.insert("sched:sched_waking".into(), waking_format());
        app.thread_names.insert(11, "blocked-0".into());
        app.thread_names.insert(12, "pipe-feeder".into());
        let switch_out = |t: u64| {
            let mut s = sample(0, 11, t, vec![jit("W::ReadWait()")]);
            s.sched_switch = Some(SchedSwitch { prev_pid: 1011, prev_state: 1, next_pid: 0 });
            s
        };
        let mut feed = sample(1, 12, 1_500, vec![Frame { name: Some("try_to_wake_up".into()), dso: None, class: DsoClass::Kernel, addr: 2 }, jit("W::Feed()")]);
        feed.raw = raw(0, 1012, 1011);
        let mut irq = sample(1, 12, 3_500, vec![Frame { name: Some("hrtimer_wakeup".into()), dso: None, class: DsoClass::Kernel, addr: 3 }, jit("W::Spin()")]);
        irq.raw = raw(0x08 | 0x01, 1012, 1011);
        app.samples = vec![switch_out(1_000), feed, switch_out(3_000), irq, switch_out(5_000)];
        for (t, out) in [(2_000, false), (4_000, false), (6_000, false)] {
            app.switches.push(ThreadSwitch { time_ns: t, pid: 10, tid: 11, out, preempted: false });
        }
        app.last_time_ns = 7_000;
        let mut wakers = Unwound { event_names: vec!["sched:sched_waking".into()], ..Default::default() };
        wakers.formats.insert("sched:sched_waking".into(), waking_format());
        let mut other = sample(0, 0, 5_600, vec![Frame { name: Some("pipe_write".into()), dso: None, class: DsoClass::Kernel, addr: 4 }]);
        other.raw = raw(0, 4242, 1011);
        wakers.samples = vec![other];

        let pids = [10].into_iter().collect();
        let w = join_wakeups(&app, Some(&wakers), &pids).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!((w[0].waker_kind, w[0].waker.as_str(), w[0].blocked_ns, w[0].latency_ns), (WakerKind::Thread, "pipe-feeder", 1_000, Some(500)));
        assert_eq!(nearest_managed(&w[0].waker_frames), Some("W::Feed()"));
        assert_eq!((w[1].waker_kind, w[1].waker.as_str()), (WakerKind::Kernel, "[kernel: hardirq]"));
        assert_eq!(nearest_managed(&w[1].waker_frames), None, "the interrupted thread's stack is not the waker's");
        assert_eq!((w[2].waker_kind, w[2].waker.as_str()), (WakerKind::Process, "[process 4242]"));

        let s = offwake_sample(&w[0]);
        let folded: Vec<String> = s.frames.iter().rev().map(model::frame_label).collect();
        assert_eq!(folded, ["W::ReadWait()", "--", "try_to_wake_up", "W::Feed()", "pipe-feeder"]);
        let (blocked, waker) = model::split_offwake(&s).unwrap();
        assert_eq!((blocked.len(), waker.len()), (1, 3));
        let tsv = wakeups_tsv(&w);
        assert_eq!(tsv.lines().count(), 4);
        assert!(tsv.lines().nth(1).unwrap().contains("W::ReadWait()\tthread\tpipe-feeder\t12\tW::Feed()\t500"), "{tsv}");
    }

    #[test]
    fn a_waking_record_shorter_than_its_format_is_an_error() {
        let mut app = Unwound { event_names: vec!["sched:sched_waking".into()], ..Default::default() };
        app.formats.insert("sched:sched_waking".into(), waking_format());
        let mut s = sample(0, 12, 10, vec![]);
        s.raw = vec![0; 10];
        app.samples.push(s);
        let err = join_wakeups(&app, None, &[10].into_iter().collect()).unwrap_err().to_string();
        assert!(err.contains("sample 0") && err.contains("10 bytes"), "{err}");
    }
}
