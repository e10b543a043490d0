//! The run's verdict: every expectation judged against the collections and the truth, the
//! engine's own "collected data" checks, each sampled check made inconclusive where its data is
//! too thin to decide, and the flat metrics map the manifest and the checks read.

use std::collections::BTreeMap;

use judge::{Check, Evidence, Verdict};
use model::{Collection, DsoClass};

use super::RunState;
use crate::collect;
use crate::scenario::{Protocol, Scenario};

/// A collector may miss this much of the measured window (its start racing the app's ready line)
/// before the checks reading it are inconclusive.
const MISSED_WINDOW_TOLERANCE_S: f64 = 0.25;

/// The samples of `c` inside its launch's measured window: an app held at start is recorded from
/// its first managed code, and its start-up and warm-up are not judged. Events stay whole (a
/// count held against the app's own truth counts its whole life).
fn measured(c: &Collection, window: Option<&super::Window>) -> Collection {
    let Some((from, to)) = window.and_then(|w| Some((w.from_ns?, w.to_ns?))) else { return c.clone() };
    Collection { samples: c.samples.iter().filter(|s| (from..=to).contains(&s.time_ns)).cloned().collect(), ..c.clone() }
}

/// Turns the expectations into checks and the checks into a verdict.
/// Where collectors of one `agree_count` disagree because one saw none of an event the others
/// saw, the likely cause: its session did not enable the event's keyword (a dotnet-trace profile
/// without the runtime's keywords, say). Each such collector is named with the keyword to add.
fn missing_keyword(check: &judge::AgreeCountCheck, collections: &[Collection]) -> Vec<String> {
    let count = |c: &Collection, name: &str| c.events.iter().filter(|e| collect::lttng::base_name(&e.name) == name).count();
    let names: Vec<String> = if check.event == "*" {
        let mut all: Vec<String> =
            collections.iter().flat_map(|c| c.events.iter().map(|e| collect::lttng::base_name(&e.name).to_string())).collect();
        all.sort();
        all.dedup();
        all
    } else {
        vec![collect::lttng::base_name(&check.event).to_string()]
    };
    let mut out = Vec::new();
    for name in names {
        let Some((provider, keywords)) = collect::lttng::runtime_event_keywords(&name) else { continue };
        let of: Vec<(&str, usize)> = check
            .collectors
            .iter()
            .filter_map(|n| collections.iter().find(|c| &c.collector == n).map(|c| (n.as_str(), count(c, &name))))
            .collect();
        let Some((seen_by, seen)) = of.iter().find(|(_, n)| *n > 0) else { continue };
        for (collector, n) in &of {
            // The reference (a peer) is what the others are held to, not told what to enable.
            if *n == 0 && check.reference.as_deref() != Some(*collector) {
                out.push(format!(
                    "`{collector}` recorded no {name} where `{seen_by}` recorded {seen}: {name} needs keyword {keywords:#x} of \
                     {provider}, which `{collector}`'s session likely lacks (add it to its `providers`, e.g. \
                     \"{provider}:{keywords:#x}:5\", or use a profile that enables it)"
                ));
            }
        }
    }
    out
}

/// An on-CPU sampler that saw nothing of an app whose CPU time over the run stood for fewer
/// samples than this cannot say the pipeline is wrong.
const IDLE_APP_SAMPLES: f64 = 5.0;

