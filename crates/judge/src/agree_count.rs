//! `kind = "agree_count"`: collectors that watched the same run count the same events alike — a
//! check that needs no truth, so it covers events the app cannot count itself.
//!
//! With `event = "*"` it compares every event type any of the collectors saw that each of them
//! can carry (LTTng carries only the runtime's own providers; EventPipe transports carry every
//! provider), and writes the parity table — event type × collector, with the truth where the
//! scenario names one — into the check's details (manifest.json and summary.md). `fields`
//! compares the values of matched events too (`GCStart.Count`: the multiset of Count values of
//! each collector's GCStart events); `truth` holds counts against the workload's own; `except`
//! leaves event types out of the verdict (they stay in the table), each with the reason.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, bad_key, count_events, strip_version, truth_f64, two};
use model::{Collection, Value};

/// Collectors agree on event counts within `tolerance` (or `tolerance_pct` % of the largest).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgreeCountCheck {
    /// One event name (version suffix ignored), or `*`: every event type.
    pub event: String,
    pub collectors: Vec<String>,
    #[serde(default = "two")]
    pub tolerance: u64,
    /// The allowed difference is the larger of `tolerance` and this percentage of the largest count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_pct: Option<f64>,
    /// `Event.Field` values compared between collectors (multisets of the field's values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Event name → truth path: every collector's count is held against it too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub truth: BTreeMap<String, String>,
    /// Event name → why its counts may differ between these transports (kept in the table).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub except: BTreeMap<String, String>,
    /// With `event = "*"`: compare only the event types this collector recorded (a peer such as
    /// perfcollect, which the others are held to); what only the others recorded is listed, each
    /// with its `except` reason when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// An event type across transports: the provider without `Microsoft-Windows-` (LTTng's spelling)
/// and the name without its version suffix.
type EventType = (String, String);

fn event_type(provider: &str, name: &str) -> EventType {
    (provider.strip_prefix("Microsoft-Windows-").unwrap_or(provider).to_string(), strip_version(name).to_string())
}

/// LTTng carries the runtime's providers only (`DotNETRuntime*` tracepoints); an EventPipe
/// transport carries every provider of its session.
fn carries(c: &Collection, ty: &EventType) -> bool {
    !c.metrics.contains_key("lttng.events") || ty.0.starts_with("DotNETRuntime")
}

fn value_text(v: &Value) -> String {
    match v {
        Value::U64(x) => x.to_string(),
        Value::I64(x) => x.to_string(),
        Value::F64(x) => x.to_string(),
        Value::Str(s) => s.clone(),
        Value::Bytes(b) => format!("{} bytes", b.len()),
    }
}

impl AgreeCountCheck {
    fn every_type(&self) -> bool {
        self.event == "*"
    }

    fn allowed(&self, largest: u64) -> f64 {
        let tol = self.tolerance as f64;
        self.tolerance_pct.map_or(tol, |pct| tol.max(largest as f64 * pct / 100.0))
    }

    /// Per collector, the multiset of `field` values of events named `name`.
    fn field_values(c: &Collection, name: &str, field: &str) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in c.events.iter().filter(|e| strip_version(&e.name) == name) {
            let v = e.fields.get(field).map_or("(absent)".to_string(), value_text);
            *out.entry(v).or_insert(0) += 1;
        }
        out
    }
}

