//! `kind = "stack_count"`: how many samples of one kind have a frame matching a pattern — for
//! traced events (a system call each) that is an exact count per method, held against the
//! count the app made (`equals_truth`, exact unless `tolerance` says otherwise) or a bound.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, bad_key, bounds_text, frame_key, truth_f64, within};
use model::nearest_managed;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StackCountCheck {
    /// Regex over resolved frame names (code versions merged).
    pub pattern: String,
    /// Only samples of this kind (a system call: `openat`, `connect`, `vfork` …).
    pub sample_kind: String,
    /// The count must equal this truth value within `tolerance` (default 0: exact).
    #[serde(default)]
    pub equals_truth: Option<String>,
    #[serde(default)]
    pub tolerance: Option<u64>,
    #[serde(default)]
    pub min: Option<u64>,
    #[serde(default)]
    pub max: Option<u64>,
}

impl Judge for StackCountCheck {
    fn lost_caller_samples(&self, c: &model::Collection) -> u64 {
        super::with_lost_caller(c)
    }

    fn truth_paths(&self) -> Vec<&str> {
        self.equals_truth.iter().map(String::as_str).collect()
    }

    fn default_name(&self) -> String {
        format!("{} calls from `{}`", self.sample_kind, self.pattern)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.pattern).map_err(|e| bad_key("pattern", format!("bad regex `{}`: {e}", self.pattern)))?;
        if self.equals_truth.is_none() && self.min.is_none() && self.max.is_none() {
            bail!("a stack_count check needs `equals_truth`, `min` or `max`");
        }
        if self.tolerance.is_some() && self.equals_truth.is_none() {
            return Err(bad_key("tolerance", "`tolerance` is the tolerance of `equals_truth`: set `equals_truth` too"));
        }
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let c = ev.read(collector)?;
        let re = Regex::new(&self.pattern).map_err(|e| e.to_string())?;
        let (mut hit, mut of_kind) = (0u64, 0u64);
        // Where the calls without the frame came from, for a reader of a failure.
        let mut elsewhere: BTreeMap<String, u64> = BTreeMap::new();
        for s in c.samples.iter().filter(|s| s.kind.as_deref() == Some(self.sample_kind.as_str())) {
            of_kind += 1;
            if s.frames.iter().any(|f| re.is_match(&frame_key(f))) {
                hit += 1;
            } else {
                let from = nearest_managed(&s.frames).map(|m| model::merge_code_version(m).to_string());
                *elsewhere.entry(from.unwrap_or_else(|| "no managed frame".into())).or_default() += 1;
            }
        }
        let mut pass = within(hit as f64, self.min.map(|v| v as f64), self.max.map(|v| v as f64));
        let mut expected = Vec::new();
        if self.min.is_some() || self.max.is_some() {
            expected.push(bounds_text(self.min.map(|v| v as f64), self.max.map(|v| v as f64)));
        }
        let mut truth_value = None;
        if let Some(path) = &self.equals_truth {
            let t = truth_f64(ev.truth_for(&c.collector), path)?;
            let tol = self.tolerance.unwrap_or(0);
            pass &= (hit as f64 - t).abs() <= tol as f64;
            expected.push(if tol == 0 { format!("exactly {t} (truth `{path}`)") } else { format!("{t} ± {tol} (truth `{path}`)") });
            truth_value = Some(t);
        }
        // Never pass on zero: a count the app says is zero proves nothing about the stacks.
        if hit == 0 {
            pass = false;
            expected.push("> 0".into());
        }
        let mut top: Vec<(String, u64)> = elsewhere.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1));
        let rest: Vec<String> = top.iter().take(3).map(|(m, n)| format!("{m} ×{n}")).collect();
        let measured = format!(
            "{hit} of {of_kind} `{}` calls{}",
            self.sample_kind,
            if rest.is_empty() { String::new() } else { format!("; the others from {}", rest.join(", ")) }
        );
        let mut check = Check::new(name, Some(&c.collector), pass, expected.join(", "), measured).value("count", hit as f64).value("of_kind", of_kind as f64);
        if let Some(t) = truth_value {
            check = check.value("truth", t);
        }
        // A lost record may be a missed call: a count that falls short with losses decides nothing.
        if c.lost_events > 0 && check.verdict == super::Verdict::Fail && truth_value.is_some_and(|t| (hit as f64) < t) {
            let reason = format!("the collector lost {} records, any of which may be a missed call", c.lost_events);
            check = super::sufficiency::inconclusive(check, reason);
        }
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame};
    use model::{Collection, DsoClass, Sample};

    fn call(kind: &str, method: &str) -> Sample {
        Sample { kind: Some(kind.into()), ..Sample::new(1, 1, 0, vec![frame(method, DsoClass::Jit)]) }
    }

    fn check(truth: Option<&str>, tolerance: Option<u64>) -> StackCountCheck {
        StackCountCheck { pattern: "::Open\\b".into(), sample_kind: "openat".into(), equals_truth: truth.map(String::from), tolerance, min: None, max: None }
    }

    #[test]
    fn exact_counts_per_method() {
        let mut c = Collection::new("perf-syscalls");
        c.samples.extend((0..3).map(|_| call("openat", "W::Open()")));
        c.samples.push(call("openat", "W::Load()"));
        c.samples.push(call("read", "W::Open()"));
        let ok = evaluate_on(&check(Some("n"), None), &[c.clone()], serde_json::json!({"n": 3}));
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
        assert!(ok.measured.contains("3 of 4") && ok.measured.contains("W::Load() ×1"), "{}", ok.measured);
        assert_eq!(evaluate_on(&check(Some("n"), None), &[c.clone()], serde_json::json!({"n": 4})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check(Some("n"), Some(1)), &[c.clone()], serde_json::json!({"n": 4})).verdict, Verdict::Pass);
        assert_eq!(evaluate_on(&check(Some("n"), None), &[c.clone()], serde_json::json!({"n": 0})).verdict, Verdict::Fail);
        c.lost_events = 2;
        assert_eq!(evaluate_on(&check(Some("n"), None), &[c.clone()], serde_json::json!({"n": 4})).verdict, Verdict::Inconclusive);
        assert_eq!(evaluate_on(&check(Some("n"), None), &[c], serde_json::json!({"n": 2})).verdict, Verdict::Fail, "more than truth is wrong whatever was lost");
    }

    #[test]
    fn settings_are_checked_when_loaded() {
        assert!(check(None, None).validate().unwrap_err().to_string().contains("equals_truth"));
        assert!(StackCountCheck { min: Some(1), ..check(None, Some(1)) }.validate().unwrap_err().to_string().contains("tolerance"));
    }
}
