//! Collector `collect-linux`: the real `dotnet-trace collect-linux` of dotnet-trace 10 (the one
//! the `dotnet-trace` collector installs), run on the host as `dotnet-trace collect-linux -p PID`.
//! The runtime writes its events through the kernel's user_events (an EventPipe session opened
//! with `CollectTracing5`) and dotnet-trace's `librecordtrace.so` records them with perf events:
//! CPU samples (`cpu-sampling`) and context switches (`thread-time`) with native and kernel
//! frames, runtime events with call stacks, into one .nettrace (format V6) that
//! `stacks::decode_collect_linux` reads.
//!
//! It needs a kernel with `CONFIG_USER_EVENTS` (6.4 or newer; no Debian kernel has it: the
//! kernel matrix builds one, `6.12-user-events`), tracefs and root. [`Collector::preflight`]
//! checks the kernel before anything is built, so a scenario on a kernel without it SKIPs in
//! seconds naming the option and what to do.
//!
//! Options: `profile` (collect-linux's kernel profiles `cpu-sampling`, `thread-time` and the
//! runtime profiles of `collect`, which are expanded and merged with `providers` as the
//! `dotnet-trace` collector does), `providers`, `perf_events` (`sched:sched_switch` …).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::dotnet_trace::{collect_output, ensure_installed, finish, profile_providers};
use super::spec::{StringList, items};
use super::{Collector, DecodeContext};
use crate::host::errors::Unsupported;
use crate::run::{RunningApp, Target};
use model::Collection;
use stacks::{decode_collect_linux, decode_nettrace};

/// collect-linux's own profiles: perf events of the kernel, no runtime provider.
pub(crate) const KERNEL_PROFILES: [&str; 2] = ["cpu-sampling", "thread-time"];

pub use crate::host::environment::{USER_EVENTS_DATA, user_events_state};

/// The kernel's list of registered user_events, each with who uses it (`… # Used by perf`).
const USER_EVENTS_STATUS: &str = "/sys/kernel/tracing/user_events_status";

/// Whether the kernel's user_events status (the text of [`USER_EVENTS_STATUS`]: one line per
/// event, `NAME # Used by perf` once a perf event listens) shows the .NET runtime's events (their
/// names start `OC_DotNet_`, as one-collect registers them) used by perf.
fn runtime_events_used_by_perf(status: &str) -> bool {
    status.lines().any(|l| l.starts_with("OC_DotNet_") && l.split_once(" # Used by").is_some_and(|(_, by)| by.contains("perf")))
}

/// Where the .NET runtime lets collect-linux record: `/proc/PID/root/tmp` style attaching as in
/// the `dotnet-trace` collector needs no capability of the app's container.
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &[];

/// `[[collector]] kind = "collect-linux"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectLinuxOptions {
    /// `cpu-sampling`, `thread-time` and/or runtime profiles (`dotnet-common`, `gc-collect` …).
    #[serde(default)]
    pub profile: Option<StringList>,
    /// `Name:0xKeywords:Level`, as a list or one comma string.
    #[serde(default)]
    pub providers: Option<StringList>,
    /// Extra perf events (`sched:sched_switch`), as a list or one comma string.
    #[serde(default)]
    pub perf_events: Option<StringList>,
}

/// The capability probe: CPU samples with the runtime's common events.
pub(crate) fn probe_options() -> CollectLinuxOptions {
    CollectLinuxOptions {
        profile: Some(StringList::One("dotnet-common,cpu-sampling".into())),
        providers: None,
        perf_events: None,
    }
}

pub fn from_spec(name: &str, options: &CollectLinuxOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(CollectLinux::new(name, options)?))
}

/// The reason a scenario SKIPs on a kernel without user_events: the option, the kernel, and what
/// to run instead.
pub fn user_events_missing(kernel: &str, why: &str) -> String {
    format!(
        "dotnet-trace collect-linux needs kernel user_events (CONFIG_USER_EVENTS=y, Linux 6.4 or newer), and this kernel \
         ({kernel}) has none: {why}. Run the scenario on a kernel built with it — `cargo xtask matrix kernels --kernels \
         6.12-user-events --scenario NAME` builds and boots one — or on a host whose kernel has it"
    )
}

