//! Collector `dotnet-trace`: the real dotnet-trace (10.x, installed once from the offline feed
//! into `<root>/.build/tools`), run on the host as `dotnet-trace collect -p HOSTPID`. It finds a
//! containerised app's socket through /proc/HOSTPID/root/tmp itself (DESIGN.md §6). Its
//! .nettrace is decoded by the same decoder as our own session's.
//!
//! Options: `profile` (comma list of dotnet-trace 10 profiles: `dotnet-common`,
//! `dotnet-sampled-thread-time`, `gc-verbose`, `gc-collect`, `database`), `providers` (list or
//! comma string of `Name:0xKeywords:Level`), `rundown` (bool, default true).
//!
//! One meaning for profile + providers in both EventPipe collectors: dotnet-trace lets
//! `--providers` replace what `--profile` enables for the same provider (a scenario with
//! `profile = "gc-collect"` and a runtime provider got no GCStart), while our own client merges
//! them. So a profile is expanded into its providers ([`profile_providers`], dotnet-trace 10's own
//! definitions) and merged with the scenario's (keywords OR-ed, highest level), and dotnet-trace
//! always gets one explicit `--providers` list.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use stacks::decode_nettrace;
use super::spec::{StringList, items};
use super::{Collector, DecodeContext};
use crate::host::dotnet::Dotnet;
use model::Collection;
use crate::run::{RunningApp, Target};

/// dotnet-trace 10's profiles for `collect` (the `cpu-sampling` / `thread-time` ones belong to
/// `collect-linux`, which needs kernel user_events).
pub(crate) const PROFILES: [&str; 5] = ["dotnet-common", "dotnet-sampled-thread-time", "gc-verbose", "gc-collect", "database"];

/// The providers of a dotnet-trace 10 profile, as dotnet-trace 10.0.750501 defines them (read from
/// its `ListProfilesCommandHandler.TraceProfiles` by reflection; `dotnet-trace list-profiles`
/// prints dotnet-common's as `--providers "Microsoft-Windows-DotNETRuntime:0x100003801D:4"`).
/// `database` carries EventSource filter arguments with newlines and is not expanded.
pub(crate) fn profile_providers(profile: &str) -> Option<&'static [&'static str]> {
    Some(match profile {
        "dotnet-common" => &["Microsoft-Windows-DotNETRuntime:0x100003801D:4"],
        "dotnet-sampled-thread-time" => &["Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4"],
        "gc-verbose" => &["Microsoft-Windows-DotNETRuntime:0x8003:5"],
        "gc-collect" => &["Microsoft-Windows-DotNETRuntime:0x1:4", "Microsoft-Windows-DotNETRuntimePrivate:0x1:4"],
        _ => return None,
    })
}

pub(crate) struct DotnetTrace {
    name: String,
    profiles: Vec<String>,
    /// What dotnet-trace gets: the profiles' providers merged with the scenario's, `Name:0xK:L`.
    providers: Vec<String>,
    rundown: bool,
    child: Option<Child>,
    stdin: Option<std::process::ChildStdin>,
    output: Arc<Mutex<Vec<u8>>>,
    trace_path: Option<PathBuf>,
    commands: Vec<String>,
    /// The app's memory map while dotnet-trace ran (names ReadyToRun frames the trace leaves bare).
    maps: super::process_maps::ProcessMaps,
    host_pid: u32,
}

/// dotnet-trace runs on the host and finds the app's socket through /proc/PID/root/tmp: the
/// app's container needs no capability (shared/DESIGN.md §6).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &[];

/// `[[collector]] kind = "dotnet-trace"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DotnetTraceOptions {
    /// dotnet-trace 10 profiles, as a list or one comma string.
    #[serde(default)]
    pub profile: Option<StringList>,
    /// `Name:0xKeywords:Level`, as a list or one comma string.
    #[serde(default)]
    pub providers: Option<StringList>,
    #[serde(default = "yes")]
    pub rundown: bool,
}

fn yes() -> bool {
    true
}

/// The capability probe: dotnet-trace's GC profile, which the gc-heavy probe app fills at once.
pub(crate) fn probe_options() -> DotnetTraceOptions {
    DotnetTraceOptions { profile: Some(StringList::One("gc-collect".into())), providers: None, rundown: true }
}

pub fn from_spec(name: &str, options: &DotnetTraceOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(DotnetTrace::new(name, options)?))
}

/// Where dotnet-trace is installed (project-local, never $HOME).
pub fn tool_dir() -> PathBuf {
    crate::project_root().join(".build").join("tools")
}

