//! `kind = "metric"`: a number the run itself measured (overhead, lost events, a collector's
//! figures such as a counter's median or a dump's thread count — the manifest's `metrics`)
//! within bounds: literal ones, the workload's truth (`equals_truth` ± `tolerance` or
//! `tolerance_pct`, `min_truth`, `max_truth`), or both. It reads no collector's data directly,
//! so it takes no `collector`.

use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, bad_key, bounds_text, truth_f64, within};

/// A run metric (manifest `metrics`) within bounds.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricCheck {
    pub metric: String,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// The metric must equal this truth value within `tolerance` (absolute) or `tolerance_pct`
    /// (percent of the truth value); neither given = exactly.
    #[serde(default)]
    pub equals_truth: Option<String>,
    #[serde(default)]
    pub tolerance: Option<f64>,
    #[serde(default)]
    pub tolerance_pct: Option<f64>,
    /// The metric must be ≥ / ≤ this truth value (e.g. the least and most threads the app saw).
    #[serde(default)]
    pub min_truth: Option<String>,
    #[serde(default)]
    pub max_truth: Option<String>,
}

impl Judge for MetricCheck {
    fn default_name(&self) -> String {
        format!("metric {}", self.metric)
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(vec![])
    }

    fn truth_paths(&self) -> Vec<&str> {
        [&self.equals_truth, &self.min_truth, &self.max_truth].into_iter().flatten().map(String::as_str).collect()
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.equals_truth.is_none() && (self.tolerance.is_some() || self.tolerance_pct.is_some()) {
            let key = if self.tolerance.is_some() { "tolerance" } else { "tolerance_pct" };
            return Err(bad_key(key, "`tolerance` and `tolerance_pct` go with `equals_truth`"));
        }
        if self.tolerance.is_some() && self.tolerance_pct.is_some() {
            return Err(bad_key("tolerance_pct", "give `tolerance` (absolute) or `tolerance_pct`, not both"));
        }
        if let Some(t) = self.tolerance.or(self.tolerance_pct).filter(|t| !(*t >= 0.0)) {
            let key = if self.tolerance.is_some() { "tolerance" } else { "tolerance_pct" };
            return Err(bad_key(key, format!("a tolerance is ≥ 0, got {t}")));
        }
        Ok(())
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let MetricCheck { metric, min, max, equals_truth, tolerance, tolerance_pct, min_truth, max_truth } = self;
        let v = *ev.metrics.get(metric).ok_or_else(|| format!("no metric `{metric}` in this run"))?;
        let mut pass = within(v, *min, *max);
        let mut expected = vec![];
        if min.is_some() || max.is_some() || self.truth_paths().is_empty() {
            expected.push(bounds_text(*min, *max));
        }
        if let Some(path) = equals_truth {
            let t = truth_f64(ev.truth, path)?;
            let (tol, text) = match (tolerance, tolerance_pct) {
                (_, Some(pct)) => (t.abs() * pct / 100.0, format!("{pct} %")),
                (Some(abs), None) => (*abs, format!("{abs}")),
                (None, None) => (0.0, "0".to_string()),
            };
            pass &= (v - t).abs() <= tol;
            expected.push(format!("{t} ± {text} (truth `{path}`)"));
        }
        if let Some(path) = min_truth {
            let t = truth_f64(ev.truth, path)?;
            pass &= v >= t;
            expected.push(format!("≥ {t} (truth `{path}`)"));
        }
        if let Some(path) = max_truth {
            let t = truth_f64(ev.truth, path)?;
            pass &= v <= t;
            expected.push(format!("≤ {t} (truth `{path}`)"));
        }
        Ok(Check::new(name, None, pass, expected.join(" and "), format!("{v:.4}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on_metrics, evaluate_on_metrics_and_truth};

    #[test]
    fn metric_within_bounds_or_missing() {
        let metrics = [("overhead_pct".to_string(), 3.25)].into();
        let check = |max| MetricCheck { metric: "overhead_pct".into(), max, ..MetricCheck::default() };
        let judged = evaluate_on_metrics(&check(Some(5.0)), &metrics);
        assert_eq!((judged.verdict, judged.name.as_str()), (Verdict::Pass, "metric overhead_pct"));
        assert_eq!((judged.expected.as_str(), judged.measured.as_str()), ("≤ 5", "3.2500"));
        assert_eq!(evaluate_on_metrics(&check(Some(3.0)), &metrics).verdict, Verdict::Fail);
        let judged = evaluate_on_metrics(&MetricCheck { metric: "lost".into(), min: Some(0.0), ..MetricCheck::default() }, &metrics);
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "no metric `lost` in this run"));
    }

    #[test]
    fn metric_against_truth() {
        let metrics = [("dump.mini.threads".to_string(), 11.0), ("counters.cpu".to_string(), 24.0)].into();
        let truth = serde_json::json!({"dump": {"threads": {"min": 11, "max": 12}}, "cpu": 25.0});
        let within_truth = MetricCheck {
            metric: "dump.mini.threads".into(),
            min_truth: Some("dump.threads.min".into()),
            max_truth: Some("dump.threads.max".into()),
            ..MetricCheck::default()
        };
        let judged = evaluate_on_metrics_and_truth(&within_truth, &metrics, truth.clone());
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.expected, "≥ 11 (truth `dump.threads.min`) and ≤ 12 (truth `dump.threads.max`)");
        let close = |tolerance, tolerance_pct| MetricCheck {
            metric: "counters.cpu".into(),
            equals_truth: Some("cpu".into()),
            tolerance,
            tolerance_pct,
            ..MetricCheck::default()
        };
        assert_eq!(evaluate_on_metrics_and_truth(&close(Some(1.0), None), &metrics, truth.clone()).verdict, Verdict::Pass);
        assert_eq!(evaluate_on_metrics_and_truth(&close(Some(0.5), None), &metrics, truth.clone()).verdict, Verdict::Fail);
        assert_eq!(evaluate_on_metrics_and_truth(&close(None, Some(4.0)), &metrics, truth.clone()).verdict, Verdict::Pass);
        assert_eq!(evaluate_on_metrics_and_truth(&close(None, None), &metrics, truth.clone()).verdict, Verdict::Fail);
        let judged = evaluate_on_metrics_and_truth(&MetricCheck { equals_truth: Some("nope".into()), ..close(None, None) }, &metrics, truth);
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "truth.json has no number at `nope`"));
        assert!(close(Some(1.0), Some(1.0)).validate().is_err());
        assert!(MetricCheck { tolerance: Some(1.0), ..MetricCheck::default() }.validate().is_err());
        assert!(close(Some(-1.0), None).validate().is_err());
    }
}