/// [`Unsupported`] unless this machine's kernel has user_events.
pub(crate) fn require_user_events() -> Result<(), Unsupported> {
    let release = crate::host::environment::kernel_release();
    let config = crate::host::environment::kernel_config();
    let tracefs = crate::host::environment::tracefs_mounted();
    match user_events_state(
        Path::new(USER_EVENTS_DATA),
        tracefs,
        config.as_ref().map(|(_, t)| t.as_str()),
    ) {
        Some(true) => Ok(()),
        Some(false) => Err(Unsupported {
            reason: user_events_missing(
                &release,
                &match &config {
                    Some((from, _)) => format!("{from} does not set CONFIG_USER_EVENTS"),
                    None => format!("tracefs is mounted and has no {USER_EVENTS_DATA}"),
                },
            ),
        }),
        None => Err(Unsupported {
            reason: user_events_missing(
                &release,
                &format!(
                    "{USER_EVENTS_DATA} is missing, tracefs is not mounted and neither /boot/config-{release} nor \
                     /proc/config.gz says otherwise (mount it: `mount -t tracefs nodev /sys/kernel/tracing`)"
                ),
            ),
        }),
    }
}

pub(crate) struct CollectLinux {
    name: String,
    /// Kernel profiles passed as `--profile`.
    profiles: Vec<String>,
    /// Runtime providers (profiles expanded, merged with the scenario's), `Name:0xK:L`.
    providers: Vec<String>,
    perf_events: Vec<String>,
    child: Option<Child>,
    stdin: Option<std::process::ChildStdin>,
    output: Arc<Mutex<Vec<u8>>>,
    trace_path: Option<PathBuf>,
    commands: Vec<String>,
    maps: super::process_maps::ProcessMaps,
    host_pid: u32,
    /// When the kernel's user_events status changed while tracelab waited for the recording
    /// (seconds after collect-linux announced its file): kept in `NAME.record.txt`.
    start_notes: Vec<String>,
}

impl CollectLinux {
    pub(crate) fn new(name: &str, options: &CollectLinuxOptions) -> Result<CollectLinux> {
        let mut profiles = Vec::new();
        let mut parsed = Vec::new();
        for p in items(&options.profile) {
            if KERNEL_PROFILES.contains(&p.as_str()) {
                profiles.push(p);
            } else if let Some(list) = profile_providers(&p) {
                parsed.extend(list.iter().map(|s| {
                    s.parse::<eventpipe::ipc::Provider>()
                        .expect("a valid built-in provider")
                }));
            } else {
                return Err(super::bad_option(
                    "profile",
                    format!(
                        "collector `{name}`: collect-linux has no profile `{p}` tracelab knows; known: {}, dotnet-common, \
                         dotnet-sampled-thread-time, gc-verbose, gc-collect",
                        KERNEL_PROFILES.join(", ")
                    ),
                ));
            }
        }
        for p in items(&options.providers) {
            parsed.push(p.parse::<eventpipe::ipc::Provider>().map_err(|e| {
                super::bad_option("providers", format!("collector `{name}`: {e:#}"))
            })?);
        }
        if profiles.is_empty() && parsed.is_empty() {
            bail!("collector `{name}` enables nothing: give `profile` and/or `providers`");
        }
        let providers = super::eventpipe::merge_providers(parsed)
            .into_iter()
            .map(|p| {
                let base =
                    format!("{}:{:#X}:{}", p.name, p.keywords, p.level).replace(":0X", ":0x");
                if p.arguments.is_empty() {
                    base
                } else {
                    format!("{base}:{}", p.arguments)
                }
            })
            .collect();
        Ok(CollectLinux {
            name: name.to_string(),
            profiles,
            providers,
            perf_events: items(&options.perf_events),
            child: None,
            stdin: None,
            output: Arc::new(Mutex::new(Vec::new())),
            trace_path: None,
            commands: Vec::new(),
            maps: Default::default(),
            host_pid: 0,
            start_notes: Vec::new(),
        })
    }

    fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// The command line after the launcher.
    fn arguments(&self, pid: u32, trace: &Path) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "collect-linux".into(),
            "-p".into(),
            pid.to_string(),
            "-o".into(),
            trace.display().to_string(),
        ];
        if !self.profiles.is_empty() {
            argv.extend(["--profile".into(), self.profiles.join(",")]);
        }
        if !self.providers.is_empty() {
            argv.extend(["--providers".into(), self.providers.join(",")]);
        }
        if !self.perf_events.is_empty() {
            argv.extend(["--perf-events".into(), self.perf_events.join(",")]);
        }
        argv
    }
}

