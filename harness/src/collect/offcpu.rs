//! Collector `perf-offcpu`: where the app's threads wait, weighted by how long.
//!
//! perf records `sched:sched_switch` of the app's threads with their stacks: with
//! `call_graph = "dwarf,N"` (the default) the registers and top N bytes of the user stack, which
//! our own unwinder ([`stacks::unwind`]) walks through libc, libcoreclr, ReadyToRun and JIT code;
//! with `"fp"` perf's frame-pointer chain, which stops in libc (kept to show the difference).
//!
//! Blocked time needs each switch-out's following switch-in. Recording system-wide (`-a`) would
//! give switch-ins as other threads' sched_switch (`next_pid`), but it also copies N stack bytes
//! for every context switch of every process on the machine (the 1 s fixture: 398 samples,
//! 3.7 MB, 63 of them the app's) and, in a container, sees its neighbours. So we record the app
//! only (`-p PID`, inherited by new threads) and add `--switch-events`: the kernel then writes a
//! small PERF_RECORD_SWITCH (≈40 bytes) each time one of the app's threads comes back on a CPU.
//! Decoding also accepts system-wide recordings (the fixtures), taking switch-ins from
//! `next_pid` there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::perf_record::{self, PerfRecord};
use super::{Collector, DecodeContext};
use model::{Collection, Sample};
use crate::run::{RunningApp, Target};
use stacks::{Kallsyms, UnwindOptions, Unwound};

/// `prev_state` bits of a task that is gone: its last switch-out is not a wait.
const TASK_DEAD_STATES: u64 = 0x10 | 0x20 | 0x80;

pub(crate) struct OffCpuCollector {
    name: String,
    call_graph: CallGraph,
    perf_binary: Option<String>,
    /// perf's ring buffer per CPU, pages (`-m`): N-byte stacks fill the default 512 KiB fast.
    /// Default: 1024 on the host; in a container as many as `kernel.perf_event_mlock_kb` allows
    /// ([`container_mmap_pages`]), because without CAP_IPC_LOCK the buffer is capped by it.
    mmap_pages: Option<u64>,
    data_file: String,
    recording: Option<PerfRecord>,
    host_output: Option<PathBuf>,
    commands: Vec<String>,
    /// The app's root directory, held open from the start: a container's files (its libc,
    /// its runtime) stay readable through it after the app and its container are gone.
    target_root: Option<std::fs::File>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallGraph {
    Dwarf(u32),
    FramePointer,
}

impl CallGraph {
    pub(crate) fn parse(s: &str) -> Result<CallGraph> {
        let s = s.trim();
        if s == "fp" {
            return Ok(CallGraph::FramePointer);
        }
        if s == "dwarf" {
            return Ok(CallGraph::Dwarf(16384));
        }
        if let Some(n) = s.strip_prefix("dwarf,") {
            let size: u32 = n.parse().with_context(|| format!("call_graph `{s}`: `{n}` is not a byte count"))?;
            // perf's limit: the sampled stack must fit a u16-sized record with the rest.
            if size == 0 || size > 65528 || !size.is_multiple_of(8) {
                bail!("call_graph `{s}`: the stack size must be a multiple of 8 between 8 and 65528 bytes");
            }
            return Ok(CallGraph::Dwarf(size));
        }
        bail!("call_graph `{s}`: expected \"dwarf,BYTES\" (e.g. dwarf,16384) or \"fp\"")
    }

    pub(crate) fn perf_arg(&self) -> String {
        match self {
            CallGraph::Dwarf(n) => format!("dwarf,{n}"),
            CallGraph::FramePointer => "fp".into(),
        }
    }
}

/// perf_event_open and the tracefs mount need SYS_ADMIN in a container (shared/DESIGN.md §6).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN"];

/// `[[collector]] kind = "perf-offcpu"` options.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OffCpuOptions {
    /// `dwarf,BYTES` (default `dwarf,16384`) or `fp`.
    #[serde(default)]
    pub call_graph: Option<String>,
    /// Only `perf` is built.
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub perf_binary: Option<String>,
    #[serde(default)]
    pub mmap_pages: Option<u64>,
}

