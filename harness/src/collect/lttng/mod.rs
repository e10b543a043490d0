//! Collector `lttng`: the runtime's LTTng-UST tracepoints (`DotNETRuntime:*`), recorded the way
//! perfcollect records them, decoded from CTF into the model.
//!
//! Scenario options: `profile` = `default` | `gc-collect-only` | `gc-only` | `gc-with-heap`
//! (perfcollect's profiles; `default` when absent; a comma list unites them) and `events` = extra tracepoint names
//! (`["DotNETRuntime:GCStart_V2"]`); with `profile = "custom"` only `events` is enabled.
//!
//! Start: [`preflight`] proves the provider can load (else the run is SKIPPED with the soname
//! reason, see [`crate::collect::Unsupported`]), a private [`session::Session`] is opened, the
//! app's registration of `DotNETRuntime` tracepoints is awaited (`lttng list -u`), then recording
//! starts. Stop: the session is stopped, destroyed, and a daemon we started is stopped.
//!
//! Decoding uses our own CTF reader (crates/ctf), chosen by measurement over driving babeltrace2:
//! on a 53 MB trace of 553 k DotNETRuntime events (every tracepoint of 25 FixtureApp runs) it
//! decodes the events with all their fields 3.3–3.6× faster than `babeltrace2 -c sink.utils.dummy`
//! (2.4 M vs 0.71 M events per CPU-second; babeltrace2 as text: 0.21 M)
//! (`cargo xtask bench ctf` prints both rates and the ratio), needs no babeltrace2 install in the
//! harness's environment, and reports malformed input as file + byte offset instead of a tool's
//! exit status; its decoding is checked event by event against babeltrace's text of the recorded
//! fixture (crates/ctf/tests/fixture.rs).

pub mod preflight;
pub mod provider;
pub mod session;

pub(crate) mod events;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Collector, DecodeContext};
use crate::model::{Collection, Event, Value};
use crate::run::{RunningApp, Target};
use session::{Place, Session, Tools};


/// How long the app may take to register its tracepoints with a daemon started after it.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(20);

/// perfcollect's profiles, over the runtime's manifest (keywords of each event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Profile {
    Default,
    GcCollectOnly,
    GcOnly,
    GcWithHeap,
    Custom,
}

impl Profile {
    pub fn parse(s: &str) -> Result<Profile> {
        Ok(match s {
            "default" => Profile::Default,
            "gc-collect-only" => Profile::GcCollectOnly,
            "gc-only" => Profile::GcOnly,
            "gc-with-heap" => Profile::GcWithHeap,
            "custom" => Profile::Custom,
            other => bail!(
                "unknown LTTng profile `{other}`: expected default, gc-collect-only, gc-only, gc-with-heap or custom (with `events`)"
            ),
        })
    }
}

// Keywords of Microsoft-Windows-DotNETRuntime (ClrEtwAll.man).
const KW_GC: u64 = 0x1;
const KW_LOADER: u64 = 0x8;
const KW_JIT: u64 = 0x10;
const KW_NGEN: u64 = 0x20;
const KW_CONTENTION: u64 = 0x4000;
const KW_EXCEPTION: u64 = 0x8000;
const KW_THREADING: u64 = 0x10000;
/// Tiered compilation (perfcollect's default "compilation" events).
const KW_COMPILATION: u64 = 0x10_0000_0000;
const KW_GC_HEAP_SURVIVAL_AND_MOVEMENT: u64 = 0x40_0000;
/// GCPrivateKeyword of the private provider.
const KW_PRIVATE_GC: u64 = 0x1;
/// Loader and JIT rundown keywords of the rundown provider.
const KW_RUNDOWN_LOADER_JIT: u64 = 0x8 | 0x10;

/// perfcollect's "GC collect only" list: the collections themselves, not allocations or marks.
const GC_COLLECT_ONLY: &[&str] = &[
    "GCStart",
    "GCEnd",
    "GCHeapStats",
    "GCRestartEEBegin",
    "GCRestartEEEnd",
    "GCSuspendEEBegin",
    "GCSuspendEEEnd",
    "GCCreateSegment",
    "GCFreeSegment",
    "GCCreateConcurrentThread",
    "GCTerminateConcurrentThread",
    "GCFinalizersBegin",
    "GCFinalizersEnd",
    "GCTriggered",
    "GCPerHeapHistory",
    "GCGlobalHeapHistory",
];

