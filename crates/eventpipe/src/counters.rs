//! EventCounters: what dotnet-counters reads. A session enables an EventSource (the runtime's is
//! `System.Runtime`) with the filter argument `EventCounterIntervalSec=N`; every N seconds the
//! source writes one self-described event named `EventCounters` per counter, whose one field
//! `Payload` is a structure (TraceEvent's `CounterPayload`, the runtime's
//! `System.Diagnostics.Tracing.CounterPayload` and `IncrementingCounterPayload`):
//!
//! - a mean counter (`CounterType` "Mean": EventCounter, PollingCounter): `Name`, `DisplayName`,
//!   `Mean`, `StandardDeviation`, `Count`, `Min`, `Max`, `IntervalSec`, `Series`, `CounterType`,
//!   `Metadata`, `DisplayUnits`;
//! - a sum counter (`CounterType` "Sum": IncrementingEventCounter, IncrementingPollingCounter):
//!   `Name`, `DisplayName`, `DisplayRateTimeScale`, `Increment` (the change over the interval),
//!   `IntervalSec`, `Metadata`, `Series`, `CounterType`, `DisplayUnits`.
//!
//! [`counter_sample`] reads one decoded event (the nettrace decoder flattens the structure into
//! `Payload.Name` …); a payload that lacks what its type needs is an error naming its offset.
//! .NET 9+ also publishes the `System.Runtime` *Meter* (System.Diagnostics.Metrics, read through
//! the `System.Diagnostics.Metrics` EventSource with its own session arguments and
//! string-encoded values); this module reads EventCounters, which .NET 10 still writes under the
//! names dotnet-counters has always shown (`cpu-usage`, `gc-heap-size` …).

use crate::decode::DecodedEvent;
use crate::error::{Error, Result};
use crate::payload::Value;

/// The runtime's EventSource of counters.
pub const RUNTIME_COUNTERS: &str = "System.Runtime";
/// The name of every counter event.
pub const COUNTER_EVENT: &str = "EventCounters";

/// The provider argument that makes an EventSource write its counters every `seconds`.
pub fn interval_argument(seconds: u32) -> String {
    format!("EventCounterIntervalSec={seconds}")
}

/// How a counter aggregates over an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// A gauge: the mean of the values polled or written in the interval.
    Mean,
    /// A rate: how much the counted quantity grew in the interval.
    Sum,
}

/// One counter's value for one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterSample {
    pub provider: String,
    /// `cpu-usage`, `gc-heap-size` …
    pub name: String,
    pub display_name: String,
    pub units: String,
    pub kind: CounterKind,
    /// `Mean` for a mean counter, `Increment` for a sum counter.
    pub value: f64,
    /// Seconds the interval lasted, as the source measured it.
    pub interval_s: f64,
    pub time_ns: u64,
}

fn field<'a>(ev: &'a DecodedEvent, name: &str) -> Option<&'a Value> {
    let nested = format!("Payload.{name}");
    ev.fields.iter().find(|(k, _)| *k == nested || *k == name).map(|(_, v)| v)
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::U64(u) => Some(*u as f64),
        Value::I64(i) => Some(*i as f64),
        _ => None,
    }
}

/// The counter an `EventCounters` event carries; `None` for any other event.
pub fn counter_sample(ev: &DecodedEvent) -> Result<Option<CounterSample>> {
    if ev.name != COUNTER_EVENT {
        return Ok(None);
    }
    let at = ev.payload_offset;
    let bad = |what: String| Error::format(at, format_args!("{} {COUNTER_EVENT} payload: {what}", ev.provider));
    if ev.fields.is_empty() {
        return Err(bad("no fields (the payload did not match the event's metadata)".into()));
    }
    let text = |name: &str| field(ev, name).and_then(Value::as_str).map(str::to_string);
    let name = text("Name").filter(|n| !n.is_empty()).ok_or_else(|| bad("no counter `Name`".into()))?;
    let kind = match text("CounterType").as_deref() {
        Some("Mean") => CounterKind::Mean,
        Some("Sum") => CounterKind::Sum,
        Some(other) => return Err(bad(format!("counter `{name}` has CounterType `{other}` (expected Mean or Sum)"))),
        None => return Err(bad(format!("counter `{name}` has no `CounterType`"))),
    };
    let value_field = if kind == CounterKind::Mean { "Mean" } else { "Increment" };
    let value = field(ev, value_field)
        .and_then(number)
        .ok_or_else(|| bad(format!("{kind:?} counter `{name}` has no number `{value_field}`")))?;
    let interval_s = field(ev, "IntervalSec").and_then(number).ok_or_else(|| bad(format!("counter `{name}` has no `IntervalSec`")))?;
    if !(value.is_finite() && interval_s.is_finite() && interval_s > 0.0) {
        return Err(bad(format!("counter `{name}`: {value_field} {value}, IntervalSec {interval_s}")));
    }
    Ok(Some(CounterSample {
        provider: ev.provider.clone(),
        name,
        display_name: text("DisplayName").unwrap_or_default(),
        units: text("DisplayUnits").unwrap_or_default(),
        kind,
        value,
        interval_s,
        time_ns: ev.time_ns,
    }))
}

/// One counter over a session: its samples in time order and their summary.
#[derive(Clone, Debug, PartialEq)]
pub struct CounterSeries {
    pub provider: String,
    pub name: String,
    pub kind: CounterKind,
    pub units: String,
    pub samples: Vec<CounterSample>,
}

