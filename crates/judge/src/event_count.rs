//! `kind = "event_count"`: how many events of one name a collector saw, against literal bounds or
//! the workload's own count (truth.json) — event collectors are judged by what the app did.

use serde::{Deserialize, Serialize};

use super::{Check, EVENT_COUNT_TOLERANCE, Evidence, Judge, bounds_text, count_events, strip_version, truth_f64, within};
use model::{Event, Value};

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
    /// Count only events whose field `field` matches the regex `matches` (a number field by its
    /// decimal text) or equals `equals`: `field = "TypeName"`, `matches = "^System\\.Int64\\[\\]$"`;
    /// `field = "Reason"`, `equals = 1` (an induced GC).
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub matches: Option<String>,
    #[serde(default)]
    pub equals: Option<FieldValue>,
    /// Count only events whose fields all equal these typed values (beside or instead of
    /// `field`): `where = { Reason = 1, Depth = 2 }`, induced gen-2 GCs.
    #[serde(default, rename = "where")]
    pub where_: std::collections::BTreeMap<String, FieldValue>,
}

/// A field's value as a scenario writes it: a number (`equals = 1`, `equals = 0.5`) or a text
/// (`equals = "System.Int64[]"`). Typed both ways: a number equals a number field of that value
/// whatever its width or sign, and never a text; `equals = "1"` equals the text `1` only.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    Integer(i64),
    Float(f64),
    Text(String),
}

impl FieldValue {
    fn equals(&self, field: &Value) -> bool {
        match (self, field) {
            (FieldValue::Integer(want), Value::U64(v)) => u64::try_from(*want).is_ok_and(|w| w == *v),
            (FieldValue::Integer(want), Value::I64(v)) => want == v,
            (FieldValue::Integer(want), Value::F64(v)) => *want as f64 == *v,
            (FieldValue::Float(want), Value::U64(v)) => *want == *v as f64,
            (FieldValue::Float(want), Value::I64(v)) => *want == *v as f64,
            (FieldValue::Float(want), Value::F64(v)) => want == v,
            (FieldValue::Text(want), Value::Str(v)) => want == v,
            _ => false,
        }
    }
}

