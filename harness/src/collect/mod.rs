//! Collectors: each observes a running app, leaves raw artifacts in the run's `artifacts/`, then
//! decodes them into a [`Collection`]. Several collectors may watch one run (the on/off-CPU
//! experiment does); the engine calls every collector's `start` before releasing the app and
//! every `stop` after it exits.

pub mod perf;
pub mod offcpu;
pub mod offwake;
pub mod idle_wakeups;
pub mod syscalls;
mod perf_record;
pub mod eventpipe;
pub mod dotnet_trace;
pub mod lttng;
pub mod dump;
#[cfg(test)]
mod malformed;
#[cfg(test)]
pub(crate) mod perf_fixtures;
pub(crate) mod perf_script;
#[cfg(test)]
mod perf_script_names;

pub mod caps;
mod spec;

use std::path::Path;

use anyhow::Result;

use crate::model::Collection;
use crate::run::{RunningApp, Target};
/// Decoding's inputs belong to symbolize (which reads them); collectors take them from there.
use crate::symbolize::DecodeContext;

pub use spec::{CollectorKind, CollectorOptions, CollectorSpec, StringList};
pub(crate) use spec::name_the_key;

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
        CollectorOptions::PerfOffwake(o) => offwake::from_spec(name, o)?,
        CollectorOptions::PerfSyscalls(o) => syscalls::from_spec(name, o)?,
        CollectorOptions::EventPipe(o) => eventpipe::from_spec(name, o)?,
        CollectorOptions::DotnetTrace(o) => dotnet_trace::from_spec(name, o)?,
        CollectorOptions::Lttng(o) => lttng::from_spec(name, o)?,
        CollectorOptions::Dump(o) => dump::from_spec(name, o)?,
    })
}
