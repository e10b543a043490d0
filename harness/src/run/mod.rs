//! Where the app runs and where collector tools run beside it: `host`, `container` (tools inside
//! the app's container), `sidecar` (tools in their own container joined to the app's pid
//! namespace, /tmp shared) or `pod` (a real pod of a chosen shape, through `podman kube play`). Collectors build their command lines in the target's view (the pid
//! the tool sees, paths under [`RunningApp::work_dir_in_target`]) and let the target start them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use crate::host::proc::{die_with_owner, quoted, signal};
use crate::host::runtime_files::host_tmp;

/// How the app of a scenario starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Program {
    /// `dotnet <dll>` with the target's runtime.
    Dll(PathBuf),
    /// A command line: the program and its fixed arguments (a self-contained app, a script).
    Command(Vec<String>),
    /// A user's Docker image, started with its own entrypoint and cmd (container targets only).
    Image(String),
}

impl Program {
    /// The program as the manifest shows it, quoted for a shell (an image: `docker run IMAGE`).
    pub(crate) fn describe(&self) -> String {
        match self {
            Program::Dll(dll) => quoted(["dotnet".to_string(), dll.display().to_string()]),
            Program::Command(argv) => quoted(argv),
            Program::Image(image) => format!("docker run {} # its own entrypoint", quoted([image])),
        }
    }
}


#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    Host,
    Container,
    Sidecar,
    /// A real pod (`podman kube play`) of a chosen [`pod::PodShape`].
    Pod,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Host => "host",
            TargetKind::Container => "container",
            TargetKind::Sidecar => "sidecar",
            TargetKind::Pod => "pod",
        }
    }
    pub fn parse(s: &str) -> Result<TargetKind> {
        Ok(match s {
            "host" => TargetKind::Host,
            "container" => TargetKind::Container,
            "sidecar" => TargetKind::Sidecar,
            "pod" => TargetKind::Pod,
            other => bail!("unknown target `{other}`: expected host, container, sidecar or pod"),
        })
    }
}

/// What to start. Paths are host paths; a container target maps them into its own view.
#[derive(Clone, Debug)]
pub struct AppLaunch {
    /// `dotnet <dll>`, a command line, or a user's image.
    pub program: Program,
    /// Passed exactly as written, after the program's own.
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Host folder shared with the target: truth.json, the go-file, artifacts, perf maps.
    pub work_dir: PathBuf,
    /// The app's working folder; `None` = `work_dir` (a user image: its own WORKDIR).
    pub cwd: Option<PathBuf>,
    /// A container may write into `cwd` (outside the run folder): mounted read-only otherwise.
    pub cwd_writable: bool,
}

impl AppLaunch {
    /// `dotnet <dll> ARGS` run in `work_dir`.
    pub fn dotnet(dll: PathBuf, args: Vec<String>, env: BTreeMap<String, String>, work_dir: PathBuf) -> AppLaunch {
        AppLaunch { program: Program::Dll(dll), args, env, work_dir, cwd: None, cwd_writable: false }
    }
}

/// A started app.
pub struct RunningApp {
    /// The pid as the host sees it (for /proc, host-side tools).
    pub host_pid: u32,
    /// The pid inside the app's pid namespace (perf-PID.map, diagnostics socket names).
    pub target_pid: u32,
    /// Host folder where the app's /tmp is visible (perf maps, jitdump, diagnostic sockets).
    pub tmp_dir_host: PathBuf,
    /// `AppLaunch::work_dir` as the app and the tools see it.
    pub work_dir_in_target: PathBuf,
    pub container_id: Option<String>,
    /// Lines the app printed on stdout/stderr, as they arrive.
    pub output: mpsc::Receiver<String>,
    pub(crate) child: Option<Child>,
    /// Everything received from `output` so far by [`RunningApp::wait_for_line`].
    pub transcript: Vec<String>,
    /// The runtime holds the app at start until it is resumed over its diagnostics socket
    /// (`DOTNET_DefaultDiagnosticPortSuspend=1`): a collector must not resume it itself.
    pub held_at_start: bool,
}

