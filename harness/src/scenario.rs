//! Scenarios are data: `scenarios/<name>.toml` names the workload, the collectors, the target and
//! the expectations. A user points one at their own app with `workload = { dll = "…" }` or
//! `workload = { project = "…" }` and their own expectations file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub workload: WorkloadRef,
    /// Arguments passed to the workload (after the ones the engine adds: --truth, --go-file).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment for the app.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `host`, `container` or `sidecar`; absent = container when a Docker daemon answers, else host.
    #[serde(default)]
    pub target: Option<crate::run::TargetKind>,
    /// Base image for container targets (`bullseye`, `bookworm`, `trixie`).
    #[serde(default)]
    pub image: Option<String>,
    /// Capabilities for container targets; absent = the least set measured to work.
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// Hard limit for the app's run, seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    #[serde(rename = "collector", default)]
    pub collectors: Vec<CollectorSpec>,
    #[serde(rename = "expect", default)]
    pub expectations: Vec<Expectation>,
    /// Free-form notes shown in summary.md (what the scenario demonstrates).
    #[serde(default)]
    pub notes: Vec<String>,
    /// HTTP load on loopback while the app runs (web workloads that print
    /// `TRACELAB LISTENING http://127.0.0.1:PORT`).
    #[serde(default)]
    pub load: Option<LoadSpec>,
    /// Collectors that would perturb each other run in separate runs of the same workload (with
    /// the same arguments and load): e.g. EventPipe's SampleProfiler suspends every managed thread
    /// each millisecond, which an off-CPU view of the same run would count as blocked time.
    /// Each inner list names the collectors of one run; empty = one run with every collector.
    #[serde(default)]
    pub runs: Vec<Vec<String>>,
}

/// Equal load on each route, from a loopback load generator, bounded in time.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    pub routes: Vec<String>,
    #[serde(default = "five")]
    pub connections_per_route: u32,
    pub seconds: f64,
}

fn five() -> u32 {
    5
}

