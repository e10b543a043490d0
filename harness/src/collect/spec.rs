//! A scenario's `[[collector]]` as one type, and the dispatch from it to the collector that
//! observes ([`from_spec`]): the kind is an enum variant that owns its typed
//! options (declared by each collector's module), so serde rejects an unknown kind, an unknown
//! option or a wrong type (`frequency = "99"`) when the scenario is loaded, not when it runs.
//!
//! `name` and `env` belong to every collector. serde's `flatten` cannot sit beside
//! `deny_unknown_fields`, so [`CollectorSpec`] takes those two keys off the table by hand and
//! gives the rest to the tagged [`CollectorOptions`].

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{Collector, collect_linux, dotnet_trace, dump, eventpipe, lttng, offcpu, offwake, perf, perfcollect, syscalls};

/// A mistake in one option of a collector, found when the scenario loads: the loader points at
/// that option's `file:line:column`, not at the `[[collector]]` header above it.
#[derive(Debug)]
pub struct BadOption {
    /// The option as the table spells it (`frequency`, `types`).
    pub key: &'static str,
    pub message: String,
}

impl std::fmt::Display for BadOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BadOption {}

pub(crate) fn bad_option(key: &'static str, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(BadOption { key, message: message.into() })
}

/// One collector of a scenario: the common keys plus the kind with its options.
#[derive(Clone, Debug, Serialize)]
pub struct CollectorSpec {
    /// Name in results; defaults to the kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Environment of the app in the run this collector observes, over the scenario's `env`
    /// (e.g. `{ DOTNET_ReadyToRun = "0" }` for a ground-truth run in which the JIT compiles every
    /// framework method). Collectors sharing a run must not disagree on a variable.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(flatten)]
    pub options: CollectorOptions,
}

/// The collector kinds, each with the options its module declares.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind")]
pub enum CollectorOptions {
    #[serde(rename = "perf-cpu")]
    PerfCpu(perf::PerfCpuOptions),
    #[serde(rename = "perf-offcpu")]
    PerfOffcpu(offcpu::OffCpuOptions),
    #[serde(rename = "perf-offwake")]
    PerfOffwake(offwake::OffWakeOptions),
    #[serde(rename = "perf-syscalls")]
    PerfSyscalls(syscalls::SyscallsOptions),
    #[serde(rename = "eventpipe")]
    EventPipe(eventpipe::EventPipeOptions),
    #[serde(rename = "dotnet-trace")]
    DotnetTrace(dotnet_trace::DotnetTraceOptions),
    #[serde(rename = "collect-linux")]
    CollectLinux(collect_linux::CollectLinuxOptions),
    #[serde(rename = "lttng")]
    Lttng(lttng::LttngOptions),
    #[serde(rename = "dump")]
    Dump(dump::DumpOptions),
    #[serde(rename = "perfcollect")]
    Perfcollect(perfcollect::PerfcollectOptions),
}

/// A collector kind without its options: what results, manifests and the capability table name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollectorKind {
    PerfCpu,
    PerfOffcpu,
    PerfOffwake,
    PerfSyscalls,
    EventPipe,
    DotnetTrace,
    CollectLinux,
    Lttng,
    Dump,
    /// Microsoft's perfcollect script, the peer tracelab is scored against.
    Perfcollect,
}

impl CollectorKind {
    /// Every kind, in the order tables list them.
    pub const ALL: [CollectorKind; 9] = [
        CollectorKind::PerfCpu,
        CollectorKind::PerfOffcpu,
        CollectorKind::PerfOffwake,
        CollectorKind::PerfSyscalls,
        CollectorKind::Lttng,
        CollectorKind::EventPipe,
        CollectorKind::DotnetTrace,
        CollectorKind::CollectLinux,
        CollectorKind::Dump,
    ];

    /// Peers: other projects' tools run as collectors, to be scored beside ours. The capability
    /// matrix does not probe them (each needs what its own documentation asks for).
    pub const PEERS: [CollectorKind; 1] = [CollectorKind::Perfcollect];