/// The tracepoint names a profile enables, `provider:symbol`, in the table's order: every
/// tracepoint the runtime's provider declares whose event belongs to one of the profile's
/// meanings (a keyword group of the runtime, or GC collections by name) — every version of it,
/// since the provider fires only the newest and an older name alone records nothing.
pub fn tracepoints(profile: &Profile, extra: &[String]) -> Vec<String> {
    let collect_only = |sym: &str| GC_COLLECT_ONLY.contains(&base_name(sym));
    let mut out: Vec<String> = events::EVENTS
        .iter()
        .filter(|(provider, sym, _, _, _, kw, _, _)| match (profile, *provider) {
            (Profile::Custom, _) => false,
            (Profile::GcCollectOnly, "DotNETRuntime") => kw & KW_GC != 0 && collect_only(sym),
            (Profile::GcOnly, "DotNETRuntime") => kw & KW_GC != 0,
            (Profile::GcOnly, "DotNETRuntimePrivate") => kw & KW_PRIVATE_GC != 0,
            (Profile::GcWithHeap, "DotNETRuntime") => kw & (KW_GC | KW_GC_HEAP_SURVIVAL_AND_MOVEMENT) != 0,
            (Profile::GcWithHeap, "DotNETRuntimePrivate") => kw & KW_PRIVATE_GC != 0,
            (Profile::Default, "DotNETRuntime") => {
                kw & (KW_THREADING | KW_EXCEPTION | KW_CONTENTION | KW_JIT | KW_NGEN | KW_LOADER | KW_COMPILATION) != 0
                    || (kw & KW_GC != 0 && collect_only(sym))
            }
            (Profile::Default, "DotNETRuntimeRundown") => kw & KW_RUNDOWN_LOADER_JIT != 0,
            _ => false,
        })
        .map(|(provider, sym, ..)| format!("{provider}:{sym}"))
        .collect();
    for e in extra {
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    out
}

/// `GCStart_V2` → `GCStart`; `GCPerHeapHistory_V3_1` → `GCPerHeapHistory`.
pub fn base_name(symbol: &str) -> &str {
    split_version(symbol).0
}

/// `GCStart_V2` → (`GCStart`, Some(2)); `GCStart` → (`GCStart`, None).
pub fn split_version(symbol: &str) -> (&str, Option<u32>) {
    if let Some(at) = symbol.rfind("_V") {
        let tail = &symbol[at + 2..];
        let digits = tail.split('_').next().unwrap_or("");
        if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) && tail.chars().all(|c| c.is_ascii_digit() || c == '_') {
            return (&symbol[..at], digits.parse().ok());
        }
    }
    (symbol, None)
}

pub struct LttngCollector {
    name: String,
    profiles: Vec<Profile>,
    tracepoints: Vec<String>,
    session: Option<Session>,
    /// The trace folder on the host.
    out_host: Option<PathBuf>,
    target_pid: u32,
    commands: Vec<String>,
    metrics: BTreeMap<String, f64>,
}

/// User-space tracing (`lttng-sessiond --no-kernel`) needs no capability (shared/DESIGN.md §6).
pub const DEFAULT_CAPABILITIES: &[&str] = &[];

/// `[[collector]] kind = "lttng"` options.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct LttngOptions {
    /// `default` | `gc-collect-only` | `gc-only` | `gc-with-heap` | `custom`, or a comma list of them.
    #[serde(default)]
    pub profile: Option<String>,
    /// Tracepoints added to the profile's (`DotNETRuntime:GCStart_V2`).
    #[serde(default)]
    pub events: Vec<String>,
}

/// The capability probe: the default profile (GC and exception events the probe app raises).
pub fn probe_options() -> LttngOptions {
    LttngOptions::default()
}

