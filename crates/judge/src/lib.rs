//! Judging a run: each expectation of the scenario becomes a [`Check`] comparing what a collector
//! measured with the workload's own truth (or with another collector). Default tolerances are
//! shared/DESIGN.md §4's and are written into every check's `expected`, so a reader never has to
//! guess what a number was held against.
//!
//! One file per kind of check (its options, default name, load-time validation and judging);
//! this file keeps what several kinds share; `sufficiency` says when the data cannot decide a
//! check (inconclusive), `units` how figures are written, [`exit`] the one exit-code table.
//!
//! Invariant: pure functions over the model. Nothing here opens a file, starts a process or reads
//! the scenario file: the harness's expectation types (`scenario::expect`) point here, never the
//! other way, and every figure a check reads comes in through [`Evidence`].

mod agree_count;
mod agree_frames;
mod agree_share;
mod blocked;
mod event_balance;
mod event_count;
mod exceptions;
mod frame;
mod metric;
mod resolved;
mod share;
mod stack_count;
mod stack_depth;
mod sufficiency;
mod units;
mod waker;

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

pub use agree_count::AgreeCountCheck;
pub use agree_frames::{AgreeFramesCheck, FRAMEWORK_ASSEMBLIES};
pub use agree_share::AgreeShareCheck;
pub use blocked::{BlockedSecondsCheck, TimeUnit};
pub use event_balance::EventBalanceCheck;
pub use event_count::{EventCountCheck, FieldValue};
pub use exceptions::ExceptionsCheck;
pub use frame::FrameCheck;
pub use metric::MetricCheck;
pub use resolved::ResolvedCheck;
pub use share::{ShareAtLeastCheck, ShareCheck};
pub use stack_count::StackCountCheck;
pub use stack_depth::StackDepthCheck;
pub use waker::WakerCheck;
pub use sufficiency::{DataQuality, MachineLoad, Starvation, Sufficiency, ThreadRate, TruthClock, apply as apply_sufficiency, inconclusive, lost_callers};
pub use units::{duration_ns, hertz, percent, weight};

use model::{Collection, DsoClass, Frame, MethodName, Sample, Sampling, frame_assembly, merge_code_version};

/// Default tolerances (shared/DESIGN.md §4).
pub const SHARE_TOLERANCE_PTS: f64 = 5.0;
pub const SHARE_MIN_SAMPLES: u64 = 300;
pub const EVENT_COUNT_TOLERANCE: u64 = 2;

/// Which frames of a sample count for a method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareMode {
    /// A sample counts for a method when the method is anywhere on its stack.
    #[default]
    Inclusive,
    /// A sample counts for a method only when the method is its leaf frame.
    Leaf,
}

/// How [`AgreeFramesCheck`] compares method names.
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

/// A load-time mistake in one key of a check's table ([`Judge::validate`]): the scenario loader
/// points at that key's `file:line:column`, not at the `[[expect]]` header above it.
#[derive(Debug)]
pub struct BadKey {
    /// The key as the table spells it (`min`, `matches`).
    pub key: &'static str,
    pub message: String,
}

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BadKey {}

pub(crate) fn bad_key(key: &'static str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadKey { key, message: message.into() })
}

/// A ratio key (`min = 0.9` of named frames, a share's floor) is a fraction of 1: `min = 95`
/// would hold every run to 9500 % and fail it after the work, so it is refused at load.
pub(crate) fn fraction(key: &'static str, value: Option<f64>) -> anyhow::Result<()> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => {
            let hint = if v > 1.0 && v <= 100.0 { format!(" ({} for {v} %)", v / 100.0) } else { String::new() };
            Err(bad_key(key, format!("`{key}` is a ratio between 0 and 1{hint}, got {v}")))
        }
        _ => Ok(()),
    }
}

/// One kind of check: what an `[[expect]]` table of that `kind` holds, without its `name` and
/// `collector` (which every kind shares).
pub trait Judge {
    /// The check's name when the expectation gives none.
    fn default_name(&self) -> String;

