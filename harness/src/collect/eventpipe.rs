//! Collector `eventpipe`: our own EventPipe session through the diagnostics IPC client of the
//! `eventpipe` crate — no .NET tooling involved. The runtime streams a nettrace file over the
//! session's connection; a thread drains it into `artifacts/NAME.nettrace` (DESIGN.md §7:
//! a client that stops reading makes StopTracing and the app's exit hang).
//!
//! Options (`[[collector]] kind = "eventpipe"`):
//! - `profile`: `thread-time` (SampleProfiler + the runtime's default keywords), `gc`,
//!   `exceptions`, `contention`; a comma list merges several. Not `cpu-sampling`: that is
//!   dotnet-trace's name for kernel sampling through `collect-linux`.
//! - `providers`: extra providers, `"Name:0xKeywords:Level"` each (a list or a comma string).
//! - `startup` (bool): reverse-connect startup tracing. `app_env` sets
//!   `DOTNET_DiagnosticPorts=SOCKET,connect,suspend`; a thread accepts the suspended runtime,
//!   starts the session on its first connection and resumes it on the next one, so the session
//!   sees the app's first managed code. Host targets only (the socket lives in the host's /tmp).
//! - `rundown` (bool, default true): method/module rundown at the end, which names precompiled
//!   (ReadyToRun) frames and jitted ones whose load events were not enabled.
//! - `counter_interval_s` (whole seconds, default 1): the interval of the `counters` profile,
//!   which enables the runtime's EventCounters (`System.Runtime` with
//!   `EventCounterIntervalSec=N`, as dotnet-counters does). Every counter in a trace becomes the
//!   metrics `counter.NAME.median|min|max|samples`, and for a sum counter (a rate: exceptions,
//!   GCs, bytes allocated per interval) also `counter.NAME.total` (its growth over the session)
//!   and `counter.NAME.rate` (total over the seconds covered).
//!
//! Frames are named `Namespace.Type::Method(params)` (the perf-map spelling without its
//! `[module]` prefix and code-version tag; a generic method's instantiation after its name,
//! `Step<System.Int32>(!!0,int32)`, where the session saw the method's MethodDetails), `dso` is the module (`System.Private.CoreLib`), class
//! `Jit` for jitted code and `R2r` for precompiled code (MethodFlags), `Unknown` for an address
//! no method range covers.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use eventpipe::ipc::{DiagnosticsClient, ReverseListener, SessionDrain};
pub use eventpipe::ipc::{Provider, SessionConfig};

use super::spec::{StringList, items};
use super::{Collector, DecodeContext};
use model::Collection;
use crate::run::{RunningApp, Target, TargetKind};
use stacks::decode_nettrace;

pub const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
pub const SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";
/// The runtime keywords dotnet-trace enables by default (GC, Loader, Jit, Exception, Contention,
/// Threading, Interop …), at Informational.
pub const DEFAULT_RUNTIME_KEYWORDS: u64 = 0x0000_0014_C14F_CCBD;

/// Providers of one of our profiles.
pub(crate) fn profile_providers(profile: &str) -> Result<Vec<Provider>> {
    Ok(match profile {
        // dotnet-trace's keywords plus MethodDiagnostic: the runtime then writes each method's
        // instantiation (MethodDetails) beside its load event, which names generic methods' frames
        // `Step<System.Int32>` where the load event alone says `Step(!!0,int32)` for every one.
        "thread-time" => vec![
            Provider::new(SAMPLE_PROFILER, 0xF000_0000_0000, 5),
            Provider::new(RUNTIME, DEFAULT_RUNTIME_KEYWORDS | eventpipe::METHOD_DIAGNOSTIC_KEYWORD, 4),
        ],
        // GC at Verbose adds GCAllocationTick to GCStart/GCEnd/GCHeapStats/GCTriggered.
        "gc" => vec![Provider::new(RUNTIME, 0x1, 5)],
        "exceptions" => vec![Provider::new(RUNTIME, 0x8000, 4)],
        "contention" => vec![Provider::new(RUNTIME, 0x4000, 4)],
        // dotnet-counters' default: every counter of the runtime's EventSource.
        "counters" => vec![Provider {
            name: eventpipe::RUNTIME_COUNTERS.into(),
            keywords: 0xffff_ffff,
            level: 5,
            arguments: eventpipe::interval_argument(1),
        }],
        "cpu-sampling" => bail!(
            "`cpu-sampling` is dotnet-trace's name for kernel sampling (collect-linux); our EventPipe profile is `thread-time`"
        ),
        other => bail!("unknown eventpipe profile `{other}`: expected thread-time, gc, exceptions, contention or counters"),
    })
}

