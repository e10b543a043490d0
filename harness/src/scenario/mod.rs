//! Scenarios are data: `scenarios/<name>.toml` names the workload, the collectors, the target and
//! the expectations. A user points one at their own app as it is — `workload = { dll = "…" }`,
//! `{ project = "…" }`, `{ command = [...] }` or `{ image = "…" }` — with how it is ready and
//! stopped (`app.rs`); relative paths mean paths next to the TOML file.
//!
//! # Adding a key: how it goes through the validator
//!
//! [`Scenario::from_toml`] is the only way in, and every mistake it finds names
//! `file:line:column` (`place.rs`). A new key gets that for free when it follows these steps:
//!
//! 1. **Type it.** A field of a `#[serde(deny_unknown_fields)]` struct here, of a collector's
//!    options struct (`collect/<kind>.rs`, reached through `collect::CollectorOptions`) or of a
//!    check (`assert/<kind>.rs`, through `expect::CheckKind`) — with the narrowest Rust type
//!    (`u32`, an enum, `Option<…>`), never a `String` parsed later and never `#[serde(untagged)]`
//!    or a custom `Deserialize` that coerces (`frequency = "99"` and `99.5` must stay errors).
//!    serde then rejects unknown keys and wrong types with the byte span of the key or value;
//!    inside `[[collector]]` / `[[expect]]` tables `collect::name_the_key` finds which key.
//! 2. **Check what serde cannot** (ranges, regexes that must compile, keys that must agree,
//!    files that must exist) at load: in `Scenario::validate`, in the collector's
//!    `collect::from_spec` (which builds every collector of a scenario at load), or in the
//!    check's `Judge::validate`. Name the key: here through [`place::at`] with its path
//!    (`scenario_path!("load", "seconds")`), in a collector with `collect::bad_option("frequency",
//!    …)`, in a check with `judge::BadKey` — the loader places those two at
//!    `[[collector]]` / `[[expect]]` N's key. A check deeper down may already have placed it;
//!    the innermost place wins. An error naming no key points at its table's header.
//! 3. **Truth a check reads** is named by its `Judge::truth_paths` (truth paths: dotted keys, a
//!    part with dots of its own in double quotes), so a scenario of an app as it is can only
//!    read what its `truth.map` declares; `Judge::truth_maps` names those holding one count per
//!    key, under which a deeper `truth.map` key is refused.
//! 4. **Test it** with one line in `place.rs`'s `scenario_mistakes` table: the faulty text, the
//!    `file:line:column` expected and the words of the message. Nothing found only at run time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use place::at;
use serde::{Deserialize, Serialize};

mod app;
mod expect;
pub mod place;
pub mod starter;
pub mod truth_map;

