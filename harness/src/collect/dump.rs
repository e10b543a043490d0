//! Collector `dump`: core dumps of the app as dotnet-dump takes them, through our own diagnostics
//! IPC client, or the runtime's own dump of a crash — and what each dump says about the process.
//!
//! - `trigger = "ipc"` (default): `at_s` seconds after the app is released, the Dump command
//!   (GenerateCoreDump3, falling back to 2 and 1) asks the runtime for each of `types` in turn.
//!   The runtime runs its `createdump` beside itself, in the app's own namespaces, so the dump is
//!   written to a path as the *app* sees it: the run's artifacts folder, which a container target
//!   mounts at the same path. The host's view of `/proc/PID/task` is counted just before and
//!   just after each dump (`TYPE.proc_threads_before|after`): the OS's own thread count, for
//!   apps that measure nothing themselves.
//! - `trigger = "crash"`: the app runs with `DOTNET_DbgEnableMiniDump=1` (and
//!   `DOTNET_DbgMiniDumpType`, `DOTNET_DbgMiniDumpName=/tmp/tracelab-crash-%p.core`): the runtime
//!   writes a dump when the app dies of an unhandled exception; the scenario says it expects the
//!   crash (`expect_crash = true`). One type only.
//!
//! Each dump is read with the `elfcore` crate (headers and notes, never the memory): one
//! `CoreDump` event per dump and the metrics `TYPE.threads` (NT_PRSTATUS notes), `TYPE.maps_libcoreclr`
//! (1 when NT_FILE maps libcoreclr.so), `TYPE.mapped_files`, `TYPE.bytes`, `TYPE.seconds`
//! (how long the runtime took). `keep = false` deletes the dump files once read (a full dump of
//! a small app is ~150 MB).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use eventpipe::ipc::{DiagnosticsClient, DumpType};

use super::{Collector, DecodeContext};
use model::{Collection, Event, Value};
use crate::run::{RunningApp, Target, TargetKind};

/// The app's container needs no capability of its own to be dumped: createdump is the app's own
/// child and may ptrace it (the runtime allows it with PR_SET_PTRACER), our client reaches the
/// socket through /proc/PID/root/tmp (measured: `cargo xtask matrix caps`, row `dump`).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &[];

/// Where a crash dump goes, in the app's view (`%p` = its pid in its own namespace).
const CRASH_DUMP_NAME: &str = "/tmp/tracelab-crash-%p.core";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Ipc,
    Crash,
}

/// `[[collector]] kind = "dump"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DumpOptions {
    #[serde(default = "ipc")]
    pub trigger: Trigger,
    /// `mini`, `heap`, `triage`, `full` (dotnet-dump's `--type` names); several are taken in
    /// turn (IPC only).
    #[serde(default = "mini")]
    pub types: Vec<String>,
    /// Seconds after the app's release before the first dump (IPC only).
    #[serde(default = "one")]
    pub at_s: f64,
    /// Keep the dump files in the run's artifacts (false: delete them once read).
    #[serde(default = "yes")]
    pub keep: bool,
}

fn ipc() -> Trigger {
    Trigger::Ipc
}
fn mini() -> Vec<String> {
    vec!["mini".into()]
}
fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

/// The capability probe: a mini dump through the IPC client, 1 s into the probe app's run.
pub(crate) fn probe_options() -> DumpOptions {
    DumpOptions { trigger: Trigger::Ipc, types: mini(), at_s: 1.0, keep: false }
}

pub fn from_spec(name: &str, options: &DumpOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(DumpCollector::new(name, options)?))
}

/// One dump the collector asked for, and how it went.
#[derive(Clone, Debug)]
struct Taken {
    dump_type: DumpType,
    path: PathBuf,
    seconds: f64,
    proc_threads_before: Option<usize>,
    proc_threads_after: Option<usize>,
    /// The command version the runtime accepted, or why the dump failed.
    outcome: std::result::Result<u8, String>,
}

pub(crate) struct DumpCollector {
    name: String,
    trigger: Trigger,
    types: Vec<DumpType>,
    at: Duration,
    keep: bool,
    worker: Option<mpsc::Receiver<Vec<Taken>>>,
    taken: Vec<Taken>,
    commands: Vec<String>,
}

