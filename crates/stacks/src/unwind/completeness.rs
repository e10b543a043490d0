//! How complete the stacks of a collection are: per DSO class of the leaf frame, how many
//! stacks reach the thread's root, and where the others stop (the DSO of their last frame).
//! Every manifest carries these numbers (issue 9, item 3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{StackEnd, UnwoundSample};
use model::{DsoClass, Frame, Sample};

/// Frames that start a thread: below them there is nothing to unwind.
pub const ROOT_FUNCTIONS: [&str; 6] =
    ["start_thread", "__libc_start_call_main", "__libc_start_main", "_start", "__clone3", "clone3"];

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassCompleteness {
    pub stacks: u64,
    pub reached_root: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Completeness {
    /// Stacks with at least one user frame.
    pub stacks: u64,
    pub reached_root: u64,
    /// Stacks holding at least one managed frame (JIT or ReadyToRun code).
    pub with_managed_frame: u64,
    /// Keyed by the class of the first user frame (where the thread was).
    pub by_leaf_class: BTreeMap<String, ClassCompleteness>,
    /// Stacks that did not reach the root, by the DSO of their last frame.
    pub stopped_in_dso: BTreeMap<String, u64>,
    /// The same, by DSO class.
    pub stopped_in_class: BTreeMap<String, u64>,
    /// User frames of the deepest stack: where a collector that cuts stacks cut them.
    #[serde(default)]
    pub max_frames: u64,
}

impl Completeness {
    pub fn root_ratio(&self) -> f64 {
        if self.stacks == 0 { 0.0 } else { self.reached_root as f64 / self.stacks as f64 }
    }

    fn add(&mut self, user: &[Frame], reached_root: bool) {
        let Some(leaf) = user.first() else { return };
        self.stacks += 1;
        self.max_frames = self.max_frames.max(user.len() as u64);
        let class = self.by_leaf_class.entry(leaf.class.as_str().to_string()).or_default();
        class.stacks += 1;
        if user.iter().any(|f| matches!(f.class, DsoClass::Jit | DsoClass::R2r)) {
            self.with_managed_frame += 1;
        }
        if reached_root {
            self.reached_root += 1;
            class.reached_root += 1;
        } else {
            let last = user.last().expect("non-empty");
            let dso = last.dso.as_deref().map(short_dso).unwrap_or("[unknown]").to_string();
            *self.stopped_in_dso.entry(dso).or_default() += 1;
            *self.stopped_in_class.entry(last.class.as_str().to_string()).or_default() += 1;
        }
    }

    /// Puts the figures into a collection's metrics (`unwind_*`, flat numbers).
    pub fn add_metrics(&self, metrics: &mut BTreeMap<String, f64>) {
        metrics.insert("unwind_stacks".into(), self.stacks as f64);
        metrics.insert("unwind_reached_root".into(), self.reached_root as f64);
        metrics.insert("unwind_root_ratio".into(), self.root_ratio());
        metrics.insert("unwind_with_managed_frame".into(), self.with_managed_frame as f64);
        metrics.insert("unwind_max_frames".into(), self.max_frames as f64);
        for (class, c) in &self.by_leaf_class {
            metrics.insert(format!("unwind_stacks_leaf_{class}"), c.stacks as f64);
            metrics.insert(format!("unwind_reached_root_leaf_{class}"), c.reached_root as f64);
            let ratio = if c.stacks == 0 { 0.0 } else { c.reached_root as f64 / c.stacks as f64 };
            metrics.insert(format!("unwind_root_ratio_leaf_{class}"), ratio);
        }
        for (class, n) in &self.stopped_in_class {
            metrics.insert(format!("unwind_stopped_in_{class}"), *n as f64);
        }
        for (dso, n) in &self.stopped_in_dso {
            metrics.insert(format!("unwind_stopped_in_dso_{dso}"), *n as f64);
        }
    }

    /// Rebuilds the report a collector put into its metrics with [`Completeness::add_metrics`].
    pub fn from_metrics(metrics: &BTreeMap<String, f64>) -> Option<Completeness> {
        let n = |k: &str| metrics.get(k).map(|v| *v as u64);
        let mut c = Completeness {
            stacks: n("unwind_stacks")?,
            reached_root: n("unwind_reached_root")?,
            with_managed_frame: n("unwind_with_managed_frame").unwrap_or(0),
            max_frames: n("unwind_max_frames").unwrap_or(0),
            ..Default::default()
        };
        for (k, v) in metrics {
            if let Some(class) = k.strip_prefix("unwind_stacks_leaf_") {
                let reached = n(&format!("unwind_reached_root_leaf_{class}")).unwrap_or(0);
                c.by_leaf_class.insert(class.to_string(), ClassCompleteness { stacks: *v as u64, reached_root: reached });
            } else if let Some(dso) = k.strip_prefix("unwind_stopped_in_dso_") {
                c.stopped_in_dso.insert(dso.to_string(), *v as u64);
            } else if let Some(class) = k.strip_prefix("unwind_stopped_in_") {
                c.stopped_in_class.insert(class.to_string(), *v as u64);
            }
        }
        Some(c)
    }
}

/// The completeness report of any collection, for the manifest. A collector that unwound its
/// own stacks (perf-offcpu) knows where each one ended and leaves that in its metrics; for the
/// others it is judged from frame names ([`completeness`]).
pub fn completeness_of_collection(c: &model::Collection) -> Completeness {
    Completeness::from_metrics(&c.metrics).unwrap_or_else(|| completeness(&c.samples))
}

impl Completeness {
    /// Adds the figures to `metrics` unless the collector already put its own there.
    pub fn add_metrics_if_absent(&self, metrics: &mut BTreeMap<String, f64>) {
        if !metrics.contains_key("unwind_stacks") {
            self.add_metrics(metrics);
        }
    }
}

fn short_dso(dso: &str) -> &str {
    dso.rsplit('/').next().unwrap_or(dso)
}

fn is_root_name(frame: &Frame) -> bool {
    frame.name.as_deref().is_some_and(|n| {
        ROOT_FUNCTIONS.contains(&n) || (frame.class != DsoClass::Kernel && is_managed_entry_point(n))
    })
}

/// `Main` of a managed program (perf map spelling `…::Main(string[])…`, or TraceEvent's
/// `…Program.Main(…)`): a managed-only stack (EventPipe) that reaches it is complete.
fn is_managed_entry_point(name: &str) -> bool {
    name.contains("::Main(") || name.contains(".Main(")
}

/// Completeness of any collection's samples, judged by frame names: a stack reached its root
/// when its last frame is one of [`ROOT_FUNCTIONS`] or a managed `Main`. (A stripped libc
/// without its debug file cannot name `start_thread`; our own unwinder knows better, see
/// [`completeness_of_unwound`].)
pub fn completeness(samples: &[Sample]) -> Completeness {
    let mut c = Completeness::default();
    for s in samples {
        let user: Vec<Frame> = s.frames.iter().filter(|f| f.class != DsoClass::Kernel).cloned().collect();
        let reached = user.last().is_some_and(is_root_name);
        c.add(&user, reached);
    }
    c
}

/// Completeness of our own unwinding: a stack reached its root when the unwinder ended it
/// cleanly (CFI marks the return address undefined, as `start_thread` and `_start` do) or its
/// last frame is named as a root.
pub fn completeness_of_unwound<'a>(samples: impl IntoIterator<Item = &'a UnwoundSample>) -> Completeness {
    let mut c = Completeness::default();
    for s in samples {
        let user = &s.frames[s.frames.len() - s.user_frames..];
        let reached = (s.end == StackEnd::Root && user.last().is_some_and(|f| f.class != DsoClass::Jit))
            || user.last().is_some_and(is_root_name);
        c.add(user, reached);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: Option<&str>, dso: &str, class: DsoClass) -> Frame {
        Frame { name: name.map(String::from), dso: Some(dso.into()), class, addr: 1 }
    }

    fn sample(frames: Vec<Frame>) -> Sample {
        Sample::new(1, 1, 0, frames)
    }

    #[test]
    fn roots_and_stops_are_counted_per_class() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let samples = vec![
            sample(vec![
                frame(Some("schedule"), "[kernel.kallsyms]", DsoClass::Kernel),
                frame(Some("__futex_abstimed_wait_common"), libc, DsoClass::Libc),
                frame(Some("void [App] App::Run()"), "[jit]", DsoClass::Jit),
                frame(Some("start_thread"), libc, DsoClass::Libc),
            ]),
            sample(vec![frame(Some("__futex_abstimed_wait_common"), libc, DsoClass::Libc)]),
            sample(vec![frame(Some("schedule"), "[kernel.kallsyms]", DsoClass::Kernel)]),
        ];
        let c = completeness(&samples);
        assert_eq!(c.stacks, 2);
        assert_eq!(c.reached_root, 1);
        assert_eq!(c.with_managed_frame, 1);
        assert_eq!(c.by_leaf_class["libc"], ClassCompleteness { stacks: 2, reached_root: 1 });
        assert_eq!(c.stopped_in_dso["libc.so.6"], 1);
        assert_eq!(c.stopped_in_class["libc"], 1);
        let mut m = BTreeMap::new();
        c.add_metrics(&mut m);
        assert_eq!(m["unwind_root_ratio"], 0.5);
        assert_eq!(m["unwind_root_ratio_leaf_libc"], 0.5);
        assert_eq!(Completeness::from_metrics(&m), Some(c));
    }
}
