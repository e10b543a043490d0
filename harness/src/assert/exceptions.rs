//! `kind = "exceptions"`: the exceptions a collector saw, by type and message, equal the ones the
//! app threw (truth.json) — exactly, since a lost or invented exception is a collector bug.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, exceptions_by_type_message, truth_value};

/// Exceptions by "type: message" equal truth's map at `truth` exactly.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExceptionsCheck {
    pub truth: String,
    /// Only exception types matching this regex are compared.
    #[serde(default)]
    pub type_pattern: Option<String>,
}

impl Judge for ExceptionsCheck {
    fn truth_paths(&self) -> Vec<&str> {
        vec![self.truth.as_str()]
    }
    fn default_name(&self) -> String {
        "exceptions by type and message".into()
    }

    fn validate(&self) -> Result<()> {
        if let Some(p) = &self.type_pattern {
            Regex::new(p).with_context(|| format!("bad regex `{p}`"))?;
        }
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let ExceptionsCheck { truth, type_pattern } = self;
        let c = ev.read(collector)?;
        let want = truth_value(ev.truth_for(&c.collector), truth)
            .and_then(|v| v.as_object())
            .ok_or_else(|| format!("truth.json has no map at `{truth}`"))?;
        let filter = type_pattern.as_deref().map(Regex::new).transpose().map_err(|e| e.to_string())?;
        let keep = |k: &str| filter.as_ref().is_none_or(|re| re.is_match(k.split(": ").next().unwrap_or(k)));
        let want: BTreeMap<String, u64> =
            want.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect();
        let got: BTreeMap<String, u64> = exceptions_by_type_message(c).into_iter().filter(|(k, _)| keep(k)).collect();
        let fmt = |m: &BTreeMap<String, u64>| m.iter().map(|(k, v)| format!("{k} ×{v}")).collect::<Vec<_>>().join("; ");
        Ok(Check::new(name, Some(&c.collector), !want.is_empty() && want == got, fmt(&want), fmt(&got))
            .value("count", got.values().sum::<u64>() as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assert::Verdict;
    use crate::assert::testing::{evaluate_on, event};
    use crate::model::{Collection, Value};

    #[test]
    fn exceptions_match_truth_exactly_within_the_type_filter() {
        let mut c = Collection::new("eventpipe");
        c.events.push(event("ExceptionThrown_V1"));
        let mut other = event("ExceptionThrown_V1");
        other.fields.insert("ExceptionType".into(), Value::Str("Other".into()));
        c.events.push(other);
        let truth = serde_json::json!({"exceptions": {"E: m": 1}});
        let all = ExceptionsCheck { truth: "exceptions".into(), type_pattern: None };
        let judged = evaluate_on(&all, &[c.clone()], truth.clone());
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "E: m ×1; Other: m ×1"));
        let only_e = ExceptionsCheck { type_pattern: Some("^E$".into()), ..all.clone() };
        let judged = evaluate_on(&only_e, &[c.clone()], truth);
        assert_eq!((judged.verdict, judged.expected.as_str()), (Verdict::Pass, "E: m ×1"));
        assert_eq!(judged.name, "exceptions by type and message");
        // No map in truth: a failed check that says so.
        let judged = evaluate_on(&all, &[c], serde_json::json!({}));
        assert_eq!(judged.measured, "truth.json has no map at `exceptions`");
        assert!(ExceptionsCheck { type_pattern: Some("(".into()), ..all }.validate().is_err());
    }
}
