//! Whether a run had the data to decide. A check that lacks it is `inconclusive` with the reason,
//! never a FAIL: a FAIL promises the pipeline gave a wrong answer with enough data to say so.
//! Three rules (issue 15; a scenario overrides the bounds in `[sufficiency]`):
//! fewer samples than a check's floor (each kind applies its own `min_samples`), lost events
//! above `max_lost_ratio` of the recorded samples, and an effective sampling rate below
//! `min_rate_ratio` of the asked frequency on the measured threads (a thread starved of CPU by
//! other load gets fewer samples per second in one phase than another, which skews shares).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::units::{hertz, percent};
use super::{Check, Verdict};
use model::Collection;

/// The bounds a scenario may set (`[sufficiency]`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Sufficiency {
    /// Lost events above this fraction of the recorded samples make sample checks inconclusive.
    pub max_lost_ratio: f64,
    /// An effective sampling rate below this fraction of the asked frequency (any measured
    /// thread, any phase) makes sample checks inconclusive.
    pub min_rate_ratio: f64,
    /// Runs an inconclusive scenario is given in all ("collect more"): each further attempt is a
    /// whole new run, and the manifest lists the attempts before the deciding one.
    pub attempts: u32,
}

impl Default for Sufficiency {
    fn default() -> Self {
        Sufficiency { max_lost_ratio: 0.01, min_rate_ratio: 0.5, attempts: 2 }
    }
}

impl Sufficiency {
    /// Bounds a scenario file could not mean (caught when it loads).
    pub fn validate(&self) -> anyhow::Result<()> {
        if !(0.0..=1.0).contains(&self.max_lost_ratio) || !(0.0..=1.0).contains(&self.min_rate_ratio) {
            anyhow::bail!("[sufficiency] bounds are fractions between 0 and 1 (e.g. max_lost_ratio = 0.01, min_rate_ratio = 0.5)");
        }
        if !(1..=5).contains(&self.attempts) {
            anyhow::bail!("[sufficiency] attempts is 1–5 (runs given to an inconclusive scenario), got {}", self.attempts);
        }
        Ok(())
    }
}

/// A thread takes part in the rate rule when it carries at least this share of the collection's
/// samples: the workload's busy threads, not the runtime's occasional ones.
const MEASURED_THREAD_SHARE: f64 = 0.10;
/// A thread seen for less than this is too short to split into phases.
const MIN_THREAD_SPAN_S: f64 = 0.5;

/// Sampling rate of one measured thread, over its whole span and in each half of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadRate {
    pub tid: u32,
    pub samples: u64,
    pub span_s: f64,
    pub rate_hz: f64,
    /// Samples per second in the first and the second half of the thread's span.
    pub phase_hz: [f64; 2],
}

/// How complete one collector's data is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DataQuality {
    pub collector: String,
    pub samples: u64,
    pub lost: u64,
    /// The sampling frequency the collector asked for (timer samplers only).
    pub asked_hz: Option<f64>,
    pub threads: Vec<ThreadRate>,
}

impl DataQuality {
    /// Measures `c`; `asked_hz` is the collector's sampling frequency where it has one.
    pub fn measure(c: &Collection, asked_hz: Option<f64>) -> DataQuality {
        let mut by_tid: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for s in &c.samples {
            by_tid.entry(s.tid).or_default().push(s.time_ns);
        }
        let total = c.samples.len() as f64;
        let mut threads = Vec::new();
        for (tid, mut times) in by_tid {
            if (times.len() as f64) < total * MEASURED_THREAD_SHARE {
                continue;
            }
            times.sort_unstable();
            let (first, last) = (times[0], times[times.len() - 1]);
            let span_s = (last - first) as f64 / 1e9;
            if span_s < MIN_THREAD_SPAN_S {
                continue;
            }
            let mid = first + (last - first) / 2;
            let first_half = times.iter().filter(|&&t| t < mid).count() as f64;
            let second_half = times.len() as f64 - first_half;
            threads.push(ThreadRate {
                tid,
                samples: times.len() as u64,
                span_s,
                rate_hz: times.len() as f64 / span_s,
                phase_hz: [first_half / (span_s / 2.0), second_half / (span_s / 2.0)],
            });
        }
        DataQuality { collector: c.collector.clone(), samples: c.samples.len() as u64, lost: c.lost_events, asked_hz, threads }
    }