    /// Checks made when the scenario loads (regexes compile, settings agree), so a typo fails
    /// before a run rather than after it.
    fn validate(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// The dotted truth paths the check reads, so a scenario that declares its truth (`truth.map`)
    /// is checked against them when it loads.
    fn truth_paths(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Those of [`Judge::truth_paths`] that hold a flat map of counts (`exceptions`: one key per
    /// `Type: message`), so a declared key nesting deeper below one — a key split at its type's
    /// dots — is refused when the scenario loads.
    fn truth_maps(&self) -> Vec<&str> {
        Vec::new()
    }

    /// The collectors the kind names itself; `None` for kinds that read the expectation's
    /// `collector` (default: the first), which the others do not take.
    fn collectors(&self) -> Option<Vec<&str>> {
        None
    }

    /// Whether the check judges proportions of one collector's samples, so that lost events and
    /// a starved sampling rate leave it without the data to decide ([`sufficiency`]).
    fn sampled(&self) -> bool {
        false
    }

    /// Which starvation biases what the check compares ([`sufficiency`]): shares held against a
    /// truth measured on a clock, or two collectors' shares compared. A share bound
    /// (`share_at_least`) or a frame check is not biased: a web app's pool threads are on CPU
    /// part of the time by design.
    fn starvation(&self) -> Starvation {
        Starvation::Unbiased
    }

    /// Samples of `c` whose part in this check's figure could change with the caller their stack
    /// lost to on-stack replacement ([`model::LOST_CALLER`]; [`sufficiency::lost_callers`]):
    /// none for a check that reads no callers.
    fn lost_caller_samples(&self, _c: &Collection) -> u64 {
        0
    }

    /// The check, or why it could not be judged (missing data or truth).
    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String>;
}

/// What a check, a run or a command ended as. A verdict is a promise: `Fail` means the pipeline
/// gave a wrong answer with enough data to say so; a run that lacks the data to decide is
/// `Inconclusive` (with its reason), one whose environment lacks a prerequisite is `Skip`, and
/// one that broke around the pipeline (Docker, an image build, a tool that crashed) is `Error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
    Inconclusive,
    Error,
}

/// Exit codes, one table for every command (README, `cargo xtask --help`).
pub mod exit {
    pub const PASS: u8 = 0;
    pub const FAIL: u8 = 1;
    /// A usage or scenario-file error: nothing ran.
    pub const USAGE: u8 = 2;
    pub const INCONCLUSIVE: u8 = 3;
    /// The environment lacks a prerequisite (a SKIP verdict, or set-up that cannot proceed).
    pub const SKIP: u8 = 4;
    /// Infrastructure: Docker, an image build, a tool that crashed, a results folder that cannot
    /// be written (a full disk).
    pub const ERROR: u8 = 5;
    /// 128 + SIGINT / SIGTERM.
    pub const INTERRUPTED_SIGINT: u8 = 130;
    pub const INTERRUPTED_SIGTERM: u8 = 143;
    /// 128 + SIGPIPE: whoever read the output — stdout or stderr — went away (`… | head`);
    /// stopped quietly, as `cat`, with what the run made removed.
    pub const CLOSED_STDOUT: u8 = 141;
    /// The table as people read it (README and `--help`).
    pub const TABLE: &str = "Exit codes: 0 pass (and skip with --allow-skip) · 1 fail · 2 usage or scenario-file error · \
3 inconclusive (not enough data to decide; the reason is printed) · 4 skip (the environment lacks a prerequisite) · \
5 infrastructure error (Docker, image build, tool crash, a results folder it cannot write) · \
130 / 143 interrupted (SIGINT / SIGTERM) · 141 the output was closed, stdout or stderr (`… | head`)";
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skip => "skip",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Error => "error",
        }
    }
    pub fn upper(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
            Verdict::Inconclusive => "INCONCLUSIVE",
            Verdict::Error => "ERROR",
        }
    }
    /// The process exit code of a command that ended with this verdict ([`exit`]).
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass => exit::PASS,
            Verdict::Fail => exit::FAIL,
            Verdict::Skip => exit::SKIP,
            Verdict::Inconclusive => exit::INCONCLUSIVE,
            Verdict::Error => exit::ERROR,
        }
    }
    /// The verdict of several (a run from its checks, a report cell from its runs): any FAIL
    /// fails; else an infrastructure error; else inconclusive; else skip; else pass.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let rank = |v: Verdict| match v {
            Verdict::Pass => 0,
            Verdict::Skip => 1,
            Verdict::Inconclusive => 2,
            Verdict::Error => 3,
            Verdict::Fail => 4,
        };
        verdicts.into_iter().max_by_key(|v| rank(*v)).unwrap_or(Verdict::Pass)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub expected: String,
    pub measured: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    /// Extra numbers (share error in points, sample counts …) the metrics and reports use.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, f64>,
    /// Lines a reader needs to see why the check came out as it did (the compared top lists …),
    /// too long for `measured`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// Why an `inconclusive` check could not decide (the floor or bound, and what was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Check {
    pub(crate) fn new(name: String, collector: Option<&str>, pass: bool, expected: String, measured: String) -> Check {
        Check {
            name,
            verdict: if pass { Verdict::Pass } else { Verdict::Fail },
            expected,
            measured,
            collector: collector.map(String::from),
            values: BTreeMap::new(),
            details: Vec::new(),
            reason: None,
        }
    }
    pub(crate) fn value(mut self, key: &str, v: f64) -> Check {
        self.values.insert(key.to_string(), v);
        self
    }
}