/// The app's temporary folder as the host reaches it: its own TMPDIR (where its runtime writes
/// perf maps and opens its diagnostics socket), else /tmp, under /proc/PID/root.
fn app_tmp(host_pid: u32) -> PathBuf {
    let environ = std::fs::read(format!("/proc/{host_pid}/environ")).unwrap_or_default();
    let tmpdir = environ
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"TMPDIR="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .filter(|v| v.starts_with('/'))
        .unwrap_or_else(|| "/tmp".into());
    PathBuf::from(format!("/proc/{host_pid}/root{tmpdir}"))
}

impl RunningApp {
    /// Waits for a stdout line starting with `prefix` (e.g. the workload's readiness line),
    /// skipping anything else (the runtime's "configured to pause during startup" notice …).
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // A container's output stays open after its app died (the container's pid 1 lives
            // on): the process itself is watched, so a crash at start is reported at once.
            match self.output.recv_timeout(left.min(Duration::from_millis(250))) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if line.starts_with(prefix) {
                        return Ok(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !self.is_alive() => {
                    self.drain_output();
                    bail!("the app exited before printing `{prefix}`; its output:\n{}", self.transcript.join("\n"))
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                    "the app printed no `{prefix}` line within {:?}; its output so far:\n{}",
                    timeout,
                    self.transcript.join("\n")
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => bail!(
                    "the app exited before printing `{prefix}`; its output:\n{}",
                    self.transcript.join("\n")
                ),
            }
        }
    }

    /// Whether the app's process still runs (not gone, not a zombie awaiting its parent).
    pub(crate) fn is_alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.host_pid))
            .ok()
            .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string)))
            .is_some_and(|state| state != "Z" && state != "X")
    }

    /// A process tracelab did not start (`--attach PID`), in the host's pid namespace: nothing of
    /// its output is seen, and dropping the handle leaves it running.
    /// A process tracelab did not start: `host_pid` as the host sees it, `target_pid` in its own
    /// pid namespace (the same on the host; its NSpid in a container or pod).
    pub(crate) fn attached(host_pid: u32, target_pid: u32, work_dir: PathBuf) -> RunningApp {
        let (_, output) = mpsc::channel();
        RunningApp {
            host_pid,
            target_pid,
            tmp_dir_host: app_tmp(host_pid),
            work_dir_in_target: work_dir,
            container_id: None,
            output,
            child: None,
            transcript: Vec::new(),
            held_at_start: false,
        }
    }

    /// The pid the target's tools address the app by: its pid in its own namespace for tools in
    /// its container or a sidecar, its host pid for tools on the host (an app in a container
    /// attached by its host pid included).
    pub fn tool_pid(&self) -> u32 {
        if self.container_id.is_some() { self.target_pid } else { self.host_pid }
    }

    /// The last `n` lines the app printed (for error messages).
    pub(crate) fn last_lines(&self, n: usize) -> String {
        let start = self.transcript.len().saturating_sub(n);
        self.transcript[start..].join("\n")
    }

    /// The runtime's perf map, perfinfo and jitdump of a host run live in the host's /tmp: once
    /// decoded, they move into the run's `artifacts`, so a finished run leaves nothing in /tmp.
    /// (Container runs write them into the run folder already.)
    pub fn keep_runtime_files(&self, artifacts: &Path) -> Result<()> {
        if self.tmp_dir_host.starts_with(artifacts.parent().unwrap_or(artifacts)) {
            return Ok(());
        }
        let pid = self.target_pid;
        for name in [format!("perf-{pid}.map"), format!("perfinfo-{pid}.map"), format!("jit-{pid}.dump")] {
            let from = self.tmp_dir_host.join(&name);
            if !from.is_file() {
                continue;
            }
            let to = artifacts.join(&name);
            if to.is_file() {
                std::fs::remove_file(&from).with_context(|| format!("cannot remove {}", from.display()))?;
            } else if std::fs::rename(&from, &to).is_err() {
                // Another file system: copy, then remove.
                std::fs::copy(&from, &to).with_context(|| format!("cannot copy {} into {}", from.display(), artifacts.display()))?;
                std::fs::remove_file(&from).with_context(|| format!("cannot remove {}", from.display()))?;
            }
        }
        Ok(())
    }

    /// Drains the remaining output until the app closes it.
    pub(crate) fn drain_output(&mut self) {
        while let Ok(line) = self.output.recv_timeout(Duration::from_millis(200)) {
            self.transcript.push(line);
        }
    }
}