pub use app::{Protocol, TruthSpec, WorkloadRef, is_aspnetcore};
pub use crate::run::ready::{ASPNETCORE_READY_LINE, Ready, Stop};
pub use expect::{CheckKind, Expectation, FRAMEWORK_ASSEMBLIES, NameMatch, ShareMode};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub workload: WorkloadRef,
    /// `tracelab` (the built-in workloads: `--truth`/`--go-file` added, `TRACELAB READY`
    /// awaited) or `none` (the app as it is); absent = `tracelab` for `workloads/…`, else `none`.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// Arguments passed to the app exactly as written (with the tracelab protocol, after the
    /// ones the engine adds: --truth, --go-file).
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment for the app.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The app's working folder; absent = its run folder (`artifacts/`). On a container target a
    /// `cwd` outside the run folder is mounted read-only unless `cwd_writable = true`.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Lets an app in a container write into its `cwd` (on the host, the app writes as its user
    /// does whatever this says).
    #[serde(default)]
    pub cwd_writable: bool,
    /// When the app is ready to be measured (protocol `none`); absent = ASP.NET Core's
    /// `Now listening on:` line for web apps (or with `[load]`), else the diagnostics socket.
    #[serde(default)]
    pub ready: Option<Ready>,
    /// Seconds between readiness and the start of measurement (start-up and first JIT excluded).
    #[serde(default)]
    pub warmup_s: Option<f64>,
    /// Length of the measured window in seconds (protocol `none`; `[load]` sets it with a load).
    #[serde(default)]
    pub seconds: Option<f64>,
    /// How the app is stopped after the window (protocol `none`); absent = `sigterm`.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// A truth file in the app's own format (protocol `none`); without one the run is judged by
    /// checks that need no truth.
    #[serde(default)]
    pub truth: Option<TruthSpec>,
    /// `host`, `container`, `sidecar` or `pod`; absent = container when a Docker daemon answers, else host.
    #[serde(default)]
    pub target: Option<crate::run::TargetKind>,
    /// Base image for container targets (`bullseye`, `bookworm`, `trixie`).
    #[serde(default)]
    pub image: Option<String>,
    /// The pod's shape on the `pod` target (`sidecar`, `debug`, `hardened`, `limited`); absent =
    /// `sidecar`.
    #[serde(default)]
    pub shape: Option<crate::run::pod::PodShape>,
    /// `resources.limits` of the app's container on the pod target (`cpu = "0.5"`, `memory =
    /// "512Mi"`, Kubernetes quantities); the `limited` shape's default is 1 CPU and 1 GiB.
    #[serde(default)]
    pub pod_resources: Option<PodResources>,
    /// Capabilities for container targets; absent = the least set measured to work.
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    /// Hard limit for the app's run, seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// The app is meant to die of an unhandled exception (the runtime aborts it: SIGABRT, exit
    /// code 134): that exit is then its success, and any other exit a failure (e.g. the crash
    /// case of a `dump` collector with `trigger = "crash"`).
    #[serde(default)]
    pub expect_crash: bool,
    /// The production shape (protocol `none`): the app starts with no diagnostics variable from
    /// tracelab (not held, no perf map, W^X on) and the collectors attach to it once it is ready,
    /// as `--attach PID` does; the perf map is switched on over the diagnostics IPC and off again.
    #[serde(default)]
    pub attach: bool,
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
    /// When data is too thin to decide (`[sufficiency] max_lost_ratio = 0.01, min_rate_ratio = 0.5`):
    /// checks on such data are inconclusive, not FAIL.
    #[serde(default)]
    pub sufficiency: judge::Sufficiency,
    /// The scenario file, when it came from one (its folder anchors relative paths).
    #[serde(skip)]
    pub origin: Option<PathBuf>,
}

/// Equal load on each route, from a loopback load generator, bounded in time.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// `http://127.0.0.1:PORT` (loopback only); absent = the `url` the readiness line captured
    /// (or the built-in workloads' `TRACELAB LISTENING` line).
    #[serde(default)]
    pub url: Option<String>,
    pub routes: Vec<String>,
    #[serde(default = "five")]
    pub connections_per_route: u32,
    pub seconds: f64,
}

fn five() -> u32 {
    5
}

/// Connections the load generator opens per route (one thread each): 5000 ran 30 s instead of 2
/// and then panicked when threads ran out.
pub const MAX_CONNECTIONS_PER_ROUTE: u32 = 64;
/// Routes of one `[load]`, for the same reason.
const MAX_ROUTES: usize = 32;

impl LoadSpec {
    /// The load generator sends traffic to this machine only. Each mistake is placed at its key.
    fn validate(&self) -> Result<()> {
        if let Some(url) = &self.url {
            crate::run::load::loopback_host_port(url).map_err(|e| at(crate::scenario_path!("load", "url"), e))?;
        }
        if self.routes.is_empty() || self.routes.len() > MAX_ROUTES {
            return Err(at(
                crate::scenario_path!("load", "routes"),
                anyhow!("`[load] routes` lists 1–{MAX_ROUTES} paths (e.g. [\"/\", \"/cpu\"]), got {}", self.routes.len()),
            ));
        }
        self.routes().map_err(|e| at(crate::scenario_path!("load", "routes"), e))?;
        if !(1..=MAX_CONNECTIONS_PER_ROUTE).contains(&self.connections_per_route) {
            return Err(at(
                crate::scenario_path!("load", "connections_per_route"),
                anyhow!(
                    "`[load] connections_per_route` is 1–{MAX_CONNECTIONS_PER_ROUTE} (each is a thread of the load generator), got {}",
                    self.connections_per_route
                ),
            ));
        }
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(at(crate::scenario_path!("load", "seconds"), anyhow!("`[load] seconds` is 0–3600, got {}", self.seconds)));
        }
        Ok(())
    }

    /// The routes as the load generator takes them ([`crate::run::load::routes`]).
    pub(crate) fn routes(&self) -> Result<Vec<crate::run::load::Route>> {
        crate::run::load::routes(&self.routes)
    }
}