/// The dotnet-trace launcher, installed from the offline feed on first use.
pub fn ensure_installed() -> Result<(Dotnet, PathBuf)> {
    let dotnet = Dotnet::locate_or_install()?;
    let launcher = dotnet.install_tool("dotnet-trace", &tool_dir())?;
    Ok((dotnet, launcher))
}

impl DotnetTrace {
    pub(crate) fn new(name: &str, options: &DotnetTraceOptions) -> Result<DotnetTrace> {
        let profiles = items(&options.profile);
        for p in &profiles {
            if !PROFILES.contains(&p.as_str()) {
                return Err(super::bad_option("profile", format!("collector `{name}`: dotnet-trace 10 has no profile `{p}` for `collect`; known: {}", PROFILES.join(", "))));
            }
        }
        let given = items(&options.providers);
        if profiles.is_empty() && given.is_empty() {
            bail!("collector `{name}` enables nothing: give `profile` and/or `providers`");
        }
        let mut parsed = Vec::new();
        let mut unexpanded = Vec::new();
        for p in &profiles {
            match profile_providers(p) {
                Some(list) => parsed.extend(list.iter().map(|s| s.parse::<eventpipe::ipc::Provider>().expect("a valid built-in provider"))),
                None => unexpanded.push(p.clone()),
            }
        }
        if !unexpanded.is_empty() && (profiles.len() > 1 || !given.is_empty()) {
            bail!(
                "collector `{name}`: dotnet-trace's `database` profile carries EventSource filter arguments tracelab does not expand; \
                 give it alone (`profile = \"database\"`), or spell its providers in `providers`"
            );
        }
        for p in &given {
            parsed.push(p.parse::<eventpipe::ipc::Provider>().map_err(|e| super::bad_option("providers", format!("collector `{name}`: {e:#}")))?);
        }
        let providers = super::eventpipe::merge_providers(parsed)
            .into_iter()
            .map(|p| {
                let base = format!("{}:{:#X}:{}", p.name, p.keywords, p.level).replace(":0X", ":0x");
                if p.arguments.is_empty() { base } else { format!("{base}:{}", p.arguments) }
            })
            .collect();
        let profiles = unexpanded;
        Ok(DotnetTrace {
            name: name.to_string(),
            profiles,
            providers,
            rundown: options.rundown,
            child: None,
            stdin: None,
            output: Arc::new(Mutex::new(Vec::new())),
            trace_path: None,
            commands: Vec::new(),
            maps: Default::default(),
            host_pid: 0,
        })
    }

    fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }
}

/// Ends a `dotnet-trace collect` / `collect-linux` child: it ends by itself when the traced
/// process exits (given 5 s for that); if the app is still alive (a run cut short, an app stopped
/// after its collectors, a web app), SIGINT makes it stop the session and finish the file, as
/// Ctrl+C does — its "press Enter" reads a terminal only: with stdin a pipe, Enter was never read
/// and an idle web app's trace waited out the limit. `None` when it did not end within `limit`
/// (then it is killed).
pub(crate) fn finish(
    child: &mut Child,
    stdin: Option<std::process::ChildStdin>,
    app_alive: bool,
    limit: Duration,
) -> Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + Duration::from_secs(if app_alive { 0 } else { 5 });
    while child.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait()?.is_none() {
        // SIGINT, 2: dotnet-trace's Ctrl+C handler stops the session and writes the rundown.
        let _ = crate::host::proc::signal(child.id(), 2);
    }
    drop(stdin);
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn collect_output<R: Read + Send + 'static>(mut r: R, sink: Arc<Mutex<Vec<u8>>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut s = sink.lock().unwrap();
            // Progress lines repeat forever on a long run; keep the start and the latest bytes.
            if s.len() > 1 << 20 {
                s.drain(64 << 10..128 << 10);
            }
            s.extend_from_slice(&buf[..n]);
        }
    });
}