/// A host app is stopped when its handle goes (a test that panics, an early return) and the
/// files its runtime left in /tmp go with it: the maps a run keeps were moved out before
/// ([`RunningApp::keep_runtime_files`]). Container apps go with their container.
impl Drop for RunningApp {
    fn drop(&mut self) {
        let Some(child) = self.child.as_mut() else { return };
        if child.try_wait().ok().flatten().is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for f in crate::host::runtime_files::runtime_files(self.target_pid, &self.tmp_dir_host) {
            let _ = std::fs::remove_file(f);
        }
        crate::host::owner::disown_process(self.host_pid);
    }
}

/// A collector tool process started by a target.
pub struct ToolProcess {
    pub child: Child,
    /// How to deliver a signal to the tool itself (for `docker exec`, the exec'd process is in
    /// the container, so a signal to the local client is not enough).
    pub signal_via: Option<Vec<String>>,
    pub description: String,
}

impl ToolProcess {
    /// Sends SIGINT to the tool (perf writes its buffers and exits cleanly on SIGINT).
    pub fn interrupt(&mut self) -> Result<()> {
        if let Some(argv) = &self.signal_via {
            let status = Command::new(&argv[0]).args(&argv[1..]).status()?;
            if !status.success() {
                bail!("could not signal {}: `{}` failed", self.description, argv.join(" "));
            }
            return Ok(());
        }
        signal(self.child.id(), 2)
    }

    /// Waits for the tool to end; after `timeout` it is killed and an error says so.
    pub fn wait(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("{} did not end within {:?}; killed", self.description, timeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where a collector prepares before the app's first instruction ([`Target::launch_prepared`]).
#[derive(Clone, Debug)]
pub struct PreLaunch {
    /// A host pid inside the app's namespaces (its container's init shell, which then starts
    /// the app); `None` on the host.
    pub anchor: Option<u32>,
    /// `AppLaunch::work_dir` as the tools will see it.
    pub work_dir_in_target: PathBuf,
}

/// A place to run the app and its collectors.
pub trait Target {
    fn kind(&self) -> TargetKind;
    /// Short label for result folder names and the manifest (`host`, `container-bullseye` …).
    fn label(&self) -> String;
    /// Capabilities granted to the collector (empty on the host: root there).
    fn capabilities(&self) -> Vec<String> {
        Vec::new()
    }
    fn launch(&mut self, app: &AppLaunch) -> Result<RunningApp>;
    /// Launches the app after `prepare` ran where the app will run (the host; a container's
    /// namespaces while its init shell holds the app back), for what must exist before the app's
    /// first instruction: an LTTng session that records its startup. The flag is `false` when
    /// this target cannot hold a launch (a user's image is its own pid 1; a pod): `prepare`
    /// never ran.
    fn launch_prepared(&mut self, app: &AppLaunch, prepare: &mut dyn FnMut(&PreLaunch) -> Result<()>) -> Result<(RunningApp, bool)> {
        let _ = prepare;
        Ok((self.launch(app)?, false))
    }
    /// Starts a collector tool (`argv` in the target's view) where this target runs tools.
    fn spawn_tool(&mut self, app: &RunningApp, argv: &[String], env: &[(String, String)]) -> Result<ToolProcess>;
    /// Waits for the app to exit (and returns its exit code).
    fn wait_app(&mut self, app: &mut RunningApp, timeout: Duration) -> Result<i32>;
    /// Removes whatever the target created (containers); idempotent.
    fn cleanup(&mut self) -> Result<()>;
    /// Where a file the target saw at `path` (a DSO in a perf recording) can be read on the host
    /// after the run; `None` when it cannot. Host: the path itself.
    fn path_map(&self, path: &Path) -> Option<PathBuf> {
        Some(path.to_path_buf())
    }
    /// Whether the tools see the app's /tmp as their own /tmp (not in a pod's debug shape): a
    /// tool that looks for the app's diagnostics socket in its own /tmp (dotnet-trace) needs it.
    fn shares_tmp_with_tools(&self) -> bool {
        true
    }
}

/// The app was still running when [`Target::wait_app`] gave up on it (it was killed then).
#[derive(Debug)]
pub(crate) struct StillRunning(pub(crate) Duration);

impl std::fmt::Display for StillRunning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "still running after {:?}", self.0)
    }
}

