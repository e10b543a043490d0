//! Collector `perfcollect`: Microsoft's own `perfcollect` script (../shared/reference/perfcollect,
//! as users run it), the peer tracelab is scored against. It runs unchanged as `perfcollect
//! collect NAME -pid PID` in its own container beside the app (the sidecar target: joined to the
//! app's pid and IPC namespaces, sharing its /tmp and /var/run/lttng, with the capabilities the
//! script's README asks for: SYS_ADMIN, IPC_LOCK, SYSLOG), so the app's container stays
//! unprivileged. Its Debian packages (perf, lttng-tools, zip, unzip) are in the image, installed
//! when the image is built (`perfcollect install` downloads and cannot run offline).
//!
//! Start: the script prints "Collection started" after its LTTng session started; its `perf
//! record` follows (its perf.data appears in its temporary folder in the shared /tmp), and the
//! app, started before the session daemon existed, registers its tracepoints with it (`lttng list
//! -u`). Only then is the app released. Stop: SIGINT, as a user's Ctrl-C; the script stops perf and
//! LTTng, post-processes (`perf inject --jit`, `perf script`) and zips `NAME.trace.zip` into the
//! app's working folder (the run's artifacts). It exits 1 even when it succeeds: the zip is the
//! proof. Decode: the zip's `perf.data.txt` (perf's names, as PerfView shows them) becomes the
//! samples, its `lttngTrace/` the events; the same checks then judge it as every collector.
//!
//! Option `settings`: `documented` (default) starts the app as the script's own instructions say
//! (`PerfMapEnabled=1`, `EnableEventLog=1`), which on .NET 10 names no JIT frame when W^X is on;
//! `fixed` adds what was found to make its JIT frames resolve (`DOTNET_PerfMapEnabled=3`,
//! `DOTNET_EnableWriteXorExecute=0`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::dotnet_trace::collect_output;
use super::lttng::session::{Place, Tools};
use super::{Collector, DecodeContext};
use crate::host::errors::Unsupported;
use crate::run::{RunningApp, Target, TargetKind, ToolProcess};
use model::{Collection, DsoClass, Frame, Sample};

/// What the script's README asks a container for.
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN", "IPC_LOCK", "SYSLOG"];
/// perfcollect's `perf record -F` when it samples CPU alone.
pub(crate) const FREQUENCY_HZ: f64 = 1000.0;
/// How long the script may take to start its LTTng session and perf.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an app started before the session daemon may take to register with it.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(20);
/// Post-processing (`perf inject`, `perf script`, zip) after Ctrl-C.
const STOP_TIMEOUT: Duration = Duration::from_secs(300);
/// The script's copy in the app's shared /tmp, as the sidecar sees it.
const SCRIPT_IN_TMP: &str = ".tracelab-perfcollect";

/// `[[collector]] kind = "perfcollect"` options.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerfcollectOptions {
    /// `documented` (the script's own instructions; default) or `fixed` (W^X off and perf map
    /// only: its JIT frames resolve on .NET 10).
    #[serde(default)]
    pub settings: Option<String>,
}

/// The script as shipped beside the checkout.
pub fn script_path() -> PathBuf {
    crate::shared_dir().join("reference").join("perfcollect").join("perfcollect")
}

/// The app's environment `fixed` adds to the documented one: what makes perfcollect's JIT frames
/// resolve on .NET 10 (said in the summary when a documented run names few).
pub const FIXED_SETTINGS: &[(&str, &str)] = &[("DOTNET_PerfMapEnabled", "3"), ("DOTNET_EnableWriteXorExecute", "0")];

/// The committed list of event types the lttng collector records and perfcollect does not, each
/// with why (`harness/data/perfcollect-differences.toml`).
pub fn known_differences() -> &'static std::collections::BTreeMap<String, String> {
    #[derive(serde::Deserialize)]
    struct Differences {
        except: std::collections::BTreeMap<String, String>,
    }
    static LIST: std::sync::OnceLock<std::collections::BTreeMap<String, String>> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        let text = include_str!("../../data/perfcollect-differences.toml");
        toml::from_str::<Differences>(text).unwrap_or_else(|e| panic!("harness/data/perfcollect-differences.toml: {e}")).except
    })
}

pub fn from_spec(name: &str, options: &PerfcollectOptions) -> Result<Box<dyn Collector>> {
    let fixed = match options.settings.as_deref() {
        None | Some("documented") => false,
        Some("fixed") => true,
        Some(other) => {
            return Err(super::bad_option("settings", format!("unknown perfcollect settings `{other}`: expected documented or fixed")));
        }
    };
    Ok(Box::new(Perfcollect { name: name.to_string(), fixed, ..Perfcollect::default() }))
}

