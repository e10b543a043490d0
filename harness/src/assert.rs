//! Judging a run: each expectation of the scenario becomes a [`Check`] comparing what a collector
//! measured with the workload's own truth (or with another collector). Default tolerances are
//! shared/DESIGN.md §4's and are written into every check's `expected`, so a reader never has to
//! guess what a number was held against.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::model::{Collection, DsoClass, Frame, MethodName, Sample, frame_assembly, merge_code_version};
use crate::scenario::{Expectation, NameMatch, ShareMode};

/// Default tolerances (shared/DESIGN.md §4).
pub const SHARE_TOLERANCE_PTS: f64 = 5.0;
pub const SHARE_MIN_SAMPLES: u64 = 300;
pub const EVENT_COUNT_TOLERANCE: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skip => "skip",
        }
    }
    pub fn upper(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
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
}

impl Check {
    fn new(name: String, collector: Option<&str>, pass: bool, expected: String, measured: String) -> Check {
        Check {
            name,
            verdict: if pass { Verdict::Pass } else { Verdict::Fail },
            expected,
            measured,
            collector: collector.map(String::from),
            values: BTreeMap::new(),
            details: Vec::new(),
        }
    }
    fn value(mut self, key: &str, v: f64) -> Check {
        self.values.insert(key.to_string(), v);
        self
    }
}

/// A value from truth.json by dotted path (`gc.induced`, `shares.cpu.HotLoop`).
pub fn truth_value<'a>(truth: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(truth, |v, key| v.get(key))
}

fn truth_f64(truth: &serde_json::Value, path: &str) -> Result<f64, String> {
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
            if f.name.is_some() {
                e.1 += 1;
            }
        }
    }
    by_class
}

fn class_ratio(res: &BTreeMap<DsoClass, (u64, u64)>, class: &str) -> Result<(u64, u64), String> {
    let classes: Vec<DsoClass> = match class {
        "managed" => vec![DsoClass::Jit, DsoClass::R2r],
        other => vec![DsoClass::parse(other).ok_or_else(|| format!("unknown DSO class `{other}`"))?],
    };
    Ok(classes.iter().fold((0, 0), |acc, c| {
        let (t, n) = res.get(c).copied().unwrap_or_default();
        (acc.0 + t, acc.1 + n)
    }))
}

/// Which of `among` a sample counts for: in leaf mode its leaf; in inclusive mode the matching
/// frame nearest the leaf (so a hot method called from another compared method counts once).
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