impl CounterSeries {
    fn values(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.value).collect()
    }

    /// The median value (a mean counter's typical level), the upper one of an even count.
    pub fn median(&self) -> f64 {
        let mut v = self.values();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }

    pub fn min(&self) -> f64 {
        self.values().into_iter().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.values().into_iter().fold(f64::NEG_INFINITY, f64::max)
    }

    /// The sum of the values: for a sum counter, how much the quantity grew over the session.
    pub fn total(&self) -> f64 {
        self.values().iter().sum()
    }

    /// Seconds the samples cover.
    pub fn seconds(&self) -> f64 {
        self.samples.iter().map(|s| s.interval_s).sum()
    }
}

/// The counters among `events`, one series per (provider, counter name), in order of first
/// appearance. A malformed counter payload is an error naming its offset.
pub fn counter_series<'a>(events: impl IntoIterator<Item = &'a DecodedEvent>) -> Result<Vec<CounterSeries>> {
    let mut out: Vec<CounterSeries> = Vec::new();
    for ev in events {
        let Some(s) = counter_sample(ev)? else { continue };
        match out.iter_mut().find(|c| c.provider == s.provider && c.name == s.name) {
            Some(c) => c.samples.push(s),
            None => out.push(CounterSeries { provider: s.provider.clone(), name: s.name.clone(), kind: s.kind, units: s.units.clone(), samples: vec![s] }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    pub(crate) fn event(fields: Vec<(&'static str, Value)>) -> DecodedEvent {
        DecodedEvent {
            provider: RUNTIME_COUNTERS.into(),
            name: COUNTER_EVENT.into(),
            event_id: 0,
            version: 0,
            time_ns: 5,
            thread_id: 1,
            stack: None,
            payload_offset: 1234,
            fields: fields.into_iter().map(|(k, v)| (Cow::Borrowed(k), v)).collect(),
        }
    }

    fn mean(name: &str, v: f64) -> DecodedEvent {
        event(vec![
            ("Payload.Name", Value::Str(name.into())),
            ("Payload.DisplayName", Value::Str("CPU Usage".into())),
            ("Payload.Mean", Value::F64(v)),
            ("Payload.IntervalSec", Value::F64(1.0)),
            ("Payload.CounterType", Value::Str("Mean".into())),
            ("Payload.DisplayUnits", Value::Str("%".into())),
        ])
    }

    fn sum(name: &str, v: f64) -> DecodedEvent {
        event(vec![
            ("Payload.Name", Value::Str(name.into())),
            ("Payload.Increment", Value::F64(v)),
            ("Payload.IntervalSec", Value::F64(1.0)),
            ("Payload.CounterType", Value::Str("Sum".into())),
        ])
    }

    #[test]
    fn mean_and_sum_counters_become_series() {
        let events = [mean("cpu-usage", 20.0), sum("exception-count", 7.0), mean("cpu-usage", 30.0), mean("cpu-usage", 25.0), sum("exception-count", 3.0)];
        let series = counter_series(&events).unwrap();
        assert_eq!(series.len(), 2);
        let cpu = &series[0];
        assert_eq!((cpu.name.as_str(), cpu.kind, cpu.units.as_str()), ("cpu-usage", CounterKind::Mean, "%"));
        assert_eq!((cpu.median(), cpu.min(), cpu.max(), cpu.seconds()), (25.0, 20.0, 30.0, 3.0));
        assert_eq!((series[1].kind, series[1].total()), (CounterKind::Sum, 10.0));
        assert_eq!(interval_argument(2), "EventCounterIntervalSec=2");
    }

    #[test]
    fn other_events_are_not_counters() {
        let mut ev = mean("cpu-usage", 1.0);
        ev.name = "GCStart".into();
        assert_eq!(counter_sample(&ev).unwrap(), None);
    }

    #[test]
    fn malformed_payloads_name_the_offset() {
        for (ev, why) in [
            (event(vec![]), "no fields"),
            (event(vec![("Payload.Mean", Value::F64(1.0))]), "no counter `Name`"),
            (event(vec![("Payload.Name", Value::Str("x".into())), ("Payload.CounterType", Value::Str("Max".into()))]), "CounterType `Max`"),
            (event(vec![("Payload.Name", Value::Str("x".into())), ("Payload.CounterType", Value::Str("Sum".into()))]), "no number `Increment`"),
            (event(vec![("Payload.Name", Value::Str("x".into())), ("Payload.CounterType", Value::Str("Mean".into())), ("Payload.Mean", Value::F64(1.0))]), "no `IntervalSec`"),
            (event(vec![("Payload.Name", Value::Str("x".into())), ("Payload.CounterType", Value::Str("Mean".into())), ("Payload.Mean", Value::F64(f64::NAN)), ("Payload.IntervalSec", Value::F64(1.0))]), "Mean NaN"),
            (event(vec![("Payload.Name", Value::Str("x".into())), ("Payload.CounterType", Value::Str("Mean".into())), ("Payload.Mean", Value::F64(1.0)), ("Payload.IntervalSec", Value::F64(0.0))]), "IntervalSec 0"),
        ] {
            let err = counter_sample(&ev).unwrap_err();
            assert_eq!(err.offset(), 1234);
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
    }
}