/// The keys of a truth path, as TOML spells a dotted key: bare keys between dots (`gc.induced`)
/// or double-quoted ones holding any characters (`exceptions."App.Errors.BadInput: no name"`,
/// `\"` and `\\` escaped inside). Quoting is what lets a key hold a dot: an exception's type has
/// its namespace's, and splitting there once made such a truth read as `App ×0`.
pub fn truth_path_keys(path: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut chars = path.chars().enumerate().peekable();
    let at = |col: usize, what: &str| format!("truth path `{path}`, column {}: {what}", col + 1);
    loop {
        let start = chars.peek().map_or(path.chars().count(), |(i, _)| *i);
        let mut key = String::new();
        if chars.peek().is_some_and(|(_, c)| *c == '"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(at(start, "a quoted key is not closed: end it with `\"`")),
                    Some((_, '"')) => break,
                    Some((i, '\\')) => match chars.next() {
                        Some((_, c @ ('"' | '\\'))) => key.push(c),
                        _ => return Err(at(i, "inside quotes only `\\\"` and `\\\\` are escapes")),
                    },
                    Some((_, c)) => key.push(c),
                }
            }
            if let Some((i, c)) = chars.peek().copied().filter(|(_, c)| *c != '.') {
                return Err(at(i, &format!("`{c}` after a quoted key: keys are joined by `.`")));
            }
        } else {
            while let Some((_, c)) = chars.peek().copied().filter(|(_, c)| *c != '.') {
                if c == '"' {
                    return Err(at(start, "a quote inside a bare key: quote the whole key (`a.\"b.c\"`)"));
                }
                key.push(c);
                chars.next();
            }
            if key.is_empty() {
                return Err(at(start, "an empty key (two dots, or a dot at an end)"));
            }
        }
        keys.push(key);
        if chars.next().is_none() {
            return Ok(keys);
        }
    }
}

/// A value from truth.json by truth path ([`truth_path_keys`]: `gc.induced`, `shares.cpu.HotLoop`,
/// `exceptions."App.BadInput: no name"`); `None` when absent or when the path does not parse.
pub fn truth_value<'a>(truth: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    truth_path_keys(path).ok()?.iter().try_fold(truth, |v, key| v.get(key))
}

pub(crate) fn truth_f64(truth: &serde_json::Value, path: &str) -> Result<f64, String> {
    truth_path_keys(path)?;
    truth_value(truth, path)
        .and_then(|v| v.as_f64())
        .ok_or_else(|| format!("truth.json has no number at `{path}`"))
}

/// The merged, display name of a frame used by every pattern match.
pub fn frame_key(frame: &Frame) -> String {
    merge_code_version(&frame.display_name()).to_string()
}

/// Per-class resolution of leaf frames (or of all frames): (total, named).
pub fn resolution(collection: &Collection, leaf_only: bool) -> BTreeMap<DsoClass, (u64, u64)> {
    let mut by_class: BTreeMap<DsoClass, (u64, u64)> = BTreeMap::new();
    for s in &collection.samples {
        let frames: &[Frame] = if leaf_only { s.frames.get(..1).unwrap_or(&[]) } else { &s.frames };
        for f in frames {
            let e = by_class.entry(f.class).or_default();
            e.0 += 1;
            if model::has_symbol(f) {
                e.1 += 1;
            }
        }
    }
    by_class
}

