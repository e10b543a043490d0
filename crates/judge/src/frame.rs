//! `kind = "frame"`: a frame matching a pattern is present (or absent) in the samples — the
//! plainest question a profile answers, and the one a user asks first of their own app.

use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::units::{percent, weight};
use super::{Check, Evidence, Judge, bad_key, fraction, frame_key, truth_f64, yes};
use model::Sample;

/// A frame matching `pattern` (regex over resolved names, code versions merged) is present
/// (or absent) in at least `min_share` of the samples.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FrameCheck {
    pub pattern: String,
    #[serde(default = "yes")]
    pub present: bool,
    #[serde(default)]
    pub leaf_only: bool,
    #[serde(default)]
    pub min_share: Option<f64>,
    /// Only samples of the thread whose id truth.json gives at this path (e.g. the blocked
    /// thread of the off-CPU workload). Tids are as the collector's pid namespace sees them.
    #[serde(default)]
    pub tid_truth: Option<String>,
    /// Only samples of this kind (`blocked` / `preempted` off-CPU samples, `managed` /
    /// `external` SampleProfiler samples).
    #[serde(default)]
    pub sample_kind: Option<String>,
    /// With `min_share`: the fewest samples the share's denominator needs to decide (default 1:
    /// a share of nothing decides nothing). Below it the check is inconclusive.
    #[serde(default)]
    pub min_samples: Option<u64>,
}

impl Judge for FrameCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.tid_truth.iter().map(String::as_str).collect()
    }
    fn default_name(&self) -> String {
        format!("frame {} `{}`", if self.present { "present" } else { "absent" }, self.pattern)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.pattern).map_err(|e| bad_key("pattern", format!("bad regex `{}`: {e}", self.pattern)))?;
        fraction("min_share", self.min_share)?;
        if self.min_samples.is_some() && (self.min_share.is_none() || !self.present) {
            return Err(bad_key("min_samples", "`min_samples` of a frame check is the floor of its `min_share`: set `min_share` too"));
        }
        Ok(())
    }

    fn sampled(&self) -> bool {
        self.present && self.min_share.is_some()
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let FrameCheck { pattern, present, leaf_only, min_share, tid_truth, sample_kind, min_samples } = self;
        let c = ev.read(collector)?;
        let re = Regex::new(pattern).map_err(|e| e.to_string())?;
        let tid = tid_truth.as_deref().map(|p| truth_f64(ev.truth_for(&c.collector), p)).transpose()?.map(|t| t as u32);
        let (mut hit, mut total, mut counted) = (0u64, 0u64, 0u64);
        let kind_ok = |s: &Sample| sample_kind.as_deref().is_none_or(|k| s.kind.as_deref() == Some(k));
        for s in c.samples.iter().filter(|s| tid.is_none_or(|t| s.tid == t) && kind_ok(s)) {
            total += s.weight;
            counted += 1;
            let frames = if *leaf_only { s.frames.get(..1).unwrap_or(&[]) } else { &s.frames[..] };
            if frames.iter().any(|f| re.is_match(&frame_key(f))) {
                hit += s.weight;
            }
        }
        let share = if total > 0 { hit as f64 / total as f64 } else { 0.0 };
        let pass = if *present { hit > 0 && min_share.is_none_or(|m| share >= m) } else { hit == 0 };
        let mut expected = match (present, min_share) {
            (true, Some(m)) => format!("in ≥ {} of {}", percent(*m), if c.weight_ns { "off-CPU time" } else { "samples" }),
            (true, None) => "present".into(),
            (false, _) => "absent".into(),
        };
        if let Some(t) = tid {
            expected.push_str(&format!(" (thread {t} only)"));
        }
        if let Some(k) = sample_kind {
            expected.push_str(&format!(" ({k} samples only)"));
        }
        let check = Check::new(
            name,
            collector.or(Some(&c.collector)),
            pass,
            expected,
            format!("in {} of {} ({})", weight(hit, c.weight_ns), weight(total, c.weight_ns), percent(share)),
        )
        .value("share", share)
        .value("samples", counted as f64);
        Ok(match (present, min_share) {
            (true, Some(_)) => floor(check, counted, min_samples.unwrap_or(1), "samples in the share's denominator"),
            _ => check,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame, sample};
    use model::{Collection, DsoClass};

    fn check(pattern: &str, present: bool, leaf_only: bool, min_share: Option<f64>) -> FrameCheck {
        FrameCheck { pattern: pattern.into(), present, leaf_only, min_share, tid_truth: None, sample_kind: None, min_samples: None }
    }

    #[test]
    fn presence_share_and_leaf_only() {
        let mut c = Collection::new("perf-cpu");
        for _ in 0..3 {
            c.samples.push(sample(vec![frame("W::Hot()[OptimizedTier1]", DsoClass::Jit), frame("W::Main()", DsoClass::Jit)]));
        }
        c.samples.push(sample(vec![frame("memmove", DsoClass::Libc)]));
        let judged = evaluate_on(&check("W::Hot\\(\\)$", true, false, Some(0.7)), &[c.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.name, "frame present `W::Hot\\(\\)$`");
        assert_eq!(judged.measured, "in 3 samples of 4 samples (75.0 %)");
        assert_eq!(judged.collector.as_deref(), Some("perf-cpu"));
        // Main is never a leaf, and an absent frame must really be absent.
        assert_eq!(evaluate_on(&check("Main", true, true, None), &[c.clone()], serde_json::json!({})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check("Main", false, false, None), &[c.clone()], serde_json::json!({})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check("Cold", false, false, None), &[c], serde_json::json!({})).verdict, Verdict::Pass);
    }

    #[test]
    fn off_cpu_weight_prints_as_time_and_an_empty_denominator_is_inconclusive() {
        let mut c = Collection::new("perf-offcpu");
        c.weight_ns = true;
        let mut s = sample(vec![frame("W::Wait()", DsoClass::Jit)]);
        s.weight = 3_786_080_327;
        c.samples.push(s.clone());
        s.frames = vec![frame("W::Spin()", DsoClass::Jit)];
        s.weight = 2_887_966;
        c.samples.push(s);
        let judged = evaluate_on(&check("Wait", true, false, Some(0.9)), &[c.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.expected, "in ≥ 90.0 % of off-CPU time");
        assert_eq!(judged.measured, "in 3.79 s of 3.79 s (99.9 %)");
        let floored = FrameCheck { min_samples: Some(3), ..check("Wait", true, false, Some(0.9)) };
        let judged = evaluate_on(&floored, &[c.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Inconclusive, "{judged:?}");
        assert!(judged.reason.as_deref().unwrap().starts_with("2 samples in the share's denominator, below the floor of 3"));
        let judged = evaluate_on(&check("Wait", true, false, Some(0.9)), &[Collection::new("perf-offcpu")], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Inconclusive, "{judged:?}");
    }

    #[test]
    fn a_thread_from_truth_that_truth_lacks_is_a_failed_check_saying_so() {
        let mut c = Collection::new("offcpu");
        c.samples.push(sample(vec![frame("W::Wait()", DsoClass::Jit)]));
        let mut by_tid = check("Wait", true, false, None);
        by_tid.tid_truth = Some("threads.blocked".into());
        let judged = evaluate_on(&by_tid, &[c.clone()], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.expected.as_str()), (Verdict::Fail, "evaluable"));
        assert!(judged.measured.contains("threads.blocked"), "{}", judged.measured);
        let judged = evaluate_on(&by_tid, &[c], serde_json::json!({"threads": {"blocked": 1}}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert!(judged.expected.ends_with("(thread 1 only)"), "{}", judged.expected);
    }
}