/// The capability probe: the defaults a scenario gets (sched_switch, dwarf stacks).
/// The `kernel.perf_event_mlock_kb` that lets a container's perf (no CAP_IPC_LOCK) map 1024 pages
/// (4 MiB) per CPU on `cpus` CPUs beside a perf-cpu (129 pages per CPU) under the same uid; perf
/// maps pages + 1 per CPU (measured on kernel 6.18 with the bullseye image's perf 5.10: 8200
/// admits -m 1024 on 2 CPUs; -m 2048 and -m 4096 are refused with "Permission error mapping
/// pages" even at 33 808, a limit not yet understood, so 1024 is the most asked for). The default
/// (516) lost 2.2–2.9 % of 16 KiB-stack sched_switch records; 4 MiB loses ~1.6 % when the app
/// saturates both cores (on-vs-off-cpu). `cargo xtask setup` raises it (lab::prereq) for
/// off-CPU scenarios in containers.
pub fn perf_mlock_kb_needed(cpus: u64) -> u64 {
    4 * (CONTAINER_MAX_PAGES + 1 + PERF_CPU_PAGES) * cpus.max(1)
}

/// What perf's default buffer (512 KiB + the header page) takes per CPU.
const PERF_CPU_PAGES: u64 = 129;

/// The largest ring buffer a container's off-CPU perf asks for, pages per CPU.
const CONTAINER_MAX_PAGES: u64 = 1024;

/// CPUs perf maps a buffer on (one per online CPU).
pub fn online_cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// This machine's `kernel.perf_event_mlock_kb` (the same inside containers: not namespaced).
pub fn perf_mlock_kb() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").ok()?.trim().parse().ok()
}

/// `-m` for a container's perf under `mlock_kb` on `cpus` CPUs: the largest power of two up to
/// [`CONTAINER_MAX_PAGES`] whose pages + 1 per CPU fit beside a perf-cpu, or None (perf's own
/// default) when that is not more than the default 128.
pub(crate) fn container_mmap_pages(mlock_kb: u64, cpus: u64) -> Option<u64> {
    let budget = (mlock_kb / 4 / cpus.max(1)).saturating_sub(PERF_CPU_PAGES);
    let pages = (0..=CONTAINER_MAX_PAGES.ilog2()).rev().map(|e| 1u64 << e).find(|p| p + 1 <= budget)?;
    (pages > 128).then_some(pages)
}

/// perf's ring buffer when the scenario sets none: 1024 pages on the host; in a container as
/// many as `kernel.perf_event_mlock_kb` allows.
pub(crate) fn default_mmap_pages(app: &RunningApp) -> Option<u64> {
    match app.container_id {
        None => Some(1024),
        Some(_) => perf_mlock_kb().and_then(|kb| container_mmap_pages(kb, online_cpus())),
    }
}

pub(crate) fn probe_options() -> OffCpuOptions {
    OffCpuOptions::default()
}

pub fn from_spec(name: &str, options: &OffCpuOptions) -> Result<Box<dyn Collector>> {
    let call_graph = CallGraph::parse(options.call_graph.as_deref().unwrap_or("dwarf,16384"))
        .map_err(|e| super::bad_option("call_graph", format!("collector `{name}`: {e:#}")))?;
    if let Some(backend) = options.backend.as_deref().filter(|b| *b != "perf") {
        return Err(super::bad_option("backend", format!("perf-offcpu backend `{backend}`: only `perf` is built (bpftrace's ustack follows frame pointers only, which end in libc)")));
    }
    if options.mmap_pages == Some(0) {
        return Err(super::bad_option("mmap_pages", "perf-offcpu mmap_pages = 0: perf needs at least one page per CPU"));
    }
    Ok(Box::new(OffCpuCollector {
        name: name.to_string(),
        call_graph,
        perf_binary: options.perf_binary.clone(),
        mmap_pages: options.mmap_pages,
        data_file: format!("{name}.data"),
        recording: None,
        host_output: None,
        commands: Vec::new(),
        target_root: None,
    }))
}