/// Which of `among` a sample counts for: in leaf mode its leaf; in inclusive mode the matching
/// frame nearest the leaf (so a hot method called from another compared method counts once).
/// Samples of `c` with a lost caller whose share attribution (the leafmost `among` match) is not
/// settled by the frames leafward of the loss: only those could count for another method had the
/// caller been there. (cpu-bound's OSR'd loops are themselves the leaf: their lost callers change
/// nothing of a share among them; spin-two's `Burn` lost `Alpha` or `Beta`, which are the share.)
pub(crate) fn unsettled_by_lost_caller(c: &Collection, among: &[String], mode: ShareMode) -> u64 {
    if mode == ShareMode::Leaf {
        return 0;
    }
    let Ok(among_re) = among.iter().map(|p| Regex::new(p)).collect::<Result<Vec<_>, _>>() else { return 0 };
    c.samples
        .iter()
        .filter(|s| {
            let Some(lost) = s.frames.iter().position(|f| f.name.as_deref() == Some(model::LOST_CALLER)) else { return false };
            !s.frames[..lost].iter().any(|f| {
                let key = frame_key(f);
                among_re.iter().any(|re| re.is_match(&key))
            })
        })
        .count() as u64
}

/// Samples of `c` with a lost caller at all (checks that read whole stacks).
pub(crate) fn with_lost_caller(c: &Collection) -> u64 {
    c.samples.iter().filter(|s| s.frames.iter().any(|f| f.name.as_deref() == Some(model::LOST_CALLER))).count() as u64
}

fn attribute(sample: &Sample, among: &[Regex], mode: ShareMode) -> Option<usize> {
    let frames = match mode {
        ShareMode::Leaf => sample.frames.get(..1).unwrap_or(&[]),
        ShareMode::Inclusive => &sample.frames[..],
    };
    frames.iter().find_map(|f| {
        let key = frame_key(f);
        among.iter().position(|re| re.is_match(&key))
    })
}

/// Samples of one sampler tick: SampleProfiler walks every managed thread at each tick, so their
/// times lie within microseconds; a tick interrupted by the scheduler spreads a little more.
const SAME_TICK_NS: u64 = 200_000;

/// No tick stands for more than this: a longer silence of the whole sampler is a pause of the
/// session, not time its samples describe.
const MAX_TICK_NS: u64 = 1_000_000_000;

/// What each sample of `c` stands for in a share, in sample order. Its own weight, except for a
/// wall-clock sampler ([`Sampling::WallClock`]: EventPipe's SampleProfiler), whose tick rate
/// follows the machine's load — a phase sampled at 500 Hz beside one at 800 Hz, or one in which
/// the starved sampler ticked every 40 ms instead of every 1 ms, would count for less than its
/// time. There a sample stands for the time around its tick: half the way to the sampler's
/// previous tick plus half the way to its next (any thread's: a thread not sampled at a tick was
/// not there, while a tick of no thread is the sampler's own delay). On 3 runs of a two-phase job
/// whose second phase ran beside 4 CPU hogs, counted shares were 3.2, 3.3 and 17.5 pts off the
/// job's stopwatch; weighted, 0.2, 0.1 and 0.7 pts.
pub fn sample_weights(c: &Collection) -> Vec<u64> {
    if c.sampling != Sampling::WallClock || c.samples.is_empty() {
        return c.samples.iter().map(|s| s.weight).collect();
    }
    let mut times: Vec<u64> = c.samples.iter().map(|s| s.time_ns).collect();
    times.sort_unstable();
    // The first time of each tick.
    let mut ticks: Vec<u64> = Vec::new();
    let mut last = None;
    for t in times {
        if last.is_none_or(|l: u64| t - l >= SAME_TICK_NS) {
            ticks.push(t);
        }
        last = Some(t);
    }
    if ticks.len() < 2 {
        return c.samples.iter().map(|s| s.weight).collect();
    }
    let around = |k: usize| -> u64 {
        let before = if k > 0 { ticks[k] - ticks[k - 1] } else { ticks[1] - ticks[0] };
        let after = if k + 1 < ticks.len() { ticks[k + 1] - ticks[k] } else { before };
        ((before.min(MAX_TICK_NS) + after.min(MAX_TICK_NS)) / 2).max(1)
    };
    c.samples
        .iter()
        .map(|s| {
            // The tick a sample belongs to: the last tick that started at or before it.
            let k = ticks.partition_point(|&t| t <= s.time_ns).saturating_sub(1);
            around(k)
        })
        .collect()
}