    /// The scenario's `kind` string, also the collector's default name in results.
    pub fn as_str(self) -> &'static str {
        match self {
            CollectorKind::PerfCpu => "perf-cpu",
            CollectorKind::PerfOffcpu => "perf-offcpu",
            CollectorKind::PerfOffwake => "perf-offwake",
            CollectorKind::PerfSyscalls => "perf-syscalls",
            CollectorKind::EventPipe => "eventpipe",
            CollectorKind::DotnetTrace => "dotnet-trace",
            CollectorKind::CollectLinux => "collect-linux",
            CollectorKind::Lttng => "lttng",
            CollectorKind::Dump => "dump",
            CollectorKind::Perfcollect => "perfcollect",
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<CollectorKind> {
        let every = || CollectorKind::ALL.into_iter().chain(CollectorKind::PEERS);
        every().find(|k| k.as_str() == s).ok_or_else(|| {
            anyhow::anyhow!("unknown collector kind `{s}`: expected {}", every().map(CollectorKind::as_str).collect::<Vec<_>>().join(", "))
        })
    }

    /// The collector the capability matrix probes for this kind: the kind's own options for a
    /// short run of the gc-heavy app (each module says which).
    pub fn probe_spec(self) -> CollectorSpec {
        CollectorSpec::new(match self {
            CollectorKind::PerfCpu => CollectorOptions::PerfCpu(perf::probe_options()),
            CollectorKind::PerfOffcpu => CollectorOptions::PerfOffcpu(offcpu::probe_options()),
            CollectorKind::PerfOffwake => CollectorOptions::PerfOffwake(offwake::probe_options()),
            CollectorKind::PerfSyscalls => CollectorOptions::PerfSyscalls(syscalls::probe_options()),
            CollectorKind::EventPipe => CollectorOptions::EventPipe(eventpipe::probe_options()),
            CollectorKind::DotnetTrace => CollectorOptions::DotnetTrace(dotnet_trace::probe_options()),
            CollectorKind::CollectLinux => CollectorOptions::CollectLinux(collect_linux::probe_options()),
            CollectorKind::Lttng => CollectorOptions::Lttng(lttng::probe_options()),
            CollectorKind::Dump => CollectorOptions::Dump(dump::probe_options()),
            CollectorKind::Perfcollect => CollectorOptions::Perfcollect(perfcollect::PerfcollectOptions::default()),
        })
    }

    /// The capabilities a container needs for this collector when no measured table says
    /// otherwise (shared/DESIGN.md §6, Debian docker.io 20.10).
    pub(crate) fn default_capabilities(self) -> &'static [&'static str] {
        match self {
            CollectorKind::PerfCpu => perf::DEFAULT_CAPABILITIES,
            CollectorKind::PerfOffcpu => offcpu::DEFAULT_CAPABILITIES,
            CollectorKind::PerfOffwake => offwake::DEFAULT_CAPABILITIES,
            CollectorKind::PerfSyscalls => syscalls::DEFAULT_CAPABILITIES,
            CollectorKind::EventPipe => eventpipe::DEFAULT_CAPABILITIES,
            CollectorKind::DotnetTrace => dotnet_trace::DEFAULT_CAPABILITIES,
            CollectorKind::CollectLinux => collect_linux::DEFAULT_CAPABILITIES,
            CollectorKind::Lttng => lttng::DEFAULT_CAPABILITIES,
            CollectorKind::Dump => dump::DEFAULT_CAPABILITIES,
            CollectorKind::Perfcollect => perfcollect::DEFAULT_CAPABILITIES,
        }
    }
}