#[derive(Default)]
struct Perfcollect {
    name: String,
    fixed: bool,
    tool: Option<ToolProcess>,
    output: Arc<Mutex<Vec<u8>>>,
    artifacts: PathBuf,
    target_pid: u32,
    script_copy: Option<PathBuf>,
    metrics: std::collections::BTreeMap<String, f64>,
    commands: Vec<String>,
}

impl Perfcollect {
    fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    fn zip_path(&self) -> PathBuf {
        self.artifacts.join(stacks::perfcollect::file_name(&self.name))
    }

    /// Waits until `ready` holds, failing when the script ended first or after `timeout`.
    fn await_script(&mut self, what: &str, timeout: Duration, mut ready: impl FnMut(&Self) -> Result<bool>) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready(self)? {
                return Ok(());
            }
            if let Some(status) = self.tool.as_mut().and_then(|t| t.child.try_wait().ok().flatten()) {
                bail!("perfcollect exited ({status}) before {what}; its output:\n{}", self.output_text().trim());
            }
            if Instant::now() >= deadline {
                bail!("perfcollect did not reach {what} within {timeout:?}; its output:\n{}", self.output_text().trim());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether the script's `perf record` opened its output: perf writes the file's header first.
/// The script records in a `mktemp -d` folder of /tmp (the app's, shared).
fn perf_recording(tmp_dir_host: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(tmp_dir_host) else { return false };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("tmp.")
            && std::fs::metadata(e.path().join("perf.data")).is_ok_and(|m| m.len() > 0)
    })
}

