//! `kind = "blocked_seconds"`: the time an off-CPU collector saw threads blocked on stacks through
//! one method, in seconds, against the app's own figure in seconds. A `share` of blocked time
//! compares methods with each other; this holds one method's wait to what the app timed
//! ("GetOrders waited 2.4 s on its lock"), which a share cannot say.

use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::units::duration_ns;
use super::{Check, Evidence, Judge, bad_key, frame_key, truth_f64};
use model::Sample;

/// Off-CPU time (sample weights in ns) of samples whose stack holds a frame matching `method`,
/// against truth at `truth` (seconds, or `truth_unit`) within `tolerance_s` or `tolerance_pct`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BlockedSecondsCheck {
    /// Regex over resolved frame names (code versions merged); anywhere on the stack.
    pub method: String,
    /// Truth path of the app's own blocked time in that method.
    pub truth: String,
    /// The truth's unit: `s` (the default) or `ms`.
    #[serde(default)]
    pub truth_unit: TimeUnit,
    /// Allowed difference in seconds.
    #[serde(default)]
    pub tolerance_s: Option<f64>,
    /// Allowed difference in percent of the truth.
    #[serde(default)]
    pub tolerance_pct: Option<f64>,
    /// Only samples of this kind; default `blocked` (a preempted thread was not waiting).
    #[serde(default)]
    pub sample_kind: Option<String>,
    /// Only the thread whose id truth gives at this path.
    #[serde(default)]
    pub tid_truth: Option<String>,
}

/// A unit of time a truth is written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    #[default]
    S,
    Ms,
}

impl TimeUnit {
    fn seconds(self, v: f64) -> f64 {
        match self {
            TimeUnit::S => v,
            TimeUnit::Ms => v / 1000.0,
        }
    }
}

impl Judge for BlockedSecondsCheck {
    fn truth_paths(&self) -> Vec<&str> {
        std::iter::once(&self.truth).chain(&self.tid_truth).map(String::as_str).collect()
    }