impl Collector for DotnetTrace {
    fn name(&self) -> &str {
        &self.name
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        if !target.shares_tmp_with_tools() {
            // Where the tools do not share the app's /tmp (a pod's debug container), dotnet-trace
            // finds no diagnostics socket: it looks in its own /tmp only.
            return Err(crate::host::errors::Unsupported {
                reason: "dotnet-trace cannot attach from a container that does not share the app's /tmp (a debug \
                         container): it looks for the diagnostics socket in its own /tmp only \
                         (dotnet/diagnostics#3480); mount the app's /tmp (an emptyDir) in the tools \
                         container (pod shape `sidecar`), or use the `eventpipe` collector, which looks \
                         through /proc/PID/root/tmp"
                    .into(),
            }
            .into());
        }
        let (dotnet, launcher) = ensure_installed()?;
        // Named by the collector, as every collector's files are: two in one run keep a trace each.
        let trace_path = artifacts.join(format!("{}.nettrace", self.name));
        let mut argv: Vec<String> = vec![
            launcher.display().to_string(),
            "collect".into(),
            "-p".into(),
            app.host_pid.to_string(),
            "-o".into(),
            trace_path.display().to_string(),
        ];
        if !self.profiles.is_empty() {
            argv.extend(["--profile".into(), self.profiles.join(",")]);
        }
        if !self.providers.is_empty() {
            argv.extend(["--providers".into(), self.providers.join(",")]);
        }
        if !self.rundown {
            argv.extend(["--rundown".into(), "false".into()]);
        }
        if app.held_at_start {
            // The engine resumes a held app once every collector records; dotnet-trace would
            // resume it as soon as its own session started.
            argv.push("--resume-runtime:false".into());
        }
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env("DOTNET_ROOT", &dotnet.root)
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .env("DOTNET_NOLOGO", "1")
            // Its stdin stays open until it is stopped (by SIGINT, see `finish`).
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("could not start {}", argv[0]))?;
        self.stdin = child.stdin.take();
        collect_output(child.stdout.take().unwrap(), self.output.clone());
        collect_output(child.stderr.take().unwrap(), self.output.clone());
        self.commands.push(crate::host::proc::quoted(&argv));
        self.trace_path = Some(trace_path);
        // dotnet-trace prints "Output File : …" after CollectTracing answered (its progress line
        // only appears on a terminal): from then on the session records.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.output_text();
            if text.lines().any(|l| l.starts_with("Output File"))
                || text.contains("Recording trace")
            {
                break;
            }
            if let Some(status) = child.try_wait()? {
                bail!("dotnet-trace exited ({status}) before its session started:\n{}", text.trim());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("dotnet-trace did not start a session within 60 s; its output:\n{}", text.trim());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
        self.host_pid = app.host_pid;
        self.maps.snapshot(app.host_pid);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        self.maps.snapshot(self.host_pid);
        if let Some(trace) = &self.trace_path {
            self.maps.write(&trace.with_extension("maps"))?;
        }
        let Some(status) = finish(&mut child, self.stdin.take(), app.is_alive(), Duration::from_secs(60))? else {
            bail!("dotnet-trace did not finish within 60 s; killed. Output:\n{}", self.output_text().trim());
        };
        let path = self.trace_path.as_ref().unwrap();
        if !path.is_file() {
            bail!("dotnet-trace ended ({status}) without writing {}:\n{}", path.display(), self.output_text().trim());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let spec: DotnetTraceOptions = toml::from_str("profile = \"gc-verbose,dotnet-common\"").unwrap();
        let c = DotnetTrace::new("dotnet-trace", &spec).unwrap();
        // Expanded and merged into one provider list; no `--profile` is passed.
        assert!(c.profiles.is_empty());
        assert_eq!(c.providers, ["Microsoft-Windows-DotNETRuntime:0x100003801F:5"]);
        let spec: DotnetTraceOptions = toml::from_str("profile = \"cpu-sampling\"").unwrap();
        let err = DotnetTrace::new("dotnet-trace", &spec).err().unwrap();
        assert!(format!("{err:#}").contains("no profile `cpu-sampling`"), "{err:#}");
        let spec: DotnetTraceOptions = toml::from_str("profile = \"database\"\nproviders = [\"X:0x1:4\"]").unwrap();
        assert!(format!("{:#}", DotnetTrace::new("dotnet-trace", &spec).err().unwrap()).contains("give it alone"));
        let spec: DotnetTraceOptions = toml::from_str("profile = \"database\"").unwrap();
        assert_eq!(DotnetTrace::new("dotnet-trace", &spec).unwrap().profiles, ["database"]);
    }

    /// The case: a runtime provider beside `gc-collect` used to replace the profile's GC
    /// keyword in dotnet-trace (GCStart measured 0); merged, GCStart survives.
    #[test]
    fn a_provider_beside_a_profile_keeps_the_profile_keywords() {
        let spec: DotnetTraceOptions =
            toml::from_str("profile = \"gc-collect\"\nproviders = [\"Microsoft-Windows-DotNETRuntime:0x8000:4\"]").unwrap();
        let c = DotnetTrace::new("dotnet-trace", &spec).unwrap();
        assert_eq!(c.providers, ["Microsoft-Windows-DotNETRuntime:0x8001:4", "Microsoft-Windows-DotNETRuntimePrivate:0x1:4"]);
        assert!(c.profiles.is_empty());
        // Every built-in expansion parses, and the profiles we list are the ones expanded.
        for p in PROFILES.iter().filter(|p| **p != "database") {
            assert!(profile_providers(p).is_some(), "{p}");
        }
    }
}
