//! The run's verdict: every expectation judged against the collections and the truth, the
//! engine's own "collected data" checks, each sampled check made inconclusive where its data is
//! too thin to decide, and the flat metrics map the manifest and the checks read.

use std::collections::BTreeMap;

use judge::{Check, Evidence, Verdict};
use model::{Collection, DsoClass};

use super::RunState;
use crate::collect;
use crate::scenario::Scenario;

/// Turns the expectations into checks and the checks into a verdict.
pub(super) fn judge(scenario: &Scenario, state: &RunState) -> (Verdict, Option<String>, Vec<Check>) {
    let metrics = run_metrics(&state.collections);
    let ev = Evidence { collections: &state.collections, truth: &state.truth, truths: &state.truths, metrics: &metrics };
    let mut checks: Vec<Check> = Vec::new();
    // A scenario never passes on zero samples: every collector must have seen something.
    for c in &state.collections {
        let n = c.samples.len() + c.events.len();
        checks.push(Check {
            name: format!("{} collected data", c.collector),
            verdict: if n > 0 { Verdict::Pass } else { Verdict::Fail },
            expected: "> 0 samples or events".into(),
            measured: format!("{} samples, {} events", c.samples.len(), c.events.len()),
            collector: Some(c.collector.clone()),
            values: BTreeMap::new(),
            details: Vec::new(),
            reason: None,
        });
    }
    // A check on samples too thin to decide (lost events, a starved sampling rate) is
    // inconclusive, whichever way it came out.
    let quality = data_quality(scenario, &state.collections);
    checks.extend(scenario.expectations.iter().map(|e| {
        let check = e.evaluate(&ev);
        if !e.check.judge().sampled() {
            return check;
        }
        let q = quality.iter().find(|q| Some(&q.collector) == check.collector.as_ref());
        judge::apply_sufficiency(check, q, &scenario.sufficiency, e.check.judge().against_wall_clock_truth())
    }));
    let verdict = Verdict::combine(checks.iter().map(|c| c.verdict));
    let reason = checks
        .iter()
        .filter(|c| c.verdict == verdict && verdict != Verdict::Pass)
        .map(|c| match &c.reason {
            Some(why) => format!("{}: {why} (expected {}, measured {})", c.name, c.expected, c.measured),
            None => format!("{}: expected {}, measured {}", c.name, c.expected, c.measured),
        })
        .collect::<Vec<_>>()
        .join("; ");
    (verdict, (!reason.is_empty()).then_some(reason), checks)
}

/// Each collection's data quality: lost events and, for timer samplers, the effective sampling
/// rate of the measured threads against the frequency the scenario asked for.
pub(super) fn data_quality(scenario: &Scenario, collections: &[Collection]) -> Vec<judge::DataQuality> {
    collections
        .iter()
        .map(|c| {
            let spec = scenario.collectors.iter().find(|s| s.name() == c.collector);
            let asked = spec.and_then(|s| match &s.options {
                collect::CollectorOptions::PerfCpu(o) => Some(o.frequency as f64),
                _ => None,
            });
            judge::DataQuality::measure(c, asked)
        })
        .collect()
}

pub(super) fn slug(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect()
}

/// The flat metrics map: per collector, and the primary collector's figures unprefixed.
pub fn run_metrics(collections: &[Collection]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let primary = collections.iter().find(|c| !c.samples.is_empty());
    for c in collections {
        let p = &c.collector;
        m.insert(format!("{p}.samples_total"), c.samples.len() as f64);
        m.insert(format!("{p}.events_total"), c.events.len() as f64);
        m.insert(format!("{p}.lost_events"), c.lost_events as f64);
        for (k, v) in c.metrics.iter().chain(&last_gc_heap_stats(c)) {
            m.insert(format!("{p}.{k}"), *v);
        }
        let res = judge::resolution(c, true);
        for (class, (total, named)) in &res {
            if *total > 0 {
                m.insert(format!("{p}.resolved_ratio_{}", class.as_str()), *named as f64 / *total as f64);
            }
        }
    }
    m.insert("samples_total".into(), primary.map_or(0, |c| c.samples.len()) as f64);
    if let Some(c) = primary {
        let res = judge::resolution(c, true);
        for class in DsoClass::ALL {
            if let Some((total, named)) = res.get(&class) {
                if *total > 0 {
                    m.insert(format!("resolved_ratio_{}", class.as_str()), *named as f64 / *total as f64);
                }
            }
        }
        let managed = [DsoClass::Jit, DsoClass::R2r]
            .iter()
            .filter_map(|c| res.get(c))
            .fold((0u64, 0u64), |a, (t, n)| (a.0 + t, a.1 + n));
        if managed.0 > 0 {
            m.insert("resolved_ratio_managed".into(), managed.1 as f64 / managed.0 as f64);
        }
    }
    m
}

/// `gc_heap_stats.last.FIELD` for each numeric field of the collection's last GCHeapStats event
/// (any version: GenerationSize0..4, TotalPromotedSize0..3, …) and `gc_heap_stats.last.Count`,
/// the Count of the last GCEnd before it: the GC those sizes are from, so a check can tell the
/// app's last GC from one that came after it. Nothing when the collection has no GCHeapStats.
pub fn last_gc_heap_stats(c: &Collection) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    // Events are in stream order, not time order, across threads: the last is the latest.
    let latest = |name: &str, before: u64| {
        c.events
            .iter()
            .filter(|e| judge::strip_version(&e.name) == name && e.time_ns <= before)
            .max_by_key(|e| e.time_ns)
    };
    let Some(stats) = latest("GCHeapStats", u64::MAX) else { return m };
    for (k, v) in &stats.fields {
        if let Some(n) = v.as_u64() {
            m.insert(format!("gc_heap_stats.last.{k}"), n as f64);
        }
    }
    if let Some(count) = latest("GCEnd", stats.time_ns).and_then(|e| e.fields.get("Count")).and_then(|v| v.as_u64()) {
        m.insert("gc_heap_stats.last.Count".into(), count as f64);
    }
    m
}


