//! `kind = "event_balance"`: two events that come in pairs (GC start/end, suspend/restart) are
//! seen about equally often — a lost-event detector that needs no truth from the app.

use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, count_events, two};

/// |count(a) − count(b)| ≤ max_diff.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventBalanceCheck {
    pub a: String,
    pub b: String,
    #[serde(default = "two")]
    pub max_diff: u64,
}

impl Judge for EventBalanceCheck {
    fn default_name(&self) -> String {
        format!("{} vs {} balance", self.a, self.b)
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let EventBalanceCheck { a, b, max_diff } = self;
        let c = ev.read(collector)?;
        let (na, nb) = (count_events(c, a, None), count_events(c, b, None));
        let diff = na.abs_diff(nb);
        Ok(Check::new(
            name,
            Some(&c.collector),
            na > 0 && nb > 0 && diff <= *max_diff,
            format!("|{a} − {b}| ≤ {max_diff}, both > 0"),
            format!("{a} {na}, {b} {nb} (diff {diff})"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, event};
    use model::Collection;

    #[test]
    fn pairs_balance_within_max_diff_and_never_on_zero() {
        let mut c = Collection::new("lttng");
        for _ in 0..5 {
            c.events.push(event("GCStart_V2"));
        }
        for _ in 0..3 {
            c.events.push(event("GCEnd_V1"));
        }
        let check = |max_diff| EventBalanceCheck { a: "GCStart".into(), b: "GCEnd".into(), max_diff };
        let judged = evaluate_on(&check(2), &[c.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!((judged.name.as_str(), judged.measured.as_str()), ("GCStart vs GCEnd balance", "GCStart 5, GCEnd 3 (diff 2)"));
        assert_eq!(evaluate_on(&check(1), &[c], serde_json::json!({})).verdict, Verdict::Fail);
        assert_eq!(evaluate_on(&check(9), &[Collection::new("lttng")], serde_json::json!({})).verdict, Verdict::Fail);
    }
}