pub(super) fn judge(scenario: &Scenario, state: &RunState) -> (Verdict, Option<String>, Vec<Check>) {
    // An app as it is is judged on its measured window; a tracelab workload measures its own
    // phase (after its go file) and every sample counts as before.
    let windowed: Vec<Collection>;
    let judged: &[Collection] = if scenario.protocol() == Protocol::None {
        windowed = state.collections.iter().map(|c| measured(c, state.window_of(&c.collector))).collect();
        &windowed
    } else {
        &state.collections
    };
    let metrics = run_metrics(judged);
    let ev = Evidence { collections: judged, truth: &state.truth, truths: &state.truths, metrics: &metrics };
    let mut checks: Vec<Check> = Vec::new();
    // A scenario never passes on zero samples: every collector must have seen something. An
    // on-CPU sampler on an app that hardly ran has nothing to see, which is no wrong answer.
    let app_cpu_s = state.load.get("load.app_cpu_s").copied();
    for c in &state.collections {
        let n = c.samples.len() + c.events.len();
        let expected_samples = c.metrics.get("frequency_hz").zip(app_cpu_s).map(|(hz, cpu)| hz * cpu);
        let idle = n == 0 && c.sampling == model::Sampling::CpuTime && expected_samples.is_some_and(|e| e < IDLE_APP_SAMPLES);
        checks.push(Check {
            name: format!("{} collected data", c.collector),
            verdict: if n > 0 {
                Verdict::Pass
            } else if idle {
                Verdict::Inconclusive
            } else {
                Verdict::Fail
            },
            expected: "> 0 samples or events".into(),
            measured: format!("{} samples, {} events", c.samples.len(), c.events.len()),
            collector: Some(c.collector.clone()),
            values: BTreeMap::new(),
            details: Vec::new(),
            reason: idle.then(|| {
                format!(
                    "the app ran on a CPU for {:.3} s while `{}` recorded ({:.1} samples at {} Hz): an on-CPU sampler has \
                     nothing to see in an idle app; measure it while it works (`[load]`, or a window where it computes)",
                    app_cpu_s.unwrap_or(0.0),
                    c.collector,
                    expected_samples.unwrap_or(0.0),
                    c.metrics.get("frequency_hz").copied().unwrap_or(0.0)
                )
            }),
        });
    }
    // A check on samples too thin to decide (lost events, a starved sampling rate) is
    // inconclusive, whichever way it came out.
    let quality = data_quality(scenario, judged, &state.load, state.other_load.as_ref());
    let first = state.collections.first().map(|c| c.collector.as_str());
    let expectations = with_peers(scenario, judged, first);
    checks.extend(expectations.iter().map(|e| {
        let mut check = e.evaluate(&ev);
        if let crate::scenario::CheckKind::AgreeCount(a) = &e.check
            && check.verdict != Verdict::Pass
        {
            check.details.extend(missing_keyword(a, judged));
        }
        if !e.check.judge().sampled() {
            return check;
        }
        // The collectors the check read (its own, else the first).
        let mut read = e.collectors();
        if read.is_empty() {
            read.extend(first);
        }
        let qualities: Vec<&judge::DataQuality> = quality.iter().filter(|q| read.contains(&q.collector.as_str())).collect();
        let mut check = judge::apply_sufficiency(check, &qualities, &scenario.sufficiency, e.check.judge().starvation());
        // Stacks that lost a caller to on-stack replacement, where that caller could count here.
        let affected: Vec<(&str, u64, u64)> = judged
            .iter()
            .filter(|c| read.contains(&c.collector.as_str()))
            .map(|c| (c.collector.as_str(), e.check.judge().lost_caller_samples(c), c.samples.len() as u64))
            .collect();
        check = judge::lost_callers(check, &affected);
        // A collector that did not see the whole measured window cannot decide what it read.
        for name in read {
            let Some(window) = state.window_of(name) else { continue };
            if let Some(missed) = window.missed_s(name).filter(|m| *m > MISSED_WINDOW_TOLERANCE_S) {
                let why = if window.held {
                    "it was not recording for part of the measured window".to_string()
                } else {
                    "it started after the app was ready: the app could not be held at start (its runtime's diagnostics are \
                     off, so nothing can resume it), so its start-up and first moments went unrecorded; checks of an app that \
                     ends by itself need it held"
                        .to_string()
                };
                check = judge::inconclusive(check, format!("`{name}` did not record {missed:.1} s of the measured window: {why}"));
            }
        }
        check
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

/// The scenario's expectations, each one that reads the first collector by default judged again
/// on every peer of the run (perfcollect): a peer is scored by the same checks as tracelab's own
/// collector, named `NAME (collector)` both. An `agree_count` held to a perfcollect collector
/// takes the committed known differences as `except` reasons (the scenario's own win).
fn with_peers(scenario: &Scenario, judged: &[Collection], first: Option<&str>) -> Vec<crate::scenario::Expectation> {
    let peers: Vec<&str> = scenario
        .collectors
        .iter()
        .filter(|c| collect::CollectorKind::PEERS.contains(&c.kind()) && Some(c.name()) != first)
        .map(|c| c.name())
        .filter(|n| judged.iter().any(|c| c.collector == *n))
        .collect();
    let mut out = Vec::new();
    for e in &scenario.expectations {
        if let crate::scenario::CheckKind::AgreeCount(a) = &e.check
            && a.reference.as_ref().is_some_and(|r| {
                scenario.collectors.iter().any(|c| c.name() == r && c.kind() == collect::CollectorKind::Perfcollect)
            })
        {
            let mut e = e.clone();
            if let crate::scenario::CheckKind::AgreeCount(a) = &mut e.check {
                for (event, why) in collect::perfcollect::known_differences() {
                    a.except.entry(event.clone()).or_insert_with(|| why.clone());
                }
            }
            out.push(e);
            continue;
        }
        if peers.is_empty() || e.collector.is_some() || e.check.judge().collectors().is_some() {
            out.push(e.clone());
            continue;
        }
        let name = e.name.clone().unwrap_or_else(|| e.check.judge().default_name());
        for reader in first.into_iter().chain(peers.iter().copied()) {
            let mut copy = e.clone();
            copy.name = Some(format!("{name} ({reader})"));
            copy.collector = Some(reader.to_string());
            out.push(copy);
        }
    }
    out
}

/// Each collection's data quality: lost events; for timer samplers, the effective sampling rate
/// of the measured threads while they were runnable against the frequency the scenario asked
/// for; and the machine's other load while the app ran (`load.*` metrics of the run, with the
/// busiest other processes), which the sufficiency rules name.
pub(super) fn data_quality(
    scenario: &Scenario,
    collections: &[Collection],
    load: &BTreeMap<String, f64>,
    other: Option<&crate::run::load::OtherLoad>,
) -> Vec<judge::DataQuality> {
    let machine = load.get("load.other_busy_share").map(|&share| judge::MachineLoad {
        cores: load.get("load.cores").copied().unwrap_or(1.0),
        other_busy_share: share,
        top: other.map(|o| o.top.clone()).unwrap_or_default(),
    });
    collections
        .iter()
        .map(|c| {
            let spec = scenario.collectors.iter().find(|s| s.name() == c.collector);
            let asked = spec.and_then(|s| match &s.options {
                collect::CollectorOptions::PerfCpu(o) => Some(o.frequency as f64),
                collect::CollectorOptions::Perfcollect(_) => Some(collect::perfcollect::FREQUENCY_HZ),
                _ => None,
            });
            judge::DataQuality { load: machine.clone(), ..judge::DataQuality::measure(c, asked) }
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
            c.samples.push(Sample::new(1, 1, i * 10_000_000, vec![frame]));
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
            other_load: None,
            window: Default::default(),
            windows: Vec::new(),
            cut_short: None,
        }
    }


    /// An app as it is (no tracelab protocol): `workload = { command = … }`.
    fn app_scenario(expect: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\nworkload = {{ command = [\"/bin/true\"] }}\ntruth = {{ path = \"t.json\" }}\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 100\n{expect}"
        );
        Scenario::from_toml(&text, Path::new("s.toml")).unwrap()
    }

    /// The samples of 0–4 s, a window of 1–3 s: the checks of an app as it is read the window's
    /// 200; a collector that started 1.5 s into the window makes them inconclusive, with the seconds.
    #[test]
    fn an_app_as_it_is_is_judged_on_its_measured_window() {
        let window = |held: bool, start_s: f64| super::super::Window {
            launched_ns: 0,
            ready_ns: Some(500_000_000),
            held,
            attached: false,
            from_ns: Some(1_000_000_000),
            to_ns: Some(3_000_000_000),
            collectors: [("perf-cpu".to_string(), (Some((start_s * 1e9) as u64), Some(3_000_000_000)))].into(),
        };
        let floor = "[[expect]]\nkind = \"share\"\nname = \"hot\"\nmethod = \"Hot\"\namong = [\"Hot\", \"Cold\"]\ntruth = \"hot\"\nmin_samples = 200\n";
        let mut state = state_with(0);
        state.windows = vec![window(true, 0.0)];
        let (v, reason, checks) = judge(&app_scenario(floor), &state);
        assert_eq!((v, reason), (Verdict::Pass, None), "{checks:?}");
        assert_eq!(checks.iter().find(|c| c.name == "hot").unwrap().values["samples"], 201.0);
        // 201 samples: one more asked for is below the floor (the window trimmed the rest).
        let (v, _, _) = judge(&app_scenario(&floor.replace("200", "202")), &state);
        assert_eq!(v, Verdict::Inconclusive);
        // Not held: the collector started 1.5 s into the window and missed its start.
        state.windows = vec![window(false, 2.5)];
        let (v, reason, _) = judge(&app_scenario(floor), &state);
        assert_eq!(v, Verdict::Inconclusive);
        let reason = reason.unwrap();
        assert!(reason.contains("`perf-cpu` did not record 1.5 s of the measured window") && reason.contains("could not be held"), "{reason}");
        // A tracelab workload measures its own phase: every sample counts.
        state.windows = vec![window(true, 0.0)];
        let (v, _, checks) = judge(&scenario(floor), &state);
        assert_eq!(v, Verdict::Pass, "{checks:?}");
        assert_eq!(checks.iter().find(|c| c.name == "hot").unwrap().values["samples"], 400.0);
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
        // A share that agrees passes all the same, saying what it agreed despite; one that does
        // not cannot be a FAIL on that data.
        let (v, _, checks) = judge(&scenario(SHARE), &state_with(8));
        assert_eq!(v, Verdict::Pass);
        let hot = checks.iter().find(|c| c.name == "hot").unwrap();
        assert!(hot.details.iter().any(|d| d.starts_with("agrees although") && d.contains("lost 8 events")), "{checks:?}");
        let mut off = state_with(8);
        off.truth = serde_json::json!({"hot": 0.5});
        let (v, reason, _) = judge(&scenario(SHARE), &off);
        assert_eq!(v, Verdict::Inconclusive);
        assert!(reason.as_deref().unwrap().contains("lost 8 events against 400 samples recorded (2.0 %"), "{reason:?}");
        let lenient = scenario(&format!("[sufficiency]\nmax_lost_ratio = 0.05\n{SHARE}"));
        assert_eq!(judge(&lenient, &off).0, Verdict::Fail);
        // A FAIL with enough data outweighs an inconclusive check.
        let absent = "[[expect]]\nkind = \"frame\"\npattern = \"Hot\"\npresent = false\n";
        let (v, reason, checks) = judge(&scenario(&format!("{absent}{SHARE}")), &off);
        assert_eq!(v, Verdict::Fail);
        assert!(reason.as_deref().unwrap().starts_with("frame absent `Hot`"), "{reason:?}");
        assert_eq!(checks.iter().filter(|c| c.verdict == Verdict::Inconclusive).count(), 1);
    }

    /// An agree_count where one transport saw none of the events the other saw names the keyword
    /// its session needs.
    #[test]
    fn a_transport_that_saw_none_of_an_event_is_told_its_keyword() {
        use model::Event;
        let thrown = |t: u64| Event {
            provider: "Microsoft-Windows-DotNETRuntime".into(),
            name: "ExceptionThrown_V1".into(),
            id: Some(80),
            version: Some(1),
            time_ns: t,
            pid: 1,
            tid: 1,
            fields: Default::default(),
            frames: Vec::new(),
        };
        let mut ep = Collection::new("eventpipe");
        ep.events = (0..5).map(thrown).collect();
        let dt = Collection::new("dotnet-trace");
        let mut state = state_with(0);
        state.collections = vec![ep, dt];
        let text = "name = \"s\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"eventpipe\"\nprofile = \"exceptions\"\n[[collector]]\nkind = \"dotnet-trace\"\nproviders = [\"Microsoft-Windows-DotNETRuntime:0x1:4\"]\n\
                    [[expect]]\nkind = \"agree_count\"\nevent = \"ExceptionThrown\"\ncollectors = [\"eventpipe\", \"dotnet-trace\"]\ntolerance = 0\n";
        let scenario = Scenario::from_toml(text, Path::new("s.toml")).unwrap_or_else(|e| panic!("{e:#}"));
        let (_, _, checks) = judge(&scenario, &state);
        let agree = checks.iter().find(|c| c.name.contains("ExceptionThrown")).unwrap();
        assert_ne!(agree.verdict, Verdict::Pass);
        assert!(
            agree.details.iter().any(|d| d.starts_with("`dotnet-trace` recorded no ExceptionThrown where `eventpipe` recorded 5") && d.contains("keyword 0x8000")),
            "{agree:?}"
        );
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

    /// The checks a user writes for their own app, over a recorded LTTng trace of 10 induced GCs
    /// and 1000 exceptions of `Fixture.FixtureException` (a type with a namespace's dot): induced
    /// GCs counted by their numeric `Reason`, exceptions against a truth keyed by
    /// `Namespace.Type: message` (each once read as 0: "measured 0", "expected Fixture ×0").
    #[test]
    fn numeric_fields_and_dotted_exception_keys_judge_a_recorded_trace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("counts.json"), r#"{"induced": 10, "f": [334, 333, 333]}"#).unwrap();
        let map: Vec<String> = (0..3).map(|i| format!("'exceptions.\"Fixture.FixtureException: fixture {i}\"' = \"{{/f/{i}}}\"")).collect();
        let text = format!(
            "name = \"s\"\nworkload = {{ command = [\"/bin/true\"] }}\n\
             truth = {{ path = \"counts.json\", map = {{ \"gc.induced\" = \"{{/induced}}\", {} }} }}\n\
             [[collector]]\nkind = \"lttng\"\n\
             [[expect]]\nkind = \"event_count\"\nname = \"induced\"\nevent = \"GCStart\"\nfield = \"Reason\"\nequals = 1\nequals_truth = \"gc.induced\"\ntolerance = 0\n\
             [[expect]]\nkind = \"event_count\"\nname = \"induced gen-2\"\nevent = \"GCStart\"\nwhere = {{ Reason = 1, Depth = 2 }}\nequals_truth = \"gc.induced\"\ntolerance = 0\n\
             [[expect]]\nkind = \"exceptions\"\nname = \"exceptions\"\ntruth = \"exceptions\"\n",
            map.join(", ")
        );
        let scenario = Scenario::from_toml(&text, &dir.path().join("s.toml")).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        let mut lttng = crate::collect::lttng::decode_dir(&tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions"), Some(40)).unwrap();
        lttng.collector = "lttng".into();
        let mut state = state_with(0);
        state.collections = vec![lttng];
        state.truth = scenario.truth.as_ref().unwrap().read(dir.path()).unwrap();
        let (v, _, checks) = judge(&scenario, &state);
        let check = |name: &str| checks.iter().find(|c| c.name == name).unwrap();
        assert_eq!((check("induced").verdict, check("induced").measured.as_str()), (Verdict::Pass, "10"), "{checks:#?}");
        assert_eq!(check("induced").expected, "10 ± 0 (truth `gc.induced`)");
        assert_eq!((check("induced gen-2").verdict, check("induced gen-2").measured.as_str()), (Verdict::Pass, "10"));
        let exceptions = check("exceptions");
        assert_eq!(exceptions.verdict, Verdict::Pass, "{exceptions:?}");
        assert_eq!(exceptions.expected, "Fixture.FixtureException: fixture 0 ×334; Fixture.FixtureException: fixture 1 ×333; Fixture.FixtureException: fixture 2 ×333");
        assert_eq!(v, Verdict::Pass, "{checks:#?}");
    }
}