impl Judge for AgreeCountCheck {
    fn default_name(&self) -> String {
        if self.every_type() {
            format!("every event type counted alike by {}", self.collectors.join(", "))
        } else {
            format!("{} count agrees across {}", self.event, self.collectors.join(", "))
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.collectors.len() < 2 {
            return Err(bad_key("collectors", format!("`collectors` needs at least two collectors to compare, found {}", self.collectors.len())));
        }
        if let Some(bad) = self.fields.iter().find(|f| f.split_once('.').is_none_or(|(e, f)| e.is_empty() || f.is_empty())) {
            return Err(bad_key("fields", format!("`fields` entry `{bad}` is not `Event.Field` (e.g. `GCStart.Count`)")));
        }
        if !self.every_type() && !self.except.is_empty() {
            return Err(bad_key("except", format!("`except` is for `event = \"*\"` (every event type); this check compares `{}` only", self.event)));
        }
        if let Some(r) = &self.reference {
            if !self.every_type() {
                return Err(bad_key("reference", format!("`reference` is for `event = \"*\"` (every event type); this check compares `{}` only", self.event)));
            }
            if !self.collectors.contains(r) {
                return Err(bad_key("reference", format!("`reference = \"{r}\"` is not one of `collectors` ({})", self.collectors.join(", "))));
            }
        }
        if let Some(t) = self.tolerance_pct.filter(|t| !(0.0..).contains(t)) {
            return Err(bad_key("tolerance_pct", format!("`tolerance_pct` is ≥ 0, got {t}")));
        }
        Ok(())
    }

    fn truth_paths(&self) -> Vec<&str> {
        self.truth.values().map(String::as_str).collect()
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(self.collectors.iter().map(String::as_str).collect())
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let mut read = vec![];
        for cname in &self.collectors {
            read.push(ev.read(Some(cname))?);
        }
        let (compared, span_note) = in_common_span(&read);
        let cols: Vec<&Collection> = compared.iter().collect();
        if !self.every_type() {
            let counts: Vec<(String, u64)> = cols.iter().map(|c| (c.collector.clone(), count_events(c, &self.event, None))).collect();
            let lo = counts.iter().map(|c| c.1).min().unwrap_or(0);
            let hi = counts.iter().map(|c| c.1).max().unwrap_or(0);
            let allowed = self.allowed(hi);
            let mut pass = lo > 0 && (hi - lo) as f64 <= allowed;
            let mut measured: Vec<String> = counts.iter().map(|(c, n)| format!("{c} {n}")).collect();
            let mut details = vec![];
            if let Some(path) = self.truth.get(strip_version(&self.event)) {
                let t = truth_f64(ev.truth, path)?;
                pass &= counts.iter().all(|(_, n)| (*n as f64 - t).abs() <= self.allowed(t as u64));
                measured.push(format!("truth {t}"));
            }
            for spec in &self.fields {
                let (event, field) = spec.split_once('.').unwrap();
                let (ok, line) = compare_field(&cols, event, field, self.tolerance);
                pass &= ok;
                details.push(line);
            }
            let expected = match self.tolerance_pct {
                Some(pct) => format!("within ± {} % or ± {}, all > 0", pct, self.tolerance),
                None => format!("within ± {}, all > 0", self.tolerance),
            };
            details.extend(span_note);
            let mut check = Check::new(name, None, pass, expected, measured.join(", "));
            check.details = details;
            return Ok(check);
        }

        // Every event type any collector saw.
        let mut counts: BTreeMap<EventType, Vec<u64>> = BTreeMap::new();
        for (i, c) in cols.iter().enumerate() {
            for e in &c.events {
                counts.entry(event_type(&e.provider, &e.name)).or_insert_with(|| vec![0; cols.len()])[i] += 1;
            }
        }
        let mut differing = vec![];
        let mut excepted = 0;
        let header: Vec<String> = cols.iter().map(|c| c.collector.clone()).collect();
        let mut rows = vec![];
        let reference = self.reference.as_ref().and_then(|r| cols.iter().position(|c| &c.collector == r));
        let mut beyond = vec![];
        for (ty, ns) in &counts {
            if let Some(r) = reference
                && ns[r] == 0
            {
                let why = self.except.get(&ty.1).map_or(String::new(), |w| format!(": {w}"));
                let by: Vec<String> = header.iter().zip(ns).filter(|(_, n)| **n > 0).map(|(c, n)| format!("{c} {n}")).collect();
                beyond.push(format!("{}:{} ({}){why}", ty.0, ty.1, by.join(", ")));
                continue;
            }
            let carriers: Vec<usize> = (0..cols.len()).filter(|&i| carries(cols[i], ty)).collect();
            let carried: Vec<u64> = carriers.iter().map(|&i| ns[i]).collect();
            let lo = carried.iter().copied().min().unwrap_or(0);
            let hi = carried.iter().copied().max().unwrap_or(0);
            let mut ok = carriers.len() >= 2 && (hi - lo) as f64 <= self.allowed(hi);
            let truth = match self.truth.get(&ty.1) {
                Some(path) => {
                    let t = truth_f64(ev.truth, path)?;
                    ok &= carried.iter().all(|n| (*n as f64 - t).abs() <= self.allowed(t as u64));
                    format!("{t}")
                }
                None => String::new(),
            };
            let status = if carriers.len() < 2 {
                "one transport carries it".to_string()
            } else if ok {
                if lo == hi { "equal".to_string() } else { format!("within ± {:.0}", self.allowed(hi)) }
            } else if let Some(why) = self.except.get(&ty.1) {
                excepted += 1;
                format!("differs (excepted: {why})")
            } else {
                differing.push(format!("{}:{} ({})", ty.0, ty.1, header.iter().zip(ns).map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")));
                "DIFFERS".to_string()
            };
            let cells: Vec<String> = (0..cols.len()).map(|i| if carries(cols[i], ty) { ns[i].to_string() } else { "—".to_string() }).collect();
            rows.push((format!("{}:{}", ty.0, ty.1), cells, truth, status));
        }
        let mut details = parity_table(&header, &rows);
        if let (Some(r), false) = (&self.reference, beyond.is_empty()) {
            details.push(format!("recorded by the others, not by `{r}` ({} event types, not compared):", beyond.len()));
            details.extend(beyond.iter().map(|b| format!("- {b}")));
        }
        details.extend(span_note);
        let mut fields_ok = true;
        for spec in &self.fields {
            let (event, field) = spec.split_once('.').unwrap();
            let (ok, line) = compare_field(&cols, event, field, self.tolerance);
            fields_ok &= ok;
            details.push(line);
        }
        let compared = rows.iter().filter(|r| r.3 != "one transport carries it").count();
        let pass = !rows.is_empty() && differing.is_empty() && fields_ok;
        let measured = if differing.is_empty() {
            format!("{} event types, {compared} carried by ≥ 2 transports alike ({excepted} excepted)", rows.len())
        } else {
            format!("{} of {compared} event types differ: {}", differing.len(), differing.join("; "))
        };
        let expected = format!(
            "every event type{} within ± {}{} across the transports that carry it{}",
            self.reference.as_ref().map_or(String::new(), |r| format!(" `{r}` recorded")),
            self.tolerance,
            self.tolerance_pct.map_or(String::new(), |p| format!(" or ± {p} %")),
            if self.fields.is_empty() { String::new() } else { format!("; fields {} alike", self.fields.join(", ")) }
        );
        let mut check = Check::new(name, None, pass, expected, measured);
        check.details = details;
        check.values.insert("event_types".into(), counts.len() as f64);
        check.values.insert("event_types_differing".into(), differing.len() as f64);
        Ok(check)
    }
}

/// The collections as compared: each one's events in the span all of them recorded
/// ([`Collection::recorded_ns`]), so a collector that also recorded the app's startup (LTTng, set
/// up before the launch) is not held against one that started once the app was ready; and a
/// line saying what was left out. Every event where a collection does not say when it recorded,
/// or where the span would leave one none of its events (its clock would not be the others').
fn in_common_span(cols: &[&Collection]) -> (Vec<Collection>, Option<String>) {
    let spans: Option<Vec<(u64, u64)>> = cols.iter().map(|c| c.recorded_ns).collect();
    let common = spans.and_then(|s| {
        let from = s.iter().map(|r| r.0).max()?;
        let to = s.iter().map(|r| r.1).min()?;
        (from < to).then_some((from, to))
    });
    if let Some((from, to)) = common {
        let kept: Vec<Collection> = cols.iter().map(|c| crate::events_in(c, Some((from, to)))).collect();
        if !cols.iter().zip(&kept).any(|(c, k)| !c.events.is_empty() && k.events.is_empty()) {
            let left: Vec<String> = cols
                .iter()
                .zip(&kept)
                .filter(|(c, k)| c.events.len() > k.events.len())
                .map(|(c, k)| format!("{} {}", c.collector, c.events.len() - k.events.len()))
                .collect();
            let note = (!left.is_empty()).then(|| {
                format!(
                    "counted over the {:.2} s all of them recorded; events left out, recorded while another collector was not: {}",
                    (to - from) as f64 / 1e9,
                    left.join(", ")
                )
            });
            return (kept, note);
        }
    }
    (cols.iter().map(|c| crate::events_in(c, None)).collect(), None)
}

/// The parity table as aligned text lines: event type, one column per collector (— when the
/// transport cannot carry it), truth, status.
fn parity_table(header: &[String], rows: &[(String, Vec<String>, String, String)]) -> Vec<String> {
    let mut head = vec!["event type".to_string()];
    head.extend(header.iter().cloned());
    head.push("truth".into());
    head.push("status".into());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|(ty, cells, truth, status)| {
            let mut r = vec![ty.clone()];
            r.extend(cells.iter().cloned());
            r.push(truth.clone());
            r.push(status.clone());
            r
        })
        .collect();
    let widths: Vec<usize> =
        (0..head.len()).map(|i| std::iter::once(&head).chain(&body).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let line = |r: &[String]| {
        r.iter().enumerate().map(|(i, c)| format!("{c:<w$}", w = widths[i])).collect::<Vec<_>>().join("  ").trim_end().to_string()
    };
    let mut out = vec![line(&head)];
    out.extend(body.iter().map(|r| line(r)));
    out
}

/// Compares the multisets of `field` values of `event` across collectors: how many values of each
/// collector are unmatched in the first collector's (and the reverse), within `tolerance`.
fn compare_field(cols: &[&Collection], event: &str, field: &str, tolerance: u64) -> (bool, String) {
    let sets: Vec<BTreeMap<String, u64>> = cols.iter().map(|c| AgreeCountCheck::field_values(c, event, field)).collect();
    let reference = &sets[0];
    let mut ok = reference.values().sum::<u64>() > 0;
    let mut parts = vec![];
    for (c, set) in cols.iter().zip(&sets).skip(1) {
        let keys: BTreeSet<&String> = reference.keys().chain(set.keys()).collect();
        let unmatched: u64 = keys.iter().map(|k| reference.get(*k).copied().unwrap_or(0).abs_diff(set.get(*k).copied().unwrap_or(0))).sum();
        ok &= unmatched <= 2 * tolerance;
        let examples: Vec<String> = keys
            .iter()
            .filter(|k| reference.get(**k) != set.get(**k))
            .take(3)
            .map(|k| format!("`{k}` {} vs {}", reference.get(*k).copied().unwrap_or(0), set.get(*k).copied().unwrap_or(0)))
            .collect();
        parts.push(format!(
            "{} vs {}: {unmatched} unmatched{}",
            cols[0].collector,
            c.collector,
            if examples.is_empty() { String::new() } else { format!(" ({})", examples.join(", ")) }
        ));
    }
    (ok, format!("{event}.{field} values ({} events in {}): {}", reference.values().sum::<u64>(), cols[0].collector, parts.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, event};
    use model::{Collection, Event};

    fn check(event: &str, tolerance: u64) -> AgreeCountCheck {
        AgreeCountCheck {
            event: event.into(),
            collectors: vec!["lttng".into(), "eventpipe".into()],
            tolerance,
            tolerance_pct: None,
            fields: vec![],
            truth: BTreeMap::new(),
            except: BTreeMap::new(),
            reference: None,
        }
    }

    fn runtime_event(provider: &str, name: &str, field: Option<(&str, Value)>) -> Event {
        let mut e = event(name);
        e.provider = provider.into();
        if let Some((k, v)) = field {
            e.fields.insert(k.into(), v);
        }
        e
    }

    fn lttng() -> Collection {
        let mut c = Collection::new("lttng");
        c.metrics.insert("lttng.events".into(), 0.0);
        c
    }

    #[test]
    fn counts_agree_within_tolerance_and_a_missing_collector_says_so() {
        let (mut a, mut b) = (Collection::new("lttng"), Collection::new("eventpipe"));
        for _ in 0..10 {
            a.events.push(event("GCStart_V2"));
        }
        for _ in 0..8 {
            b.events.push(event("GCStart"));
        }
        let judged = evaluate_on(&check("GCStart", 2), &[a.clone(), b.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!((judged.name.as_str(), judged.measured.as_str()), ("GCStart count agrees across lttng, eventpipe", "lttng 10, eventpipe 8"));
        assert_eq!(evaluate_on(&check("GCStart", 1), &[a.clone(), b], serde_json::json!({})).verdict, Verdict::Fail);
        let judged = evaluate_on(&check("GCStart", 2), &[a], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "no data from collector `eventpipe`"));
    }

    #[test]
    fn counts_are_compared_over_the_span_all_collectors_recorded() {
        let at = |ns: u64| Event { time_ns: ns, ..event("ExceptionThrown_V1") };
        let (mut a, mut b) = (Collection::new("lttng"), Collection::new("eventpipe"));
        // LTTng recorded from the launch (one exception of the app's startup), EventPipe from ready.
        a.recorded_ns = Some((100, 10_000));
        b.recorded_ns = Some((2_000, 10_001));
        a.events.push(at(500));
        for t in [3_000, 4_000, 5_000] {
            a.events.push(at(t));
            b.events.push(at(t + 1));
        }
        let judged = evaluate_on(&check("ExceptionThrown", 0), &[a.clone(), b.clone()], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Pass, "lttng 3, eventpipe 3"), "{judged:?}");
        assert!(judged.details.iter().any(|d| d.contains("left out") && d.contains("lttng 1")), "{:?}", judged.details);
        // Without spans (or with a span that would empty a collection: another clock), every event counts.
        let judged = evaluate_on(&check("ExceptionThrown", 0), &[Collection { recorded_ns: None, ..a.clone() }, b.clone()], serde_json::json!({}));
        assert_eq!(judged.measured, "lttng 4, eventpipe 3");
        let judged = evaluate_on(&check("ExceptionThrown", 0), &[a, Collection { recorded_ns: Some((20_000, 30_000)), ..b }], serde_json::json!({}));
        assert_eq!(judged.measured, "lttng 4, eventpipe 3");
    }

    #[test]
    fn three_collectors_with_truth_and_a_percentage() {
        let mut cols = vec![];
        for (name, n) in [("lttng", 200), ("eventpipe", 197), ("dotnet-trace", 200)] {
            let mut c = Collection::new(name);
            for _ in 0..n {
                c.events.push(event("ContentionStart_V2"));
            }
            cols.push(c);
        }
        let mut ck = check("ContentionStart", 2);
        ck.collectors = vec!["lttng".into(), "eventpipe".into(), "dotnet-trace".into()];
        ck.truth.insert("ContentionStart".into(), "contention.n".into());
        let truth = serde_json::json!({"contention": {"n": 200}});
        assert_eq!(evaluate_on(&ck, &cols, truth.clone()).verdict, Verdict::Fail, "3 apart, ± 2");
        ck.tolerance_pct = Some(2.0);
        let judged = evaluate_on(&ck, &cols, truth);
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "lttng 200, eventpipe 197, dotnet-trace 200, truth 200");
    }

    #[test]
    fn every_event_type_gets_a_row_and_differences_are_named() {
        let mut a = lttng();
        let mut b = Collection::new("eventpipe");
        for i in 0..5 {
            a.events.push(runtime_event("DotNETRuntime", "GCStart_V2", Some(("Count", Value::U64(i)))));
            b.events.push(runtime_event("Microsoft-Windows-DotNETRuntime", "GCStart", Some(("Count", Value::U64(i)))));
        }
        for _ in 0..7 {
            b.events.push(runtime_event("Microsoft-Windows-DotNETRuntimeRundown", "MethodDCEndVerbose", None));
        }
        // Only EventPipe carries the EventPipe provider's own events: not a difference.
        b.events.push(runtime_event("Microsoft-DotNETCore-EventPipe", "ProcessInfo", None));
        let mut ck = check("*", 0);
        ck.fields = vec!["GCStart.Count".into()];
        let judged = evaluate_on(&ck, &[a.clone(), b.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Fail);
        assert_eq!(judged.measured, "1 of 2 event types differ: DotNETRuntimeRundown:MethodDCEndVerbose (lttng 0, eventpipe 7)");
        let table = judged.details.join("\n");
        assert!(table.contains("DotNETRuntime:GCStart") && table.contains("equal"), "{table}");
        assert!(table.contains("Microsoft-DotNETCore-EventPipe:ProcessInfo  —"), "{table}");
        assert!(table.contains("GCStart.Count values (5 events in lttng): lttng vs eventpipe: 0 unmatched"), "{table}");
        ck.except.insert("MethodDCEndVerbose".into(), "rundown: EventPipe asks for it when the session ends".into());
        let judged = evaluate_on(&ck, &[a.clone(), b.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "3 event types, 2 carried by ≥ 2 transports alike (1 excepted)");
        // A field value that differs is caught.
        b.events.push(runtime_event("Microsoft-Windows-DotNETRuntime", "GCStart", Some(("Count", Value::U64(99)))));
        a.events.push(runtime_event("DotNETRuntime", "GCStart_V2", Some(("Count", Value::U64(98)))));
        let judged = evaluate_on(&ck, &[a, b], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Fail);
        assert!(judged.details.last().unwrap().contains("2 unmatched (`98` 1 vs 0, `99` 0 vs 1)"), "{:?}", judged.details);
    }

    /// Held to a peer: only what the peer recorded is compared; what only ours recorded is listed
    /// with its reason, not held against either.
    #[test]
    fn a_reference_collector_picks_the_event_types_compared() {
        let mut ours = lttng();
        let mut peer = Collection::new("perfcollect");
        peer.metrics.insert("lttng.events".into(), 3.0);
        for _ in 0..3 {
            ours.events.push(runtime_event("DotNETRuntime", "ModuleLoad_V2", None));
            peer.events.push(runtime_event("DotNETRuntime", "ModuleLoad_V2", None));
        }
        ours.events.push(runtime_event("DotNETRuntime", "AssemblyLoad_V1", None));
        let mut ck = check("*", 0);
        ck.collectors = vec!["lttng".into(), "perfcollect".into()];
        ck.reference = Some("perfcollect".into());
        ck.except.insert("AssemblyLoad".into(), "perfcollect never enables it".into());
        let judged = evaluate_on(&ck, &[ours.clone(), peer.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!(judged.measured, "1 event types, 1 carried by ≥ 2 transports alike (0 excepted)");
        let details = judged.details.join("\n");
        assert!(details.contains("- DotNETRuntime:AssemblyLoad (lttng 1): perfcollect never enables it"), "{details}");
        // A count of the peer's that ours misses fails.
        peer.events.push(runtime_event("DotNETRuntime", "ModuleLoad_V2", None));
        let judged = evaluate_on(&ck, &[ours, peer], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Fail, "{judged:?}");
        ck.reference = Some("dotnet-trace".into());
        assert!(ck.validate().unwrap_err().to_string().contains("not one of `collectors`"));
    }

    #[test]
    fn settings_are_checked_when_the_scenario_loads() {
        let mut ck = check("GCStart", 2);
        ck.fields = vec!["Count".into()];
        assert!(ck.validate().unwrap_err().to_string().contains("`Count` is not `Event.Field`"));
        let mut ck = check("GCStart", 2);
        ck.except.insert("X".into(), "why".into());
        assert!(ck.validate().is_err());
        let mut ck = check("*", 2);
        ck.collectors.pop();
        assert!(ck.validate().is_err());
    }
}
