//! Collectors: each observes a running app, leaves raw artifacts in the run's `artifacts/`, then
//! decodes them into a [`Collection`]. Several collectors may watch one run (the on/off-CPU
//! experiment does); the engine calls every collector's `start` before releasing the app and
//! every `stop` after it exits.
//!
//! This file holds the [`Collector`] trait alone; `spec` turns a scenario's `[[collector]]` into
//! one (the dispatch on the kind), and each other module is one kind. `caps` reads the committed
//! least-capability table.

pub mod perf;
pub mod offcpu;
mod process_maps;
pub mod offwake;
pub mod syscalls;
mod perf_record;
pub mod eventpipe;
pub mod dotnet_trace;
pub mod collect_linux;
pub mod lttng;
pub mod dump;
pub mod perfcollect;
#[cfg(test)]
mod malformed;

pub mod caps;
mod spec;

use std::path::Path;

use anyhow::Result;

use model::Collection;
use crate::run::{PreLaunch, RunningApp, Target};
/// Decoding's inputs belong to symbolize (which reads them); collectors take them from there.
use stacks::DecodeContext;

pub use perf_record::set_budget_wait;
pub use spec::{BadOption, CollectorKind, CollectorOptions, CollectorSpec, StringList, from_spec};
pub(crate) use spec::bad_option;
pub(crate) use spec::name_the_key;

pub trait Collector {
    /// The collector's name in results (`perf-cpu`, `eventpipe`, …); unique within a scenario.
    fn name(&self) -> &str;
    /// Environment the app must be started with for this collector to see it.
    fn app_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Checked before the workload is built or anything launched: `Err` with an `Unsupported`
    /// when this environment proves the collector cannot work (a kernel option it lacks), so
    /// the scenario SKIPs in seconds.
    fn preflight(&self) -> Result<()> {
        Ok(())
    }
    /// Checked with [`Collector::preflight`], once the target is known: `Err` with an
    /// `Unsupported` when the collector cannot run on this kind of target (perfcollect needs a
    /// container of its own beside the app), so the run SKIPs before the app is built or given
    /// any capability.
    fn runs_on(&self, target: crate::run::TargetKind) -> Result<()> {
        let _ = target;
        Ok(())
    }
    /// Whether this collector must be set up before the app's first instruction
    /// ([`Collector::before_launch`]): to record the app's startup.
    fn prepares_before_launch(&self) -> bool {
        false
    }
    /// Called before the app starts, where it will run, on a target that can hold a launch
    /// ([`Target::launch_prepared`]); `start` follows as always, once the app is ready.
    fn before_launch(&mut self, at: &PreLaunch, artifacts: &Path) -> Result<()> {
        let _ = (at, artifacts);
        Ok(())
    }
    /// Called once the app printed its readiness line and before it is released into its
    /// measured phase. Returns only when the session is surely recording (a sentinel).
    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()>;
    /// Whether `stop` must come before the other collectors' stops: a tool that may record
    /// through a daemon another collector started and stops (perfcollect's LTTng session in the
    /// `lttng` collector's session daemon) stops while that daemon still runs.
    fn stops_first(&self) -> bool {
        false
    }
    /// Called after the app exited (or when the run is cut short): flush and close.
    fn stop(&mut self, target: &mut dyn Target, app: &RunningApp) -> Result<()>;
    /// Turns the raw artifacts into the model.
    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection>;
    /// The command lines this collector ran, for the manifest.
    fn commands(&self) -> Vec<String>;
}