/// Merges providers of the same name (keywords OR-ed, highest level), keeping first-seen order.
pub(crate) fn merge_providers(list: Vec<Provider>) -> Vec<Provider> {
    let mut out: Vec<Provider> = Vec::new();
    for p in list {
        match out.iter_mut().find(|o| o.name == p.name) {
            Some(o) => {
                o.keywords |= p.keywords;
                o.level = o.level.max(p.level);
                if o.arguments.is_empty() {
                    o.arguments = p.arguments;
                }
            }
            None => out.push(p),
        }
    }
    out
}

/// Our IPC client runs on the host and reaches the app's socket through /proc/PID/root/tmp: the
/// app's container needs no capability (shared/DESIGN.md §6).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &[];

/// `[[collector]] kind = "eventpipe"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventPipeOptions {
    /// Comma list of our profiles (thread-time, gc, exceptions, contention).
    #[serde(default)]
    pub profile: Option<String>,
    /// `Name:0xKeywords:Level`, as a list or one comma string.
    #[serde(default)]
    pub providers: Option<StringList>,
    #[serde(default = "yes")]
    pub rundown: bool,
    /// Start the app suspended on our own diagnostics port, so the session sees its start-up.
    #[serde(default)]
    pub startup: bool,
    /// Seconds between two EventCounters reports of the `counters` profile (whole seconds: the
    /// runtime's counter poller truncates the interval to them).
    #[serde(default)]
    pub counter_interval_s: Option<u32>,
}

fn yes() -> bool {
    true
}

type StartupResult = std::result::Result<(SessionDrain, u64), String>;

pub(crate) struct EventPipeCollector {
    name: String,
    config: SessionConfig,
    startup: bool,
    /// Startup mode: folder of the listening socket and of the trace until `start` moves it.
    startup_dir: Option<tempfile::TempDir>,
    startup_thread: Mutex<Option<JoinHandle<StartupResult>>>,
    drain: Option<SessionDrain>,
    session_id: u64,
    /// Where the stream is written while the session runs.
    stream_path: Option<PathBuf>,
    /// `artifacts/NAME.nettrace` (the collector's name: two EventPipe collectors in one run keep
    /// a trace each).
    trace_path: Option<PathBuf>,
    host_pid: u32,
    commands: Vec<String>,
    /// The app's memory map while the session ran (names ReadyToRun frames the trace leaves bare).
    maps: super::process_maps::ProcessMaps,
}

/// The capability probe: GC events, which the gc-heavy probe app raises at once.
pub(crate) fn probe_options() -> EventPipeOptions {
    EventPipeOptions { profile: Some("gc".into()), providers: None, rundown: true, startup: false, counter_interval_s: None }
}

pub fn from_spec(name: &str, options: &EventPipeOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(EventPipeCollector::new(name, options)?))
}