fn default_timeout() -> u64 {
    120
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum WorkloadRef {
    /// A workload of this repository: `workloads/<name>`.
    Named(String),
    /// A user's project folder (built with `dotnet build`) or a built dll.
    Path {
        #[serde(default)]
        project: Option<PathBuf>,
        #[serde(default)]
        dll: Option<PathBuf>,
        /// Publish ReadyToRun (precompiled) instead of a plain build.
        #[serde(default)]
        ready_to_run: bool,
    },
}

/// One collector of a scenario: the kind with its typed options, declared by the collectors.
pub use crate::collect::{CollectorKind, CollectorSpec};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMode {
    /// A sample counts for a method when the method is anywhere on its stack.
    #[default]
    Inclusive,
    /// A sample counts for a method only when the method is its leaf frame.
    Leaf,
}

/// An expectation. `collector` picks which collector's data it reads (default: the first).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Expectation {
    /// A frame matching `pattern` (regex over resolved names, code versions merged) is present
    /// (or absent) in at least `min_share` of the samples.
    Frame {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        pattern: String,
        #[serde(default = "yes")]
        present: bool,
        #[serde(default)]
        leaf_only: bool,
        #[serde(default)]
        min_share: Option<f64>,
        /// Only samples of the thread whose id truth.json gives at this path (e.g. the blocked
        /// thread of the off-CPU workload). Tids are as the collector's pid namespace sees them.
        #[serde(default)]
        tid_truth: Option<String>,
        /// Only samples of this kind (`blocked` / `preempted` off-CPU samples, `managed` /
        /// `external` SampleProfiler samples).
        #[serde(default)]
        sample_kind: Option<String>,
    },
    /// Share of `method` among the methods in `among`, against a truth value (a dotted path into
    /// truth.json giving a fraction 0..1) within ± `tolerance_pts` points.
    Share {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        method: String,
        among: Vec<String>,
        truth: String,
        #[serde(default)]
        mode: ShareMode,
        #[serde(default)]
        sample_kind: Option<String>,
        #[serde(default)]
        tolerance_pts: Option<f64>,
        #[serde(default)]
        min_samples: Option<u64>,
    },
    /// Share of `method` among `among` is at least `min` (fraction; "≈ only X" uses 0.9).
    ShareAtLeast {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        method: String,
        among: Vec<String>,
        min: f64,
        #[serde(default)]
        mode: ShareMode,
        #[serde(default)]
        sample_kind: Option<String>,
        #[serde(default)]
        min_samples: Option<u64>,
    },
    /// Resolved-frame ratio for a DSO class (`jit`, `r2r`, `runtime_native`, `libc`, `kernel`,
    /// `managed` = jit + r2r) at least `min` and/or at most `max`.
    Resolved {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        class: String,
        #[serde(default)]
        min: Option<f64>,
        #[serde(default)]
        max: Option<f64>,
        /// Count leaf frames only (the default) or every frame.
        #[serde(default = "yes")]
        leaf_only: bool,
    },
    /// Count of events named `event` (version suffix ignored) against literal bounds or truth.
    EventCount {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        event: String,
        #[serde(default)]
        provider: Option<String>,
        #[serde(default)]
        min: Option<u64>,
        #[serde(default)]
        max: Option<u64>,
        /// Count must be ≥ this truth value.
        #[serde(default)]
        at_least_truth: Option<String>,
        /// Count must equal this truth value within `tolerance`.
        #[serde(default)]
        equals_truth: Option<String>,
        #[serde(default)]
        tolerance: Option<u64>,
    },
    /// |count(a) − count(b)| ≤ max_diff.
    EventBalance {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        a: String,
        b: String,
        #[serde(default = "two")]
        max_diff: u64,
    },
    /// Exceptions by "type: message" equal truth's map at `truth` exactly.
    Exceptions {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        collector: Option<String>,
        truth: String,
        /// Only exception types matching this regex are compared.
        #[serde(default)]
        type_pattern: Option<String>,
    },
    /// A run metric (manifest `metrics`) within bounds.
    Metric {
        #[serde(default)]
        name: Option<String>,
        metric: String,
        #[serde(default)]
        min: Option<f64>,
        #[serde(default)]
        max: Option<f64>,
    },
    /// Two collectors agree on an event count within `tolerance`.
    AgreeCount {
        #[serde(default)]
        name: Option<String>,
        event: String,
        collectors: Vec<String>,
        #[serde(default = "two")]
        tolerance: u64,
    },
    /// Two collectors name the same hot methods: each ranks the managed methods of assemblies
    /// matching `assembly` by sample weight, and their top `top` lists share at least
    /// `min_common` names. Besides, every method of the first collector's top list that was
    /// named mostly from a ReadyToRun image must be known to the second under the same name —
    /// among its frames or the names its symbol source listed (a perf map lists every method the
    /// JIT compiled, sampled or not) — so precompiled frames are not merely ranked alike but
    /// spelled as the runtime spells them.
    AgreeFrames {
        #[serde(default)]
        name: Option<String>,
        /// Exactly two collectors.
        collectors: Vec<String>,
        /// Regex over a frame's assembly (`System.Private.CoreLib`, `framework` …); the default
        /// is the shared framework's assemblies.
        #[serde(default = "framework_assemblies")]
        assembly: String,
        /// `leaf`: a sample counts for the managed frame nearest its leaf (native helpers below it
        /// count for it, as EventPipe stacks hold managed frames only); `inclusive`: for every
        /// managed method on its stack, once.
        #[serde(default = "leaf")]
        mode: ShareMode,
        /// How names compare (code versions are merged either way).
        #[serde(default)]
        names: NameMatch,
        #[serde(default = "ten")]
        top: usize,
        min_common: usize,
        /// At least this many of the first collector's top methods must be named mostly from
        /// ReadyToRun images: a comparison meant to check precompiled frames must see some.
        #[serde(default)]
        min_r2r: Option<usize>,
        /// Collector → sample kind to count (e.g. `{ eventpipe = "managed" }`: SampleProfiler
        /// samples blocked threads too, which on-CPU perf never sees).
        #[serde(default)]
        sample_kinds: BTreeMap<String, String>,
    },
}

