//! `kind = "event_count"`: how many events of one name a collector saw, against literal bounds or
//! the workload's own count (truth.json) — event collectors are judged by what the app did.

use serde::{Deserialize, Serialize};

use super::{Check, EVENT_COUNT_TOLERANCE, Evidence, Judge, bounds_text, count_events, truth_f64, within};

/// Count of events named `event` (version suffix ignored) against literal bounds or truth.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventCountCheck {
    pub event: String,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub min: Option<u64>,
    #[serde(default)]
    pub max: Option<u64>,
    /// Count must be ≥ this truth value.
    #[serde(default)]
    pub at_least_truth: Option<String>,
    /// Count must equal this truth value within `tolerance`.
    #[serde(default)]
    pub equals_truth: Option<String>,
    #[serde(default)]
    pub tolerance: Option<u64>,
}

impl Judge for EventCountCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.at_least_truth.iter().chain(&self.equals_truth).map(String::as_str).collect()
    }
    fn default_name(&self) -> String {
        format!("{} count", self.event)
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let EventCountCheck { event, provider, min, max, at_least_truth, equals_truth, tolerance } = self;
        let c = ev.read(collector)?;
        let n = count_events(c, event, provider.as_deref());
        let mut pass = within(n as f64, min.map(|v| v as f64), max.map(|v| v as f64));
        let mut expected = vec![];
        if min.is_some() || max.is_some() {
            expected.push(bounds_text(min.map(|v| v as f64), max.map(|v| v as f64)));
        }
        if let Some(path) = at_least_truth {
            let t = truth_f64(ev.truth_for(&c.collector), path)?;
            pass &= n as f64 >= t;
            expected.push(format!("≥ {t} (truth `{path}`)"));
        }
        if let Some(path) = equals_truth {
            let t = truth_f64(ev.truth_for(&c.collector), path)?;
            let tol = tolerance.unwrap_or(EVENT_COUNT_TOLERANCE);
            pass &= (n as f64 - t).abs() <= tol as f64;
            expected.push(format!("{t} ± {tol} (truth `{path}`)"));
        }
        if n == 0 && min.is_none() && at_least_truth.is_none() && equals_truth.is_none() {
            // "Never pass on zero": a count with no lower bound still has to see something.
            pass = false;
            expected.push("> 0".into());
        }
        Ok(Check::new(name, Some(&c.collector), pass, expected.join(" and "), n.to_string()).value("count", n as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assert::testing::{evaluate_on, event};
    use crate::assert::{Verdict, exceptions_by_type_message};
    use crate::model::Collection;

    fn count(event: &str) -> EventCountCheck {
        EventCountCheck {
            event: event.into(),
            provider: None,
            min: None,
            max: None,
            at_least_truth: None,
            equals_truth: None,
            tolerance: None,
        }
    }

    #[test]
    fn event_counts_ignore_version_suffix_and_never_pass_on_zero() {
        let mut c = Collection::new("lttng");
        c.events.push(event("GCStart_V2"));
        c.events.push(event("GCStart"));
        c.events.push(event("ExceptionThrown_V1"));
        assert_eq!(count_events(&c, "GCStart", None), 2);
        assert_eq!(exceptions_by_type_message(&c).get("E: m"), Some(&1));
        let check = evaluate_on(&count("GCEnd"), &[c], serde_json::json!({}));
        assert_eq!(check.verdict, Verdict::Fail);
    }

    #[test]
    fn counts_against_truth_within_tolerance() {
        let mut c = Collection::new("lttng");
        for _ in 0..9 {
            c.events.push(event("GCStart_V2"));
        }
        let truth = serde_json::json!({"gc": {"induced": 10}});
        let equals = EventCountCheck { equals_truth: Some("gc.induced".into()), ..count("GCStart") };
        let check = evaluate_on(&equals, &[c.clone()], truth.clone());
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert_eq!((check.name.as_str(), check.expected.as_str()), ("GCStart count", "10 ± 2 (truth `gc.induced`)"));
        let at_least = EventCountCheck { at_least_truth: Some("gc.induced".into()), min: Some(1), ..count("GCStart") };
        let check = evaluate_on(&at_least, &[c], truth);
        assert_eq!(check.verdict, Verdict::Fail);
        assert_eq!(check.expected, "≥ 1 and ≥ 10 (truth `gc.induced`)");
    }
}