impl Collector for OffCpuCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        perf_record::perf_map_env()
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        perf_record::ensure_tracefs(target, app, "sched:sched_switch", &mut self.commands)?;
        self.target_root = perf_record::open_target_root(app);
        let host_output = artifacts.join(&self.data_file);
        let mut argv: Vec<String> = vec![
            perf_record::perf_binary(self.perf_binary.as_deref(), app)?,
            "record".into(),
            "-k".into(),
            "1".into(),
            "-e".into(),
            "sched:sched_switch".into(),
            "--switch-events".into(),
            "--call-graph".into(),
            self.call_graph.perf_arg(),
        ];
        argv.extend(perf_record::app_recording_args(self.mmap_pages, app, &host_output));
        self.commands.push(crate::host::proc::quoted(&argv));
        let log = artifacts.join(format!("{}.record.txt", self.name));
        self.recording = Some(PerfRecord::start(target, app, argv, host_output.clone(), log)?);
        self.host_output = Some(host_output);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        match self.recording.take() {
            Some(r) => r.stop(app),
            None => Ok(()),
        }
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let data = self.host_output.clone().unwrap_or_else(|| ctx.artifacts.join(&self.data_file));
        let app_pids: BTreeSet<u32> = [ctx.host_pid, ctx.target_pid].into_iter().collect();
        let unwound = unwind_app_recording(&data, ctx, self.target_root.as_ref(), Some(&app_pids))?;
        let mut collection = offcpu_collection(&self.name, &unwound, &app_pids);
        let bytes = std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0);
        collection.metrics.insert("perf_data_bytes".into(), bytes as f64);
        if let CallGraph::Dwarf(n) = self.call_graph {
            collection.metrics.insert("stack_bytes_setting".into(), n as f64);
        }
        Ok(collection)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// Unwinds a per-process recording of the app with our own unwinder: the app's perf map (also
/// for its forked children, until they exec), the symbol folders, the target's files through
/// `target_root` (the app's root directory, held open since the start: a container's files stay
/// readable after it is gone). `pids`: unwind only these processes (None: every process).
pub(crate) fn unwind_app_recording(data: &Path, ctx: &DecodeContext, target_root: Option<&std::fs::File>, pids: Option<&BTreeSet<u32>>) -> Result<Unwound> {
    let perf_map = ctx.app_tmp_dir.join(format!("perf-{}.map", ctx.target_pid));
    let app_pids: BTreeSet<u32> = [ctx.host_pid, ctx.target_pid].into_iter().collect();
    let root_fd = target_root.map(std::os::fd::AsRawFd::as_raw_fd);
    let path_map = |p: &Path| -> Option<PathBuf> {
        let mapped = (ctx.path_map)(p).filter(|h| h.is_file());
        mapped.or_else(|| {
            let rel = p.strip_prefix("/").ok()?;
            Some(PathBuf::from(format!("/proc/self/fd/{}", root_fd?)).join(rel))
        })
    };
    let mut opts = UnwindOptions {
        pids: pids.cloned(),
        perf_maps: app_pids.iter().map(|p| (*p, perf_map.clone())).collect(),
        search_dirs: ctx.symbol_dirs.to_vec(),
        path_map: &path_map,
        kallsyms: Kallsyms::live(),
        ..Default::default()
    };
    let r2r = std::cell::RefCell::new(stacks::R2rResolver::new());
    let r2r_namer = |path: &Path, file_offset: u64| r2r.borrow_mut().name(path, file_offset);
    opts.r2r_namer = Some(&r2r_namer);
    stacks::unwind_perf_data(data, opts)
}