/// Weighted share of `method` among `among` ([`sample_weights`]); returns (share, denominator
/// samples, denominator weight).
pub fn share(
    collection: &Collection,
    method: &str,
    among: &[String],
    mode: ShareMode,
    sample_kind: Option<&str>,
) -> Result<(f64, u64, u64), String> {
    let method_re = Regex::new(method).map_err(|e| e.to_string())?;
    let among_re: Vec<Regex> = among.iter().map(|p| Regex::new(p)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    // The method itself must be one of the compared set; find which.
    let target = among.iter().position(|p| p == method).or_else(|| {
        among_re.iter().position(|re| re.as_str() == method_re.as_str())
    });
    let target = target.ok_or_else(|| format!("`{method}` must be one of `among` {among:?}"))?;
    let (mut hit, mut all, mut samples) = (0u64, 0u64, 0u64);
    let weights = sample_weights(collection);
    for (s, weight) in collection.samples.iter().zip(weights) {
        if let Some(kind) = sample_kind {
            if s.kind.as_deref() != Some(kind) {
                continue;
            }
        }
        if let Some(i) = attribute(s, &among_re, mode) {
            all += weight;
            samples += 1;
            if i == target {
                hit += weight;
            }
        }
    }
    if all == 0 {
        return Ok((0.0, 0, 0));
    }
    Ok((hit as f64 / all as f64, samples, all))
}

/// Events named `event` (a `_Vn` suffix on either side is ignored), optionally of a provider.
pub fn count_events(collection: &Collection, event: &str, provider: Option<&str>) -> u64 {
    let want = strip_version(event);
    collection
        .events
        .iter()
        .filter(|e| strip_version(&e.name) == want)
        .filter(|e| provider.is_none_or(|p| e.provider.to_ascii_lowercase().contains(&p.to_ascii_lowercase())))
        .count() as u64
}

/// The collection's events in the measured window of its launch ([`Collection::measured_ns`]),
/// what a workload's truth counts, as a collection of events alone. Every event where the window
/// is unknown, or where it would leave none of them (their clock would not be the run's).
pub(crate) fn measured_events(c: &Collection) -> Collection {
    let kept = events_in(c, c.measured_ns);
    if kept.events.is_empty() { events_in(c, None) } else { kept }
}

/// The collection's events recorded within `span` (CLOCK_MONOTONIC ns, ends included; every
/// event when `None`), as a collection of events alone: what event checks compare.
pub(crate) fn events_in(c: &Collection, span: Option<(u64, u64)>) -> Collection {
    Collection {
        collector: c.collector.clone(),
        events: c.events.iter().filter(|e| span.is_none_or(|(from, to)| (from..=to).contains(&e.time_ns))).cloned().collect(),
        lost_events: c.lost_events,
        metrics: c.metrics.clone(),
        ..Default::default()
    }
}

pub fn strip_version(name: &str) -> &str {
    match name.rfind("_V") {
        Some(i) if name[i + 2..].chars().all(|c| c.is_ascii_digit()) && i + 2 < name.len() => &name[..i],
        _ => name,
    }
}

/// Exceptions by `"type: message"`, from ExceptionThrown events.
pub fn exceptions_by_type_message(collection: &Collection) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for e in collection.events.iter().filter(|e| strip_version(&e.name) == "ExceptionThrown") {
        let ty = e.fields.get("ExceptionType").and_then(|v| v.as_str()).unwrap_or("?");
        let msg = e.fields.get("ExceptionMessage").and_then(|v| v.as_str()).unwrap_or("");
        *map.entry(format!("{ty}: {msg}")).or_insert(0) += 1;
    }
    map
}

/// One method of a collector's ranking (see [`rank_methods`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RankedMethod {
    /// The name it is compared by (code versions merged; see [`NameMatch`]).
    pub key: String,
    /// Sample weight counted for it.
    pub weight: u64,
    /// Of that, the weight of frames named from a ReadyToRun image.
    pub r2r_weight: u64,
}

impl RankedMethod {
    /// Named mostly from ReadyToRun images (at least half its weight).
    pub fn is_r2r(&self) -> bool {
        self.r2r_weight * 2 >= self.weight && self.r2r_weight > 0
    }
}

