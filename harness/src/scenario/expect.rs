//! The `[[expect]]` tables of a scenario: a name, the collector read, and one kind of check whose
//! options and judging live in `assert/<kind>.rs`. The TOML keeps `name` and `collector` beside
//! the kind's own keys, so this file reads them off by hand before serde reads the kind: serde's
//! `flatten` would silently accept unknown keys, and a typo in an expectation must fail the load.

use anyhow::Result;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

pub use judge::{FRAMEWORK_ASSEMBLIES, NameMatch, ShareMode};
use judge::{AgreeCountCheck, AgreeFramesCheck, AgreeShareCheck, BlockedSecondsCheck, Check, EventBalanceCheck, EventCountCheck, Evidence, ExceptionsCheck, FrameCheck, Judge, MetricCheck, ResolvedCheck, ShareAtLeastCheck, ShareCheck, StackCountCheck, StackDepthCheck, WakerCheck};

/// An expectation. `collector` picks which collector's data it reads (default: the first).
#[derive(Clone, Debug, Serialize)]
pub struct Expectation {
    /// Name in results; absent = the kind's default name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only for kinds that read one collector (not `metric`, `agree_count`, `agree_frames`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    #[serde(flatten)]
    pub check: CheckKind,
}

/// The kinds of check, by the TOML `kind` key.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CheckKind {
    Frame(FrameCheck),
    Share(ShareCheck),
    ShareAtLeast(ShareAtLeastCheck),
    Resolved(ResolvedCheck),
    EventCount(EventCountCheck),
    EventBalance(EventBalanceCheck),
    Exceptions(ExceptionsCheck),
    Metric(MetricCheck),
    AgreeCount(AgreeCountCheck),
    AgreeFrames(AgreeFramesCheck),
    AgreeShare(AgreeShareCheck),
    Waker(WakerCheck),
    StackCount(StackCountCheck),
    StackDepth(StackDepthCheck),
    BlockedSeconds(BlockedSecondsCheck),
}

impl CheckKind {
    /// The kind's options as the judge of their kind.
    pub(crate) fn judge(&self) -> &dyn Judge {
        match self {
            CheckKind::Frame(c) => c,
            CheckKind::Share(c) => c,
            CheckKind::ShareAtLeast(c) => c,
            CheckKind::Resolved(c) => c,
            CheckKind::EventCount(c) => c,
            CheckKind::EventBalance(c) => c,
            CheckKind::Exceptions(c) => c,
            CheckKind::Metric(c) => c,
            CheckKind::AgreeCount(c) => c,
            CheckKind::AgreeFrames(c) => c,
            CheckKind::AgreeShare(c) => c,
            CheckKind::Waker(c) => c,
            CheckKind::StackCount(c) => c,
            CheckKind::StackDepth(c) => c,
            CheckKind::BlockedSeconds(c) => c,
        }
    }
}

impl<'de> Deserialize<'de> for Expectation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(deserializer)?;
        let mut text = |key: &str| match table.remove(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(D::Error::custom(format!("`{key}` must be a string, not {}", other.type_str()))),
        };
        let (name, collector) = (text("name")?, text("collector")?);
        let kind = table.get("kind").and_then(|k| k.as_str()).unwrap_or("?").to_string();
        let check: CheckKind = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| D::Error::custom(crate::collect::name_the_key::<CheckKind>(&table, e.message())))?;
        if collector.is_some() && check.judge().collectors().is_some() {
            return Err(D::Error::custom(format!(
                "unknown field `collector`: a `{kind}` expectation does not read one collector{}",
                if kind == "metric" { " (it reads the run's metrics)" } else { " (it names its `collectors`)" }
            )));
        }
        Ok(Expectation { name, collector, check })
    }
}

impl Expectation {
    pub(crate) fn collector(&self) -> Option<&str> {
        self.collector.as_deref()
    }

    /// Every collector the expectation reads.
    pub(crate) fn collectors(&self) -> Vec<&str> {
        self.check.judge().collectors().unwrap_or_else(|| self.collector().into_iter().collect())
    }

    /// Judges the expectation against a run's evidence.
    pub(crate) fn evaluate(&self, ev: &Evidence) -> Check {
        judge::evaluate(self.name.as_deref(), self.collector(), self.check.judge(), ev)
    }

    /// Load-time checks: the collectors it reads exist among `collectors` (the scenario's), and
    /// the kind's own (regexes compile, ranges, settings agree); a mistake in one key is a
    /// `judge::BadKey` naming it.
    pub(crate) fn validate(&self, collectors: &std::collections::BTreeSet<String>) -> Result<()> {
        for c in self.collectors() {
            if !collectors.contains(c) {
                let key = if self.check.judge().collectors().is_some() { "collectors" } else { "collector" };
                return Err(anyhow::Error::new(judge::BadKey {
                    key,
                    message: format!("an expectation reads collector `{c}`, which the scenario does not have"),
                }));
            }
        }
        self.check.judge().validate()
    }

