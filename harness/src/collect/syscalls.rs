//! Collector `perf-syscalls`: system calls of the app with the managed stacks that made them —
//! file opens, reads and writes, connects and accepts, process creation (`syscalls:sys_enter_*`
//! tracepoints, every call recorded, none sampled).
//!
//! perf records the app (`-p PID`; children it forks inherit the events) with dwarf stacks,
//! which our unwinder walks to the managed frames as for off-CPU stacks. A child .NET's
//! Process.Start made with vfork runs on its parent's stack until it calls execve: its execve
//! is unwound with the mappings it inherited and named through the parent's perf map
//! ([`stacks::unwind`] gives a forked child its parent's map until it execs).
//!
//! Each system call becomes a sample of weight 1 whose kind is the call's name without the
//! `sys_enter_` prefix (`openat`, `connect`, `vfork`, `execve` …), so checks count calls per
//! method with `sample_kind`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::offcpu::{self, CallGraph};
use super::perf_record::{self, PerfRecord};
use super::{Collector, DecodeContext};
use model::{Collection, Sample};
use crate::run::{RunningApp, Target};
use stacks::Unwound;

/// The calls recorded when a scenario names none: file access, network, process creation.
pub(crate) const DEFAULT_SYSCALLS: &[&str] =
    &["openat", "read", "write", "connect", "accept", "accept4", "clone", "clone3", "vfork", "execve"];

/// perf_event_open and the tracefs mount need SYS_ADMIN in a container (as the other perf
/// collectors).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN"];

/// `[[collector]] kind = "perf-syscalls"` options.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SyscallsOptions {
    /// System call names (`openat`, `connect` …); default [`DEFAULT_SYSCALLS`].
    #[serde(default)]
    pub syscalls: Option<Vec<String>>,
    /// `dwarf,BYTES` (default `dwarf,16384`) or `fp`.
    #[serde(default)]
    pub call_graph: Option<String>,
    #[serde(default)]
    pub perf_binary: Option<String>,
    #[serde(default)]
    pub mmap_pages: Option<u64>,
}

pub(crate) fn probe_options() -> SyscallsOptions {
    SyscallsOptions::default()
}

/// The tracepoint of system call `name`.
fn tracepoint(name: &str) -> String {
    format!("syscalls:sys_enter_{name}")
}

pub fn from_spec(name: &str, options: &SyscallsOptions) -> Result<Box<dyn Collector>> {
    let call_graph = CallGraph::parse(options.call_graph.as_deref().unwrap_or("dwarf,16384"))
        .map_err(|e| super::bad_option("call_graph", format!("collector `{name}`: {e:#}")))?;
    let syscalls: Vec<String> = match &options.syscalls {
        Some(list) => list.clone(),
        None => DEFAULT_SYSCALLS.iter().map(|s| s.to_string()).collect(),
    };
    if options.mmap_pages == Some(0) {
        return Err(super::bad_option("mmap_pages", "perf-syscalls mmap_pages = 0: perf needs at least one page per CPU"));
    }
    if syscalls.is_empty() {
        return Err(super::bad_option("syscalls", "perf-syscalls `syscalls = []`: name at least one system call (e.g. \"openat\")"));
    }
    if let Some(bad) = syscalls.iter().find(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) {
        return Err(super::bad_option("syscalls", format!("perf-syscalls: `{bad}` is not a system call name (letters, digits and _ only, e.g. \"openat\")")));
    }
    Ok(Box::new(SyscallsCollector {
        name: name.to_string(),
        call_graph,
        syscalls,
        options: options.clone(),
        recording: None,
        commands: Vec::new(),
        target_root: None,
    }))
}

pub(crate) struct SyscallsCollector {
    name: String,
    call_graph: CallGraph,
    syscalls: Vec<String>,
    options: SyscallsOptions,
    recording: Option<PerfRecord>,
    commands: Vec<String>,
    target_root: Option<std::fs::File>,
}