impl EventPipeCollector {
    pub(crate) fn new(name: &str, options: &EventPipeOptions) -> Result<EventPipeCollector> {
        let mut providers = Vec::new();
        let profiles = options.profile.as_deref().unwrap_or("");
        for profile in profiles.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            providers.extend(profile_providers(profile)?);
        }
        if let Some(interval) = options.counter_interval_s {
            let Some(counters) = providers.iter_mut().find(|p| p.name == eventpipe::RUNTIME_COUNTERS) else {
                return Err(super::bad_option("counter_interval_s", format!("collector `{name}`: `counter_interval_s` goes with `profile = \"counters\"`")));
            };
            if !(1..=3600).contains(&interval) {
                return Err(super::bad_option("counter_interval_s", format!("collector `{name}`: `counter_interval_s` is 1–3600 whole seconds, got {interval}")));
            }
            counters.arguments = eventpipe::interval_argument(interval);
        }
        for p in items(&options.providers) {
            providers.push(p.parse::<Provider>().map_err(|e| super::bad_option("providers", format!("collector `{name}`: {e:#}")))?);
        }
        if providers.is_empty() {
            bail!(
                "collector `{name}` enables nothing: give `profile` (thread-time, gc, exceptions, contention) and/or `providers`"
            );
        }
        let config = SessionConfig {
            providers: merge_providers(providers),
            rundown: options.rundown,
            ..SessionConfig::default()
        };
        let startup = options.startup;
        let startup_dir = if startup {
            Some(tempfile::Builder::new().prefix("tracelab-ep-").tempdir().context("creating the startup socket folder")?)
        } else {
            None
        };
        Ok(EventPipeCollector {
            name: name.to_string(),
            config,
            startup,
            startup_dir,
            startup_thread: Mutex::new(None),
            drain: None,
            session_id: 0,
            stream_path: None,
            trace_path: None,
            host_pid: 0,
            commands: Vec::new(),
            maps: Default::default(),
        })
    }

    fn describe(&self) -> String {
        let providers: Vec<String> =
            self.config.providers.iter().map(|p| format!("{}:{:#x}:{}", p.name, p.keywords, p.level)).collect();
        format!("providers={} rundown={}", providers.join(","), self.config.rundown)
    }

    fn startup_socket(&self) -> Option<PathBuf> {
        self.startup_dir.as_ref().map(|d| d.path().join("diag.sock"))
    }
}

/// How long the suspended runtime may take to connect (a cold `dotnet` start is ~0.1–1 s).
const STARTUP_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

impl Collector for EventPipeCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        let (Some(socket), Some(dir)) = (self.startup_socket(), self.startup_dir.as_ref()) else {
            return Vec::new();
        };
        // The runtime waits for us before running any managed code, while the engine waits for
        // the app's readiness line: accept, start the session and resume on a thread now.
        let listener = match ReverseListener::bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                let msg = format!("{e}");
                *self.startup_thread.lock().unwrap() = Some(std::thread::spawn(move || Err(msg)));
                return Vec::new();
            }
        };
        let env_value = listener.diagnostic_ports_value();
        let config = self.config.clone();
        let stream_path = dir.path().join(format!("{}.nettrace", self.name));
        let thread = std::thread::spawn(move || -> StartupResult {
            let (session, _advertise) =
                listener.start_suspended_session(&config, STARTUP_CONNECT_TIMEOUT).map_err(|e| e.to_string())?;
            let id = session.id;
            let file = std::fs::File::create(&stream_path).map_err(|e| format!("{}: {e}", stream_path.display()))?;
            let drain = session.drain_to(std::io::BufWriter::new(file));
            // The listener goes away with this thread: the runtime's later reconnects then fail
            // and it keeps running (it retries in the background).
            Ok((drain, id))
        });
        *self.startup_thread.lock().unwrap() = Some(thread);
        vec![("DOTNET_DiagnosticPorts".to_string(), env_value)]
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        self.host_pid = app.host_pid;
        let trace_path = artifacts.join(format!("{}.nettrace", self.name));
        self.trace_path = Some(trace_path.clone());
        if self.startup {
            if target.kind() != TargetKind::Host {
                bail!(
                    "eventpipe `startup = true` needs a host target: the runtime must reach our socket {}",
                    self.startup_socket().unwrap().display()
                );
            }
            let thread = self.startup_thread.lock().unwrap().take().context(
                "startup tracing was not prepared: the engine must launch the app with this collector's app_env",
            )?;
            let (drain, id) = thread
                .join()
                .map_err(|_| anyhow::anyhow!("the startup-tracing thread panicked"))?
                .map_err(|e| anyhow::anyhow!("startup tracing failed: {e}"))?;
            self.drain = Some(drain);
            self.session_id = id;
            self.stream_path = Some(self.startup_dir.as_ref().unwrap().path().join(format!("{}.nettrace", self.name)));
            self.commands.push(format!(
                "eventpipe startup session {id} via DOTNET_DiagnosticPorts={},connect,suspend ({})",
                self.startup_socket().unwrap().display(),
                self.describe()
            ));
            return Ok(());
        }
        let client = DiagnosticsClient::for_pid(app.host_pid)
            .with_context(|| format!("connecting to the runtime of pid {}", app.host_pid))?;
        let session = client.start_session(&self.config).with_context(|| format!("starting a session on {}", client.socket_path().display()))?;
        self.session_id = session.id;
        let file = std::fs::File::create(&trace_path).with_context(|| format!("creating {}", trace_path.display()))?;
        self.commands.push(format!(
            "eventpipe CollectTracing{} session {} on {} ({})",
            session.command_version,
            session.id,
            client.socket_path().display(),
            self.describe()
        ));
        self.drain = Some(session.drain_to(std::io::BufWriter::new(file)));
        self.stream_path = Some(trace_path);
        self.maps.snapshot(app.host_pid);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        let Some(mut drain) = self.drain.take() else { return Ok(()) };
        self.maps.snapshot(self.host_pid);
        if let Some(trace) = &self.trace_path {
            self.maps.write(&trace.with_extension("maps"))?;
        }
        // After the app's exit the stream ends by itself; give it a moment before asking. A
        // live app (stopped after its collectors) is asked at once.
        let deadline = std::time::Instant::now() + Duration::from_secs(if app.is_alive() { 0 } else { 3 });
        while !drain.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !drain.is_finished() {
            // When the process is gone there is no socket, and the stream ends on its own.
            if let Ok(client) = DiagnosticsClient::for_pid(self.host_pid) {
                client.stop_tracing(self.session_id).with_context(|| format!("StopTracing {}", self.session_id))?;
                self.commands.push(format!("eventpipe StopTracing {}", self.session_id));
            }
        }
        let bytes = drain.wait(Duration::from_secs(60)).context("draining the EventPipe stream")?;
        let (Some(stream_path), Some(trace_path)) = (&self.stream_path, &self.trace_path) else { return Ok(()) };
        if stream_path != trace_path {
            std::fs::copy(stream_path, trace_path)
                .with_context(|| format!("copying {} to {}", stream_path.display(), trace_path.display()))?;
        }
        if bytes == 0 {
            bail!("the EventPipe session {} delivered no data", self.session_id);
        }
        Ok(())
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let path = self.trace_path.clone().unwrap_or_else(|| ctx.artifacts.join(format!("{}.nettrace", self.name)));
        let mut c = decode_nettrace(&path, &self.name)?;
        super::process_maps::name_frames(&mut c, &path.with_extension("maps"), ctx)?;
        Ok(c)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// Records `dll args…` (a FixtureApp-style app that prints `ready_line` before its work) under