/// Off-CPU samples of the app's threads from an unwound recording: one sample per switch-out,
/// weight = nanoseconds until the thread's next switch-in, `kind` = `blocked` (it waited:
/// sleeping or uninterruptible) or `preempted` (runnable, the CPU was taken away).
pub(crate) fn offcpu_samples(unwound: &Unwound, app_pids: &BTreeSet<u32>) -> Vec<Sample> {
    switch_out_intervals(unwound, app_pids)
        .into_iter()
        .map(|i| {
            let s = &unwound.samples[i.sample];
            Sample {
                pid: s.pid,
                // The sample's tid, not the tracepoint's prev_pid: perf translates the former into
                // its own pid namespace (a container's tids, as the app reports them in its truth).
                tid: s.tid,
                time_ns: s.time_ns,
                weight: i.end_ns - s.time_ns,
                frames: s.frames.clone(),
                kind: Some(if i.blocked { "blocked" } else { "preempted" }.to_string()),
                cpu: s.cpu,
            }
        })
        .collect()
}

/// One switch-out of an app thread: the index of its sched_switch sample in
/// [`Unwound::samples`], when the thread came back (its next switch-in, else its exit, else the
/// recording's end), and whether it waited (sleeping or uninterruptible) or was preempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SwitchOut {
    pub sample: usize,
    pub end_ns: u64,
    pub blocked: bool,
}

/// The switch-outs of the app's threads, in recording order.
pub(crate) fn switch_out_intervals(unwound: &Unwound, app_pids: &BTreeSet<u32>) -> Vec<SwitchOut> {
    // Switch-in times per thread, from both sources a recording may hold.
    let mut switch_ins: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for s in &unwound.switches {
        if !s.out {
            switch_ins.entry(s.tid).or_default().push(s.time_ns);
        }
    }
    for s in &unwound.samples {
        if let Some(sw) = s.sched_switch.filter(|sw| sw.next_pid != 0) {
            switch_ins.entry(sw.next_pid).or_default().push(s.time_ns);
        }
    }
    for v in switch_ins.values_mut() {
        v.sort_unstable();
    }
    let mut out = Vec::new();
    for (i, s) in unwound.samples.iter().enumerate() {
        let Some(sw) = s.sched_switch else { continue };
        if !app_pids.contains(&s.pid) || sw.prev_state & TASK_DEAD_STATES != 0 {
            continue;
        }
        let back = switch_ins.get(&s.tid).and_then(|v| {
            let i = v.partition_point(|t| *t <= s.time_ns);
            v.get(i).copied()
        });
        let end_ns = back
            .or_else(|| unwound.exits.get(&s.tid).copied().filter(|t| *t > s.time_ns))
            .unwrap_or(unwound.last_time_ns.max(s.time_ns));
        out.push(SwitchOut { sample: i, end_ns, blocked: sw.prev_state & 0xff != 0 });
    }
    out
}