    fn default_name(&self) -> String {
        format!("blocked seconds in `{}`", self.method)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.method).map_err(|e| bad_key("method", format!("bad regex `{}`: {e}", self.method)))?;
        // No default tolerance: how closely an app's stopwatch and the scheduler agree is the
        // app's to say (its own timing overhead, waits shorter than a switch).
        match (self.tolerance_s, self.tolerance_pct) {
            // A missing key has no line of its own: the error points at the table.
            (None, None) => Err(anyhow::anyhow!("a `blocked_seconds` check needs `tolerance_s` (seconds) or `tolerance_pct` (percent of the truth)")),
            (Some(_), Some(_)) => Err(bad_key("tolerance_pct", "give `tolerance_s` or `tolerance_pct`, not both")),
            (Some(t), None) if !(0.0..).contains(&t) => Err(bad_key("tolerance_s", format!("`tolerance_s` is ≥ 0, got {t}"))),
            (None, Some(t)) if !(0.0..=100.0).contains(&t) => Err(bad_key("tolerance_pct", format!("`tolerance_pct` is 0–100, got {t}"))),
            _ => Ok(()),
        }
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let c = ev.read(collector)?;
        if !c.weight_ns {
            return Err(format!(
                "collector `{}` counts samples, not time: blocked seconds need an off-CPU collector (`perf-offcpu`)",
                c.collector
            ));
        }
        let re = Regex::new(&self.method).map_err(|e| e.to_string())?;
        let truth = ev.truth_for(&c.collector);
        let want_s = self.truth_unit.seconds(truth_f64(truth, &self.truth)?);
        let tid = self.tid_truth.as_deref().map(|p| truth_f64(truth, p)).transpose()?.map(|t| t as u32);
        let kind = self.sample_kind.as_deref().unwrap_or("blocked");
        let of_interest = |s: &&Sample| s.kind.as_deref() == Some(kind) && tid.is_none_or(|t| s.tid == t);
        let (mut ns, mut samples) = (0u64, 0u64);
        for s in c.samples.iter().filter(of_interest).filter(|s| s.frames.iter().any(|f| re.is_match(&frame_key(f)))) {
            ns += s.weight;
            samples += 1;
        }
        let got_s = ns as f64 / 1e9;
        let (allowed, how) = match (self.tolerance_s, self.tolerance_pct) {
            (Some(t), _) => (t, format!("± {t} s")),
            (None, Some(p)) => (want_s.abs() * p / 100.0, format!("± {p} %")),
            (None, None) => (0.0, "exactly".to_string()),
        };
        let mut expected = format!("{want_s:.3} s {how} (truth `{}`), {kind} time", self.truth);
        if let Some(t) = tid {
            expected.push_str(&format!(", thread {t} only"));
        }
        Ok(Check::new(
            name,
            Some(&c.collector),
            (got_s - want_s).abs() <= allowed,
            expected,
            format!("{} ({got_s:.3} s) over {samples} off-CPU intervals", duration_ns(ns)),
        )
        .value("seconds", got_s)
        .value("truth", want_s)
        .value("samples", samples as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame};
    use model::{Collection, DsoClass};

    fn interval(tid: u32, ns: u64, kind: &str, method: &str) -> Sample {
        Sample { weight: ns, kind: Some(kind.into()), ..Sample::new(1, tid, 0, vec![frame("libc::futex", DsoClass::Libc), frame(method, DsoClass::Jit)]) }
    }

    fn check(tolerance_s: Option<f64>, tolerance_pct: Option<f64>) -> BlockedSecondsCheck {
        BlockedSecondsCheck {
            method: "::LockWait\\b".into(),
            truth: "blocked.lock_s".into(),
            truth_unit: TimeUnit::S,
            tolerance_s,
            tolerance_pct,
            sample_kind: None,
            tid_truth: None,
        }
    }

    #[test]
    fn one_methods_blocked_time_is_held_against_seconds() {
        let mut c = Collection::new("perf-offcpu");
        c.weight_ns = true;
        c.samples.push(interval(7, 1_500_000_000, "blocked", "W::LockWait()[OptimizedTier1]"));
        c.samples.push(interval(8, 900_000_000, "blocked", "W::LockWait()"));
        // Preempted time, and another method's wait, are not this method's blocked time.
        c.samples.push(interval(7, 400_000_000, "preempted", "W::LockWait()"));
        c.samples.push(interval(7, 3_000_000_000, "blocked", "W::SleepWait()"));
        let truth = serde_json::json!({"blocked": {"lock_s": 2.5, "lock_ms": 2500, "tid": 8}});
        let judged = evaluate_on(&check(Some(0.2), None), &[c.clone()], truth.clone());
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "2.40 s (2.400 s) over 2 off-CPU intervals");
        assert_eq!(judged.expected, "2.500 s ± 0.2 s (truth `blocked.lock_s`), blocked time");
        assert_eq!(evaluate_on(&check(None, Some(3.0)), &[c.clone()], truth.clone()).verdict, Verdict::Fail);
        let in_ms = BlockedSecondsCheck { truth: "blocked.lock_ms".into(), truth_unit: TimeUnit::Ms, ..check(None, Some(5.0)) };
        assert_eq!(evaluate_on(&in_ms, &[c.clone()], truth.clone()).verdict, Verdict::Pass);
        let one_thread = BlockedSecondsCheck { tid_truth: Some("blocked.tid".into()), ..check(Some(0.01), None) };
        let judged = evaluate_on(&one_thread, &[c.clone()], serde_json::json!({"blocked": {"lock_s": 0.9, "tid": 8}}));
        assert_eq!((judged.verdict, judged.values["seconds"]), (Verdict::Pass, 0.9));
        // A sampler's counts are not time: said, not compared.
        let mut counted = c;
        counted.weight_ns = false;
        let judged = evaluate_on(&check(Some(0.2), None), &[counted], truth);
        assert!(judged.measured.contains("counts samples, not time"), "{}", judged.measured);
    }

    #[test]
    fn tolerances_and_regexes_are_checked_at_load() {
        let key = |c: BlockedSecondsCheck| c.validate().unwrap_err().downcast::<crate::BadKey>().unwrap().key;
        check(Some(0.1), None).validate().unwrap();
        assert!(check(None, None).validate().unwrap_err().downcast::<crate::BadKey>().is_err());
        assert_eq!(key(check(Some(0.1), Some(5.0))), "tolerance_pct");
        assert_eq!(key(check(None, Some(500.0))), "tolerance_pct");
        assert_eq!(key(BlockedSecondsCheck { method: "(".into(), ..check(Some(0.1), None) }), "method");
    }
}