/// How [`Expectation::AgreeFrames`] compares method names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NameMatch {
    /// The full name as the collector spells it (perf map and ReadyToRun resolver alike).
    #[default]
    Exact,
    /// `Namespace.Type::Method/ARITY`: across spellings (EventPipe's parameter types are spelled
    /// differently from the perf map's).
    MethodAndArity,
}

/// The assemblies of the .NET shared framework (Microsoft.NETCore.App, Microsoft.AspNetCore.App).
pub const FRAMEWORK_ASSEMBLIES: &str = r"^(System|Microsoft)(\.|$)|^(mscorlib|netstandard)$";

fn framework_assemblies() -> String {
    FRAMEWORK_ASSEMBLIES.to_string()
}
fn leaf() -> ShareMode {
    ShareMode::Leaf
}
fn ten() -> usize {
    10
}

fn yes() -> bool {
    true
}
fn two() -> u64 {
    2
}

impl Scenario {
    pub fn from_toml(text: &str, origin: &Path) -> Result<Scenario> {
        let scenario: Scenario =
            toml::from_str(text).with_context(|| format!("{} is not a valid scenario", origin.display()))?;
        scenario.validate().with_context(|| format!("in {}", origin.display()))?;
        Ok(scenario)
    }

    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Scenario::from_toml(&text, path)
    }

    /// `scenarios/<name>.toml`, or a path to a TOML file.
    pub fn find(name_or_path: &str) -> Result<Scenario> {
        let as_path = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || as_path.is_file() {
            return Scenario::load(as_path);
        }
        let path = crate::project_root().join("scenarios").join(format!("{name_or_path}.toml"));
        if !path.is_file() {
            let known = list_names().unwrap_or_default().join(", ");
            bail!("no scenario `{name_or_path}` ({} does not exist); known: {known}", path.display());
        }
        Scenario::load(&path)
    }

    fn validate(&self) -> Result<()> {
        if self.collectors.is_empty() {
            bail!("scenario `{}` names no [[collector]]", self.name);
        }
        let mut names = std::collections::BTreeSet::new();
        for c in &self.collectors {
            if !names.insert(c.name().to_string()) {
                bail!("two collectors are named `{}`: give one a `name`", c.name());
            }
        }
        let mut grouped = std::collections::BTreeSet::new();
        for group in &self.runs {
            for c in group {
                if !names.contains(c.as_str()) {
                    bail!("`runs` names collector `{c}`, which the scenario does not have");
                }
                if !grouped.insert(c.clone()) {
                    bail!("`runs` names collector `{c}` twice: each collector belongs to one run");
                }
            }
        }
        if !self.runs.is_empty() && grouped.len() != names.len() {
            bail!("`runs` must place every collector in a run (missing: {:?})", names.difference(&grouped.iter().cloned().collect()).collect::<Vec<_>>());
        }
        for e in &self.expectations {
            for c in e.collectors() {
                if !names.contains(c) {
                    bail!("an expectation reads collector `{c}`, which the scenario does not have");
                }
            }
            e.compile_patterns()?;
        }
        for group in self.run_groups() {
            self.run_env(&group)?;
        }
        Ok(())
    }
}