fn default_timeout() -> u64 {
    120
}

/// One collector of a scenario: the kind with its typed options, declared by the collectors.
pub use crate::collect::{CollectorKind, CollectorSpec};

/// `pod_resources`: limits of the app's container in a pod.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PodResources {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

impl PodResources {
    fn validate(&self) -> Result<()> {
        // A Kubernetes quantity: a decimal with an optional SI, binary or exponent suffix.
        let quantity = regex::Regex::new(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$").unwrap();
        for (key, value) in [("cpu", &self.cpu), ("memory", &self.memory)] {
            if let Some(v) = value
                && !quantity.is_match(v)
            {
                return Err(at(crate::scenario_path!("pod_resources", key), anyhow!(
                    "`pod_resources.{key}` is a Kubernetes quantity (\"0.5\", \"500m\", \"2\"; memory \"512Mi\", \"1Gi\"), got {v:?}"
                )));
            }
        }
        Ok(())
    }
}

impl Scenario {
    /// A scenario of `workload` with every other setting at its default (scenarios built in code).
    pub fn new(name: &str, workload: WorkloadRef) -> Scenario {
        Scenario {
            name: name.to_string(),
            description: String::new(),
            workload,
            protocol: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            cwd_writable: false,
            ready: None,
            warmup_s: None,
            seconds: None,
            stop: None,
            truth: None,
            target: None,
            image: None,
            shape: None,
            pod_resources: None,
            capabilities: None,
            timeout_s: default_timeout(),
            expect_crash: false,
            attach: false,
            collectors: Vec::new(),
            expectations: Vec::new(),
            notes: Vec::new(),
            load: None,
            runs: Vec::new(),
            sufficiency: Default::default(),
            origin: None,
        }
    }

    /// Parses and checks a whole scenario before any work: a mistake is an error naming
    /// `file:line:column` (unknown keys, wrong types — never coerced —, unknown collectors,
    /// regexes that do not compile, out-of-range numbers, conflicting settings).
    pub fn from_toml(text: &str, origin: &Path) -> Result<Scenario> {
        let mut scenario: Scenario = toml::from_str(text)
            .map_err(|e| place::explain(text, origin, e.into()))
            .context("not a valid scenario (`cargo xtask init` writes one with every key explained)")?;
        let base = std::path::absolute(origin).ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_default();
        scenario.workload.resolve_against(&base);
        if let Some(cwd) = &mut scenario.cwd {
            *cwd = app::normalized(&base.join(&*cwd));
        }
        scenario.origin = Some(origin.to_path_buf());
        scenario
            .validate()
            .map_err(|e| place::explain(text, origin, e))
            .context("not a valid scenario (`cargo xtask init` writes one with every key explained)")?;
        Ok(scenario)
    }

    /// Whether the app speaks tracelab's protocol: as the scenario says, else when it is one of
    /// the workloads of this repository.
    pub(crate) fn protocol(&self) -> Protocol {
        if let Some(p) = self.protocol {
            return p;
        }
        match &self.workload {
            WorkloadRef::Named(_) => Protocol::Tracelab,
            WorkloadRef::Project { project, .. } => {
                // (workloads/ named here, not through `workload`, which reads this module.)
                let ours = crate::project_root().join("workloads").canonicalize().ok();
                let folder = if project.is_file() { project.parent().map(Path::to_path_buf) } else { Some(project.clone()) };
                let theirs = folder.and_then(|f| f.canonicalize().ok());
                if ours.is_some() && theirs.as_ref().and_then(|t| t.parent()) == ours.as_deref() {
                    Protocol::Tracelab
                } else {
                    Protocol::None
                }
            }
            _ => Protocol::None,
        }
    }

    pub fn load(path: &Path) -> Result<Scenario> {
        Scenario::from_toml(&read_scenario_file(path)?, path)
    }

    /// `scenarios/<name>.toml`, or a path to a TOML file.
    pub fn find(name_or_path: &str) -> Result<Scenario> {
        let as_path = Path::new(name_or_path);
        if name_or_path.ends_with(".toml") || as_path.is_file() {
            return Scenario::load(as_path);
        }
        let path = crate::checkout()?.join("scenarios").join(format!("{name_or_path}.toml"));
        if !path.is_file() {
            let known = list_names().unwrap_or_default().join(", ");
            bail!("no scenario `{name_or_path}` ({} does not exist); known: {known}", path.display());
        }
        Scenario::load(&path)
    }