pub fn from_spec(name: &str, options: &LttngOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(LttngCollector::new(name, options)?))
}

impl LttngCollector {
    pub fn new(name: &str, options: &LttngOptions) -> Result<Self> {
        // A comma list unites profiles (`default,gc-only`: perfcollect's default and every GC event).
        let profiles = options
            .profile
            .as_deref()
            .unwrap_or("default")
            .split(',')
            .map(|p| Profile::parse(p.trim()))
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("collector `{name}`"))?;
        let extra = options.events.clone();
        if profiles.contains(&Profile::Custom) && extra.is_empty() {
            bail!("collector `{name}`: profile = \"custom\" needs `events = [\"DotNETRuntime:GCStart_V2\", …]`");
        }
        if let Some(bad) = extra.iter().find(|e| !e.contains(':')) {
            bail!("collector `{name}`: event `{bad}` is not a tracepoint name (`DotNETRuntime:GCStart_V2`)");
        }
        let mut all: Vec<String> = Vec::new();
        for p in &profiles {
            for t in tracepoints(p, &extra) {
                if !all.contains(&t) {
                    all.push(t);
                }
            }
        }
        Ok(LttngCollector {
            name: name.to_string(),
            tracepoints: all,
            profiles,
            session: None,
            out_host: None,
            target_pid: 0,
            commands: Vec::new(),
            metrics: BTreeMap::new(),
        })
    }

    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    pub fn tracepoints(&self) -> &[String] {
        &self.tracepoints
    }
}