/// The comparison key of a managed frame, or `None` when it is unnamed or not a method.
fn method_key(frame: &Frame, names: NameMatch) -> Option<String> {
    name_key(merge_code_version(frame.name.as_deref()?), names)
}

/// The comparison key of a method name whose code-version tags are merged away.
fn name_key(name: &str, names: NameMatch) -> Option<String> {
    match names {
        NameMatch::Exact => Some(name.to_string()),
        NameMatch::MethodAndArity => MethodName::parse(name).map(|m| m.spelling_free_key()),
    }
}

/// Managed methods of assemblies matching `assembly`, by sample weight, heaviest first (ties by
/// name, so a ranking is reproducible). Returns the ranking and the weight of the samples counted.
pub fn rank_methods(
    collection: &Collection,
    assembly: &Regex,
    mode: ShareMode,
    names: NameMatch,
    sample_kind: Option<&str>,
) -> (Vec<RankedMethod>, u64) {
    let mut by_key: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut counted = 0u64;
    // Frames of managed methods, leaf first. Named JIT-class frames that are no method (the
    // runtime's stubs and write barriers in the perf map) are passed over like native helpers,
    // and so are the GC-suspension poll's (where a sampler stops a thread); an unnamed managed
    // frame stays, so a frame nothing could name is never replaced by its caller.
    let method_frame = |f: &&Frame| {
        matches!(f.class, DsoClass::Jit | DsoClass::R2r)
            && f.name.as_deref().is_none_or(|n| {
                MethodName::parse(merge_code_version(n)).is_some_and(|m| !m.is_gc_suspension_poll())
            })
    };
    let wanted = |f: &Frame| frame_assembly(f).is_some_and(|a| assembly.is_match(&a));
    for s in &collection.samples {
        if sample_kind.is_some_and(|k| s.kind.as_deref() != Some(k)) {
            continue;
        }
        let frames: Vec<&Frame> = match mode {
            ShareMode::Leaf => s.frames.iter().find(method_frame).filter(|f| wanted(f)).into_iter().collect(),
            ShareMode::Inclusive => s.frames.iter().filter(method_frame).filter(|f| wanted(f)).collect(),
        };
        let mut seen: Vec<String> = Vec::new();
        for f in frames {
            let Some(key) = method_key(f, names) else { continue };
            // A recursive method counts once per sample in inclusive mode.
            if seen.contains(&key) {
                continue;
            }
            let e = by_key.entry(key.clone()).or_default();
            e.0 += s.weight;
            if f.class == DsoClass::R2r {
                e.1 += s.weight;
            }
            seen.push(key);
        }
        if !seen.is_empty() {
            counted += s.weight;
        }
    }
    let mut ranked: Vec<RankedMethod> =
        by_key.into_iter().map(|(key, (weight, r2r_weight))| RankedMethod { key, weight, r2r_weight }).collect();
    ranked.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.key.cmp(&b.key)));
    (ranked, counted)
}

/// Every method key a collection knows: its frames' (any position, any sample kind) and those of
/// the names its symbol source listed without a sample ([`Collection::method_names`]).
pub(crate) fn known_method_keys(collection: &Collection, names: NameMatch) -> std::collections::HashSet<String> {
    let listed = collection.method_names.iter().filter_map(|n| name_key(n, names));
    collection.samples.iter().flat_map(|s| &s.frames).filter_map(|f| method_key(f, names)).chain(listed).collect()
}

/// Everything an expectation may read.
pub struct Evidence<'a> {
    pub collections: &'a [Collection],
    /// The truth of the (first) run.
    pub truth: &'a serde_json::Value,
    /// Where collectors ran in separate runs: each collector's own run's truth.
    pub truths: &'a BTreeMap<String, serde_json::Value>,
    pub metrics: &'a BTreeMap<String, f64>,
}

impl Evidence<'_> {
    pub(crate) fn truth_for(&self, collector: &str) -> &serde_json::Value {
        self.truths.get(collector).unwrap_or(self.truth)
    }

    /// The collection of collector `name` (default: the first), or why there is none.
    pub(crate) fn read(&self, name: Option<&str>) -> Result<&Collection, String> {
        match name {
            Some(n) => self.collections.iter().find(|c| c.collector == n),
            None => self.collections.first(),
        }
        .ok_or_else(|| format!("no data from collector `{}`", name.unwrap_or("(first)")))
    }
}