impl DumpCollector {
    pub(crate) fn new(name: &str, o: &DumpOptions) -> Result<DumpCollector> {
        let mut types = Vec::new();
        for t in &o.types {
            let parsed = DumpType::parse(t).ok_or_else(|| {
                super::bad_option("types", format!("collector `{name}`: unknown dump type `{t}`: expected {}", DumpType::ALL.map(DumpType::as_str).join(", ")))
            })?;
            if types.contains(&parsed) {
                return Err(super::bad_option("types", format!("collector `{name}`: dump type `{t}` is listed twice")));
            }
            types.push(parsed);
        }
        if types.is_empty() {
            return Err(super::bad_option("types", format!("collector `{name}`: `types` is empty: give at least one of mini, heap, triage, full")));
        }
        if o.trigger == Trigger::Crash && types.len() > 1 {
            return Err(super::bad_option("types", format!("collector `{name}`: a crash leaves one dump: give one type with `trigger = \"crash\"`")));
        }
        if !(0.0..=3600.0).contains(&o.at_s) {
            return Err(super::bad_option("at_s", format!("collector `{name}`: `at_s` is 0–3600 seconds, got {}", o.at_s)));
        }
        Ok(DumpCollector {
            name: name.into(),
            trigger: o.trigger,
            types,
            at: Duration::from_secs_f64(o.at_s),
            keep: o.keep,
            worker: None,
            taken: Vec::new(),
            commands: Vec::new(),
        })
    }

}

fn proc_threads(host_pid: u32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{host_pid}/task")).ok().map(|d| d.count())
}