impl Scenario {
    /// The app's environment for the run of `group` (collector names): the scenario's `env`,
    /// then the collectors' own `env`. Collectors of one run that disagree on a variable are an
    /// error: one app cannot run both ways.
    pub fn run_env(&self, group: &[String]) -> Result<BTreeMap<String, String>> {
        let mut env = self.env.clone();
        let mut set_by: BTreeMap<&str, &str> = BTreeMap::new();
        for spec in self.collectors.iter().filter(|c| group.iter().any(|g| g == c.name())) {
            for (k, v) in &spec.env {
                if let Some(other) = set_by.get(k.as_str())
                    && env.get(k) != Some(v)
                {
                    bail!(
                        "collectors `{other}` and `{}` share a run but set {k} differently: put them in separate `runs`",
                        spec.name()
                    );
                }
                set_by.insert(k, spec.name());
                env.insert(k.clone(), v.clone());
            }
        }
        Ok(env)
    }

    /// The collectors of each run, by name.
    pub fn run_groups(&self) -> Vec<Vec<String>> {
        if self.runs.is_empty() {
            vec![self.collectors.iter().map(|c| c.name().to_string()).collect()]
        } else {
            self.runs.clone()
        }
    }
}

impl Expectation {
    pub fn collector(&self) -> Option<&str> {
        match self {
            Expectation::Frame { collector, .. }
            | Expectation::Share { collector, .. }
            | Expectation::ShareAtLeast { collector, .. }
            | Expectation::Resolved { collector, .. }
            | Expectation::EventCount { collector, .. }
            | Expectation::EventBalance { collector, .. }
            | Expectation::Exceptions { collector, .. } => collector.as_deref(),
            Expectation::Metric { .. } | Expectation::AgreeCount { .. } | Expectation::AgreeFrames { .. } => None,
        }
    }

    /// Every collector the expectation reads.
    pub fn collectors(&self) -> Vec<&str> {
        match self {
            Expectation::AgreeCount { collectors, .. } | Expectation::AgreeFrames { collectors, .. } => {
                collectors.iter().map(String::as_str).collect()
            }
            other => other.collector().into_iter().collect(),
        }
    }

    fn compile_patterns(&self) -> Result<()> {
        let pats: Vec<&String> = match self {
            Expectation::Frame { pattern, .. } => vec![pattern],
            Expectation::Share { method, among, .. } | Expectation::ShareAtLeast { method, among, .. } => {
                std::iter::once(method).chain(among.iter()).collect()
            }
            Expectation::Exceptions { type_pattern: Some(p), .. } => vec![p],
            Expectation::AgreeFrames { assembly, .. } => vec![assembly],
            _ => vec![],
        };
        for p in pats {
            regex::Regex::new(p).with_context(|| format!("bad regex `{p}`"))?;
        }
        if let Expectation::AgreeFrames { collectors, top, min_common, min_r2r, sample_kinds, .. } = self {
            if collectors.len() != 2 {
                bail!("agree_frames compares exactly two collectors, got {collectors:?}");
            }
            if *top == 0 || *min_common > *top || min_r2r.is_some_and(|m| m > *top) {
                bail!("agree_frames needs 0 < top, min_common ≤ top and min_r2r ≤ top (top {top}, min_common {min_common}, min_r2r {min_r2r:?})");
            }
            if let Some(c) = sample_kinds.keys().find(|k| !collectors.contains(k)) {
                bail!("agree_frames `sample_kinds` names `{c}`, which is not one of its collectors {collectors:?}");
            }
        }
        Ok(())
    }
}

