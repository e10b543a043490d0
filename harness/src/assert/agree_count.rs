//! `kind = "agree_count"`: collectors that watched the same run count the same event alike — a
//! check that needs no truth, so it covers events the app cannot count itself.

use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, count_events, two};

/// Two collectors agree on an event count within `tolerance`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgreeCountCheck {
    pub event: String,
    pub collectors: Vec<String>,
    #[serde(default = "two")]
    pub tolerance: u64,
}

impl Judge for AgreeCountCheck {
    fn default_name(&self) -> String {
        format!("{} count agrees across {}", self.event, self.collectors.join(", "))
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(self.collectors.iter().map(String::as_str).collect())
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let AgreeCountCheck { event, collectors, tolerance } = self;
        let mut counts = vec![];
        for cname in collectors {
            counts.push((cname.clone(), count_events(ev.read(Some(cname))?, event, None)));
        }
        let lo = counts.iter().map(|c| c.1).min().unwrap_or(0);
        let hi = counts.iter().map(|c| c.1).max().unwrap_or(0);
        Ok(Check::new(
            name,
            None,
            lo > 0 && hi - lo <= *tolerance,
            format!("within ± {tolerance}, all > 0"),
            counts.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", "),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assert::Verdict;
    use crate::assert::testing::{evaluate_on, event};
    use crate::model::Collection;

    #[test]
    fn counts_agree_within_tolerance_and_a_missing_collector_says_so() {
        let (mut a, mut b) = (Collection::new("lttng"), Collection::new("eventpipe"));
        for _ in 0..10 {
            a.events.push(event("GCStart_V2"));
        }
        for _ in 0..8 {
            b.events.push(event("GCStart"));
        }
        let check = |tolerance| AgreeCountCheck { event: "GCStart".into(), collectors: vec!["lttng".into(), "eventpipe".into()], tolerance };
        let judged = evaluate_on(&check(2), &[a.clone(), b.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!((judged.name.as_str(), judged.measured.as_str()), ("GCStart count agrees across lttng, eventpipe", "lttng 10, eventpipe 8"));
        assert_eq!(evaluate_on(&check(1), &[a.clone(), b], serde_json::json!({})).verdict, Verdict::Fail);
        let judged = evaluate_on(&check(2), &[a], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "no data from collector `eventpipe`"));
    }
}