impl SyscallsCollector {
    fn data(&self, artifacts: &Path) -> PathBuf {
        artifacts.join(format!("{}.data", self.name))
    }
}

impl Collector for SyscallsCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        perf_record::perf_map_env()
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        perf_record::ensure_tracefs(target, app, "syscalls:sys_enter_*", &mut self.commands)?;
        self.target_root = perf_record::open_target_root(app);
        let out = self.data(artifacts);
        let mut argv: Vec<String> =
            vec![perf_record::perf_binary(self.options.perf_binary.as_deref(), app)?, "record".into(), "-k".into(), "1".into()];
        for s in &self.syscalls {
            argv.extend(["-e".into(), tracepoint(s)]);
        }
        argv.extend([
            "--call-graph".into(),
            self.call_graph.perf_arg(),
        ]);
        argv.extend(perf_record::app_recording_args(self.options.mmap_pages, app, &out));
        self.commands.push(crate::host::proc::quoted(&argv));
        let log = artifacts.join(format!("{}.record.txt", self.name));
        self.recording = Some(PerfRecord::start(target, app, argv, out, log)?);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        self.recording.take().map_or(Ok(()), |r| r.stop(app))
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let data = self.data(ctx.artifacts);
        // Every process of the recording: the app and the children it started (-p follows them).
        let unwound = offcpu::unwind_app_recording(&data, ctx, self.target_root.as_ref(), None)?;
        let app_pids: BTreeSet<u32> = [ctx.host_pid, ctx.target_pid].into_iter().collect();
        let mut collection = syscalls_collection(&self.name, &unwound, &app_pids);
        collection.metrics.insert("perf_data_bytes".into(), std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0) as f64);
        Ok(collection)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// The system call of a tracepoint event name (`syscalls:sys_enter_openat` → `openat`).
pub(crate) fn syscall_of(event: &str) -> Option<&str> {
    event.rsplit(':').next()?.strip_prefix("sys_enter_")
}

/// One sample per recorded system call, kind = the call's name; metrics count each call, and
/// how many came from the app's children.
pub(crate) fn syscalls_collection(name: &str, unwound: &Unwound, app_pids: &BTreeSet<u32>) -> Collection {
    let mut collection = Collection::new(name);
    collection.lost_events = unwound.lost;
    for s in &unwound.samples {
        let Some(call) = unwound.event_names.get(s.event).and_then(|e| syscall_of(e)) else { continue };
        collection.samples.push(Sample {
            pid: s.pid,
            tid: s.tid,
            time_ns: s.time_ns,
            weight: 1,
            frames: s.frames.clone(),
            kind: Some(call.to_string()),
            cpu: s.cpu,
        });
        *collection.metrics.entry(format!("calls_{call}")).or_default() += 1.0;
        if !app_pids.contains(&s.pid) {
            *collection.metrics.entry("calls_in_children".into()).or_default() += 1.0;
        }
    }
    stacks::completeness_of_unwound(unwound.samples.iter()).add_metrics(&mut collection.metrics);
    collection.metrics.insert("samples_total".into(), collection.samples.len() as f64);
    collection.metrics.insert("events_recorded".into(), unwound.samples.len() as f64);
    collection.metrics.insert("images_unreadable".into(), unwound.missing_images.len() as f64);
    collection
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_options() {
        assert_eq!(syscall_of("syscalls:sys_enter_openat"), Some("openat"));
        assert_eq!(syscall_of("sched:sched_switch"), None);
        assert!(from_spec("s", &SyscallsOptions { syscalls: Some(vec![]), ..Default::default() }).is_err());
        let bad = SyscallsOptions { syscalls: Some(vec!["open at".into()]), ..Default::default() };
        assert!(from_spec("s", &bad).err().unwrap().to_string().contains("`open at`"));
        assert!(from_spec("s", &probe_options()).is_ok());
    }
}