/// an EventPipe session of `config` into `out`, on the host. Returns the bytes recorded.
/// Used to make large traces for benchmarks.
pub fn record_app(dotnet: &Path, dll: &Path, args: &[String], ready_line: &str, config: &SessionConfig, out: &Path) -> Result<u64> {
    use crate::run::{AppLaunch, HostTarget};
    let work_dir = out.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut target = HostTarget::new(dotnet.to_path_buf());
    let launch = AppLaunch::dotnet(dll.to_path_buf(), args.to_vec(), Default::default(), work_dir);
    let mut app = target.launch(&launch)?;
    app.wait_for_line(ready_line, Duration::from_secs(60))?;
    let client = DiagnosticsClient::for_pid(app.host_pid)?;
    let session = client.start_session(config)?;
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut drain = session.drain_to(std::io::BufWriter::new(file));
    let code = target.wait_app(&mut app, Duration::from_secs(600))?;
    if code != 0 {
        bail!("{} exited with {code}:\n{}", dll.display(), app.transcript.join("\n"));
    }
    Ok(drain.wait(Duration::from_secs(60))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> EventPipeOptions {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn profiles_and_providers_merge() {
        let c = EventPipeCollector::new(
            "eventpipe",
            &spec(
                r#"profile = "gc,exceptions"
               providers = ["My-Source:0x2:4"]"#,
            ),
        )
        .unwrap();
        assert_eq!(c.config.providers.len(), 2);
        assert_eq!(c.config.providers[0].keywords, 0x8001);
        assert_eq!(c.config.providers[0].level, 5);
        assert_eq!(c.config.providers[1].name, "My-Source");
        assert!(c.config.rundown);
    }

    #[test]
    fn cpu_sampling_is_not_ours() {
        let err = EventPipeCollector::new("eventpipe", &spec("profile = \"cpu-sampling\"")).err().unwrap();
        assert!(format!("{err:#}").contains("thread-time"), "{err:#}");
        let err = EventPipeCollector::new("eventpipe", &spec("")).err().unwrap();
        assert!(format!("{err:#}").contains("enables nothing"), "{err:#}");
    }
}