impl Collector for Perfcollect {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        // The script's instructions (it says COMPlus_, which .NET 10 reads as DOTNET_).
        let mut env = vec![("DOTNET_PerfMapEnabled".to_string(), "1".to_string()), ("DOTNET_EnableEventLog".into(), "1".into())];
        if self.fixed {
            env.retain(|(k, _)| FIXED_SETTINGS.iter().all(|(f, _)| f != k));
            env.extend(FIXED_SETTINGS.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        env
    }

    fn preflight(&self) -> Result<()> {
        let script = script_path();
        if !script.is_file() {
            bail!(
                "the perfcollect script is not at {}: it comes with ../shared (reference/perfcollect); set TRACELAB_SHARED to \
                 the folder that holds it",
                script.display()
            );
        }
        Ok(())
    }

    fn runs_on(&self, target: TargetKind) -> Result<()> {
        if target == TargetKind::Sidecar {
            return Ok(());
        }
        Err(Unsupported {
            reason: format!(
                "perfcollect runs in its own container beside the app, with SYS_ADMIN, IPC_LOCK and SYSLOG that the app's \
                 container must not get, and LTTng 2.12 (the bullseye image): run with `--target sidecar`, not {}",
                target.as_str()
            ),
        }
        .into())
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        self.runs_on(target.kind())?;
        self.artifacts = artifacts.to_path_buf();
        self.target_pid = app.target_pid;
        let _ = std::fs::remove_file(self.zip_path());
        // The script runs from the app's /tmp, which the sidecar shares: nothing of it lands in results.
        let copy = app.tmp_dir_host.join(SCRIPT_IN_TMP);
        std::fs::copy(script_path(), &copy).with_context(|| format!("cannot copy the perfcollect script to {}", copy.display()))?;
        self.script_copy = Some(copy);
        let argv: Vec<String> =
            ["bash", &format!("/tmp/{SCRIPT_IN_TMP}"), "collect", &self.name, "-pid", &app.target_pid.to_string()].map(String::from).to_vec();
        self.commands.push(format!("perfcollect collect {} -pid {} (in a sidecar: {})", self.name, app.target_pid, target.capabilities().join(",")));
        crate::host::progress::note("collect", &format!("perfcollect: {}", argv[2..].join(" ")));
        let t0 = Instant::now();
        let mut tool = target.spawn_tool(app, &argv, &[("TERM".into(), "dumb".into())])?;
        collect_output(tool.child.stdout.take().context("perfcollect's stdout")?, self.output.clone());
        collect_output(tool.child.stderr.take().context("perfcollect's stderr")?, self.output.clone());
        self.tool = Some(tool);
        self.await_script("its LTTng session (\"Collection started\")", START_TIMEOUT, |c| Ok(c.output_text().contains("Collection started")))?;
        let tmp = app.tmp_dir_host.clone();
        self.await_script("its perf record", START_TIMEOUT, |_| Ok(perf_recording(&tmp)))?;
        // The app started before the script's session daemon: it registers when the daemon comes
        // up. Released before that, its first events would be lost to the gap, not to perfcollect.
        let tools = Tools { place: Place::Namespaces { anchor: app.host_pid }, lttng_home: "/tmp".into() };
        // perfcollect itself does not look: a failed look is said, not fatal.
        let registered = tools.wait_registered(app.target_pid, "DotNETRuntime", REGISTRATION_TIMEOUT).unwrap_or(0);
        if registered == 0 {
            crate::host::progress::note(
                "collect",
                &format!("perfcollect: the app registered no DotNETRuntime tracepoints within {REGISTRATION_TIMEOUT:?}: its LTTng trace will hold none"),
            );
        }
        self.metrics.insert("perfcollect.registered_tracepoints".into(), registered as f64);
        self.metrics.insert("perfcollect.start_s".into(), t0.elapsed().as_secs_f64());
        Ok(())
    }

    /// Its `lttng create` finds the `lttng` collector's daemon when one runs (the shared
    /// /var/run/lttng): stopped first, its session is flushed before that daemon goes.
    fn stops_first(&self) -> bool {
        true
    }

    fn stop(&mut self, _target: &mut dyn Target, _app: &RunningApp) -> Result<()> {
        let Some(mut tool) = self.tool.take() else { return Ok(()) };
        let t0 = Instant::now();
        let step = crate::host::progress::step("collect", "perfcollect: Ctrl-C, then its post-processing (perf inject, perf script, zip)");
        let stopped = tool.interrupt().and_then(|()| tool.wait(STOP_TIMEOUT));
        drop(step);
        let log = self.artifacts.join(format!("{}.log", self.name));
        let text = self.output_text();
        let _ = std::fs::write(&log, &text);
        if let Some(copy) = self.script_copy.take() {
            let _ = std::fs::remove_file(copy);
        }
        // Its LTTng session's folder, copied into the zip by the script (which leaves it).
        let _ = std::fs::remove_dir_all(self.artifacts.join(crate::run::container::SIDECAR_LTTNG_TRACES));
        self.metrics.insert("perfcollect.stop_s".into(), t0.elapsed().as_secs_f64());
        let status = stopped.with_context(|| format!("stopping perfcollect (its output: {})", log.display()))?;
        if !self.zip_path().is_file() {
            bail!("perfcollect ended ({status}) without writing {}; its output ({}):\n{}", self.zip_path().display(), log.display(), text.trim());
        }
        Ok(())
    }

    fn decode(&mut self, _ctx: &DecodeContext) -> Result<Collection> {
        let zip = self.zip_path();
        let unpacked = self.artifacts.join(format!(".{}-unpacked", self.name));
        let _ = std::fs::remove_dir_all(&unpacked);
        let result = decode_zip(&zip, &unpacked, &self.name, self.target_pid);
        let _ = std::fs::remove_dir_all(&unpacked);
        let mut collection = result?;
        collection.metrics.extend(self.metrics.clone());
        collection.metrics.insert("perfcollect.fixed_settings".into(), if self.fixed { 1.0 } else { 0.0 });
        Ok(collection)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// The model of a perfcollect trace.zip: the samples of `pid` from its `perf.data.txt`, named as
/// perf named them, and its LTTng events.
pub fn decode_zip(zip: &Path, unpacked: &Path, collector: &str, pid: u32) -> Result<Collection> {
    let folder = stacks::perfcollect::unpack(zip, unpacked)?;
    let script = folder.join("perf.data.txt");
    let mut collection = match folder.join("lttngTrace") {
        dir if dir.is_dir() => super::lttng::decode_dir(&dir, Some(pid))?,
        _ => Collection::new(collector),
    };
    collection.collector = collector.to_string();
    let events = collection.events.len();
    let source = format!("{} (in {})", script.display(), zip.display());
    let text = std::fs::read_to_string(&script).with_context(|| format!("{} holds no perf.data.txt", zip.display()))?;
    let mut reader = stacks::ScriptReader::new(&source);
    let mut others = 0u64;
    let mut take = |s: stacks::ScriptSample| {
        if s.pid.is_some_and(|p| p != pid) {
            others += 1;
            return;
        }
        let frames = s.frames.into_iter().map(|f| frame(f.symbol, f.dso, f.addr)).collect();
        let tid = s.tid.unwrap_or(pid);
        collection.samples.push(Sample::new(pid, tid, s.time_us * 1000, frames));
    };
    for line in text.lines() {
        if let Some(s) = reader.line(line)? {
            take(s);
        }
    }
    if let Some(s) = reader.finish() {
        take(s);
    }
    collection.sampling = model::Sampling::CpuTime;
    collection.metrics.insert("frequency_hz".into(), FREQUENCY_HZ);
    collection.metrics.insert("perfcollect.samples_of_other_processes".into(), others as f64);
    collection.metrics.insert("perfcollect.lttng_events".into(), events as f64);
    Ok(collection)
}

/// A frame as perf printed it: the class from its mapping (`perf inject --jit`'s `jitted-*.so`
/// images hold JIT code).
fn frame(symbol: Option<String>, dso: String, addr: u64) -> Frame {
    let file = dso.rsplit('/').next().unwrap_or(&dso);
    let class = if file.starts_with("jitted-") && file.ends_with(".so") { DsoClass::Jit } else { DsoClass::of_mapping(&dso) };
    let dso = (dso != "[unknown]").then_some(dso);
    Frame { class: class.refined(symbol.as_deref()), name: symbol, dso, addr }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_take_perfs_names_and_the_class_of_their_mapping() {
        let f = frame(Some("Program::Hot()[OptimizedTier1]".into()), "/root/.debug/jit/x/jitted-7-12.so".into(), 1);
        assert_eq!(f.class, DsoClass::Jit);
        let f = frame(None, "/memfd:doublemapper (deleted)".into(), 1);
        assert_eq!((f.class, f.display_name().as_str()), (DsoClass::Jit, "[unknown] (/memfd:doublemapper (deleted))"));
        assert_eq!(frame(None, "[unknown]".into(), 0).dso, None);
        assert_eq!(frame(Some("x".into()), "/tmp/perf-7.map".into(), 1).class, DsoClass::Jit);
    }

    #[test]
    fn the_known_differences_load_and_name_runtime_events() {
        let list = known_differences();
        assert!(list.len() >= 10, "{list:?}");
        for (event, why) in list {
            assert!(super::super::lttng::runtime_event_keywords(event).is_some(), "`{event}` is no event of the runtime's manifest");
            assert!(!why.trim().is_empty(), "{event}: no reason");
        }
    }

    #[test]
    fn settings_are_checked_and_fixed_turns_wx_off() {
        let e = from_spec("p", &PerfcollectOptions { settings: Some("best".into()) }).err().unwrap().to_string();
        assert!(e.contains("unknown perfcollect settings `best`"), "{e}");
        let env = from_spec("p", &PerfcollectOptions { settings: Some("fixed".into()) }).unwrap().app_env();
        assert!(env.contains(&("DOTNET_EnableWriteXorExecute".into(), "0".into())) && env.contains(&("DOTNET_PerfMapEnabled".into(), "3".into())), "{env:?}");
        let env = from_spec("p", &PerfcollectOptions::default()).unwrap().app_env();
        assert_eq!(env, [("DOTNET_PerfMapEnabled".to_string(), "1".to_string()), ("DOTNET_EnableEventLog".into(), "1".into())]);
    }

    #[test]
    fn a_zip_written_as_perfcollect_writes_it_decodes_to_the_apps_samples_and_events() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("src/p.trace");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("perf.data.txt"),
            "dotnet  40/41 [001] 10.000001: 1001001 cpu-clock: \n\t    7f0000001000 instance void [a] P::Hot()[OptimizedTier1] (/tmp/perf-40.map)\n\
             \t    7f0000002000 [unknown] (/memfd:doublemapper (deleted))\n\n\
             other 9/9 [000] 10.000002: 1001001 cpu-clock: \n\tffffffff81000000 schedule ([kernel.kallsyms])\n\n",
        )
        .unwrap();
        let ctf = tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions");
        let copy = folder.join("lttngTrace");
        copy_dir(&ctf, &copy.join("auto-1"));
        let zip = dir.path().join("p.trace.zip");
        zip_dir(&dir.path().join("src"), &zip);
        let c = decode_zip(&zip, &dir.path().join("out"), "perfcollect", 40).unwrap();
        assert_eq!(c.collector, "perfcollect");
        assert_eq!(c.samples.len(), 1);
        assert_eq!((c.samples[0].tid, c.samples[0].time_ns), (41, 10_000_001_000));
        assert_eq!(c.samples[0].frames[0].name.as_deref(), Some("instance void [a] P::Hot()[OptimizedTier1]"));
        assert_eq!(c.metrics["perfcollect.samples_of_other_processes"], 1.0);
        assert_eq!(c.events.iter().filter(|e| e.name == "ExceptionThrown").count(), 1000);
    }

    /// `zip -r` of every file under `root`, named relative to it.
    fn zip_dir(root: &Path, to: &Path) {
        use std::io::Write as _;
        let mut zip = zip::ZipWriter::new(std::fs::File::create(to).unwrap());
        let mut todo = vec![root.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    todo.push(e.path());
                    continue;
                }
                let name = e.path().strip_prefix(root).unwrap().to_string_lossy().into_owned();
                zip.start_file(name, zip::write::SimpleFileOptions::default()).unwrap();
                zip.write_all(&std::fs::read(e.path()).unwrap()).unwrap();
            }
        }
        zip.finish().unwrap();
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
}
