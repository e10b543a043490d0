//! `kind = "exceptions"`: the exceptions a collector saw, by type and message, equal the ones the
//! app threw (truth.json) — exactly, since a lost or invented exception is a collector bug — and,
//! with `throw_site`, each one's recorded stack names the method that threw it as its top
//! managed frame.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, exceptions_by_type_message, strip_version, truth_value};
use model::{Event, Frame};

/// Exceptions by "type: message" equal truth's map at `truth` exactly; and/or every exception's
/// top managed frame is the throwing method.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExceptionsCheck {
    /// Truth path of the map "type: message" → count.
    #[serde(default)]
    pub truth: Option<String>,
    /// Only exception types matching this regex are compared.
    #[serde(default)]
    pub type_pattern: Option<String>,
    /// Truth path of the throwing method, `Type.Method` (namespace optional): every
    /// ExceptionThrown kept by `type_pattern` must have it as its top managed frame.
    #[serde(default)]
    pub throw_site: Option<String>,
    /// The throwing method spelled in the scenario, for an app that writes no truth.
    #[serde(default)]
    pub throw_method: Option<String>,
}

/// Frames of the runtime's own exception dispatch, above the throwing method on the stack the
/// runtime records with ExceptionThrown: .NET 9+ dispatches exceptions in managed code
/// (System.Private.CoreLib's `System.Runtime.EH`, called from the throw helper), so the event
/// fires with those frames on top.
const DISPATCH_FRAMES: &[&str] = &["System.Runtime.EH::"];

/// The top managed frame of an event's stack, runtime dispatch frames skipped: `Namespace.Type.Method`
/// (no parameters), `[unknown]` for a frame no method range covers, `[no stack]` for none.
pub fn top_managed_frame(frames: &[Frame]) -> String {
    let Some(f) = frames.iter().find(|f| !f.name.as_deref().is_some_and(|n| DISPATCH_FRAMES.iter().any(|d| n.starts_with(d)))) else {
        return "[no stack]".into();
    };
    match &f.name {
        Some(n) => method_label(n),
        None => "[unknown]".into(),
    }
}

/// `Namespace.Type::Method(params)` → `Namespace.Type.Method`.
fn method_label(name: &str) -> String {
    let without_params = name.find('(').map_or(name, |i| &name[..i]);
    without_params.replace("::", ".")
}

/// Whether `label` (`Namespace.Type.Method`) is the method `site` names (`Type.Method`, with or
/// without its namespace, `::` or `.` between type and method).
fn is_site(label: &str, site: &str) -> bool {
    let site = site.replace("::", ".");
    label == site || label.strip_suffix(site.as_str()).is_some_and(|ns| ns.ends_with('.'))
}