impl Collector for LttngCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        vec![("DOTNET_EnableEventLog".into(), "1".into()), ("DOTNET_LTTng".into(), "1".into())]
    }

    fn start(&mut self, _target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        let (check, root) = preflight::check_process(app.host_pid)?;
        self.metrics.insert("lttng.provider_loaded".into(), if check.loaded == Some(true) { 1.0 } else { 0.0 });
        check.require(&root)?;

        // The engine makes the artifacts folder the app's work dir; tools see it at
        // `work_dir_in_target` (bind-mounted at the same path in containers).
        let folder = format!("lttng-{}", self.name);
        let out_host = artifacts.join(&folder);
        if out_host.exists() {
            std::fs::remove_dir_all(&out_host).with_context(|| format!("cannot clear {}", out_host.display()))?;
        }
        let home_host = artifacts.join(".lttng-home");
        std::fs::create_dir_all(&home_host).with_context(|| format!("cannot create {}", home_host.display()))?;
        let place = if app.container_id.is_some() { Place::Namespaces { anchor: app.host_pid } } else { Place::Host };
        let tools = Tools { place, lttng_home: app.work_dir_in_target.join(".lttng-home") };
        let t0 = Instant::now();
        let mut session = Session::open(tools, &app.work_dir_in_target.join(&folder), &artifacts.join("lttng-sessiond.log"))?;
        // Once the daemon runs, enter the container through the daemon: it outlives the app.
        if let (Place::Namespaces { .. }, Some(d)) = (place, &session.daemon) {
            session.tools.place = Place::Namespaces { anchor: d.pid() };
        }
        let result = (|| {
            session.enable(&self.tracepoints)?;
            // Sentinel: the app must have registered its DotNETRuntime tracepoints with the
            // daemon before `lttng start`, which then returns only once the app is recording.
            let n = session.wait_registered(app.target_pid, "DotNETRuntime", REGISTRATION_TIMEOUT)?;
            if n == 0 {
                bail!(
                    "the app (pid {}) registered no DotNETRuntime tracepoints with lttng-sessiond within {REGISTRATION_TIMEOUT:?}, \
                     although its provider {} is {}; `lttng list -u` shows what registered",
                    app.target_pid,
                    check.provider.display(),
                    if check.loaded == Some(true) { "loaded" } else { "present" }
                );
            }
            self.metrics.insert("lttng.registered_tracepoints".into(), n as f64);
            session.start()
        })();
        self.metrics.insert("lttng.start_s".into(), t0.elapsed().as_secs_f64());
        self.commands.append(&mut session.commands);
        if let Err(e) = result {
            let _ = session.close();
            self.commands.append(&mut session.commands);
            return Err(e);
        }
        self.out_host = Some(out_host);
        self.target_pid = app.target_pid;
        self.session = Some(session);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, _app: &RunningApp) -> Result<()> {
        let Some(mut session) = self.session.take() else { return Ok(()) };
        let r = session.close();
        self.commands.append(&mut session.commands);
        r
    }

    fn decode(&mut self, _ctx: &DecodeContext) -> Result<Collection> {
        let dir = self.out_host.clone().context("the LTTng session never started")?;
        let t0 = Instant::now();
        let mut collection = decode_dir(&dir, Some(self.target_pid))?;
        collection.collector = self.name.clone();
        collection.metrics.extend(self.metrics.clone());
        collection.metrics.insert("lttng.decode_s".into(), t0.elapsed().as_secs_f64());
        Ok(collection)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// Decodes every CTF trace under `dir` into events of the model, keeping only those of `pid`
/// (the `vpid` context) when given. Event names lose their version suffix (`GCStart_V2` →
/// `GCStart`, version 2); ids come from the runtime's manifest; times are CLOCK_MONOTONIC ns.
pub fn decode_dir(dir: &Path, pid: Option<u32>) -> Result<Collection> {
    let mut collection = Collection::new("lttng");
    let traces = ctf::Trace::find(dir).with_context(|| "the LTTng session recorded nothing — did the app register its provider?")?;
    let ids: HashMap<(&str, &str), (Option<u32>, u32)> =
        events::EVENTS.iter().map(|(p, s, _, v, id, ..)| ((*p, *s), (*id, *v))).collect();
    let mut bytes = 0u64;
    for t in traces {
        let trace = ctf::Trace::open(&t)?;
        bytes += trace.stream_bytes();
        let mut events = trace.events();
        for ev in &mut events {
            let ev = ev?;
            let vpid = ev.context_field("vpid").and_then(ctf::Value::as_u64).map(|v| v as u32);
            if let (Some(want), Some(got)) = (pid, vpid)
                && want != got
            {
                continue;
            }
            let full = ev.class.name.as_str();
            let (provider, symbol) = full.split_once(':').unwrap_or(("", full));
            let (name, suffix_version) = split_version(symbol);
            let known = ids.get(&(provider, symbol)).copied();
            let tid = ev.context_field("vtid").and_then(ctf::Value::as_u64).unwrap_or(0) as u32;
            let clock = ev.stream_class.clock.map(|c| &trace.metadata().clocks[c]);
            let class = ev.class;
            let fields = class
                .field_names
                .iter()
                .zip(ev.payload)
                .map(|(k, v)| (k.to_string(), model_value(v)))
                .collect();
            collection.events.push(Event {
                provider: provider.to_string(),
                name: name.to_string(),
                id: known.and_then(|k| k.0),
                version: suffix_version.or(known.map(|k| k.1)).or(Some(0)),
                time_ns: clock.map(|c| c.ns(ev.cycles)).unwrap_or(ev.cycles),
                pid: vpid.unwrap_or(0),
                tid,
                fields,
                frames: Vec::new(),
            });
        }
        collection.lost_events += events.discarded();
    }
    collection.events.sort_by_key(|e| e.time_ns);
    collection.metrics.insert("lttng.events".into(), collection.events.len() as f64);
    collection.metrics.insert("lttng.trace_bytes".into(), bytes as f64);
    Ok(collection)
}

fn model_value(v: ctf::Value) -> Value {
    match v {
        ctf::Value::UInt(x) => Value::U64(x),
        ctf::Value::SInt(x) => Value::I64(x),
        ctf::Value::Float(x) => Value::F64(x),
        ctf::Value::Str(s) => Value::Str(s),
        ctf::Value::Bytes(b) => Value::Bytes(b),
        ctf::Value::Enum { value, label } => match label {
            Some(l) => Value::Str(l.to_string()),
            None => Value::I64(value),
        },
        other => Value::Str(format!("{other:?}")),
    }
}

/// Records a large CTF trace for `cargo xtask bench ctf`: every `DotNETRuntime` tracepoint of
/// `runs` FixtureApp runs (`gc,exceptions 1`, ≈ 2 MB and 22 k events each) in a container of the
/// bullseye runtime image, into `out` (host path; replaced). The image must exist (`cargo xtask
/// images`). Returns the trace folder.
pub fn record_bench_trace(out: &Path, runs: u32) -> Result<PathBuf> {
    let build = out.parent().context("the output folder has no parent")?.join("fixture-app");
    let src = build.join("src");
    std::fs::create_dir_all(&src)?;
    // ../shared is read-only; the build writes obj/ beside the project.
    for f in ["FixtureApp.csproj", "Program.cs"] {
        std::fs::copy(crate::shared_dir().join("fixtures/FixtureApp").join(f), src.join(f))
            .with_context(|| format!("copying FixtureApp/{f} from ../shared/fixtures"))?;
    }
    let dotnet = crate::dotnet::Dotnet::locate_or_install()?;
    let app = build.join("app");
    let status = dotnet
        .command()
        .args(["build", "-c", "Release", "-v", "q", "-o"])
        .arg(&app)
        .arg(src.join("FixtureApp.csproj"))
        .status()
        .context("running dotnet build")?;
    if !status.success() {
        bail!("dotnet build of FixtureApp failed ({status})");
    }
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    std::fs::create_dir_all(out)?;
    let image = crate::image::runtime_tag(crate::image::suite("bullseye")?);
    // Per-CPU buffers of 8 × 2 MiB keep up with every tracepoint; docker's default 64 MiB
    // /dev/shm is too small for them (the session then records nothing), hence --shm-size.
    let script = format!(
        "set -e; lttng-sessiond --daemonize --no-kernel; lttng create bench --output=/out/trace >/dev/null; \
         lttng enable-channel -u bench --subbuf-size=2M --num-subbuf=8 >/dev/null; \
         lttng enable-event -u -c bench 'DotNETRuntime:*' >/dev/null; \
         lttng add-context -u -c bench -t vpid -t vtid -t procname >/dev/null; lttng start >/dev/null; \
         for i in $(seq {runs}); do DOTNET_EnableEventLog=1 dotnet /app/FixtureApp.dll gc,exceptions 1 >/dev/null; done; \
         lttng stop >/dev/null; lttng destroy >/dev/null"
    );
    let status = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--shm-size=256m", "-v"])
        .arg(format!("{}:/app:ro", app.display()))
        .arg("-v")
        .arg(format!("{}:/out", out.display()))
        .args([&image, "sh", "-c", &script])
        .status()
        .context("running docker")?;
    if !status.success() {
        bail!("recording the bench trace in {image} failed ({status})");
    }
    Ok(out.join("trace"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions")
    }

    #[test]
    fn fixture_decodes_into_the_model() {
        let c = decode_dir(&fixture(), Some(40)).unwrap();
        let count = |n: &str| c.events.iter().filter(|e| e.name == n).count();
        assert_eq!(count("ExceptionThrown"), 1000);
        assert_eq!(count("GCStart"), 22);
        assert_eq!(count("GCEnd"), 23);
        assert_eq!(count("GCHeapStats"), 23);
        let ex = c.events.iter().find(|e| e.name == "ExceptionThrown").unwrap();
        assert_eq!(ex.provider, "DotNETRuntime");
        assert_eq!((ex.id, ex.version), (Some(80), Some(1)));
        assert_eq!(ex.fields["ExceptionType"].as_str(), Some("Fixture.FixtureException"));
        assert_eq!(ex.fields["ExceptionMessage"].as_str(), Some("fixture 0"));
        assert_eq!((ex.pid, ex.tid), (40, 40));
        let gc = c.events.iter().find(|e| e.name == "GCStart").unwrap();
        assert_eq!((gc.id, gc.version), (Some(1), Some(2)));
        assert_eq!(gc.fields["Count"].as_u64(), Some(2));
        assert!(c.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        // Another pid's events are filtered out.
        assert!(decode_dir(&fixture(), Some(41)).unwrap().events.is_empty());
    }

    #[test]
    fn empty_folder_says_nothing_was_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let err = format!("{:#}", decode_dir(tmp.path(), None).unwrap_err());
        assert!(err.contains("recorded nothing") && err.contains("an empty folder"), "{err}");
    }

    #[test]
    fn versions_split_from_symbols() {
        assert_eq!(split_version("GCStart_V2"), ("GCStart", Some(2)));
        assert_eq!(split_version("GCPerHeapHistory_V3_1"), ("GCPerHeapHistory", Some(3)));
        assert_eq!(split_version("GCStart"), ("GCStart", None));
        assert_eq!(split_version("Foo_Very"), ("Foo_Very", None));
    }

    #[test]
    fn profiles_follow_perfcollect() {
        let collect_only = tracepoints(&Profile::GcCollectOnly, &[]);
        assert!(collect_only.contains(&"DotNETRuntime:GCStart_V2".to_string()));
        assert!(collect_only.contains(&"DotNETRuntime:GCEnd_V1".to_string()));
        assert!(!collect_only.iter().any(|t| t.contains("GCAllocationTick")));
        let gc_only = tracepoints(&Profile::GcOnly, &[]);
        assert!(gc_only.iter().any(|t| t.contains("GCAllocationTick")));
        assert!(!gc_only.iter().any(|t| t.contains("GCBulkMovedObjectRanges")));
        let heap = tracepoints(&Profile::GcWithHeap, &[]);
        assert!(heap.iter().any(|t| t.contains("GCBulkMovedObjectRanges")));
        let default = tracepoints(&Profile::Default, &[]);
        for t in ["DotNETRuntime:ExceptionThrown_V1", "DotNETRuntime:GCStart_V2", "DotNETRuntime:MethodLoadVerbose_V1"] {
            assert!(default.contains(&t.to_string()), "{t}");
        }
        assert!(!default.iter().any(|t| t.contains("GCAllocationTick")));
        // Every version the provider declares, the ones .NET 10 fires included (enabling an older
        // name alone records nothing).
        for t in [
            "DotNETRuntime:ContentionStart_V1",
            "DotNETRuntime:ContentionStart_V2",
            "DotNETRuntime:ContentionStop",
            "DotNETRuntime:ContentionStop_V1",
            "DotNETRuntime:ContentionLockCreated",
            "DotNETRuntime:GCHeapStats_V2",
            "DotNETRuntime:ExceptionCatchStart",
            "DotNETRuntime:TieredCompilationBackgroundJitStart",
        ] {
            assert!(default.contains(&t.to_string()), "{t}");
        }
        assert!(collect_only.contains(&"DotNETRuntime:GCHeapStats_V2".to_string()));
        assert!(gc_only.contains(&"DotNETRuntime:GCAllocationTick_V4".to_string()));
        let custom = tracepoints(&Profile::Custom, &["DotNETRuntime:GCStart_V2".into()]);
        assert_eq!(custom, vec!["DotNETRuntime:GCStart_V2"]);
    }

    #[test]
    fn bad_options_are_refused() {
        let spec: LttngOptions = toml::from_str("profile = \"everything\"").unwrap();
        assert!(LttngCollector::new("lttng", &spec).is_err());
        let spec: LttngOptions = toml::from_str("profile = \"custom\"").unwrap();
        assert!(LttngCollector::new("lttng", &spec).is_err());
        let spec: LttngOptions = toml::from_str("profile = \"default, gc-only\"").unwrap();
        let both = LttngCollector::new("lttng", &spec).unwrap();
        assert!(both.tracepoints().iter().any(|t| t == "DotNETRuntime:GCAllocationTick_V4"));
        assert!(both.tracepoints().iter().any(|t| t == "DotNETRuntime:ContentionStart_V2"));
        let spec: LttngOptions = toml::from_str("profile = \"default,everything\"").unwrap();
        assert!(format!("{:#}", LttngCollector::new("lttng", &spec).err().unwrap()).contains("unknown LTTng profile `everything`"));
    }
}