#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use model::{Frame, Sample};

    /// A run's state holding one perf-cpu collection: thread 1 sampled at the asked 100 Hz for
    /// 4 s, all in `W::Hot()`.
    fn state_with(lost: u64) -> RunState {
        let mut c = Collection::new("perf-cpu");
        for i in 0..400u64 {
            let frame = Frame { name: Some("W::Hot()".into()), dso: None, class: DsoClass::Jit, addr: 0 };
            c.samples.push(Sample { pid: 1, tid: 1, time_ns: i * 10_000_000, weight: 1, frames: vec![frame], kind: None });
        }
        c.lost_events = lost;
        RunState {
            durations: BTreeMap::new(),
            commands: Vec::new(),
            collections: vec![c],
            truth: serde_json::json!({"hot": 1.0}),
            truths: BTreeMap::new(),
            environment: Default::default(),
            completeness: BTreeMap::new(),
            workload: None,
            load_report: None,
            load: BTreeMap::new(),
        }
    }


    fn scenario(expect: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 100\n{expect}"
        );
        Scenario::from_toml(&text, Path::new("s.toml")).unwrap()
    }

    const SHARE: &str = "[[expect]]\nkind = \"share\"\nname = \"hot\"\nmethod = \"Hot\"\namong = [\"Hot\", \"Cold\"]\ntruth = \"hot\"\n";

    #[test]
    fn a_run_is_inconclusive_when_a_check_lacks_data_and_fails_only_on_a_decided_fail() {
        // 400 samples at the asked rate, nothing lost: decided.
        let (v, reason, _) = judge(&scenario(SHARE), &state_with(0));
        assert_eq!((v, reason), (Verdict::Pass, None));
        // Below the floor: inconclusive, the reason names the floor and what was measured.
        let floored = scenario(&format!("{SHARE}min_samples = 1000\n"));
        let (v, reason, _) = judge(&floored, &state_with(0));
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reason.as_deref().unwrap().starts_with("hot: 400 samples, below the floor of 1000 (min_samples)"), "{reason:?}");
        // 8 lost events of 400 samples is 2 %: above the default bound, within a scenario's 5 %.
        let (v, reason, _) = judge(&scenario(SHARE), &state_with(8));
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reason.as_deref().unwrap().contains("lost 8 events against 400 samples recorded (2.0 %"), "{reason:?}");
        let lenient = scenario(&format!("[sufficiency]\nmax_lost_ratio = 0.05\n{SHARE}"));
        assert_eq!(judge(&lenient, &state_with(8)).0, Verdict::Pass);
        // A FAIL with enough data outweighs an inconclusive check.
        let absent = "[[expect]]\nkind = \"frame\"\npattern = \"Hot\"\npresent = false\n";
        let (v, reason, checks) = judge(&scenario(&format!("{absent}{SHARE}")), &state_with(8));
        assert_eq!(v, Verdict::Fail);
        assert!(reason.as_deref().unwrap().starts_with("frame absent `Hot`"), "{reason:?}");
        assert_eq!(checks.iter().filter(|c| c.verdict == Verdict::Inconclusive).count(), 1);
    }

    /// The last GCHeapStats by time (not stream order) gives the metrics, with the Count of the
    /// GCEnd before it; a later GCEnd (a GC whose stats were not recorded) does not count.
    #[test]
    fn last_gc_heap_stats_are_the_latest_event_and_its_gc() {
        use model::{Event, Value};
        let at = |name: &str, t: u64, fields: &[(&str, u64)]| Event {
            provider: "DotNETRuntime".into(),
            name: name.into(),
            id: None,
            version: None,
            time_ns: t,
            pid: 1,
            tid: 1,
            fields: fields.iter().map(|(k, v)| (k.to_string(), Value::U64(*v))).collect(),
            frames: Vec::new(),
        };
        let mut c = Collection::new("eventpipe");
        assert!(last_gc_heap_stats(&c).is_empty());
        c.events.push(at("GCEnd_V1", 300, &[("Count", 9)]));
        c.events.push(at("GCHeapStats_V2", 200, &[("GenerationSize0", 24), ("GenerationSize2", 4096)]));
        c.events.push(at("GCEnd_V1", 100, &[("Count", 7)]));
        c.events.push(at("GCHeapStats_V2", 110, &[("GenerationSize0", 1), ("GenerationSize2", 1)]));
        c.events.push(at("GCEnd_V1", 190, &[("Count", 8)]));
        let m = last_gc_heap_stats(&c);
        assert_eq!(m["gc_heap_stats.last.GenerationSize0"], 24.0);
        assert_eq!(m["gc_heap_stats.last.GenerationSize2"], 4096.0);
        assert_eq!(m["gc_heap_stats.last.Count"], 8.0);
        assert_eq!(run_metrics(&[c])["eventpipe.gc_heap_stats.last.Count"], 8.0);
    }
}