/// Names of the scenarios under `scenarios/`.
pub fn list_names() -> Result<Vec<String>> {
    let dir = crate::project_root().join("scenarios");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            names.push(path.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_checked_in_scenario_parses() {
        for name in list_names().unwrap() {
            Scenario::find(&name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
    }

    #[test]
    fn unknown_collector_reference_is_rejected() {
        let text = r#"
            name = "x"
            workload = "cpu-bound"
            [[collector]]
            kind = "perf-cpu"
            [[expect]]
            kind = "resolved"
            collector = "eventpipe"
            class = "jit"
            min = 0.9
        "#;
        let err = Scenario::from_toml(text, Path::new("x.toml")).unwrap_err();
        assert!(format!("{err:#}").contains("collector `eventpipe`"), "{err:#}");
    }

    #[test]
    fn collector_env_applies_to_its_run_and_conflicts_are_rejected() {
        let text = r#"
            name = "x"
            workload = "framework"
            env = { A = "1", B = "scenario" }
            runs = [["perf-cpu"], ["jit-only"]]
            [[collector]]
            kind = "perf-cpu"
            [[collector]]
            kind = "perf-cpu"
            name = "jit-only"
            env = { DOTNET_ReadyToRun = "0", B = "collector" }
        "#;
        let s = Scenario::from_toml(text, Path::new("x.toml")).unwrap();
        // `env` is the collector's, not a perf option (perf-cpu rejects unknown options).
        assert_eq!(s.collectors[1].env["DOTNET_ReadyToRun"], "0");
        let first = s.run_env(&["perf-cpu".into()]).unwrap();
        assert_eq!(first.get("DOTNET_ReadyToRun"), None);
        let second = s.run_env(&["jit-only".into()]).unwrap();
        assert_eq!(second["DOTNET_ReadyToRun"], "0");
        assert_eq!((second["A"].as_str(), second["B"].as_str()), ("1", "collector"));
        // Without `runs`, both collectors would watch one app that cannot run both ways.
        let one_run = text.replace(r#"runs = [["perf-cpu"], ["jit-only"]]"#, "").replace(
            "[[collector]]\n            kind = \"perf-cpu\"\n            [[collector]]",
            "[[collector]]\n            kind = \"perf-cpu\"\n            env = { B = \"other\" }\n            [[collector]]",
        );
        let err = Scenario::from_toml(&one_run, Path::new("x.toml")).unwrap_err();
        assert!(format!("{err:#}").contains("set B differently"), "{err:#}");
    }

    #[test]
    fn agree_frames_is_checked_when_loaded() {
        let base = r#"
            name = "x"
            workload = "framework"
            [[collector]]
            kind = "perf-cpu"
            [[collector]]
            kind = "eventpipe"
            profile = "thread-time"
            [[expect]]
            kind = "agree_frames"
        "#;
        let ok = format!("{base}collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 8\nsample_kinds = {{ eventpipe = \"managed\" }}\n");
        let s = Scenario::from_toml(&ok, Path::new("x.toml")).unwrap();
        match &s.expectations[0] {
            Expectation::AgreeFrames { top, mode, names, assembly, .. } => {
                assert_eq!((*top, *mode, *names), (10, ShareMode::Leaf, NameMatch::Exact));
                assert!(regex::Regex::new(assembly).unwrap().is_match("System.Private.CoreLib"));
                assert!(!regex::Regex::new(assembly).unwrap().is_match("framework"));
            }
            other => panic!("{other:?}"),
        }
        for (bad, why) in [
            ("collectors = [\"perf-cpu\", \"lttng\"]\nmin_common = 8\n", "collector `lttng`"),
            ("collectors = [\"perf-cpu\"]\nmin_common = 8\n", "exactly two"),
            ("collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 11\n", "min_common ≤ top"),
            ("collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 8\nsample_kinds = { dotnet-trace = \"managed\" }\n", "not one of its collectors"),
        ] {
            let err = Scenario::from_toml(&format!("{base}{bad}"), Path::new("x.toml")).unwrap_err();
            assert!(format!("{err:#}").contains(why), "{bad}: {err:#}");
        }
    }

    #[test]
    fn user_workload_by_path() {
        let text = r#"
            name = "mine"
            workload = { dll = "/srv/app/My.dll" }
            [[collector]]
            kind = "perf-cpu"
            frequency = 499
        "#;
        let s = Scenario::from_toml(text, Path::new("mine.toml")).unwrap();
        assert!(matches!(s.workload, WorkloadRef::Path { dll: Some(_), .. }));
        match &s.collectors[0].options {
            crate::collect::CollectorOptions::PerfCpu(o) => assert_eq!(o.frequency, 499),
            other => panic!("{other:?}"),
        }
    }
}