    fn validate(&self) -> Result<()> {
        use crate::scenario_path as path;
        // The name becomes part of a results folder's name.
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) || self.name.starts_with('.') {
            return Err(at(path!("name"), anyhow!("`name` is letters, digits, `-`, `_` and `.` (it names the results folder), got {:?}", self.name)));
        }
        self.sufficiency.validate().map_err(|e| at(self.sufficiency_key(), e))?;
        if let Some(truth) = &self.truth {
            truth.validate().map_err(|e| at(path!("truth"), e))?;
        }
        if self.warmup_s.is_some_and(|w| !(0.0..=600.0).contains(&w)) {
            return Err(at(path!("warmup_s"), anyhow!("`warmup_s` is 0–600 seconds, got {:?}", self.warmup_s.unwrap_or_default())));
        }
        if self.seconds.is_some_and(|s| !(s > 0.0 && s <= 3600.0)) {
            return Err(at(path!("seconds"), anyhow!("`seconds` is more than 0 and at most 3600, got {:?}", self.seconds.unwrap_or_default())));
        }
        if !(1..=86_400).contains(&self.timeout_s) {
            return Err(at(path!("timeout_s"), anyhow!("`timeout_s` is 1–86400 seconds, got {}", self.timeout_s)));
        }
        if let Some(load) = &self.load {
            load.validate().map_err(|e| at(path!("load"), e))?;
        }
        if self.protocol() == Protocol::Tracelab {
            for (key, set) in [("ready", self.ready.is_some()), ("stop", self.stop.is_some()), ("truth", self.truth.is_some()), ("seconds", self.seconds.is_some())] {
                if set {
                    return Err(at(path!(key), anyhow!("`{key}` is for apps as they are (protocol = \"none\"); tracelab's own workloads signal readiness, stop and truth themselves")));
                }
            }
        }
        if let WorkloadRef::Image { .. } = &self.workload {
            if self.target == Some(crate::run::TargetKind::Host) {
                return Err(at(path!("target"), anyhow!("an `image` workload runs in a container: use target = \"sidecar\" (tools beside it) or \"container\"")));
            }
            if self.stop == Some(Stop::Exit) {
                return Err(at(path!("stop"), anyhow!("`stop = \"exit\"` cannot be used with an `image` workload: the app is its container's pid 1, and its exit ends the tools beside it before they write their data; use \"sigterm\" (the default) or {{ http = \"/path\" }}")));
            }
        }
        if let Some(image) = &self.image {
            crate::host::image::suite(image).map_err(|e| at(path!("image"), e))?;
        }
        if let Some(resources) = &self.pod_resources {
            resources.validate()?;
        }
        if self.collectors.is_empty() {
            bail!("scenario `{}` names no [[collector]]", self.name);
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, c) in self.collectors.iter().enumerate() {
            // Each collector's own option checks (ranges, profiles, event names), at load.
            crate::collect::from_spec(c).map_err(|e| {
                let key = e.downcast_ref::<crate::collect::BadOption>().map(|b| b.key);
                at(key.map_or_else(|| path!("collector", i), |k| path!("collector", i, k)), e)
            })?;
            if let crate::collect::CollectorOptions::Dump(d) = &c.options
                && d.trigger == crate::collect::dump::Trigger::Crash
                && !self.expect_crash
            {
                return Err(at(path!("collector", i, "trigger"), anyhow!("a `dump` collector with `trigger = \"crash\"` waits for the app to crash: set `expect_crash = true` at the top of the scenario")));
            }
            if !names.insert(c.name().to_string()) {
                return Err(at(path!("collector", i), anyhow!("two collectors are named `{}`: give one a `name`", c.name())));
            }
        }
        if self.attach {
            if self.protocol() == Protocol::Tracelab {
                return Err(at(path!("attach"), anyhow!("`attach = true` is for apps as they are (protocol = \"none\"): tracelab's own workloads are started with their collectors' variables")));
            }
            for (i, c) in self.collectors.iter().enumerate() {
                // What a collector can only have at launch, an attached app never got.
                let launch_only = match &c.options {
                    crate::collect::CollectorOptions::Lttng(_) => Some("LTTng needs DOTNET_LTTng=1 at launch"),
                    crate::collect::CollectorOptions::EventPipe(o) if o.startup => Some("`startup = true` needs DOTNET_DiagnosticPorts at launch"),
                    crate::collect::CollectorOptions::Dump(d) if d.trigger == crate::collect::dump::Trigger::Crash => {
                        Some("a crash dump needs DOTNET_DbgEnableMiniDump at launch")
                    }
                    _ => None,
                };
                if let Some(why) = launch_only {
                    return Err(at(path!("collector", i), anyhow!("collector `{}` cannot attach to a running app ({why}): drop `attach = true`, or this collector", c.name())));
                }
            }
        }
        let mut grouped = std::collections::BTreeSet::new();
        for (i, group) in self.runs.iter().enumerate() {
            for c in group {
                if !names.contains(c.as_str()) {
                    return Err(at(path!("runs", i), anyhow!("`runs` names collector `{c}`, which the scenario does not have (it has {})", names.iter().cloned().collect::<Vec<_>>().join(", "))));
                }
                if !grouped.insert(c.clone()) {
                    return Err(at(path!("runs", i), anyhow!("`runs` names collector `{c}` twice: each collector belongs to one run")));
                }
            }
        }
        if !self.runs.is_empty() && grouped.len() != names.len() {
            return Err(at(path!("runs"), anyhow!("`runs` must place every collector in a run (missing: {:?})", names.difference(&grouped.iter().cloned().collect()).collect::<Vec<_>>())));
        }
        for (i, e) in self.expectations.iter().enumerate() {
            // A check's own mistake names its key (`judge::BadKey`): the line to fix, not the
            // `[[expect]]` header above it.
            e.validate(&names).map_err(|err| {
                let key = err.downcast_ref::<judge::BadKey>().map(|b| b.key);
                at(key.map_or_else(|| path!("expect", i), |k| path!("expect", i, k)), err)
            })?;
            for wanted in e.check.judge().truth_paths() {
                let wanted_keys = judge::truth_path_keys(wanted).map_err(|why| at(e.truth_key(i, wanted), anyhow!("{why}")))?;
                // An app as it is has the truth its scenario declares: with a `truth.map`, exactly
                // its keys (and the objects above them); with none, no truth at all.
                if self.protocol() != Protocol::None {
                    continue;
                }
                let declared = match &self.truth {
                    None => Err("the scenario has no `truth`: give one (`truth = { path = …, map = { … } }`) or drop the check".to_string()),
                    Some(t) if t.map.is_empty() => Ok(()),
                    Some(t) if t.map.keys().any(|k| judge::truth_path_keys(k).is_ok_and(|ks| ks.starts_with(&wanted_keys))) => Ok(()),
                    Some(t) => Err(format!("`truth.map` declares {}", t.map.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "))),
                };
                if let Err(why) = declared {
                    return Err(at(e.truth_key(i, wanted), anyhow!("the check reads truth `{wanted}`, which the scenario does not declare: {why}")));
                }
            }
            // A map of counts holds them one level below its path: a deeper key was split at
            // dots that belong to the key (an exception type's namespace).
            for map_path in e.check.judge().truth_maps() {
                let (Some(truth), Ok(map_keys)) = (&self.truth, judge::truth_path_keys(map_path)) else { continue };
                for key in truth.map.keys() {
                    let Ok(keys) = judge::truth_path_keys(key) else { continue };
                    if keys.starts_with(&map_keys) && keys.len() > map_keys.len() + 1 {
                        let rest = keys[map_keys.len()..].join(".");
                        return Err(at(
                            path!("truth", "map", key.as_str()),
                            anyhow!("truth.map key `{key}` nests {} levels below `{map_path}`, whose values are counts by one key each: quote that key, '{map_path}.\"{rest}\"'", keys.len() - map_keys.len()),
                        ));
                    }
                }
            }
        }
        for group in self.run_groups() {
            let env = self.run_env(&group).map_err(|e| at(path!("env"), e))?;
            check_exec_size(&self.args, &env).map_err(|e| at(path!("env"), e))?;
            // The host target points the runtime's perf map and jitdump at the app's TMPDIR,
            // where the collectors read them: a scenario's own path would hide them.
            for key in [crate::run::PERF_MAP_PATH_VAR, "COMPlus_PerfMapJitDumpPath"] {
                if env.contains_key(key) {
                    return Err(at(path!("env"), anyhow!("`env` sets {key}: tracelab places the perf map and jitdump itself (in the app's TMPDIR, where it reads them); drop the key, or set TMPDIR")));
                }
            }
        }
        // Last, so a mistake in the file itself is told first: every file the scenario names
        // exists now, before any build or run (a missing dll once ended as a FAIL mid-run).
        self.referenced_files_exist()
    }

    /// Which `[sufficiency]` key its refusal is about: the first one refused on its own beside
    /// the defaults (the bounds are judge's; this only finds the line to point at).
    fn sufficiency_key(&self) -> Vec<place::Seg> {
        use crate::scenario_path as path;
        let s = &self.sufficiency;
        let d = judge::Sufficiency::default();
        let alone = [
            ("max_lost_ratio", judge::Sufficiency { max_lost_ratio: s.max_lost_ratio, ..d.clone() }),
            ("min_rate_ratio", judge::Sufficiency { min_rate_ratio: s.min_rate_ratio, ..d.clone() }),
            ("min_phase_balance", judge::Sufficiency { min_phase_balance: s.min_phase_balance, ..d.clone() }),
            ("attempts", judge::Sufficiency { attempts: s.attempts, ..d.clone() }),
        ];
        match alone.into_iter().find(|(_, one)| one.validate().is_err()) {
            Some((key, _)) => path!("sufficiency", key),
            None => path!("sufficiency"),
        }
    }

    /// The files and folders the scenario names (relative ones already resolved next to it).
    fn referenced_files_exist(&self) -> Result<()> {
        use crate::scenario_path as path;
        let hint = "(relative paths are next to the scenario file)";
        match &self.workload {
            WorkloadRef::Dll { dll } if !dll.is_file() => {
                let why = if dll.is_dir() { "is a folder, not a file" } else { "does not exist" };
                return Err(at(path!("workload", "dll"), anyhow!("workload dll {} {why} {hint}: build the app first (`dotnet build`), or point `dll` at its output", dll.display())));
            }
            WorkloadRef::Project { project, .. } if !project.exists() => {
                return Err(at(path!("workload", "project"), anyhow!("workload project {} does not exist {hint}: give the folder or the .csproj", project.display())));
            }
            WorkloadRef::Command { command } if command[0].contains('/') && !Path::new(&command[0]).is_file() => {
                return Err(at(path!("workload", "command"), anyhow!("workload program {} does not exist {hint} (a bare name is looked up on PATH)", command[0])));
            }
            _ => {}
        }
        if let Some(cwd) = &self.cwd
            && !cwd.is_dir()
        {
            return Err(at(path!("cwd"), anyhow!("`cwd` {} is not a folder {hint}", cwd.display())));
        }
        // A container target mounts `cwd` into the app's container: never the host's system.
        if let Some(cwd) = &self.cwd
            && let Some(system) = SYSTEM_FOLDERS.iter().find(|s| cwd == Path::new(s) || (**s != "/" && cwd.starts_with(s)))
        {
            return Err(at(
                path!("cwd"),
                anyhow!(
                    "`cwd` {} is the host's own {system}: a container target would mount it into the app's container; give the \
                     app a folder of its own (or leave `cwd` out: the run folder)",
                    cwd.display()
                ),
            ));
        }
        Ok(())
    }
}

/// Host folders a scenario's `cwd` may not be (nor be under, but for `/` itself).
const SYSTEM_FOLDERS: &[&str] = &["/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev"];

impl Scenario {
    /// The app's environment for the run of `group` (collector names): the scenario's `env`,
    /// then the collectors' own `env`. Collectors of one run that disagree on a variable are an
    /// error: one app cannot run both ways.
    pub(crate) fn run_env(&self, group: &[String]) -> Result<BTreeMap<String, String>> {
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
    /// Collectors of one run that skew each other's figures, each named with the measured skew
    /// and the fix: printed before the run and kept among its findings.
    pub fn setup_warnings(&self) -> Vec<String> {
        use crate::collect::CollectorOptions as O;
        let samples_threads = |o: &O| match o {
            O::EventPipe(e) => {
                e.profile.as_deref().is_some_and(|p| p.split(',').any(|p| p.trim() == "thread-time"))
                    || e.providers.as_ref().map(|l| l.items()).unwrap_or_default().iter().any(|p| p.contains("SampleProfiler"))
            }
            O::DotnetTrace(d) => {
                d.profile.as_ref().map(|l| l.items()).unwrap_or_default().iter().any(|p| p.contains("thread-time") || p.contains("cpu-sampling"))
                    || d.providers.as_ref().map(|l| l.items()).unwrap_or_default().iter().any(|p| p.contains("SampleProfiler"))
            }
            _ => false,
        };
        let mut warnings = Vec::new();
        for group in self.run_groups() {
            let members: Vec<&crate::collect::CollectorSpec> =
                self.collectors.iter().filter(|c| group.iter().any(|g| g == c.name())).collect();
            let offcpu = members.iter().find(|c| matches!(c.options, O::PerfOffcpu(_)));
            let sampler = members.iter().find(|c| samples_threads(&c.options));
            if let (Some(off), Some(sp)) = (offcpu, sampler) {
                warnings.push(format!(
                    "`{}` and `{}` (EventPipe's SampleProfiler) share a run: SampleProfiler suspends the runtime about every \
                     millisecond, and perf-offcpu records those suspensions as the stopped threads' blocked time — measured on a \
                     web API, 22 % of its blocked route's time put onto its CPU route. Give each its own run: \
                     `runs = [[\"{}\"], [\"{}\"]]` (the other collectors in either)",
                    off.name(),
                    sp.name(),
                    off.name(),
                    sp.name()
                ));
            }
        }
        warnings
    }

    pub(crate) fn run_groups(&self) -> Vec<Vec<String>> {
        if self.runs.is_empty() {
            vec![self.collectors.iter().map(|c| c.name().to_string()).collect()]
        } else {
            self.runs.clone()
        }
    }
}

/// What execve(2) takes: one argument or `KEY=VALUE` of at most 128 KiB (MAX_ARG_STRLEN), and
/// all of them within ARG_MAX (2 MiB with the default 8 MiB stack) — half of it here, for the
/// environment tracelab passes on and adds. 300,000 env keys failed at launch with `Argument list
/// too long`; now at load.
const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
const MAX_EXEC_BYTES: usize = 1 << 20;

fn check_exec_size(args: &[String], env: &BTreeMap<String, String>) -> Result<()> {
    let mut total = 0;
    for a in args {
        if a.len() > MAX_ARG_BYTES {
            bail!("an `args` item is {} bytes: the kernel takes at most {MAX_ARG_BYTES} per argument", a.len());
        }
        total += a.len() + 1 + std::mem::size_of::<usize>();
    }
    for (k, v) in env {
        let len = k.len() + 1 + v.len();
        if len > MAX_ARG_BYTES {
            bail!("`env` {k} is {len} bytes with its value: the kernel takes at most {MAX_ARG_BYTES} per variable");
        }
        total += len + 1 + std::mem::size_of::<usize>();
    }
    if total > MAX_EXEC_BYTES {
        bail!("`args` and `env` take {total} bytes ({} variables): more than the {MAX_EXEC_BYTES} bytes a process start may use here (the kernel's ARG_MAX, shared with the environment tracelab passes on)", env.len());
    }
    Ok(())
}

/// How large a scenario file may be: the built-in ones are a few KB; without a bound a file
/// linked to /dev/zero was read until memory ran out (2.1 GB when a ulimit stopped it).
pub const MAX_SCENARIO_BYTES: u64 = 4 << 20;

/// A scenario file's text: a regular file (a link to one is fine) of at most
/// [`MAX_SCENARIO_BYTES`], read no further than that even if it grows meanwhile.
fn read_scenario_file(path: &Path) -> Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let meta = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file ({}): a scenario is a TOML file", path.display(), file_kind(&meta));
    }
    let too_big = || anyhow!("{} is larger than {} MB: a scenario is a TOML file of a few KB", path.display(), MAX_SCENARIO_BYTES >> 20);
    if meta.len() > MAX_SCENARIO_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| anyhow!("{} is not UTF-8 text (byte {}): a scenario is a TOML file", path.display(), e.utf8_error().valid_up_to()))
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    let t = meta.file_type();
    if t.is_dir() {
        "a folder"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Names of the scenarios under `scenarios/`.
pub fn list_names() -> Result<Vec<String>> {
    let dir = crate::checkout()?.join("scenarios");
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
    fn a_scenario_file_is_a_regular_file_of_bounded_size() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = format!("{:#}", Scenario::find(zero.to_str().unwrap()).unwrap_err());
        assert!(err.contains(&format!("{} is not a regular file (a character device)", zero.display())), "{err}");
        let big = dir.path().join("big.toml");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_SCENARIO_BYTES + 1).unwrap();
        let err = format!("{:#}", Scenario::load(&big).unwrap_err());
        assert!(err.contains("is larger than 4 MB"), "{err}");
        let folder = dir.path().join("folder.toml");
        std::fs::create_dir(&folder).unwrap();
        assert!(format!("{:#}", Scenario::load(&folder).unwrap_err()).contains("(a folder)"));
    }

