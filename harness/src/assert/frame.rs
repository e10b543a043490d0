//! `kind = "frame"`: a frame matching a pattern is present (or absent) in the samples — the
//! plainest question a profile answers, and the one a user asks first of their own app.

use anyhow::{Context, Result};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, frame_key, truth_f64, yes};
use crate::model::Sample;

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
}

impl Judge for FrameCheck {
    fn default_name(&self) -> String {
        format!("frame {} `{}`", if self.present { "present" } else { "absent" }, self.pattern)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.pattern).with_context(|| format!("bad regex `{}`", self.pattern))?;
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let FrameCheck { pattern, present, leaf_only, min_share, tid_truth, sample_kind } = self;
        let c = ev.read(collector)?;
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
        let pass = if *present { hit > 0 && min_share.is_none_or(|m| share >= m) } else { hit == 0 };
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
        Ok(Check::new(
            name,
            collector.or(Some(&c.collector)),
            pass,
            expected,
            format!("in {hit} of {total} sample weight ({:.1} %)", share * 100.0),
        )
        .value("share", share))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assert::Verdict;
    use crate::assert::testing::{evaluate_on, frame, sample};
    use crate::model::{Collection, DsoClass};

    fn check(pattern: &str, present: bool, leaf_only: bool, min_share: Option<f64>) -> FrameCheck {
        FrameCheck { pattern: pattern.into(), present, leaf_only, min_share, tid_truth: None, sample_kind: None }
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
        assert_eq!(judged.measured, "in 3 of 4 sample weight (75.0 %)");
        assert_eq!(judged.collector.as_deref(), Some("perf-cpu"));
        // Main is never a leaf, and an absent frame must really be absent.
        assert_eq!(evaluate_on(&check("Main", true, true, None), &[c.clone()], serde_json::json!({})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check("Main", false, false, None), &[c.clone()], serde_json::json!({})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check("Cold", false, false, None), &[c], serde_json::json!({})).verdict, Verdict::Pass);
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