/// Judges one expectation: `name` and `collector` are the expectation's own (absent: the kind's
/// default name, the first collector). A missing collection or truth value is a failed check that
/// says so.
pub fn evaluate(name: Option<&str>, collector: Option<&str>, check: &dyn Judge, ev: &Evidence) -> Check {
    let name = name.map_or_else(|| check.default_name(), String::from);
    check
        .judge(name.clone(), collector, ev)
        .unwrap_or_else(|why| Check::new(name, collector, false, "evaluable".into(), why))
}

pub(crate) fn bounds_text(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("between {a} and {b}"),
        (Some(a), None) => format!("≥ {a}"),
        (None, Some(b)) => format!("≤ {b}"),
        (None, None) => "any".into(),
    }
}

pub(crate) fn within(v: f64, min: Option<f64>, max: Option<f64>) -> bool {
    min.is_none_or(|m| v >= m) && max.is_none_or(|m| v <= m)
}

/// Serde defaults shared by several kinds.
pub(crate) fn yes() -> bool {
    true
}
pub(crate) fn two() -> u64 {
    2
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small in-memory collections for the kinds' tests.
    use super::*;
    use model::{Event, Value};

    pub fn frame(name: &str, class: DsoClass) -> Frame {
        Frame { name: Some(name.into()), dso: None, class, addr: 0 }
    }

    pub fn framed(name: &str, class: DsoClass, dso: &str) -> Frame {
        Frame { name: Some(name.into()), dso: Some(dso.into()), class, addr: 0 }
    }

    pub fn sample(frames: Vec<Frame>) -> Sample {
        Sample::new(1, 1, 0, frames)
    }

    /// `n` samples whose stacks are `frames` (leaf first).
    pub fn push(c: &mut Collection, n: usize, frames: Vec<Frame>) {
        for _ in 0..n {
            c.samples.push(sample(frames.clone()));
        }
    }

    /// A runtime event, with the fields of an `E: m` exception.
    pub fn event(name: &str) -> Event {
        Event {
            provider: "DotNETRuntime".into(),
            name: name.into(),
            id: None,
            version: None,
            time_ns: 0,
            pid: 1,
            tid: 1,
            fields: [("ExceptionType".to_string(), Value::Str("E".into())), ("ExceptionMessage".to_string(), Value::Str("m".into()))].into(),
            frames: Vec::new(),
        }
    }

    /// Judges `check` (no name, first collector) against `collections` and one run's truth.
    pub fn evaluate_on(check: &dyn Judge, collections: &[Collection], truth: serde_json::Value) -> Check {
        let ev = Evidence { collections, truth: &truth, truths: &BTreeMap::new(), metrics: &BTreeMap::new() };
        evaluate(None, None, check, &ev)
    }

    /// Judges `check` against a run's metrics alone.
    pub fn evaluate_on_metrics(check: &dyn Judge, metrics: &BTreeMap<String, f64>) -> Check {
        evaluate_on_metrics_and_truth(check, metrics, serde_json::json!({}))
    }

    /// Judges `check` against a run's metrics and truth.
    pub fn evaluate_on_metrics_and_truth(check: &dyn Judge, metrics: &BTreeMap<String, f64>, truth: serde_json::Value) -> Check {
        evaluate(None, None, check, &Evidence { collections: &[], truth: &truth, truths: &BTreeMap::new(), metrics })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{frame, framed, push, sample};
    use super::*;

    #[test]
    fn share_merges_code_versions_and_counts_nearest_match() {
        let mut c = Collection::new("perf-cpu");
        for _ in 0..7 {
            c.samples.push(sample(vec![frame("W::HotLoop()[OptimizedTier1]", DsoClass::Jit), frame("W::Run()", DsoClass::Jit)]));
        }
        for _ in 0..3 {
            c.samples.push(sample(vec![frame("W::ColdLoop()[QuickJitted]", DsoClass::Jit)]));
        }
        c.samples.push(sample(vec![frame("other", DsoClass::Libc)]));
        let among = vec!["::HotLoop\\(".to_string(), "::ColdLoop\\(".to_string()];
        let (s, n, _) = share(&c, "::HotLoop\\(", &among, ShareMode::Leaf, None).unwrap();
        assert_eq!(n, 10);
        assert!((s - 0.7).abs() < 1e-9);
    }

    #[test]
    fn truth_paths() {
        let t = serde_json::json!({"gc": {"induced": 10}});
        assert_eq!(truth_value(&t, "gc.induced").and_then(|v| v.as_u64()), Some(10));
        assert!(truth_value(&t, "gc.missing").is_none());
        let t = serde_json::json!({"exceptions": {"App.Errors.Bad: no \"name\"": 2}});
        assert_eq!(truth_value(&t, r#"exceptions."App.Errors.Bad: no \"name\"""#).and_then(|v| v.as_u64()), Some(2));
        assert!(truth_value(&t, "exceptions.App.Errors.Bad: no name").is_none());
    }

    #[test]
    fn truth_path_keys_are_bare_or_quoted_and_mistakes_name_the_column() {
        let keys = |p: &str| truth_path_keys(p);
        assert_eq!(keys("gc.induced").unwrap(), ["gc", "induced"]);
        assert_eq!(keys(r#"a."b.c: d"."e""#).unwrap(), ["a", "b.c: d", "e"]);
        assert_eq!(keys(r#""x\\y\"z""#).unwrap(), [r#"x\y"z"#]);
        assert_eq!(keys(r#""""#).unwrap(), [""]);
        for (bad, why) in [
            ("a..b", "column 3: an empty key"),
            ("a.", "column 3: an empty key"),
            ("", "column 1: an empty key"),
            (r#"a."b"#, "column 3: a quoted key is not closed"),
            (r#"a."b"c"#, "column 6: `c` after a quoted key"),
            (r#"a.b"c""#, "column 3: a quote inside a bare key"),
            (r#""\n""#, "column 2: inside quotes only"),
        ] {
            let err = keys(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
    const CORELIB: &str = "/d/System.Private.CoreLib.dll";

    fn perf_name(method: &str) -> String {
        format!("void [System.Private.CoreLib] System.Demo::{method}(int32)")
    }

    #[test]
    fn ranking_takes_the_managed_method_nearest_the_leaf() {
        let mut c = Collection::new("perf-cpu");
        let native = framed("memmove", DsoClass::Libc, "/lib/libc.so.6");
        let stub = framed("stub JIT_WriteBarrier", DsoClass::Jit, "//anon");
        let poll = framed("System.Threading.Thread::<PollGC>g__PollGCWorker|67_0()", DsoClass::R2r, "System.Private.CoreLib");
        let hot = framed(&perf_name("Hot"), DsoClass::R2r, CORELIB);
        let hot_jit = framed(&format!("{}[OptimizedTier1]", perf_name("Hot")), DsoClass::Jit, "//anon");
        let app = framed("void [app] App::Main()", DsoClass::Jit, "//anon");
        // Native helpers, stubs and the GC poll below a framework method count for it.
        push(&mut c, 3, vec![native.clone(), stub.clone(), poll.clone(), hot.clone(), app.clone()]);
        // Code versions merge; R2R weight is tracked per method.
        push(&mut c, 1, vec![hot_jit, app.clone()]);
        // App code nearest the leaf: the sample is not the framework's.
        push(&mut c, 5, vec![app.clone(), hot.clone()]);
        // An unnamed managed frame is not replaced by its caller.
        push(&mut c, 2, vec![Frame { name: None, dso: Some(CORELIB.into()), class: DsoClass::R2r, addr: 1 }, hot.clone()]);
        let re = Regex::new(FRAMEWORK_ASSEMBLIES).unwrap();
        let (ranked, counted) = rank_methods(&c, &re, ShareMode::Leaf, NameMatch::Exact, None);
        assert_eq!(counted, 4);
        assert_eq!(ranked, vec![RankedMethod { key: perf_name("Hot"), weight: 4, r2r_weight: 3 }]);
        assert!(ranked[0].is_r2r());
        // Inclusive: a method counts once per sample, however often it recurses.
        let mut r = Collection::new("perf-cpu");
        push(&mut r, 2, vec![hot.clone(), hot.clone(), framed(&perf_name("Outer"), DsoClass::Jit, "//anon")]);
        let (ranked, counted) = rank_methods(&r, &re, ShareMode::Inclusive, NameMatch::Exact, None);
        assert_eq!(counted, 2);
        assert_eq!(ranked.iter().map(|m| (m.key.as_str(), m.weight)).collect::<Vec<_>>(), vec![
            (perf_name("Hot").as_str(), 2),
            (perf_name("Outer").as_str(), 2)
        ]);
    }
}
