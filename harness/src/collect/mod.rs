//! Collectors: each observes a running app, leaves raw artifacts in the run's `artifacts/`, then
//! decodes them into a [`Collection`]. Several collectors may watch one run (the on/off-CPU
//! experiment does); the engine calls every collector's `start` before releasing the app and
//! every `stop` after it exits.

pub mod perf;
pub mod offcpu;
pub mod eventpipe;
pub mod dotnet_trace;
pub mod lttng;

mod spec;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::model::Collection;
use crate::run::{RunningApp, Target};

pub use spec::{CollectorKind, CollectorOptions, CollectorSpec, StringList};

/// A collector that cannot work in this environment for a reason the environment proves (the
/// LTTng provider needs liblttng-ust.so.0 and the target has only .so.1; no CONFIG_USER_EVENTS …).
/// The engine turns it into a SKIP verdict with this reason, never a FAIL or a PASS.
#[derive(Debug, Clone)]
pub struct Unsupported {
    pub reason: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Unsupported {}

/// The skip reason if `err` (or anything in its chain) is an [`Unsupported`].
pub fn unsupported_reason(err: &anyhow::Error) -> Option<String> {
    err.chain().find_map(|e| e.downcast_ref::<Unsupported>()).map(|u| u.reason.clone())
}

/// What decoding may need besides the collector's own artifacts.
pub struct DecodeContext<'a> {
    /// The run's artifacts folder (host path).
    pub artifacts: &'a Path,
    /// Host folder where the app's /tmp was visible (perf maps, jitdump).
    pub app_tmp_dir: &'a Path,
    pub host_pid: u32,
    /// The pid inside the app's namespace (names perf-PID.map).
    pub target_pid: u32,
    /// Maps a path as the target saw it to a host path where the same file can be read
    /// (container runs: the image's files; host runs: identity).
    pub path_map: &'a dyn Fn(&Path) -> Option<PathBuf>,
    /// Symbol folders given with `--symbols DIR`.
    pub symbol_dirs: &'a [PathBuf],
}

pub trait Collector {
    /// The collector's name in results (`perf-cpu`, `eventpipe`, …); unique within a scenario.
    fn name(&self) -> &str;
    /// Environment the app must be started with for this collector to see it.
    fn app_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Called once the app printed its readiness line and before it is released into its
    /// measured phase. Returns only when the session is surely recording (a sentinel).
    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()>;
    /// Called after the app exited (or when the run is cut short): flush and close.
    fn stop(&mut self, target: &mut dyn Target, app: &RunningApp) -> Result<()>;
    /// Turns the raw artifacts into the model.
    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection>;
    /// The command lines this collector ran, for the manifest.
    fn commands(&self) -> Vec<String>;
}

/// Builds the collector a scenario names.
pub fn from_spec(spec: &CollectorSpec) -> Result<Box<dyn Collector>> {
    let name = spec.name();
    Ok(match &spec.options {
        CollectorOptions::PerfCpu(o) => perf::from_spec(name, o)?,
        CollectorOptions::PerfOffcpu(o) => offcpu::from_spec(name, o)?,
        CollectorOptions::EventPipe(o) => eventpipe::from_spec(name, o)?,
        CollectorOptions::DotnetTrace(o) => dotnet_trace::from_spec(name, o)?,
        CollectorOptions::Lttng(o) => lttng::from_spec(name, o)?,
    })
}