impl Collector for DumpCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        if self.trigger != Trigger::Crash {
            return Vec::new();
        }
        vec![
            ("DOTNET_DbgEnableMiniDump".into(), "1".into()),
            ("DOTNET_DbgMiniDumpType".into(), (self.types[0] as u32).to_string()),
            ("DOTNET_DbgMiniDumpName".into(), CRASH_DUMP_NAME.into()),
        ]
    }

    fn start(&mut self, _target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        if self.trigger == Trigger::Crash {
            return Ok(());
        }
        let client = DiagnosticsClient::for_pid(app.host_pid)
            .with_context(|| format!("connecting to the runtime of pid {}", app.host_pid))?;
        let (tx, rx) = mpsc::channel();
        let (types, at, host_pid) = (self.types.clone(), self.at, app.host_pid);
        // The work dir is mounted at the same path in a container: this path is the app's too.
        let artifacts = artifacts.to_path_buf();
        std::thread::Builder::new().name(format!("dump-{}", self.name)).spawn(move || {
            std::thread::sleep(at);
            let mut taken = Vec::new();
            for dump_type in types {
                let path = artifacts.join(format!("dump-{}.core", dump_type.as_str()));
                let before = proc_threads(host_pid);
                let started = Instant::now();
                let outcome = client.write_dump(&path, dump_type, 0).map_err(|e| e.to_string());
                let seconds = started.elapsed().as_secs_f64();
                taken.push(Taken { dump_type, path, seconds, proc_threads_before: before, proc_threads_after: proc_threads(host_pid), outcome });
            }
            let _ = tx.send(taken);
        })?;
        self.worker = Some(rx);
        self.commands.push(format!(
            "dump: GenerateCoreDump ({}) on {} at {:.1} s",
            self.types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", "),
            self.at.as_secs_f64(),
            DiagnosticsClient::for_pid(app.host_pid).map(|c| c.socket_path().display().to_string()).unwrap_or_default()
        ));
        Ok(())
    }

    fn stop(&mut self, target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        if self.trigger == Trigger::Crash {
            // The runtime waits for createdump before it aborts: by the app's exit the file is whole.
            let tmp = if target.kind() == TargetKind::Host { PathBuf::from("/tmp") } else { app.tmp_dir_host.clone() };
            let from = tmp.join(crate::host::runtime_files::crash_dump_file(app.target_pid));
            if !from.is_file() {
                bail!(
                    "the app left no crash dump {} (DOTNET_DbgMiniDumpName={CRASH_DUMP_NAME}): did it die of an unhandled exception? Its output (artifacts/app-output.txt) shows what createdump said",
                    from.display()
                );
            }
            let artifacts = app.work_dir_in_target.clone();
            let to = artifacts.join(format!("dump-crash-{}.core", self.types[0].as_str()));
            if std::fs::rename(&from, &to).is_err() {
                std::fs::copy(&from, &to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
                std::fs::remove_file(&from).with_context(|| format!("cannot remove {}", from.display()))?;
            }
            self.commands.push(format!(
                "dump: crash dump by the runtime (DOTNET_DbgEnableMiniDump=1 DOTNET_DbgMiniDumpType={} DOTNET_DbgMiniDumpName={CRASH_DUMP_NAME})",
                self.types[0] as u32
            ));
            self.taken.push(Taken {
                dump_type: self.types[0],
                path: to,
                seconds: 0.0,
                proc_threads_before: None,
                proc_threads_after: None,
                outcome: Ok(0),
            });
            return Ok(());
        }
        let Some(rx) = self.worker.take() else { return Ok(()) };
        // Each dump takes ~1 s for a small app; a full dump of a large one, minutes.
        self.taken = rx.recv_timeout(Duration::from_secs(600)).context("the dump thread did not finish within 600 s")?;
        if self.taken.is_empty() {
            bail!("no dump was taken");
        }
        Ok(())
    }

    fn decode(&mut self, _ctx: &DecodeContext) -> Result<Collection> {
        let mut coll = Collection::new(&self.name);
        let mut failures = Vec::new();
        for t in &self.taken {
            let kind = t.dump_type.as_str();
            if let Err(why) = &t.outcome {
                failures.push(format!("{kind} dump: {why}"));
                continue;
            }
            let core = elfcore::CoreFile::open(&t.path).with_context(|| format!("reading the {kind} dump"))?;
            let m = &mut coll.metrics;
            m.insert(format!("{kind}.threads"), core.threads.len() as f64);
            m.insert(format!("{kind}.maps_libcoreclr"), f64::from(u8::from(core.maps_file("libcoreclr.so"))));
            m.insert(format!("{kind}.mapped_files"), core.mapped_files().len() as f64);
            m.insert(format!("{kind}.bytes"), core.file_len as f64);
            m.insert(format!("{kind}.seconds"), t.seconds);
            for (key, v) in [("proc_threads_before", t.proc_threads_before), ("proc_threads_after", t.proc_threads_after)] {
                if let Some(v) = v {
                    m.insert(format!("{kind}.{key}"), v as f64);
                }
            }
            let mut fields = std::collections::BTreeMap::new();
            fields.insert("type".to_string(), Value::Str(kind.into()));
            fields.insert("path".to_string(), Value::Str(t.path.display().to_string()));
            fields.insert("threads".to_string(), Value::U64(core.threads.len() as u64));
            fields.insert("bytes".to_string(), Value::U64(core.file_len));
            fields.insert("process".to_string(), Value::Str(core.process_name.clone().unwrap_or_default()));
            coll.events.push(Event {
                provider: "tracelab-dump".into(),
                name: "CoreDump".into(),
                id: None,
                version: None,
                time_ns: 0,
                pid: core.pid.unwrap_or(0),
                tid: core.threads.first().map_or(0, |t| t.tid),
                fields,
                frames: Vec::new(),
            });
            if !self.keep {
                std::fs::remove_file(&t.path).with_context(|| format!("cannot remove {}", t.path.display()))?;
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        Ok(coll)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(text: &str) -> DumpOptions {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn options_are_checked() {
        let c = DumpCollector::new("dump", &options("types = [\"mini\", \"full\"]\nat_s = 0.5")).unwrap();
        assert_eq!((c.types.clone(), c.at, c.trigger), (vec![DumpType::Mini, DumpType::Full], Duration::from_millis(500), Trigger::Ipc));
        assert!(c.app_env().is_empty());
        for (bad, why) in [
            ("types = [\"tiny\"]", "unknown dump type `tiny`"),
            ("types = []", "`types` is empty"),
            ("types = [\"mini\", \"mini\"]", "listed twice"),
            ("trigger = \"crash\"\ntypes = [\"mini\", \"full\"]", "one type"),
            ("at_s = -1.0", "`at_s`"),
        ] {
            let err = DumpCollector::new("dump", &options(bad)).err().unwrap();
            assert!(format!("{err:#}").contains(why), "{bad}: {err:#}");
        }
        assert!(toml::from_str::<DumpOptions>("trigger = \"signal\"").is_err());
    }

    #[test]
    fn crash_trigger_sets_the_runtime_dump_variables() {
        let c = DumpCollector::new("dump", &options("trigger = \"crash\"\ntypes = [\"heap\"]")).unwrap();
        let env: std::collections::BTreeMap<_, _> = c.app_env().into_iter().collect();
        assert_eq!(env["DOTNET_DbgEnableMiniDump"], "1");
        assert_eq!(env["DOTNET_DbgMiniDumpType"], "2");
        assert_eq!(env["DOTNET_DbgMiniDumpName"], "/tmp/tracelab-crash-%p.core");
        assert_eq!(crate::host::runtime_files::crash_dump_file(42), "tracelab-crash-42.core");
    }
}