    #[test]
    fn perf_offcpu_beside_sampleprofiler_is_named_with_the_fix() {
        let both = "name = \"x\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-offcpu\"\n[[collector]]\nkind = \"eventpipe\"\nprofile = \"thread-time\"\n";
        let w = Scenario::from_toml(both, Path::new("x.toml")).unwrap().setup_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("22 %") && w[0].contains("runs = [[\"perf-offcpu\"], [\"eventpipe\"]]"), "{w:?}");
        let split = format!("runs = [[\"perf-offcpu\"], [\"eventpipe\"]]\n{both}");
        assert!(Scenario::from_toml(&split, Path::new("x.toml")).unwrap().setup_warnings().is_empty());
        let gc_only = both.replace("thread-time", "gc");
        assert!(Scenario::from_toml(&gc_only, Path::new("x.toml")).unwrap().setup_warnings().is_empty());
    }

    #[test]
    fn the_root_route_loads_and_names_itself() {
        let text = "name = \"x\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\n[load]\nroutes = [\"/\", \"/search?q=a=b\"]\nseconds = 2\n";
        let s = Scenario::from_toml(text, Path::new("x.toml")).unwrap();
        let routes = s.load.unwrap().routes().unwrap();
        assert_eq!((routes[0].name.as_str(), routes[0].path.as_str()), ("/", "/"));
        assert_eq!((routes[1].name.as_str(), routes[1].path.as_str()), ("search?q=a=b", "/search?q=a=b"));
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
    fn sufficiency_bounds_and_image_are_typed_and_checked_when_loaded() {
        let base = "name = \"x\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\n";
        let s = Scenario::from_toml(base, Path::new("x.toml")).unwrap();
        assert_eq!(s.sufficiency, judge::Sufficiency { max_lost_ratio: 0.01, min_rate_ratio: 0.5, min_phase_balance: 0.9, attempts: 2 });
        let s = Scenario::from_toml(&format!("{base}[sufficiency]\nmin_rate_ratio = 0.25\n"), Path::new("x.toml")).unwrap();
        assert_eq!((s.sufficiency.max_lost_ratio, s.sufficiency.min_rate_ratio), (0.01, 0.25));
        for (extra, why) in [
            ("[sufficiency]\nmax_lost = 0.1\n", "unknown field `max_lost`"),
            ("[sufficiency]\nmax_lost_ratio = 5\n", "fractions between 0 and 1"),
        ] {
            let err = Scenario::from_toml(&format!("{base}{extra}"), Path::new("x.toml")).unwrap_err();
            assert!(format!("{err:#}").contains(why), "{err:#}");
        }
        let err = Scenario::from_toml(&format!("image = \"sid\"\n{base}"), Path::new("x.toml")).unwrap_err();
        assert!(format!("{err:#}").contains("expected one of bullseye, bookworm, trixie"), "{err:#}");
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
    fn user_workload_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let dll = dir.path().join("My.dll");
        std::fs::write(&dll, b"").unwrap();
        let text = format!("name = \"mine\"\nworkload = {{ dll = {:?} }}\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n", dll.display().to_string());
        let s = Scenario::from_toml(&text, Path::new("mine.toml")).unwrap();
        assert_eq!(s.workload, WorkloadRef::Dll { dll });
        assert_eq!(s.protocol(), Protocol::None);
        match &s.collectors[0].options {
            crate::collect::CollectorOptions::PerfCpu(o) => assert_eq!(o.frequency, 499),
            other => panic!("{other:?}"),
        }
    }
}