/// The collection of an unwound off-CPU recording, with the stack-completeness report and the
/// cost figures in its metrics.
pub fn offcpu_collection(name: &str, unwound: &Unwound, app_pids: &BTreeSet<u32>) -> Collection {
    let mut collection = Collection::new(name);
    collection.samples = offcpu_samples(unwound, app_pids);
    collection.lost_events = unwound.lost;
    collection.weight_ns = true;
    collection.thread_names = unwound.thread_names.clone();
    let app_samples: Vec<&stacks::UnwoundSample> =
        unwound.samples.iter().filter(|s| app_pids.contains(&s.pid) && s.sched_switch.is_some()).collect();
    let completeness = stacks::completeness_of_unwound(app_samples.iter().copied());
    completeness.add_metrics(&mut collection.metrics);
    let m = &mut collection.metrics;
    m.insert("samples_total".into(), collection.samples.len() as f64);
    m.insert("switch_outs".into(), app_samples.len() as f64);
    let blocked_ns: u64 = collection.samples.iter().filter(|s| s.kind.as_deref() == Some("blocked")).map(|s| s.weight).sum();
    m.insert("offcpu_blocked_ns".into(), blocked_ns as f64);
    let total_ns: u64 = collection.samples.iter().map(|s| s.weight).sum();
    m.insert("offcpu_total_ns".into(), total_ns as f64);
    let stack_bytes: u64 = app_samples.iter().map(|s| s.user_stack_bytes).sum();
    if !app_samples.is_empty() {
        m.insert("user_stack_bytes_mean".into(), stack_bytes as f64 / app_samples.len() as f64);
    }
    m.insert("images_unreadable".into(), unwound.missing_images.len() as f64);
    collection
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_buffer_follows_the_mlock_limit() {
        // Debian's default 516 KiB: perf's own default (128 pages) is all it allows.
        assert_eq!(container_mmap_pages(516, 2), None);
        // Raised by set-up: 1024 pages per CPU, on 2 CPUs as on 8.
        assert_eq!(container_mmap_pages(perf_mlock_kb_needed(2), 2), Some(1024));
        assert_eq!(container_mmap_pages(perf_mlock_kb_needed(8), 8), Some(1024));
        // Sized for 2 CPUs, a limit leaves 8 CPUs only perf's default.
        assert_eq!(container_mmap_pages(perf_mlock_kb_needed(2), 8), None);
        // In between: the largest power of two whose pages + 1 fit beside a perf-cpu.
        assert_eq!(container_mmap_pages(4100, 2), Some(256));
        assert_eq!(container_mmap_pages(0, 2), None);
    }
    use stacks::{SchedSwitch, StackEnd, ThreadSwitch, UnwoundSample};

    #[test]
    fn call_graph_settings() {
        assert_eq!(CallGraph::parse("dwarf,16384").unwrap(), CallGraph::Dwarf(16384));
        assert_eq!(CallGraph::parse("dwarf").unwrap(), CallGraph::Dwarf(16384));
        assert_eq!(CallGraph::parse("fp").unwrap(), CallGraph::FramePointer);
        assert!(CallGraph::parse("dwarf,70000").is_err());
        assert!(CallGraph::parse("dwarf,12").is_err());
        assert!(CallGraph::parse("lbr").unwrap_err().to_string().contains("dwarf,BYTES"));
    }

    fn switch_out(tid: u32, t: u64, state: u64) -> UnwoundSample {
        UnwoundSample {
            event: 0,
            pid: 10,
            tid,
            cpu: Some(0),
            time_ns: t,
            period: 1,
            frames: Vec::new(),
            user_frames: 0,
            end: StackEnd::NoUserStack,
            sched_switch: Some(SchedSwitch { prev_pid: tid, prev_state: state, next_pid: 0 }),
            user_stack_bytes: 0,
            raw: Vec::new(),
        }
    }

    /// Switch-ins come from PERF_RECORD_SWITCH (per-process recordings) or from other
    /// threads' sched_switch `next_pid` (system-wide ones); a dead task's last switch is no wait.
    #[test]
    fn blocked_time_runs_to_the_next_switch_in() {
        let mut other = switch_out(99, 250, 1);
        other.pid = 77;
        other.sched_switch = Some(SchedSwitch { prev_pid: 99, prev_state: 1, next_pid: 12 });
        let unwound = Unwound {
            samples: vec![switch_out(11, 100, 1), switch_out(12, 200, 0), other, switch_out(11, 400, 0x80)],
            switches: vec![
                ThreadSwitch { time_ns: 150, pid: 10, tid: 11, out: false, preempted: false },
                ThreadSwitch { time_ns: 100, pid: 10, tid: 11, out: true, preempted: false },
            ],
            last_time_ns: 1000,
            ..Default::default()
        };
        let pids = [10].into_iter().collect();
        let s = offcpu_samples(&unwound, &pids);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].tid, s[0].weight, s[0].kind.as_deref()), (11, 50, Some("blocked")));
        assert_eq!((s[1].tid, s[1].weight, s[1].kind.as_deref()), (12, 50, Some("preempted")));
    }
}