/// Weighted share of `method` among `among`; returns (share, denominator samples, denominator weight).
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
    for s in &collection.samples {
        if let Some(kind) = sample_kind {
            if s.kind.as_deref() != Some(kind) {
                continue;
            }
        }
        if let Some(i) = attribute(s, &among_re, mode) {
            all += s.weight;
            samples += 1;
            if i == target {
                hit += s.weight;
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

fn strip_version(name: &str) -> &str {
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
fn known_method_keys(collection: &Collection, names: NameMatch) -> std::collections::HashSet<String> {
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
    fn truth_for(&self, collector: &str) -> &serde_json::Value {
        self.truths.get(collector).unwrap_or(self.truth)
    }

    fn collection(&self, name: Option<&str>) -> Option<&Collection> {
        match name {
            Some(n) => self.collections.iter().find(|c| c.collector == n),
            None => self.collections.first(),
        }
    }
}

/// Evaluates one expectation. A missing collection or truth value is a failed check that says so.
pub fn evaluate(exp: &Expectation, ev: &Evidence) -> Check {
    match evaluate_inner(exp, ev) {
        Ok(c) => c,
        Err(why) => Check::new(default_name(exp), exp.collector(), false, "evaluable".into(), why),
    }
}

fn default_name(exp: &Expectation) -> String {
    match exp {
        Expectation::Frame { name, pattern, present, .. } => name.clone().unwrap_or_else(|| {
            format!("frame {} `{pattern}`", if *present { "present" } else { "absent" })
        }),
        Expectation::Share { name, method, .. } => name.clone().unwrap_or_else(|| format!("share of `{method}`")),
        Expectation::ShareAtLeast { name, method, .. } => {
            name.clone().unwrap_or_else(|| format!("share of `{method}` at least"))
        }
        Expectation::Resolved { name, class, .. } => name.clone().unwrap_or_else(|| format!("resolved {class} frames")),
        Expectation::EventCount { name, event, .. } => name.clone().unwrap_or_else(|| format!("{event} count")),
        Expectation::EventBalance { name, a, b, .. } => name.clone().unwrap_or_else(|| format!("{a} vs {b} balance")),
        Expectation::Exceptions { name, .. } => name.clone().unwrap_or_else(|| "exceptions by type and message".into()),
        Expectation::Metric { name, metric, .. } => name.clone().unwrap_or_else(|| format!("metric {metric}")),
        Expectation::AgreeCount { name, event, collectors, .. } => {
            name.clone().unwrap_or_else(|| format!("{event} count agrees across {}", collectors.join(", ")))
        }
        Expectation::AgreeFrames { name, collectors, top, .. } => {
            name.clone().unwrap_or_else(|| format!("top {top} methods agree across {}", collectors.join(", ")))
        }
    }
}

fn bounds_text(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("between {a} and {b}"),
        (Some(a), None) => format!("≥ {a}"),
        (None, Some(b)) => format!("≤ {b}"),
        (None, None) => "any".into(),
    }
}

fn within(v: f64, min: Option<f64>, max: Option<f64>) -> bool {
    min.is_none_or(|m| v >= m) && max.is_none_or(|m| v <= m)
}

fn evaluate_inner(exp: &Expectation, ev: &Evidence) -> Result<Check, String> {
    let name = default_name(exp);
    let coll = |c: Option<&str>| {
        ev.collection(c).ok_or_else(|| format!("no data from collector `{}`", c.unwrap_or("(first)")))
    };
    Ok(match exp {
        Expectation::Frame { collector, pattern, present, leaf_only, min_share, tid_truth, sample_kind, .. } => {
            let c = coll(collector.as_deref())?;
            let re = Regex::new(pattern).map_err(|e| e.to_string())?;
            let tid = tid_truth.as_deref().map(|p| truth_f64(ev.truth_for(&c.collector), p)).transpose()?.map(|t| t as u32);
            let (mut hit, mut total) = (0u64, 0u64);
            let kind_ok = |s: &Sample| sample_kind.as_deref().is_none_or(|k| s.kind.as_deref() == Some(k));
            for s in c.samples.iter().filter(|s| tid.is_none_or(|t| s.tid == t) && kind_ok(s)) {
                total += s.weight;
                let frames = if *leaf_only { s.frames.get(..1).unwrap_or(&[]) } else { &s.frames[..] };
                if frames.iter().any(|f| re.is_match(&frame_key(f))) {
                    hit += s.weight;
                }
            }
            let share = if total > 0 { hit as f64 / total as f64 } else { 0.0 };
            let pass = if *present {
                hit > 0 && min_share.is_none_or(|m| share >= m)
            } else {
                hit == 0
            };
            let mut expected = match (present, min_share) {
                (true, Some(m)) => format!("in ≥ {:.1} % of sample weight", m * 100.0),
                (true, None) => "present".into(),
                (false, _) => "absent".into(),
            };
            if let Some(t) = tid {
                expected.push_str(&format!(" (thread {t} only)"));
            }
            if let Some(k) = sample_kind {
                expected.push_str(&format!(" ({k} samples only)"));
            }
            Check::new(name, collector.as_deref().or(Some(&c.collector)), pass, expected,
                format!("in {hit} of {total} sample weight ({:.1} %)", share * 100.0))
            .value("share", share)
        }
        Expectation::Share { collector, method, among, truth, mode, sample_kind, tolerance_pts, min_samples, .. } => {
            let c = coll(collector.as_deref())?;
            let truth_share = truth_f64(ev.truth_for(&c.collector), truth)?;
            let (measured, samples, _) = share(c, method, among, *mode, sample_kind.as_deref())?;
            let tol = tolerance_pts.unwrap_or(SHARE_TOLERANCE_PTS);
            let min_n = min_samples.unwrap_or(SHARE_MIN_SAMPLES);
            let err_pts = (measured - truth_share).abs() * 100.0;
            let pass = samples >= min_n && err_pts <= tol;
            Check::new(
                name,
                Some(&c.collector),
                pass,
                format!("{:.1} % ± {tol} pts (truth `{truth}`), ≥ {min_n} samples", truth_share * 100.0),
                format!("{:.1} % over {samples} samples (error {err_pts:.1} pts)", measured * 100.0),
            )
            .value("share", measured)
            .value("truth", truth_share)
            .value("error_pts", err_pts)
            .value("samples", samples as f64)
        }
        Expectation::ShareAtLeast { collector, method, among, min, mode, sample_kind, min_samples, .. } => {
            let c = coll(collector.as_deref())?;
            let (measured, samples, _) = share(c, method, among, *mode, sample_kind.as_deref())?;
            let min_n = min_samples.unwrap_or(SHARE_MIN_SAMPLES);
            Check::new(
                name,
                Some(&c.collector),
                samples >= min_n && measured >= *min,
                format!("≥ {:.1} %, ≥ {min_n} samples", min * 100.0),
                format!("{:.1} % over {samples} samples", measured * 100.0),
            )
            .value("share", measured)
            .value("samples", samples as f64)
        }
        Expectation::Resolved { collector, class, min, max, leaf_only, .. } => {
            let c = coll(collector.as_deref())?;
            let res = resolution(c, *leaf_only);
            let (total, named) = class_ratio(&res, class)?;
            let ratio = if total > 0 { named as f64 / total as f64 } else { 0.0 };
            // No frames of the class at all proves nothing: a ratio needs a denominator.
            let pass = total > 0 && within(ratio, *min, *max);
            Check::new(
                name,
                Some(&c.collector),
                pass,
                format!("ratio {} over > 0 {} frames", bounds_text(*min, *max), if *leaf_only { "leaf" } else { "all" }),
                format!("{named} of {total} named ({:.1} %)", ratio * 100.0),
            )
            .value("ratio", ratio)
            .value("frames", total as f64)
        }
        Expectation::EventCount { collector, event, provider, min, max, at_least_truth, equals_truth, tolerance, .. } => {
            let c = coll(collector.as_deref())?;
            let n = count_events(c, event, provider.as_deref());
            let mut pass = within(n as f64, min.map(|v| v as f64), max.map(|v| v as f64));
            let mut expected = vec![];
            if min.is_some() || max.is_some() {
                expected.push(bounds_text(min.map(|v| v as f64), max.map(|v| v as f64)));
            }
            if let Some(path) = at_least_truth {
                let t = truth_f64(ev.truth_for(&c.collector), path)?;
                pass &= n as f64 >= t;
                expected.push(format!("≥ {t} (truth `{path}`)"));
            }
            if let Some(path) = equals_truth {
                let t = truth_f64(ev.truth_for(&c.collector), path)?;
                let tol = tolerance.unwrap_or(EVENT_COUNT_TOLERANCE);
                pass &= (n as f64 - t).abs() <= tol as f64;
                expected.push(format!("{t} ± {tol} (truth `{path}`)"));
            }
            if n == 0 && min.is_none() && at_least_truth.is_none() && equals_truth.is_none() {
                // "Never pass on zero": a count with no lower bound still has to see something.
                pass = false;
                expected.push("> 0".into());
            }
            Check::new(name, Some(&c.collector), pass, expected.join(" and "), n.to_string()).value("count", n as f64)
        }
        Expectation::EventBalance { collector, a, b, max_diff, .. } => {
            let c = coll(collector.as_deref())?;
            let (na, nb) = (count_events(c, a, None), count_events(c, b, None));
            let diff = na.abs_diff(nb);
            Check::new(
                name,
                Some(&c.collector),
                na > 0 && nb > 0 && diff <= *max_diff,
                format!("|{a} − {b}| ≤ {max_diff}, both > 0"),
                format!("{a} {na}, {b} {nb} (diff {diff})"),
            )
        }
        Expectation::Exceptions { collector, truth, type_pattern, .. } => {
            let c = coll(collector.as_deref())?;
            let want = truth_value(ev.truth_for(&c.collector), truth)
                .and_then(|v| v.as_object())
                .ok_or_else(|| format!("truth.json has no map at `{truth}`"))?;
            let filter = type_pattern.as_deref().map(Regex::new).transpose().map_err(|e| e.to_string())?;
            let keep = |k: &str| filter.as_ref().is_none_or(|re| re.is_match(k.split(": ").next().unwrap_or(k)));
            let want: BTreeMap<String, u64> = want
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect();
            let got: BTreeMap<String, u64> =
                exceptions_by_type_message(c).into_iter().filter(|(k, _)| keep(k)).collect();
            let fmt = |m: &BTreeMap<String, u64>| {
                m.iter().map(|(k, v)| format!("{k} ×{v}")).collect::<Vec<_>>().join("; ")
            };
            Check::new(name, Some(&c.collector), !want.is_empty() && want == got, fmt(&want), fmt(&got))
                .value("count", got.values().sum::<u64>() as f64)
        }
        Expectation::Metric { metric, min, max, .. } => {
            let v = *ev.metrics.get(metric).ok_or_else(|| format!("no metric `{metric}` in this run"))?;
            Check::new(name, None, within(v, *min, *max), bounds_text(*min, *max), format!("{v:.4}"))
        }
        Expectation::AgreeCount { event, collectors, tolerance, .. } => {
            let mut counts = vec![];
            for cname in collectors {
                counts.push((cname.clone(), count_events(coll(Some(cname))?, event, None)));
            }
            let lo = counts.iter().map(|c| c.1).min().unwrap_or(0);
            let hi = counts.iter().map(|c| c.1).max().unwrap_or(0);
            Check::new(
                name,
                None,
                lo > 0 && hi - lo <= *tolerance,
                format!("within ± {tolerance}, all > 0"),
                counts.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", "),
            )
        }
        Expectation::AgreeFrames { collectors, assembly, mode, names, top, min_common, min_r2r, sample_kinds, .. } => {
            let re = Regex::new(assembly).map_err(|e| e.to_string())?;
            let [a, b] = collectors.as_slice() else {
                return Err(format!("agree_frames compares exactly two collectors, got {collectors:?}"));
            };
            let (ca, cb) = (coll(Some(a))?, coll(Some(b))?);
            let rank = |c: &Collection| {
                let (ranked, counted) = rank_methods(c, &re, *mode, *names, sample_kinds.get(&c.collector).map(String::as_str));
                (ranked.into_iter().take(*top).collect::<Vec<_>>(), counted)
            };
            let ((ta, na), (tb, nb)) = (rank(ca), rank(cb));
            let keys = |t: &[RankedMethod]| t.iter().map(|m| m.key.clone()).collect::<std::collections::BTreeSet<_>>();
            let (ka, kb) = (keys(&ta), keys(&tb));
            let common = ka.intersection(&kb).count();
            // The first collector's precompiled methods must be named the way the second names
            // them, wherever they rank there (a top list alone would forgive a misspelt name
            // that ranks low). One way only: the second may hold frames the first cannot see
            // (perf's frame-pointer walk skips the caller of a method that keeps no frame
            // pointer; EventPipe's unwinder does not), which is no naming fault of either.
            let known_b = known_method_keys(cb, *names);
            let unmatched_r2r: Vec<String> = ta
                .iter()
                .filter(|m| m.is_r2r() && !known_b.contains(&m.key))
                .map(|m| format!("`{}`", m.key))
                .collect();
            let r2r_in_a = ta.iter().filter(|m| m.is_r2r()).count();
            let r2r_in_b = tb.iter().filter(|m| m.is_r2r()).count();
            let pass = na > 0
                && nb > 0
                && common >= *min_common
                && unmatched_r2r.is_empty()
                && min_r2r.is_none_or(|m| r2r_in_a >= m);
            let mode_text = match mode {
                ShareMode::Leaf => "nearest-leaf managed frame",
                ShareMode::Inclusive => "inclusive",
            };
            let names_text = match names {
                NameMatch::Exact => "exact names",
                NameMatch::MethodAndArity => "Type::Method/arity",
            };
            let mut expected = format!(
                "≥ {min_common} of each top {top} in common ({mode_text}, {names_text}, assemblies `{assembly}`); \
                 every R2R-named method of {a}'s top {top} known to {b} by that name"
            );
            if let Some(m) = min_r2r {
                expected.push_str(&format!("; ≥ {m} of {a}'s top {top} R2R-named"));
            }
            let only = |x: &std::collections::BTreeSet<String>, y: &std::collections::BTreeSet<String>| {
                x.difference(y).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            };
            let mut measured = format!(
                "{common} of top {top} in common; R2R-named in top: {a} {r2r_in_a}, {b} {r2r_in_b}; samples counted: {a} {na}, {b} {nb}"
            );
            if common < ka.len().max(kb.len()) {
                measured.push_str(&format!("; only {a}: {}; only {b}: {}", only(&ka, &kb), only(&kb, &ka)));
            }
            if !unmatched_r2r.is_empty() {
                measured.push_str(&format!("; R2R-named but unknown to {b}: {}", unmatched_r2r.join(", ")));
            }
            let mut check = Check::new(name, None, pass, expected, measured)
                .value("common", common as f64)
                .value("top", *top as f64)
                .value("r2r_in_top_first", r2r_in_a as f64)
                .value("r2r_in_top_second", r2r_in_b as f64)
                .value("r2r_unmatched", unmatched_r2r.len() as f64);
            for (cname, list, total) in [(a, &ta, na), (b, &tb, nb)] {
                check.details.push(format!("{cname} top {top} ({mode_text}, of {total} samples counted):"));
                for (i, m) in list.iter().enumerate() {
                    let marks = match (m.is_r2r(), kb.contains(&m.key) && ka.contains(&m.key)) {
                        (true, true) => " [R2R, common]",
                        (true, false) => " [R2R]",
                        (false, true) => " [common]",
                        (false, false) => "",
                    };
                    check.details.push(format!("  {:>2}. {:>6}  {}{marks}", i + 1, m.weight, m.key));
                }
            }
            check
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, Value};

    fn frame(name: &str, class: DsoClass) -> Frame {
        Frame { name: Some(name.into()), dso: None, class, addr: 0 }
    }

    fn sample(frames: Vec<Frame>) -> Sample {
        Sample { pid: 1, tid: 1, time_ns: 0, weight: 1, frames, kind: None }
    }

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
    fn share_check_fails_below_min_samples() {
        let mut c = Collection::new("perf-cpu");
        c.samples.push(sample(vec![frame("W::HotLoop()", DsoClass::Jit)]));
        let truth = serde_json::json!({"shares": {"cpu": {"HotLoop": 1.0}}});
        let exp = Expectation::Share {
            name: None,
            collector: None,
            method: "HotLoop".into(),
            among: vec!["HotLoop".into(), "ColdLoop".into()],
            truth: "shares.cpu.HotLoop".into(),
            mode: ShareMode::Leaf,
            sample_kind: None,
            tolerance_pts: None,
            min_samples: None,
        };
        let metrics = BTreeMap::new();
        let check = evaluate(&exp, &Evidence { collections: &[c], truth: &truth, truths: &BTreeMap::new(), metrics: &metrics });
        assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
    }

    #[test]
    fn event_counts_ignore_version_suffix_and_never_pass_on_zero() {
        let mut c = Collection::new("lttng");
        let ev = |name: &str| Event {
            provider: "DotNETRuntime".into(),
            name: name.into(),
            id: None,
            version: None,
            time_ns: 0,
            pid: 1,
            tid: 1,
            fields: [("ExceptionType".to_string(), Value::Str("E".into())), ("ExceptionMessage".to_string(), Value::Str("m".into()))].into(),
        };
        c.events.push(ev("GCStart_V2"));
        c.events.push(ev("GCStart"));
        c.events.push(ev("ExceptionThrown_V1"));
        assert_eq!(count_events(&c, "GCStart", None), 2);
        assert_eq!(exceptions_by_type_message(&c).get("E: m"), Some(&1));
        let exp = Expectation::EventCount {
            name: None, collector: None, event: "GCEnd".into(), provider: None, min: None, max: None,
            at_least_truth: None, equals_truth: None, tolerance: None,
        };
        let metrics = BTreeMap::new();
        let truth = serde_json::json!({});
        let check = evaluate(&exp, &Evidence { collections: &[c], truth: &truth, truths: &BTreeMap::new(), metrics: &metrics });
        assert_eq!(check.verdict, Verdict::Fail);
    }

    #[test]
    fn truth_paths() {
        let t = serde_json::json!({"gc": {"induced": 10}});
        assert_eq!(truth_value(&t, "gc.induced").and_then(|v| v.as_u64()), Some(10));
        assert!(truth_value(&t, "gc.missing").is_none());
    }
    fn framed(name: &str, class: DsoClass, dso: &str) -> Frame {
        Frame { name: Some(name.into()), dso: Some(dso.into()), class, addr: 0 }
    }

    /// `n` samples whose stacks are `frames` (leaf first).
    fn push(c: &mut Collection, n: usize, frames: Vec<Frame>) {
        for _ in 0..n {
            c.samples.push(sample(frames.clone()));
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
        let re = Regex::new(crate::scenario::FRAMEWORK_ASSEMBLIES).unwrap();
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

    fn agree(min_common: usize, min_r2r: Option<usize>, names: NameMatch) -> Expectation {
        Expectation::AgreeFrames {
            name: None,
            collectors: vec!["a".into(), "b".into()],
            assembly: crate::scenario::FRAMEWORK_ASSEMBLIES.into(),
            mode: ShareMode::Leaf,
            names,
            top: 3,
            min_common,
            min_r2r,
            sample_kinds: [("b".to_string(), "managed".to_string())].into(),
        }
    }

    fn judge_agree(exp: &Expectation, a: Collection, b: Collection) -> Check {
        let metrics = BTreeMap::new();
        let truth = serde_json::json!({});
        evaluate(exp, &Evidence { collections: &[a, b], truth: &truth, truths: &BTreeMap::new(), metrics: &metrics })
    }

    #[test]
    fn agree_frames_compares_top_lists_and_checks_r2r_names_against_the_other() {
        // a: precompiled frames named by the R2R resolver; b: the same methods from a perf map.
        let mut a = Collection::new("a");
        for (i, m) in ["One", "Two", "Three", "Four"].iter().enumerate() {
            push(&mut a, 10 - i, vec![framed(&perf_name(m), DsoClass::R2r, CORELIB)]);
        }
        let mut b = Collection::new("b");
        for (i, m) in ["Two", "One", "Four", "Three"].iter().enumerate() {
            let mut s = sample(vec![framed(&format!("{}[OptimizedTier1]", perf_name(m)), DsoClass::Jit, "//anon")]);
            s.kind = Some("managed".into());
            for _ in 0..(10 - i) {
                b.samples.push(s.clone());
            }
        }
        // Blocked samples are not counted for b: they would put `Wait` on top.
        let mut blocked = sample(vec![framed(&perf_name("Wait"), DsoClass::Jit, "//anon")]);
        blocked.kind = Some("external".into());
        b.samples.extend(std::iter::repeat_n(blocked, 50));
        let check = judge_agree(&agree(2, Some(3), NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert_eq!(check.values["common"], 2.0);
        assert_eq!(check.values["r2r_in_top_first"], 3.0);
        assert!(check.details.iter().any(|d| d.contains("System.Demo::One") && d.contains("[R2R, common]")), "{:?}", check.details);
        // Fewer in common than asked: FAIL, naming what differs.
        let check = judge_agree(&agree(3, None, NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.measured.contains("only a: `") && check.measured.contains("Three"), "{}", check.measured);
        // Too few precompiled methods in a's top list.
        let check = judge_agree(&agree(2, Some(4), NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail);
        // An R2R name b does not know (a misspelling) fails even though it ranks alike …
        let mut misspelt = a.clone();
        push(&mut misspelt, 20, vec![framed("void [System.Private.CoreLib] System.Demo::Five(int)", DsoClass::R2r, CORELIB)]);
        let check = judge_agree(&agree(1, None, NameMatch::Exact), misspelt.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
        assert!(check.measured.contains("unknown to b: `void [System.Private.CoreLib] System.Demo::Five(int)`"), "{}", check.measured);
        // … and passes once b's perf map lists that exact name, sampled or not.
        let mut b_map = b.clone();
        b_map.method_names.insert("void [System.Private.CoreLib] System.Demo::Five(int)".into());
        assert_eq!(judge_agree(&agree(1, None, NameMatch::Exact), misspelt, b_map).verdict, Verdict::Pass);
        // Never on zero samples.
        let check = judge_agree(&agree(0, None, NameMatch::Exact), a, Collection::new("b"));
        assert_eq!(check.verdict, Verdict::Fail);
    }

    #[test]
    fn agree_frames_across_spellings_by_method_and_arity() {
        let mut perf = Collection::new("a");
        push(&mut perf, 5, vec![framed(
            "instance bool [System.Text.RegularExpressions] System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(valuetype [System.Runtime]System.ReadOnlySpan`1<char>)",
            DsoClass::R2r,
            "/d/System.Text.RegularExpressions.dll",
        )]);
        let mut ep = Collection::new("b");
        let mut s = sample(vec![framed(
            "System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(value class System.ReadOnlySpan`1<wchar>)",
            DsoClass::R2r,
            "System.Text.RegularExpressions",
        )]);
        s.kind = Some("managed".into());
        ep.samples.extend(std::iter::repeat_n(s, 4));
        assert_eq!(judge_agree(&agree(1, Some(1), NameMatch::Exact), perf.clone(), ep.clone()).verdict, Verdict::Fail);
        let check = judge_agree(&agree(1, Some(1), NameMatch::MethodAndArity), perf, ep);
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    }
}
