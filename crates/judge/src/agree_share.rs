//! `kind = "agree_share"`: two collectors that watched the same run give a method the same
//! share of the compared methods — the check a user's app gets when it declares no truth. It
//! holds where both collectors measure the same quantity (CPU-bound code, where perf cpu-clock and
//! EventPipe's SampleProfiler both see running threads); on blocked code they truly disagree
//! (SampleProfiler samples blocked threads, cpu-clock does not), and the check says so.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::units::percent;
use super::{Check, Evidence, Judge, SHARE_MIN_SAMPLES, bad_key, ShareMode, Starvation, share};

fn ten() -> f64 {
    10.0
}

/// Share of `method` among `among`, by each of two `collectors`, within `tolerance_pts` points
/// of each other.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgreeShareCheck {
    pub method: String,
    pub among: Vec<String>,
    /// Exactly two collectors.
    pub collectors: Vec<String>,
    #[serde(default = "ten")]
    pub tolerance_pts: f64,
    #[serde(default)]
    pub mode: ShareMode,
    /// The floor of compared samples, per collector.
    #[serde(default)]
    pub min_samples: Option<u64>,
}

impl Judge for AgreeShareCheck {
    fn lost_caller_samples(&self, c: &model::Collection) -> u64 {
        super::unsettled_by_lost_caller(c, &self.among, self.mode)
    }

    fn default_name(&self) -> String {
        format!("share of `{}` agrees across {}", self.method, self.collectors.join(", "))
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(self.collectors.iter().map(String::as_str).collect())
    }

    fn validate(&self) -> Result<()> {
        if self.collectors.len() != 2 {
            return Err(bad_key("collectors", format!("agree_share compares exactly two collectors, got {:?}", self.collectors)));
        }
        if !(0.0..=100.0).contains(&self.tolerance_pts) {
            return Err(bad_key("tolerance_pts", format!("agree_share `tolerance_pts` is in points between 0 and 100, not {}", self.tolerance_pts)));
        }
        super::share::compile(&self.method, &self.among)
    }

    fn sampled(&self) -> bool {
        true
    }

    fn starvation(&self) -> Starvation {
        Starvation::BetweenCollectors
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let AgreeShareCheck { method, among, collectors, tolerance_pts, mode, min_samples } = self;
        let min_n = min_samples.unwrap_or(SHARE_MIN_SAMPLES);
        let mut measured = Vec::new();
        for cname in collectors {
            let (s, n, _) = share(ev.read(Some(cname))?, method, among, *mode, None)?;
            measured.push((cname.as_str(), s, n));
        }
        let diff_pts = (measured[0].1 - measured[1].1).abs() * 100.0;
        let fewest = measured.iter().map(|m| m.2).min().unwrap_or(0);
        let check = Check::new(
            name,
            None,
            diff_pts <= *tolerance_pts,
            format!("within ± {tolerance_pts} pts of each other, ≥ {min_n} samples each"),
            format!(
                "{} (difference {diff_pts:.1} pts)",
                measured.iter().map(|(c, s, n)| format!("{c} {} over {n} samples", percent(*s))).collect::<Vec<_>>().join(", ")
            ),
        )
        .value("difference_pts", diff_pts)
        .value("share_first", measured[0].1)
        .value("share_second", measured[1].1);
        Ok(floor(check, fewest, min_n, "samples"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame, sample};
    use model::{Collection, DsoClass};

    fn split(name: &str, hot: usize, cold: usize) -> Collection {
        let mut c = Collection::new(name);
        for _ in 0..hot {
            c.samples.push(sample(vec![frame("App::Alpha()", DsoClass::Jit)]));
        }
        for _ in 0..cold {
            c.samples.push(sample(vec![frame("App::Beta()", DsoClass::Jit)]));
        }
        c
    }

    #[test]
    fn two_collectors_agree_within_tolerance_or_fail_with_both_numbers() {
        let check = |tol| AgreeShareCheck {
            method: "::Alpha".into(),
            among: vec!["::Alpha".into(), "::Beta".into()],
            collectors: vec!["perf-cpu".into(), "eventpipe".into()],
            tolerance_pts: tol,
            mode: ShareMode::Leaf,
            min_samples: Some(10),
        };
        let runs = [split("perf-cpu", 75, 25), split("eventpipe", 70, 30)];
        let judged = evaluate_on(&check(10.0), &runs, serde_json::json!(null));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "perf-cpu 75.0 % over 100 samples, eventpipe 70.0 % over 100 samples (difference 5.0 pts)");
        assert_eq!(evaluate_on(&check(4.0), &runs, serde_json::json!(null)).verdict, Verdict::Fail);
        // Too few samples on one side decides nothing.
        let thin = [split("perf-cpu", 75, 25), split("eventpipe", 3, 2)];
        assert_eq!(evaluate_on(&check(10.0), &thin, serde_json::json!(null)).verdict, Verdict::Inconclusive);
        assert!(check(10.0).validate().is_ok());
        assert!(AgreeShareCheck { collectors: vec!["a".into()], ..check(1.0) }.validate().is_err());
    }
}