impl Judge for ExceptionsCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.truth.iter().chain(&self.throw_site).map(String::as_str).collect()
    }
    fn truth_maps(&self) -> Vec<&str> {
        self.truth.iter().map(String::as_str).collect()
    }
    fn default_name(&self) -> String {
        match (&self.truth, self.throw_site.is_some() || self.throw_method.is_some()) {
            (Some(_), false) => "exceptions by type and message".into(),
            (None, _) => "exceptions at their throw site".into(),
            (Some(_), true) => "exceptions by type and message, at their throw site".into(),
        }
    }

    fn validate(&self) -> Result<()> {
        if let Some(p) = &self.type_pattern {
            Regex::new(p).with_context(|| format!("bad regex `{p}`"))?;
        }
        if self.throw_site.is_some() && self.throw_method.is_some() {
            bail!("give `throw_site` (a truth path) or `throw_method` (the method itself), not both");
        }
        if self.truth.is_none() && self.throw_site.is_none() && self.throw_method.is_none() {
            bail!("an `exceptions` check needs `truth` (exceptions by type and message) and/or `throw_site` / `throw_method`");
        }
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let read = ev.read(collector)?;
        // Held against the truth: the exceptions of the window the truth counts.
        let measured = self.truth.is_some().then(|| crate::measured_events(read));
        let c = measured.as_ref().unwrap_or(read);
        let truth = ev.truth_for(&c.collector);
        let filter = self.type_pattern.as_deref().map(Regex::new).transpose().map_err(|e| e.to_string())?;
        let keep = |k: &str| filter.as_ref().is_none_or(|re| re.is_match(k));
        let fmt = |m: &BTreeMap<String, u64>| m.iter().map(|(k, v)| format!("{k} ×{v}")).collect::<Vec<_>>().join("; ");
        let (mut pass, mut expected, mut measured) = (true, Vec::new(), Vec::new());
        let mut count = None;
        if let Some(path) = &self.truth {
            let want = truth_value(truth, path).and_then(|v| v.as_object()).ok_or_else(|| format!("truth.json has no map at `{path}`"))?;
            let type_of = |k: &str| k.split(": ").next().unwrap_or(k).to_string();
            // A value that is not a count was never an exception's: most often a truth key split
            // at the dots of its type's namespace (`App.Errors.Bad: m` read as `App` → …).
            // Every value is checked before `type_pattern` filters: a split key's first part
            // (`Shop`) matches no pattern and would vanish unseen.
            let want: BTreeMap<String, u64> = want
                .iter()
                .map(|(k, v)| {
                    // A count derived by `truth.map` is a JSON float (25.0): a whole one counts.
                    let whole = v.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0).map(|f| f as u64);
                    v.as_u64().or(whole).map(|n| (k.clone(), n)).ok_or_else(|| {
                        format!(
                            "truth `{path}` holds `{k}` = {v}, not a count of exceptions: quote a key whose type has dots \
                             (`{path}.\"Namespace.Type: message\"` in `truth.map`)"
                        )
                    })
                })
                .collect::<Result<BTreeMap<_, _>, _>>()?
                .into_iter()
                .filter(|(k, _)| keep(&type_of(k)))
                .collect();
            let got: BTreeMap<String, u64> = exceptions_by_type_message(c).into_iter().filter(|(k, _)| keep(&type_of(k))).collect();
            pass &= !want.is_empty() && want == got;
            count = Some(got.values().sum::<u64>());
            expected.push(fmt(&want));
            measured.push(fmt(&got));
        }
        let site = match (&self.throw_site, &self.throw_method) {
            (Some(path), _) => Some(
                truth_value(truth, path).and_then(|v| v.as_str()).ok_or_else(|| format!("truth.json has no method name at `{path}`"))?.to_string(),
            ),
            (None, Some(m)) => Some(m.clone()),
            (None, None) => None,
        };
        if let Some(site) = site {
            let thrown: Vec<&Event> = c
                .events
                .iter()
                .filter(|e| strip_version(&e.name) == "ExceptionThrown")
                .filter(|e| keep(e.fields.get("ExceptionType").and_then(|v| v.as_str()).unwrap_or("?")))
                .collect();
            let mut tops: BTreeMap<String, u64> = BTreeMap::new();
            for e in &thrown {
                *tops.entry(top_managed_frame(&e.frames)).or_insert(0) += 1;
            }
            let at_site: u64 = tops.iter().filter(|(label, _)| is_site(label, &site)).map(|(_, n)| n).sum();
            pass &= !thrown.is_empty() && at_site == thrown.len() as u64;
            expected.push(format!("top managed frame {site} for every ExceptionThrown"));
            measured.push(format!("{} ExceptionThrown, top managed frame: {}", thrown.len(), fmt(&tops)));
            count.get_or_insert(thrown.len() as u64);
        }
        Ok(Check::new(name, Some(&c.collector), pass, expected.join(" | "), measured.join(" | ")).value("count", count.unwrap_or(0) as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, event};
    use model::{Collection, Value};

    #[test]
    fn exceptions_match_truth_exactly_within_the_type_filter() {
        let mut c = Collection::new("eventpipe");
        c.events.push(event("ExceptionThrown_V1"));
        let mut other = event("ExceptionThrown_V1");
        other.fields.insert("ExceptionType".into(), Value::Str("Other".into()));
        c.events.push(other);
        let truth = serde_json::json!({"exceptions": {"E: m": 1}});
        let all = ExceptionsCheck { truth: Some("exceptions".into()), type_pattern: None, throw_site: None, throw_method: None };
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

    #[test]
    fn a_truth_split_at_a_types_dots_is_named_not_counted_as_zero() {
        let mut c = Collection::new("lttng");
        let mut e = event("ExceptionThrown_V1");
        e.fields.insert("ExceptionType".into(), Value::Str("App.Errors.Bad".into()));
        c.events.push(e);
        let check = ExceptionsCheck { truth: Some("exceptions".into()), type_pattern: None, throw_site: None, throw_method: None };
        let split = serde_json::json!({"exceptions": {"App": {"Errors": {"Bad: m": 1}}}});
        let judged = evaluate_on(&check, &[c.clone()], split.clone());
        assert_eq!(judged.verdict, Verdict::Fail);
        assert!(judged.measured.contains("holds `App` = {") && judged.measured.contains("quote a key"), "{}", judged.measured);
        // Named even where `type_pattern` would have dropped the split key's first part.
        let filtered = ExceptionsCheck { type_pattern: Some(r"^App\.Errors\.Bad$".into()), ..check.clone() };
        assert!(evaluate_on(&filtered, &[c.clone()], split).measured.contains("holds `App` = {"));
        let whole = serde_json::json!({"exceptions": {"App.Errors.Bad: m": 1}});
        assert_eq!(evaluate_on(&check, &[c.clone()], whole).verdict, Verdict::Pass);
        // As `truth.map` derives it: a float, whole.
        let derived = serde_json::json!({"exceptions": {"App.Errors.Bad: m": 1.0}});
        assert_eq!(evaluate_on(&check, &[c.clone()], derived).verdict, Verdict::Pass);
        let half = serde_json::json!({"exceptions": {"App.Errors.Bad: m": 0.5}});
        assert!(evaluate_on(&check, &[c], half).measured.contains("not a count"));
    }

    fn frame(name: &str) -> Frame {
        Frame { name: Some(name.into()), dso: None, class: model::DsoClass::Jit, addr: 0 }
    }

    #[test]
    fn the_throw_site_is_the_top_managed_frame_below_the_runtimes_dispatch() {
        let at = |frames: Vec<Frame>| {
            let mut e = event("ExceptionThrown");
            e.frames = frames;
            e
        };
        let thrower = frame("Tracelab.Workloads.RuntimeEvents::ThrowAtSite(int32)");
        let caller = frame("Tracelab.Workloads.RuntimeEvents::Exceptions(class WorkloadContext)");
        let dispatch = frame("System.Runtime.EH::RhThrowEx(object,value class StackFrameIterator&)");
        let mut c = Collection::new("eventpipe");
        c.events.push(at(vec![dispatch.clone(), thrower.clone(), caller.clone()]));
        c.events.push(at(vec![thrower.clone(), caller.clone()]));
        let truth = serde_json::json!({"exceptions": {"throw_site": "RuntimeEvents.ThrowAtSite"}});
        let check = ExceptionsCheck { truth: None, type_pattern: None, throw_site: Some("exceptions.throw_site".into()), throw_method: None };
        check.validate().unwrap();
        let judged = evaluate_on(&check, &[c.clone()], truth.clone());
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "2 ExceptionThrown, top managed frame: Tracelab.Workloads.RuntimeEvents.ThrowAtSite ×2");
        // Thrown from the caller, or with no stack: named as such, and a failure.
        c.events.push(at(vec![caller.clone()]));
        c.events.push(at(vec![]));
        let judged = evaluate_on(&check, &[c.clone()], truth.clone());
        assert_eq!(judged.verdict, Verdict::Fail);
        assert!(judged.measured.contains("[no stack] ×1") && judged.measured.contains("RuntimeEvents.Exceptions ×1"), "{}", judged.measured);
        // A method name that only ends like the site is another method.
        let other = ExceptionsCheck { throw_method: Some("AtSite".into()), throw_site: None, ..check.clone() };
        assert_eq!(evaluate_on(&other, &[c.clone()], truth.clone()).verdict, Verdict::Fail);
        // No exceptions at all is no evidence of a throw site.
        assert_eq!(evaluate_on(&check, &[Collection::new("eventpipe")], truth).verdict, Verdict::Fail);
        assert!(ExceptionsCheck { throw_method: Some("A.B".into()), ..check.clone() }.validate().is_err());
        assert!(ExceptionsCheck { throw_site: None, ..check }.validate().is_err());
    }
}