impl std::error::Error for StillRunning {}

/// Whether `err` says the app was still running when waiting for it ended.
pub(crate) fn still_running(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<StillRunning>())
}

/// The app runs as a child of the harness, tools as well.
pub struct HostTarget {
    pub dotnet: PathBuf,
    /// Where the files the app sees are on the host, when it sees another root: an app in a
    /// container attached by its host pid (`/proc/PID/root`).
    seen_through: Option<PathBuf>,
}

impl HostTarget {
    pub fn new(dotnet: PathBuf) -> Self {
        HostTarget { dotnet, seen_through: None }
    }

    /// The host's tools beside a process whose files live under `root` (`/proc/PID/root` of an
    /// app in a container): its DSOs are read from there.
    pub fn seen_through(dotnet: PathBuf, root: PathBuf) -> Self {
        HostTarget { dotnet, seen_through: Some(root) }
    }
}

/// Forwards each line of `reader` into `tx`.
pub(crate) fn forward_lines<R: std::io::Read + Send + 'static>(reader: R, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

impl Target for HostTarget {
    fn kind(&self) -> TargetKind {
        TargetKind::Host
    }
    fn path_map(&self, path: &Path) -> Option<PathBuf> {
        match &self.seen_through {
            Some(root) => Some(root.join(path.strip_prefix("/").unwrap_or(path))),
            None => Some(path.to_path_buf()),
        }
    }
    fn label(&self) -> String {
        "host".into()
    }
    fn launch_prepared(&mut self, app: &AppLaunch, prepare: &mut dyn FnMut(&PreLaunch) -> Result<()>) -> Result<(RunningApp, bool)> {
        prepare(&PreLaunch { anchor: None, work_dir_in_target: app.work_dir.clone() })?;
        Ok((self.launch(app)?, true))
    }
    fn launch(&mut self, app: &AppLaunch) -> Result<RunningApp> {
        let mut cmd = match &app.program {
            Program::Dll(dll) => {
                let mut c = Command::new(&self.dotnet);
                c.arg(dll);
                c
            }
            Program::Command(argv) => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
            Program::Image(image) => {
                bail!("image {image} runs in a container: use the container or sidecar target")
            }
        };
        cmd.args(&app.args);
        // A framework-dependent apphost finds the runtime through DOTNET_ROOT.
        if let Some(root) = self.dotnet.parent() {
            cmd.env("DOTNET_ROOT", root);
        }
        cmd.envs(&app.env);
        // The runtime puts its diagnostics socket and debugger pipes in TMPDIR but its perf map
        // and jitdump in DOTNET_PerfMapJitDumpPath, /tmp when unset: with TMPDIR set, the maps
        // went where nothing looked (2 of 5,422 frames named, and never swept). One folder for
        // all: where the collectors read, the run keeps and the sweep removes.
        let tmp_dir_host = app_tmp_dir(&app.env);
        cmd.env(PERF_MAP_PATH_VAR, &tmp_dir_host);
        // The app runs in its run folder (what it writes stays with the run), not the caller's.
        let cwd = app.cwd.clone().unwrap_or_else(|| app.work_dir.clone());
        cmd.current_dir(&cwd);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        die_with_owner(&mut cmd);
        let mut child = crate::host::owner::spawn_owned(&mut cmd, &tmp_dir_host)
            .with_context(|| format!("could not start `{}` in {}", app.program.describe(), cwd.display()))?;
        let (tx, rx) = mpsc::channel();
        forward_lines(child.stdout.take().unwrap(), tx.clone());
        forward_lines(child.stderr.take().unwrap(), tx);
        let pid = child.id();
        Ok(RunningApp {
            host_pid: pid,
            target_pid: pid,
            tmp_dir_host,
            work_dir_in_target: app.work_dir.clone(),
            container_id: None,
            output: rx,
            child: Some(child),
            transcript: Vec::new(),
            held_at_start: false,
        })
    }
    fn spawn_tool(&mut self, _app: &RunningApp, argv: &[String], env: &[(String, String)]) -> Result<ToolProcess> {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_owner(&mut cmd);
        let child = match crate::host::owner::spawn_owned(&mut cmd, &host_tmp()) {
            Ok(child) => child,
            // A tool that is not there is a missing prerequisite (a SKIP naming it), not a verdict.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(anyhow::Error::new(crate::host::errors::Unsupported {
                    reason: format!("`{}` is not installed here ({e}): `cargo xtask setup` installs what collectors need, `cargo xtask doctor` shows it", argv[0]),
                }));
            }
            Err(e) => return Err(e).with_context(|| format!("could not start `{}`", argv[0])),
        };
        // (Owned by spawn_owned: a .NET tool, dotnet-trace, has a diagnostics socket of its own in /tmp.)
        Ok(ToolProcess { child, signal_via: None, description: argv[0].clone() })
    }
    fn wait_app(&mut self, app: &mut RunningApp, timeout: Duration) -> Result<i32> {
        let child = app.child.as_mut().context("app already waited for")?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait()? {
                app.drain_output();
                // A death by signal reads as a shell reports it (128 + signal), as in a container.
                use std::os::unix::process::ExitStatusExt as _;
                return Ok(status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(anyhow::Error::new(StillRunning(timeout))
                    .context(format!("the app (pid {}) did not exit within {timeout:?}; killed", app.host_pid)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn cleanup(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The runtime setting that places its perf map and jitdump; tracelab sets it on the host (a
/// scenario's `env` cannot: refused at load).
pub(crate) const PERF_MAP_PATH_VAR: &str = "DOTNET_PerfMapJitDumpPath";

/// The host folder a host app's runtime files go to: the TMPDIR it is given (the scenario's
/// `env`, else this process's), as the runtime reads it.
fn app_tmp_dir(env: &BTreeMap<String, String>) -> PathBuf {
    env.get("TMPDIR").filter(|t| !t.is_empty()).map(PathBuf::from).unwrap_or_else(host_tmp)
}

pub mod container;
pub mod load;
pub mod pod;
pub mod ready;
mod wrapped;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_kinds_parse() {
        for kind in [TargetKind::Host, TargetKind::Container, TargetKind::Sidecar, TargetKind::Pod] {
            assert_eq!(TargetKind::parse(kind.as_str()).unwrap(), kind);
        }
        assert!(TargetKind::parse("vm").unwrap_err().to_string().contains("expected host, container, sidecar or pod"));
    }

    #[test]
    fn a_host_apps_runtime_files_follow_the_tmpdir_it_is_given() {
        let mut env = BTreeMap::new();
        assert_eq!(app_tmp_dir(&env), host_tmp());
        env.insert("TMPDIR".to_string(), "/srv/app-tmp".to_string());
        assert_eq!(app_tmp_dir(&env), PathBuf::from("/srv/app-tmp"));
    }
}