impl Collector for CollectLinux {
    fn name(&self) -> &str {
        &self.name
    }

    fn preflight(&self) -> Result<()> {
        require_user_events()?;
        Ok(())
    }

    fn start(
        &mut self,
        _target: &mut dyn Target,
        app: &RunningApp,
        artifacts: &Path,
    ) -> Result<()> {
        require_user_events()?;
        let (dotnet, launcher) = ensure_installed()?;
        let trace_path = artifacts.join(format!("{}.nettrace", self.name));
        let mut argv = vec![launcher.display().to_string()];
        argv.extend(self.arguments(app.host_pid, &trace_path));
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("DOTNET_ROOT", &dotnet.root)
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .env("DOTNET_NOLOGO", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", argv[0]))?;
        self.stdin = child.stdin.take();
        collect_output(child.stdout.take().unwrap(), self.output.clone());
        collect_output(child.stderr.take().unwrap(), self.output.clone());
        self.commands.push(crate::host::proc::quoted(&argv));
        self.trace_path = Some(trace_path);
        // With its output a pipe, collect-linux prints its providers, its perf events and
        // "Output File : …", then nothing until it stops (its progress line is for a terminal;
        // seen on the 6.12-user-events guest): recording once the line is out and record-trace
        // has created the file (given 10 s for that).
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut announced: Option<Instant> = None;
        let (mut timeline, mut last_status) = (Vec::<String>::new(), String::new());
        loop {
            let text = self.output_text();
            if text.contains("Recording started") || text.contains("Recording trace") {
                break;
            }
            if text.lines().any(|l| l.starts_with("Output File")) {
                let since = *announced.get_or_insert_with(Instant::now);
                let path = self.trace_path.as_ref().expect("set above");
                // The file exists before perf listens to the runtime's events: a run whose app
                // threw its first exceptions then lost them (857 of 1,000 on the guest). Those
                // events are recording once the kernel lists them as used by perf.
                let status = std::fs::read_to_string(USER_EVENTS_STATUS).unwrap_or_default();
                if status != last_status {
                    timeline.push(format!("{:.2} s user_events_status: {}", since.elapsed().as_secs_f64(), status.trim().replace('\n', " | ")));
                    last_status = status.clone();
                }
                let events_on = self.providers.is_empty() || runtime_events_used_by_perf(&status);
                if (path.exists() && events_on) || since.elapsed() >= Duration::from_secs(30) {
                    break;
                }
            }
            if let Some(status) = child.try_wait()? {
                bail!(
                    "dotnet-trace collect-linux exited ({status}) before recording:\n{}",
                    text.trim()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "dotnet-trace collect-linux did not start recording within 120 s; its output:\n{}",
                    text.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.start_notes = timeline;
        self.child = Some(child);
        self.host_pid = app.host_pid;
        self.maps.snapshot(app.host_pid);
        Ok(())
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        self.maps.snapshot(self.host_pid);
        if let Some(trace) = &self.trace_path {
            self.maps.write(&trace.with_extension("maps"))?;
        }
        let Some(status) = finish(&mut child, self.stdin.take(), app.is_alive(), Duration::from_secs(120))? else {
            bail!("dotnet-trace collect-linux did not finish within 120 s; killed. Output:\n{}", self.output_text().trim());
        };
        let path = self.trace_path.as_ref().unwrap();
        // What collect-linux said, kept beside its trace (it names what record-trace could not do).
        let notes = self.start_notes.iter().map(|l| format!("tracelab: {l}\n")).collect::<String>();
        let _ = std::fs::write(path.with_extension("record.txt"), notes + &self.output_text());
        if !path.is_file() {
            bail!(
                "dotnet-trace collect-linux ended ({status}) without writing {}:\n{}",
                path.display(),
                self.output_text().trim()
            );
        }
        Ok(())
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let path = self
            .trace_path
            .clone()
            .unwrap_or_else(|| ctx.artifacts.join(format!("{}.nettrace", self.name)));
        let mut head = [0u8; 16];
        if std::io::Read::read_exact(&mut std::fs::File::open(&path)?, &mut head).is_ok()
            && eventpipe::is_nettrace_v6(&head)
        {
            // What collect-linux writes: perf samples, mappings, the recorder's symbols and the
            // runtime's user_events, named as perf recordings are (stacks::decode_collect_linux).
            let c = decode_collect_linux(&path, &self.name, ctx)?;
            // Not a wrong pipeline: collect-linux's perf side recorded nothing of what a profile
            // asked for (on the 6.12-user-events guest, `thread-time` never wrote a switch).
            let switches = c.samples.iter().filter(|s| s.kind.as_deref() == Some("blocked")).count();
            let cpu = c.samples.len() - switches;
            let missing = [("cpu-sampling", cpu, "CPU sample"), ("thread-time", switches, "context switch")]
                .into_iter()
                .filter(|(profile, n, _)| *n == 0 && self.profiles.iter().any(|p| p == profile))
                .map(|(profile, _, what)| format!("no {what} (`--profile {profile}`)"))
                .collect::<Vec<_>>();
            if !missing.is_empty() {
                return Err(crate::host::errors::Infrastructure::wrap(format!(
                    "dotnet-trace collect-linux's trace {} holds {}, which its profile asked for ({cpu} CPU samples, {switches} context \
                     switches, {} events of the runtime): record-trace's perf events recorded nothing of that for pid {}. What \
                     collect-linux printed is in {}",
                    path.display(),
                    missing.join(" and "),
                    c.events.len(),
                    self.host_pid,
                    path.with_extension("record.txt").display()
                )));
            }
            return Ok(c);
        }
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
    fn kernel_profiles_pass_through_and_runtime_profiles_expand() {
        let spec: CollectLinuxOptions =
            toml::from_str("profile = \"dotnet-common,cpu-sampling\"").unwrap();
        let c = CollectLinux::new("collect-linux", &spec).unwrap();
        assert_eq!(c.profiles, ["cpu-sampling"]);
        assert_eq!(
            c.providers,
            ["Microsoft-Windows-DotNETRuntime:0x100003801D:4"]
        );
        let argv = c.arguments(42, Path::new("/r/collect-linux.nettrace"));
        assert_eq!(
            argv[..5],
            [
                "collect-linux",
                "-p",
                "42",
                "-o",
                "/r/collect-linux.nettrace"
            ]
        );
        assert!(
            argv.windows(2).any(|w| w == ["--profile", "cpu-sampling"]),
            "{argv:?}"
        );
        let spec: CollectLinuxOptions = toml::from_str("profile = \"database\"").unwrap();
        assert!(
            format!("{:#}", CollectLinux::new("x", &spec).err().unwrap())
                .contains("no profile `database`")
        );
        let spec: CollectLinuxOptions =
            toml::from_str("perf_events = \"sched:sched_switch\"").unwrap();
        assert!(
            format!("{:#}", CollectLinux::new("x", &spec).err().unwrap())
                .contains("enables nothing")
        );
    }

    #[test]
    fn runtime_events_are_on_once_perf_uses_them() {
        let registered = "OC_DotNet_Microsoft_Windows_DotNETRuntime_134_All\n\nActive: 1\nBusy: 0\n";
        assert!(!runtime_events_used_by_perf(registered));
        let used = "other_event # Used by ftrace\nOC_DotNet_Microsoft_Windows_DotNETRuntime_134_All # Used by perf\n\nActive: 2\nBusy: 2\n";
        assert!(runtime_events_used_by_perf(used));
        assert!(!runtime_events_used_by_perf("OC_DotNet_X # Used by ftrace\n"));
    }

    #[test]
    fn user_events_are_proven_by_the_file_or_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("user_events_data");
        assert_eq!(user_events_state(&data, true, None), Some(false));
        assert_eq!(user_events_state(&data, false, None), None);
        assert_eq!(
            user_events_state(&data, false, Some("# CONFIG_USER_EVENTS is not set\n")),
            Some(false)
        );
        assert_eq!(
            user_events_state(&data, false, Some("CONFIG_USER_EVENTS=y\n")),
            Some(true)
        );
        std::fs::write(&data, "").unwrap();
        assert_eq!(
            user_events_state(&data, false, Some("# CONFIG_USER_EVENTS is not set\n")),
            Some(true)
        );
        let why = user_events_missing("6.18.0", "x");
        assert!(
            why.contains("CONFIG_USER_EVENTS") && why.contains("--kernels 6.12-user-events"),
            "{why}"
        );
    }
}