impl std::fmt::Display for FieldValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FieldValue::Integer(v) => write!(f, "{v}"),
            FieldValue::Float(v) => write!(f, "{v}"),
            FieldValue::Text(v) => write!(f, "{v:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for FieldValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor rather than `untagged`: each form is taken as it is written, never coerced,
        // and anything else is an error saying what may be written.
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = FieldValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FieldValue, E> {
                Ok(FieldValue::Integer(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FieldValue, E> {
                i64::try_from(v).map(FieldValue::Integer).map_err(|_| E::custom(format!("{v} is beyond a 64-bit signed integer")))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<FieldValue, E> {
                Ok(FieldValue::Float(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FieldValue, E> {
                Ok(FieldValue::Text(v.to_string()))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl Serialize for FieldValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FieldValue::Integer(v) => s.serialize_i64(*v),
            FieldValue::Float(v) => s.serialize_f64(*v),
            FieldValue::Text(v) => s.serialize_str(v),
        }
    }
}

/// Which events of the name count.
enum Filter<'a> {
    Matches(&'a str, regex::Regex),
    Equals(&'a str, &'a FieldValue),
}

impl Filter<'_> {
    fn field(&self) -> &str {
        match self {
            Filter::Matches(f, _) | Filter::Equals(f, _) => f,
        }
    }

    fn keeps(&self, e: &Event) -> bool {
        let Some(v) = e.fields.get(self.field()) else { return false };
        match self {
            // A number is matched by its decimal text, as the runtime's manifest writes it
            // (GC `Reason` 1 is `^1$`): a pattern that could never match a number field once
            // counted 0 where the truth said 25.
            Filter::Matches(_, re) => match v {
                Value::Str(s) => re.is_match(s),
                Value::U64(n) => re.is_match(&n.to_string()),
                Value::I64(n) => re.is_match(&n.to_string()),
                Value::F64(n) => re.is_match(&n.to_string()),
                Value::Bytes(_) => false,
            },
            Filter::Equals(_, want) => want.equals(v),
        }
    }
}

impl EventCountCheck {
    /// Every condition an event must meet: `field`'s, then each of `where`'s.
    fn filters(&self) -> anyhow::Result<Vec<Filter<'_>>> {
        let mut all: Vec<Filter<'_>> = self.filter()?.into_iter().collect();
        all.extend(self.where_.iter().map(|(f, v)| Filter::Equals(f, v)));
        Ok(all)
    }

    fn filter(&self) -> anyhow::Result<Option<Filter<'_>>> {
        match (&self.field, &self.matches, &self.equals) {
            (None, None, None) => Ok(None),
            (Some(f), Some(m), None) => Ok(Some(Filter::Matches(f, regex::Regex::new(m).map_err(|e| crate::bad_key("matches", format!("`matches`: {e}")))?))),
            (Some(f), None, Some(v)) => Ok(Some(Filter::Equals(f, v))),
            (Some(_), Some(_), Some(_)) => Err(crate::bad_key("equals", "give `matches` (a regex) or `equals` (a value), not both")),
            (Some(_), None, None) => Err(crate::bad_key("field", "`field` needs `matches` (a regex over its text or decimal number) or `equals` (a number or a string)")),
            (None, Some(_), _) => Err(crate::bad_key("matches", "`matches` needs `field`: the event field it is matched against")),
            (None, None, Some(_)) => Err(crate::bad_key("equals", "`equals` needs `field`: the event field it is compared with")),
        }
    }
}

impl Judge for EventCountCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.at_least_truth.iter().chain(&self.equals_truth).map(String::as_str).collect()
    }
    fn default_name(&self) -> String {
        let mut conditions: Vec<String> = match (&self.field, &self.matches, &self.equals) {
            (Some(f), Some(m), _) => vec![format!("{f} ~ /{m}/")],
            (Some(f), None, Some(v)) => vec![format!("{f} = {v}")],
            _ => vec![],
        };
        conditions.extend(self.where_.iter().map(|(f, v)| format!("{f} = {v}")));
        if conditions.is_empty() { format!("{} count", self.event) } else { format!("{} count ({})", self.event, conditions.join(", ")) }
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.filter()?;
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(crate::bad_key("max", format!("`max` ({max}) is below `min` ({min}): no count passes")));
        }
        if let Some(t) = self.tolerance_pct.filter(|t| !(0.0..).contains(t)) {
            return Err(crate::bad_key("tolerance_pct", format!("`tolerance_pct` is ≥ 0, got {t}")));
        }
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let EventCountCheck { event, provider, min, max, at_least_truth, equals_truth, tolerance, tolerance_pct, .. } = self;
        let read = ev.read(collector)?;
        // Held against the truth: the events of the window the truth counts.
        let measured = (at_least_truth.is_some() || equals_truth.is_some()).then(|| crate::measured_events(read));
        let c = measured.as_ref().unwrap_or(read);
        let filters = self.filters().map_err(|e| e.to_string())?;
        let n = if filters.is_empty() {
            count_events(c, event, provider.as_deref())
        } else {
            let want = strip_version(event);
            let named: Vec<&Event> = c
                .events
                .iter()
                .filter(|e| strip_version(&e.name) == want)
                .filter(|e| provider.as_deref().is_none_or(|p| e.provider.to_ascii_lowercase().contains(&p.to_ascii_lowercase())))
                .collect();
            // A field no event has is a misspelt name, not a count of 0.
            for filter in &filters {
                if let Some(first) = named.first()
                    && !named.iter().any(|e| e.fields.contains_key(filter.field()))
                {
                    let fields = first.fields.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                    return Err(format!("no {event} event has a field `{}` (its fields: {fields})", filter.field()));
                }
            }
            named.iter().filter(|e| filters.iter().all(|f| f.keeps(e))).count() as u64
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
            equals: None,
            where_: Default::default(),
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
    fn counts_against_truth_are_of_the_measured_window() {
        // LTTng set up before the launch recorded one GC of the app's startup, which the
        // workload's truth (counted from its release) does not hold.
        let mut c = Collection::new("lttng");
        c.measured_ns = Some((1_000, 9_000));
        for t in [500, 2_000, 3_000, 4_000] {
            c.events.push(model::Event { time_ns: t, ..event("GCStart_V2") });
        }
        let truth = serde_json::json!({"gc": {"collections_total": 3}});
        let equals = EventCountCheck { equals_truth: Some("gc.collections_total".into()), tolerance: Some(0), ..count("GCStart") };
        let check = evaluate_on(&equals, &[c.clone()], truth.clone());
        assert_eq!((check.verdict, check.measured.as_str()), (Verdict::Pass, "3"), "{check:?}");
        // Without the truth every event counts; a window no event lies in (another clock) leaves all.
        assert_eq!(evaluate_on(&EventCountCheck { min: Some(1), ..count("GCStart") }, &[c.clone()], truth.clone()).measured, "4");
        c.measured_ns = Some((50_000, 60_000));
        assert_eq!(evaluate_on(&equals, &[c], truth).measured, "4");
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
        // A number field is matched by its decimal text; half a filter is refused at load,
        // naming the key to fix.
        let numeric = EventCountCheck { field: Some("Index".into()), matches: Some("^[12]$".into()), ..count("GCAllocationTick") };
        let judged = evaluate_on(&numeric, &[c.clone()], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Pass, "2"), "{judged:?}");
        let key_of = |check: EventCountCheck| check.validate().unwrap_err().downcast::<crate::BadKey>().unwrap().key;
        assert_eq!(key_of(EventCountCheck { field: Some("TypeName".into()), ..count("X") }), "field");
        assert_eq!(key_of(EventCountCheck { field: Some("T".into()), matches: Some("(".into()), ..count("X") }), "matches");
        assert_eq!(key_of(EventCountCheck { matches: Some("a".into()), ..count("X") }), "matches");
        assert_eq!(key_of(EventCountCheck { equals: Some(FieldValue::Integer(1)), ..count("X") }), "equals");
        let both = EventCountCheck { field: Some("T".into()), matches: Some("a".into()), equals: Some(FieldValue::Integer(1)), ..count("X") };
        assert_eq!(key_of(both), "equals");
        // A misspelt field is named with the fields there are, not counted as 0.
        let typo = EventCountCheck { field: Some("Indx".into()), equals: Some(FieldValue::Integer(1)), ..count("GCAllocationTick") };
        let judged = evaluate_on(&typo, &[c], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Fail);
        assert!(judged.measured.contains("no GCAllocationTick event has a field `Indx` (its fields: "), "{}", judged.measured);
    }

    #[test]
    fn typed_equals_counts_numbers_as_numbers_and_texts_as_texts() {
        let mut c = Collection::new("lttng");
        for (reason, depth) in [(1u64, 2i64), (0, 0), (1, 2), (1, 1)] {
            let mut e = event("GCStart_V2");
            e.fields.insert("Reason".into(), Value::U64(reason));
            e.fields.insert("Depth".into(), Value::I64(depth));
            e.fields.insert("Kind".into(), Value::Str(reason.to_string()));
            c.events.push(e);
        }
        let by = |field: &str, value: FieldValue| EventCountCheck {
            field: Some(field.into()),
            equals: Some(value),
            equals_truth: Some("gc.induced".into()),
            tolerance: Some(0),
            ..count("GCStart")
        };
        let truth = serde_json::json!({"gc": {"induced": 3}});
        let judged = evaluate_on(&by("Reason", FieldValue::Integer(1)), &[c.clone()], truth.clone());
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Pass, "3"), "{judged:?}");
        assert_eq!(judged.name, "GCStart count (Reason = 1)");
        assert_eq!(evaluate_on(&by("Depth", FieldValue::Float(2.0)), &[c.clone()], serde_json::json!({"gc": {"induced": 2}})).measured, "2");
        // Typed: the text "1" is not the number 1, nor the number 1 a text.
        assert_eq!(evaluate_on(&by("Reason", FieldValue::Text("1".into())), &[c.clone()], truth.clone()).measured, "0");
        assert_eq!(evaluate_on(&by("Kind", FieldValue::Integer(1)), &[c.clone()], truth.clone()).measured, "0");
        assert_eq!(evaluate_on(&by("Kind", FieldValue::Text("1".into())), &[c.clone()], truth).measured, "3");
        assert!(!FieldValue::Integer(-1).equals(&Value::U64(u64::MAX)));
    }

    #[test]
    fn where_counts_events_meeting_every_condition() {
        let mut c = Collection::new("lttng");
        for (reason, depth) in [(1u64, 2u64), (1, 0), (0, 2), (1, 2)] {
            let mut e = event("GCStart_V2");
            e.fields.insert("Reason".into(), Value::U64(reason));
            e.fields.insert("Depth".into(), Value::U64(depth));
            c.events.push(e);
        }
        let induced_gen2 = EventCountCheck {
            where_: [("Reason".to_string(), FieldValue::Integer(1)), ("Depth".to_string(), FieldValue::Integer(2))].into(),
            min: Some(2),
            max: Some(2),
            ..count("GCStart")
        };
        let judged = evaluate_on(&induced_gen2, &[c.clone()], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Pass, "2"), "{judged:?}");
        assert_eq!(judged.name, "GCStart count (Depth = 2, Reason = 1)");
        // Beside `field`, and a misspelt condition named.
        let both = EventCountCheck { field: Some("Reason".into()), equals: Some(FieldValue::Integer(1)), where_: [("Depth".to_string(), FieldValue::Integer(0))].into(), ..count("GCStart") };
        assert_eq!(evaluate_on(&both, &[c.clone()], serde_json::json!({})).measured, "1");
        let typo = EventCountCheck { where_: [("Dept".to_string(), FieldValue::Integer(2))].into(), ..count("GCStart") };
        assert!(evaluate_on(&typo, &[c], serde_json::json!({})).measured.contains("no GCStart event has a field `Dept`"));
    }

    #[test]
    fn equals_is_read_typed_from_a_scenario() {
        #[derive(Deserialize)]
        struct E {
            equals: FieldValue,
        }
        let read = |text: &str| serde_json::from_str::<E>(text).map(|e| e.equals).map_err(|e| e.to_string());
        assert_eq!(read(r#"{"equals": 1}"#), Ok(FieldValue::Integer(1)));
        assert_eq!(read(r#"{"equals": 0.5}"#), Ok(FieldValue::Float(0.5)));
        assert_eq!(read(r#"{"equals": "1"}"#), Ok(FieldValue::Text("1".into())));
        assert!(read(r#"{"equals": true}"#).unwrap_err().contains("a number or a string"));
        assert_eq!(serde_json::to_string(&FieldValue::Text("a".into())).unwrap(), r#""a""#);
    }
}