impl std::fmt::Display for CollectorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl CollectorOptions {
    pub(crate) fn kind(&self) -> CollectorKind {
        match self {
            CollectorOptions::PerfCpu(_) => CollectorKind::PerfCpu,
            CollectorOptions::PerfOffcpu(_) => CollectorKind::PerfOffcpu,
            CollectorOptions::PerfOffwake(_) => CollectorKind::PerfOffwake,
            CollectorOptions::PerfSyscalls(_) => CollectorKind::PerfSyscalls,
            CollectorOptions::EventPipe(_) => CollectorKind::EventPipe,
            CollectorOptions::DotnetTrace(_) => CollectorKind::DotnetTrace,
            CollectorOptions::CollectLinux(_) => CollectorKind::CollectLinux,
            CollectorOptions::Lttng(_) => CollectorKind::Lttng,
            CollectorOptions::Dump(_) => CollectorKind::Dump,
            CollectorOptions::Perfcollect(_) => CollectorKind::Perfcollect,
        }
    }
}

impl CollectorSpec {
    /// A spec of `options` with no name or environment of its own.
    pub(crate) fn new(options: CollectorOptions) -> CollectorSpec {
        CollectorSpec { name: None, env: BTreeMap::new(), options }
    }

    pub fn kind(&self) -> CollectorKind {
        self.options.kind()
    }

    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(self.kind().as_str())
    }

    /// A spec from a `[[collector]]` table (`kind`, the common keys and the kind's options).
    pub fn from_table(mut table: toml::Table) -> Result<CollectorSpec, toml::de::Error> {
        use serde::de::Error;
        let name = match table.remove("name") {
            Some(v) => Some(String::deserialize(v).map_err(|e| toml::de::Error::custom(format!("`name`: {e}")))?),
            None => None,
        };
        let env = match table.remove("env") {
            Some(v) => BTreeMap::deserialize(v).map_err(|e| toml::de::Error::custom(format!("`env`: {e}")))?,
            None => BTreeMap::new(),
        };
        let options = CollectorOptions::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            toml::de::Error::custom(name_the_key::<CollectorOptions>(&table, e.message()))
        })?;
        Ok(CollectorSpec { name, env, options })
    }
}

impl<'de> Deserialize<'de> for CollectorSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(deserializer)?;
        CollectorSpec::from_table(table).map_err(serde::de::Error::custom)
    }
}

/// The key of a tagged table (`[[collector]]`, `[[expect]]`: `kind` plus the kind's options) whose
/// value gives the error `why`. Such tables are read through a `toml::Table`, where serde's
/// message for a wrong type names neither the key nor its place (`invalid type: string "99",
/// expected u32`): the key whose value alone, beside `kind`, fails the same way is the one to fix.
/// (serde reports a wrong type as it reads the value, before it misses a required key, so a
/// kind with required options is judged the same.) Only called on the error path.
fn key_of_wrong_value<T: serde::de::DeserializeOwned>(table: &toml::Table, why: &str) -> Option<String> {
    table.iter().filter(|(k, _)| *k != "kind").find_map(|(key, value)| {
        let mut alone = toml::Table::new();
        if let Some(kind) = table.get("kind") {
            alone.insert("kind".into(), kind.clone());
        }
        alone.insert(key.clone(), value.clone());
        let e = toml::Value::Table(alone).try_into::<T>().err()?;
        (e.message().trim_end() == why).then(|| key.clone())
    })
}

/// `why`, prefixed with the key [`key_of_wrong_value`] finds and its value
/// (`` `frequency = "99"`: invalid type … ``), which `scenario::place::explain` then places on
/// that key's own line — in the right table when an array has several.
pub(crate) fn name_the_key<T: serde::de::DeserializeOwned>(table: &toml::Table, why: &str) -> String {
    let why = why.trim_end();
    match key_of_wrong_value::<T>(table, why) {
        Some(key) if !why.starts_with("unknown ") => format!("`{key} = {}`: {why}", table[&key]),
        _ => why.to_string(),
    }
}

/// A list given as a TOML array or as one comma-separated string (`providers = "A:0x1:4,B"`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum StringList {
    Many(Vec<String>),
    One(String),
}

impl StringList {
    pub(crate) fn items(&self) -> Vec<String> {
        match self {
            StringList::Many(v) => v.clone(),
            StringList::One(s) => s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        }
    }
}

/// The items of an optional list (absent = none).
pub(crate) fn items(list: &Option<StringList>) -> Vec<String> {
    list.as_ref().map(StringList::items).unwrap_or_default()
}

