//! `kind = "event_count"`: how many events of one name a collector saw, against literal bounds or
//! the workload's own count (truth.json) — event collectors are judged by what the app did.

use serde::{Deserialize, Serialize};

use super::{Check, EVENT_COUNT_TOLERANCE, Evidence, Judge, bounds_text, count_events, strip_version, truth_f64, within};

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
    /// With `equals_truth`: the allowed difference is the larger of `tolerance` and this
    /// percentage of the truth (`tolerance_pct = 2` with `tolerance = 2`: ±2 % or ±2 events).
    #[serde(default)]
    pub tolerance_pct: Option<f64>,
    /// Count only events whose field `field` matches the regex `matches` (both or neither):
    /// `field = "TypeName"`, `matches = "^System\\.Int64\\[\\]$"`.
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub matches: Option<String>,
}

impl EventCountCheck {
    fn filter(&self) -> anyhow::Result<Option<(&str, regex::Regex)>> {
        match (&self.field, &self.matches) {
            (None, None) => Ok(None),
            (Some(f), Some(m)) => Ok(Some((f.as_str(), regex::Regex::new(m).map_err(|e| anyhow::anyhow!("`matches`: {e}"))?))),
            _ => anyhow::bail!("`field` and `matches` go together: count events whose `field` matches the regex `matches`"),
        }
    }
}

impl Judge for EventCountCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.at_least_truth.iter().chain(&self.equals_truth).map(String::as_str).collect()
    }
    fn default_name(&self) -> String {
        match (&self.field, &self.matches) {
            (Some(f), Some(m)) => format!("{} count ({f} ~ /{m}/)", self.event),
            _ => format!("{} count", self.event),
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.filter().map(|_| ())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let EventCountCheck { event, provider, min, max, at_least_truth, equals_truth, tolerance, tolerance_pct, .. } = self;
        let c = ev.read(collector)?;
        let n = match self.filter().map_err(|e| e.to_string())? {
            None => count_events(c, event, provider.as_deref()),
            Some((field, re)) => {
                let want = strip_version(event);
                c.events
                    .iter()
                    .filter(|e| strip_version(&e.name) == want)
                    .filter(|e| provider.as_deref().is_none_or(|p| e.provider.to_ascii_lowercase().contains(&p.to_ascii_lowercase())))
                    .filter(|e| e.fields.get(field).and_then(|v| v.as_str()).is_some_and(|s| re.is_match(s)))
                    .count() as u64
            }
        };
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
            let tol = tolerance.unwrap_or(EVENT_COUNT_TOLERANCE) as f64;
            let allowed = tolerance_pct.map_or(tol, |pct| tol.max(t.abs() * pct / 100.0));
            pass &= (n as f64 - t).abs() <= allowed;
            match tolerance_pct {
                Some(pct) => expected.push(format!("{t} ± {allowed:.1} (± {pct} % or ± {tol}, truth `{path}`)")),
                None => expected.push(format!("{t} ± {tol} (truth `{path}`)")),
            }
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
    use crate::testing::{evaluate_on, event};
    use crate::{Verdict, exceptions_by_type_message};
    use model::Collection;

    fn count(event: &str) -> EventCountCheck {
        EventCountCheck {
            event: event.into(),
            provider: None,
            min: None,
            max: None,
            at_least_truth: None,
            equals_truth: None,
            tolerance: None,
            tolerance_pct: None,
            field: None,
            matches: None,
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

    #[test]
    fn percentage_tolerance_widens_only_past_the_absolute_one() {
        let mut c = Collection::new("lttng");
        for _ in 0..196 {
            c.events.push(event("ContentionStart_V2"));
        }
        let pct = |truth: u64| {
            let check = EventCountCheck {
                equals_truth: Some("contention.n".into()),
                tolerance_pct: Some(2.0),
                ..count("ContentionStart")
            };
            evaluate_on(&check, &[c.clone()], serde_json::json!({"contention": {"n": truth}}))
        };
        // 2 % of 200 is 4: 196 passes; 2 % of 50 is 1, so ±2 holds: 196 vs 50 fails.
        let check = pct(200);
        assert_eq!((check.verdict, check.expected.as_str()), (Verdict::Pass, "200 ± 4.0 (± 2 % or ± 2, truth `contention.n`)"));
        assert_eq!(pct(199).verdict, Verdict::Pass);
        assert_eq!(pct(205).verdict, Verdict::Fail);
        assert_eq!(pct(50).verdict, Verdict::Fail);
    }

    #[test]
    fn a_field_filter_counts_matching_events_only() {
        let mut c = Collection::new("eventpipe");
        for (i, ty) in ["System.Int64[]", "System.Int32[]", "System.Int64[]"].iter().enumerate() {
            let mut e = event("GCAllocationTick_V4");
            e.fields.insert("TypeName".into(), model::Value::Str(ty.to_string()));
            e.fields.insert("Index".into(), model::Value::U64(i as u64));
            c.events.push(e);
        }
        let check = EventCountCheck {
            field: Some("TypeName".into()),
            matches: Some(r"^System\.Int64\[\]$".into()),
            min: Some(2),
            max: Some(2),
            ..count("GCAllocationTick")
        };
        let judged = evaluate_on(&check, &[c.clone()], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Pass, "2"), "{judged:?}");
        assert_eq!(judged.name, r"GCAllocationTick count (TypeName ~ /^System\.Int64\[\]$/)");
        // A number field never matches a text pattern; half a filter is refused at load.
        let numeric = EventCountCheck { field: Some("Index".into()), matches: Some("1".into()), ..count("GCAllocationTick") };
        assert_eq!(evaluate_on(&numeric, &[c], serde_json::json!({})).verdict, Verdict::Fail);
        assert!(EventCountCheck { field: Some("TypeName".into()), ..count("X") }.validate().is_err());
        assert!(EventCountCheck { field: Some("T".into()), matches: Some("(".into()), ..count("X") }.validate().is_err());
    }
}