    /// Lost events per recorded sample (infinite when everything was lost).
    pub fn lost_ratio(&self) -> f64 {
        match (self.lost, self.samples) {
            (0, _) => 0.0,
            (_, 0) => f64::INFINITY,
            (l, n) => l as f64 / n as f64,
        }
    }

    /// The slowest phase of any measured thread: (tid, phase 1 or 2, samples/s).
    pub fn slowest_phase(&self) -> Option<(u32, usize, f64)> {
        self.threads
            .iter()
            .flat_map(|t| t.phase_hz.iter().enumerate().map(move |(i, hz)| (t.tid, i + 1, *hz)))
            .min_by(|a, b| a.2.total_cmp(&b.2))
    }

    /// The slowest phase's rate as a fraction of the asked frequency.
    pub fn min_rate_ratio(&self) -> Option<f64> {
        let asked = self.asked_hz.filter(|h| *h > 0.0)?;
        self.slowest_phase().map(|(_, _, hz)| hz / asked)
    }

    /// Why this collector's samples cannot decide a check, or `None` when they can.
    pub fn insufficient(&self, rules: &Sufficiency, rate_rule: bool) -> Option<String> {
        let mut why = Vec::new();
        let lost = self.lost_ratio();
        if lost > rules.max_lost_ratio {
            why.push(format!(
                "`{}` lost {} events against {} samples recorded ({}, above the bound of {}; a larger ring \
                 buffer keeps them: `cargo xtask setup` raises kernel.perf_event_mlock_kb, which bounds perf in containers; \
                 perf-offcpu writes less with a smaller stack copy, e.g. call_graph = \"dwarf,8192\")",
                self.collector,
                self.lost,
                self.samples,
                percent(lost.min(99.99)),
                percent(rules.max_lost_ratio)
            ));
        }
        if let (true, Some(ratio), Some((tid, phase, hz)), Some(asked)) =
            (rate_rule, self.min_rate_ratio(), self.slowest_phase(), self.asked_hz)
            && ratio < rules.min_rate_ratio
        {
            why.push(format!(
                "`{}` sampled thread {tid} at {} in phase {phase} of 2, {} of the asked {} (bound {})",
                self.collector,
                hertz(hz),
                percent(ratio),
                hertz(asked),
                percent(rules.min_rate_ratio)
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The figures for manifest.json metrics (`<collector>.…`): numbers, in Hz and fractions.
    pub fn metrics(&self, m: &mut BTreeMap<String, f64>) {
        let p = &self.collector;
        m.insert(format!("{p}.lost_ratio"), if self.samples > 0 { self.lost as f64 / self.samples as f64 } else { 0.0 });
        if let Some(hz) = self.asked_hz {
            m.insert(format!("{p}.asked_hz"), hz);
        }
        if let Some(r) = self.min_rate_ratio() {
            m.insert(format!("{p}.rate_ratio_min"), r);
        }
        for t in &self.threads {
            m.insert(format!("{p}.thread.{}.rate_hz", t.tid), t.rate_hz);
            m.insert(format!("{p}.thread.{}.phase1_hz", t.tid), t.phase_hz[0]);
            m.insert(format!("{p}.thread.{}.phase2_hz", t.tid), t.phase_hz[1]);
        }
    }
}

/// The sample floor of a check: below `floor`, the check is inconclusive whatever it measured.
pub(crate) fn floor(check: Check, samples: u64, floor: u64, what: &str) -> Check {
    if samples >= floor {
        return check;
    }
    let reason = format!("{samples} {what}, below the floor of {floor} (min_samples): too few to decide");
    inconclusive(check, reason)
}

/// Marks `check` inconclusive (a FAIL or a PASS alike: neither was decided) with `reason`.
pub fn inconclusive(mut check: Check, reason: String) -> Check {
    if check.verdict == Verdict::Pass || check.verdict == Verdict::Fail {
        check.verdict = Verdict::Inconclusive;
        check.reason = Some(match check.reason.take() {
            Some(r) => format!("{r}; {reason}"),
            None => reason,
        });
    }
    check
}

/// Applies the collection-wide rules to a check that reads sample proportions; the rate rule
/// only when `rate_rule` (the check compares with wall-clock truth).
pub fn apply(check: Check, quality: Option<&DataQuality>, rules: &Sufficiency, rate_rule: bool) -> Check {
    match quality.and_then(|q| q.insufficient(rules, rate_rule)) {
        Some(why) => inconclusive(check, why),
        None => check,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{frame, sample};
    use model::DsoClass;

    /// `n` samples of thread `tid` evenly spread over `[from_s, to_s)`.
    fn spread(c: &mut Collection, tid: u32, n: u64, from_s: f64, to_s: f64) {
        for i in 0..n {
            let mut s = sample(vec![frame("W::Hot()", DsoClass::Jit)]);
            s.tid = tid;
            s.time_ns = ((from_s + (to_s - from_s) * i as f64 / n as f64) * 1e9) as u64;
            c.samples.push(s);
        }
    }

    fn passed() -> Check {
        Check::new("c".into(), Some("perf-cpu"), true, "x".into(), "y".into())
    }

    #[test]
    fn a_starved_phase_makes_sample_checks_inconclusive() {
        // Thread 1 runs at the asked 1000 Hz; thread 2 gets 250 Hz in its second half.
        let mut c = Collection::new("perf-cpu");
        spread(&mut c, 1, 4000, 0.0, 4.0);
        spread(&mut c, 2, 2000, 0.0, 2.0);
        spread(&mut c, 2, 500, 2.0, 4.0);
        spread(&mut c, 3, 5, 0.0, 4.0); // a runtime thread, not measured
        let q = DataQuality::measure(&c, Some(1000.0));
        assert_eq!(q.threads.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![1, 2]);
        let (tid, phase, hz) = q.slowest_phase().unwrap();
        assert_eq!((tid, phase), (2, 2));
        assert!((hz - 250.0).abs() < 2.0, "{hz}");
        let rules = Sufficiency::default();
        let judged = apply(passed(), Some(&q), &rules, true);
        assert_eq!(judged.verdict, Verdict::Inconclusive);
        let reason = judged.reason.unwrap();
        assert!(reason.starts_with("`perf-cpu` sampled thread 2 at 25") && reason.contains("Hz in phase 2 of 2") && reason.contains("of the asked 1000 Hz (bound 50.0 %)"), "{reason}");
        // A scenario that accepts a quarter of the rate decides.
        let lenient = Sufficiency { min_rate_ratio: 0.2, ..rules.clone() };
        assert_eq!(apply(passed(), Some(&q), &lenient, true).verdict, Verdict::Pass);
        // Without an asked frequency (off-CPU, EventPipe) the rate rule does not apply.
        assert_eq!(apply(passed(), Some(&DataQuality::measure(&c, None)), &rules, true).verdict, Verdict::Pass);
        // Nor to a check that does not compare with wall-clock truth (a share bound, a frame
        // check): a web app's pool threads are on CPU part of the time by design.
        assert_eq!(apply(passed(), Some(&q), &rules, false).verdict, Verdict::Pass);
    }

    #[test]
    fn lost_events_above_the_bound_make_a_fail_inconclusive() {
        let mut c = Collection::new("perf-offcpu");
        spread(&mut c, 1, 1000, 0.0, 2.0);
        c.lost_events = 10;
        let rules = Sufficiency::default();
        let failed = Check::new("c".into(), Some("perf-offcpu"), false, "x".into(), "y".into());
        // 1.0 % lost is at the bound: still decided.
        assert_eq!(apply(failed.clone(), Some(&DataQuality::measure(&c, None)), &rules, true).verdict, Verdict::Fail);
        c.lost_events = 307;
        let judged = apply(failed, Some(&DataQuality::measure(&c, None)), &rules, true);
        assert_eq!(judged.verdict, Verdict::Inconclusive);
        let reason = judged.reason.unwrap();
        assert!(reason.starts_with("`perf-offcpu` lost 307 events against 1000 samples recorded (30.7 %, above the bound of 1.0 %;"), "{reason}");
        assert!(reason.contains("cargo xtask setup"), "the reason names the fix: {reason}");
        let mut m = BTreeMap::new();
        DataQuality::measure(&c, None).metrics(&mut m);
        assert_eq!(m["perf-offcpu.lost_ratio"], 0.307);
    }

    #[test]
    fn below_the_floor_is_inconclusive_whatever_was_measured() {
        let judged = floor(passed(), 49, 50, "samples");
        assert_eq!(judged.verdict, Verdict::Inconclusive);
        assert_eq!(judged.reason.as_deref(), Some("49 samples, below the floor of 50 (min_samples): too few to decide"));
        assert_eq!(floor(passed(), 50, 50, "samples").verdict, Verdict::Pass);
        assert!(Sufficiency { max_lost_ratio: 2.0, ..Default::default() }.validate().is_err());
    }
}