    /// Where the expectation names truth path `wanted`: the key holding it (`truth`,
    /// `equals_truth` …), else the expectation itself.
    pub(crate) fn truth_key(&self, i: usize, wanted: &str) -> Vec<super::place::Seg> {
        use super::place::Seg;
        let holder = serde_json::to_value(&self.check).ok().and_then(|v| {
            v.as_object()?.iter().find(|(_, v)| v.as_str() == Some(wanted)).map(|(k, _)| k.clone())
        });
        let mut path = vec![Seg::from("expect"), Seg::from(i)];
        path.extend(holder.map(Seg::Key));
        path
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn agree_frames_is_checked_when_loaded() {
        let base = r#"
            name = "x"
            workload = "framework"
            [[collector]]
            kind = "perf-cpu"
            [[collector]]
            kind = "eventpipe"
            profile = "thread-time"
            [[expect]]
            kind = "agree_frames"
        "#;
        let ok = format!("{base}collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 8\nsample_kinds = {{ eventpipe = \"managed\" }}\n");
        let s = Scenario::from_toml(&ok, Path::new("x.toml")).unwrap();
        match &s.expectations[0].check {
            CheckKind::AgreeFrames(AgreeFramesCheck { top, mode, names, assembly, .. }) => {
                assert_eq!((*top, *mode, *names), (10, ShareMode::Leaf, NameMatch::Exact));
                assert!(regex::Regex::new(assembly).unwrap().is_match("System.Private.CoreLib"));
                assert!(!regex::Regex::new(assembly).unwrap().is_match("framework"));
            }
            other => panic!("{other:?}"),
        }
        for (bad, why) in [
            ("collectors = [\"perf-cpu\", \"lttng\"]\nmin_common = 8\n", "collector `lttng`"),
            ("collectors = [\"perf-cpu\"]\nmin_common = 8\n", "exactly two"),
            ("collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 11\n", "min_common ≤ top"),
            ("collectors = [\"perf-cpu\", \"eventpipe\"]\nmin_common = 8\nsample_kinds = { dotnet-trace = \"managed\" }\n", "not one of its collectors"),
        ] {
            let err = Scenario::from_toml(&format!("{base}{bad}"), Path::new("x.toml")).unwrap_err();
            assert!(format!("{err:#}").contains(why), "{bad}: {err:#}");
        }
    }

    fn expectation(text: &str) -> Result<Expectation, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn name_and_collector_sit_beside_the_kinds_own_keys() {
        let e = expectation("kind = \"share\"\nname = \"split\"\ncollector = \"offcpu\"\nmethod = \"A\"\namong = [\"A\", \"B\"]\ntruth = \"t\"\n").unwrap();
        assert_eq!((e.name.as_deref(), e.collector()), (Some("split"), Some("offcpu")));
        assert!(matches!(&e.check, CheckKind::Share(s) if s.among == ["A", "B"] && s.mode == ShareMode::Inclusive));
        let e = expectation("kind = \"resolved\"\nclass = \"jit\"\n").unwrap();
        assert_eq!((e.name.as_deref(), e.collectors()), (None, vec![]));
    }

    #[test]
    fn unknown_keys_wrong_types_and_misplaced_collectors_are_rejected() {
        for (bad, why) in [
            ("kind = \"resolved\"\nclass = \"jit\"\nmni = 0.5\n", "unknown field `mni`"),
            ("kind = \"resolved\"\nclass = \"jit\"\nname = 3\n", "`name` must be a string"),
            ("kind = \"resolved\"\nclass = \"jit\"\ncollector = [\"a\"]\n", "`collector` must be a string"),
            ("kind = \"nope\"\n", "unknown variant `nope`"),
            ("kind = \"metric\"\nmetric = \"m\"\ncollector = \"perf-cpu\"\n", "a `metric` expectation does not read one collector"),
            ("kind = \"agree_count\"\nevent = \"E\"\ncollectors = [\"a\", \"b\"]\ncollector = \"a\"\n", "it names its `collectors`"),
            ("kind = \"agree_frames\"\ncollectors = [\"a\", \"b\"]\nmin_common = 1\ncollector = \"a\"\n", "unknown field `collector`"),
        ] {
            let err = expectation(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_typo_in_a_scenarios_expectation_names_the_key_and_the_file() {
        let text = "name = \"x\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\n[[expect]]\nkind = \"resolved\"\nclass = \"jit\"\nmni = 0.9\n";
        let err = format!("{:#}", Scenario::from_toml(text, Path::new("x.toml")).unwrap_err());
        assert!(err.contains("x.toml:8:1: unknown field `mni`"), "{err}");
    }
}
