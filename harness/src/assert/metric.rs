//! `kind = "metric"`: a number the run itself measured (overhead, lost events …, the manifest's
//! `metrics`) within bounds. It reads no collector's data, so it takes no `collector`.

use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, bounds_text, within};

/// A run metric (manifest `metrics`) within bounds.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricCheck {
    pub metric: String,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
}

impl Judge for MetricCheck {
    fn default_name(&self) -> String {
        format!("metric {}", self.metric)
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(vec![])
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let MetricCheck { metric, min, max } = self;
        let v = *ev.metrics.get(metric).ok_or_else(|| format!("no metric `{metric}` in this run"))?;
        Ok(Check::new(name, None, within(v, *min, *max), bounds_text(*min, *max), format!("{v:.4}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assert::Verdict;
    use crate::assert::testing::evaluate_on_metrics;

    #[test]
    fn metric_within_bounds_or_missing() {
        let metrics = [("overhead_pct".to_string(), 3.25)].into();
        let check = |max| MetricCheck { metric: "overhead_pct".into(), min: None, max };
        let judged = evaluate_on_metrics(&check(Some(5.0)), &metrics);
        assert_eq!((judged.verdict, judged.name.as_str()), (Verdict::Pass, "metric overhead_pct"));
        assert_eq!((judged.expected.as_str(), judged.measured.as_str()), ("≤ 5", "3.2500"));
        assert_eq!(evaluate_on_metrics(&check(Some(3.0)), &metrics).verdict, Verdict::Fail);
        let judged = evaluate_on_metrics(&MetricCheck { metric: "lost".into(), min: Some(0.0), max: None }, &metrics);
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "no metric `lost` in this run"));
    }
}