/// Builds the collector a scenario names.
pub fn from_spec(spec: &CollectorSpec) -> Result<Box<dyn Collector>> {
    let name = spec.name();
    Ok(match &spec.options {
        CollectorOptions::PerfCpu(o) => perf::from_spec(name, o)?,
        CollectorOptions::PerfOffcpu(o) => offcpu::from_spec(name, o)?,
        CollectorOptions::PerfOffwake(o) => offwake::from_spec(name, o)?,
        CollectorOptions::PerfSyscalls(o) => syscalls::from_spec(name, o)?,
        CollectorOptions::EventPipe(o) => eventpipe::from_spec(name, o)?,
        CollectorOptions::DotnetTrace(o) => dotnet_trace::from_spec(name, o)?,
        CollectorOptions::CollectLinux(o) => collect_linux::from_spec(name, o)?,
        CollectorOptions::Lttng(o) => lttng::from_spec(name, o)?,
        CollectorOptions::Dump(o) => dump::from_spec(name, o)?,
        CollectorOptions::Perfcollect(o) => perfcollect::from_spec(name, o)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CollectorSpec, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn common_keys_and_options_parse() {
        let s = parse("kind = \"perf-cpu\"\nname = \"jit-only\"\nenv = { DOTNET_ReadyToRun = \"0\" }\nfrequency = 499").unwrap();
        assert_eq!((s.kind(), s.name()), (CollectorKind::PerfCpu, "jit-only"));
        assert_eq!(s.env["DOTNET_ReadyToRun"], "0");
        match &s.options {
            CollectorOptions::PerfCpu(o) => assert_eq!(o.frequency, 499),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse("kind = \"lttng\"").unwrap().name(), "lttng");
    }

    #[test]
    fn wrong_types_unknown_options_and_kinds_are_serde_errors() {
        for (bad, why) in [
            ("kind = \"perf-cpu\"\nfrequency = \"99\"", "invalid type"),
            ("kind = \"perf-cpu\"\nfrequency = 99.5", "invalid type"),
            ("kind = \"perf-cpu\"\nfreq = 99", "unknown field `freq`"),
            ("kind = \"perf-offcpu\"\nfrequency = 99", "unknown field `frequency`"),
            ("kind = \"eventpipe\"\nrundown = \"no\"", "invalid type"),
            ("kind = \"perf\"", "unknown variant `perf`"),
            ("name = \"x\"", "missing field `kind`"),
            ("kind = \"lttng\"\nname = 3", "`name`"),
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in CollectorKind::ALL {
            assert_eq!(CollectorKind::parse(k.as_str()).unwrap(), k);
            assert_eq!(parse(&format!("kind = \"{k}\"\n")).map(|s| s.kind()).ok().unwrap_or(k), k);
        }
        assert!(CollectorKind::parse("perf").unwrap_err().to_string().contains("perf-cpu"));
    }

    #[test]
    fn serializes_back_to_the_same_table() {
        let text = "kind = \"dotnet-trace\"\nname = \"dt\"\nprofile = \"gc-verbose,dotnet-common\"\n";
        let s = parse(text).unwrap();
        let again = parse(&toml::to_string(&s).unwrap()).unwrap();
        assert_eq!((again.name(), again.kind()), ("dt", CollectorKind::DotnetTrace));
    }

    #[test]
    fn every_kind_has_a_probe_that_builds() {
        for k in CollectorKind::ALL {
            let spec = k.probe_spec();
            assert_eq!(spec.kind(), k);
            super::super::from_spec(&spec).unwrap_or_else(|e| panic!("{k}: {e:#}"));
        }
    }

    #[test]
    fn lists_are_arrays_or_comma_strings() {
        assert_eq!(StringList::One("a, b,,c".into()).items(), ["a", "b", "c"]);
        assert_eq!(StringList::Many(vec!["a,b".into()]).items(), ["a,b"]);
        assert!(items(&None).is_empty());
    }
}
