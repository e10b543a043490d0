//! One LTTng tracing session and, when none runs, the session daemon it needs.
//!
//! Where the tools run: on the host they run directly; for an app in a container they run from
//! the host inside the app container's mount, IPC, UTS and network namespaces (`nsenter -m -i -u
//! -n`), so they use the image's own lttng binaries, sockets (`/var/run/lttng`) and `/dev/shm`,
//! but stay in the host's pid namespace. That matters: the app is pid 1 of its container, and
//! when pid 1 exits the kernel kills every process of the namespace — a daemon started with
//! `docker exec` dies with the app, before `lttng stop` can flush the ring buffers, and the tail
//! of the trace is lost. Outside the pid namespace it outlives the app (measured: 1000 of 1000
//! ExceptionThrown_V1 recorded from an app that exits right after throwing them).
//!
//! Lifecycle rules: sessions have private names (`tracelab-<harness pid>-<n>`), are always
//! destroyed, and never touch sessions of others; every `lttng` client runs with a private
//! `LTTNG_HOME`, so the user's `~/.lttngrc` is never written. A daemon we start is our child
//! with `PR_SET_PDEATHSIG`: if the harness is killed, the kernel stops the daemon and its
//! sessions vanish with it. Sessions a killed harness left in a daemon it did not start are
//! destroyed by the next [`Session::open`] (their name carries the dead pid).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long one `lttng` command may take (`lttng stop` waits for the consumer to drain).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
const DAEMON_READY_TIMEOUT: Duration = Duration::from_secs(20);
const SESSION_PREFIX: &str = "tracelab-";

/// Where the LTTng tools run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Host,
    /// Inside the namespaces (except pid) of the process with this host pid.
    Namespaces { anchor: u32 },
}

/// Runs LTTng programs at a [`Place`].
#[derive(Clone, Debug)]
pub struct Tools {
    pub place: Place,
    /// `LTTNG_HOME` of every client command (a path as the tools see it).
    pub lttng_home: PathBuf,
}

/// A finished command: exit status and both outputs.
pub(crate) struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Tools {
    pub(crate) fn argv(&self, program: &str, args: &[&str]) -> Vec<String> {
        let mut argv = Vec::new();
        if let Place::Namespaces { anchor } = self.place {
            argv.extend(["nsenter", "-t"].map(String::from));
            argv.push(anchor.to_string());
            argv.extend(["-m", "-i", "-u", "-n", "--"].map(String::from));
        }
        argv.push(program.to_string());
        argv.extend(args.iter().map(|s| s.to_string()));
        argv
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let argv = self.argv(program, args);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).env("LTTNG_HOME", &self.lttng_home).stdin(Stdio::null());
        c
    }

    /// Runs `lttng ARGS` and waits (bounded) for it.
    pub(crate) fn lttng(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = self.command("lttng", args);
        run_bounded(&mut cmd, COMMAND_TIMEOUT).with_context(|| format!("running `{}`", self.argv("lttng", args).join(" ")))
    }

    /// Runs `lttng ARGS`; a non-zero exit is an error quoting the tool.
    pub(crate) fn lttng_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.lttng(args)?;
        if !out.ok {
            bail!(
                "`{}` failed: {}{}",
                self.argv("lttng", args).join(" "),
                out.stderr.trim(),
                if out.stderr.trim().is_empty() { out.stdout.trim() } else { "" }
            );
        }
        Ok(out.stdout)
    }

    /// Whether a session daemon answers.
    pub(crate) fn daemon_answers(&self) -> bool {
        self.lttng(&["list"]).map(|o| o.ok).unwrap_or(false)
    }

    /// How many tracepoints of `provider` (`DotNETRuntime`) the app with pid `pid` (as it sees
    /// itself) registered with the daemon (`lttng list -u`).
    pub(crate) fn registered_tracepoints(&self, pid: u32, provider: &str) -> Result<usize> {
        let out = self.lttng_ok(&["list", "--userspace"])?;
        Ok(count_registered(&out, pid, provider))
    }

    /// Waits until the app `pid` registered at least one tracepoint of `provider` with the daemon
    /// (any session's: perfcollect's script opens its own); the count at `timeout` otherwise.
    pub(crate) fn wait_registered(&self, pid: u32, provider: &str, timeout: Duration) -> Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.registered_tracepoints(pid, provider)?;
            if n > 0 || Instant::now() >= deadline {
                return Ok(n);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Names of the sessions the daemon holds.
    pub fn session_names(&self) -> Result<Vec<String>> {
        let out = self.lttng(&["list"])?;
        if !out.ok {
            return Ok(Vec::new());
        }
        Ok(parse_session_names(&out.stdout))
    }
}

/// `  1) NAME [active]` lines of `lttng list`.
pub(crate) fn parse_session_names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (num, rest) = l.split_once(") ")?;
            num.parse::<u32>().ok()?;
            rest.split_whitespace().next().map(String::from)
        })
        .collect()
}

/// Runs a command with piped outputs, killing it after `timeout`.
fn run_bounded(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot start it (is it installed?)")?;
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("no answer within {timeout:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Output {
        ok: status.success(),
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    })
}

/// A session daemon this harness started.
pub struct Daemon {
    child: Child,
    pub log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the daemon (SIGTERM; SIGKILL after 10 s) and reaps it.
    pub(crate) fn stop(mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let _ = crate::host::proc::signal(self.child.id(), 15);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait()?;
        bail!("lttng-sessiond (pid {}) ignored SIGTERM for 10 s; killed", self.child.id())
    }
}

unsafe extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
}
const PR_SET_PDEATHSIG: i32 = 1;

/// Starts `lttng-sessiond --no-kernel` (user-space tracing needs no capability) in the
/// foreground as our child, and waits until its client socket answers.
fn start_daemon(tools: &Tools, log: &Path) -> Result<Daemon> {
    let log_file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let mut cmd = tools.command("lttng-sessiond", &["--no-kernel"]);
    cmd.stdout(Stdio::from(log_file.try_clone()?)).stderr(Stdio::from(log_file));
    // SAFETY: prctl is async-signal-safe; the closure touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            // The daemon must not outlive a killed harness (its sessions would linger). The
            // signal fires when the forking *thread* ends: callers keep the session on one thread.
            if prctl(PR_SET_PDEATHSIG, 15, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let argv = tools.argv("lttng-sessiond", &["--no-kernel"]);
    let mut child = cmd.spawn().with_context(|| format!("cannot start `{}`", argv.join(" ")))?;
    let deadline = Instant::now() + DAEMON_READY_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            // Someone else's daemon won the race: use it.
            if tools.daemon_answers() {
                bail!(DaemonRace(text));
            }
            bail!(
                "`{}` exited at start ({status}): {}",
                argv.join(" "),
                text.lines().filter(|l| !l.contains("open files limit")).collect::<Vec<_>>().join("\n")
            );
        }
        if tools.daemon_answers() {
            return Ok(Daemon { child, log: log.to_path_buf() });
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{}` did not answer within {DAEMON_READY_TIMEOUT:?}; killed", argv.join(" "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[derive(Debug)]
struct DaemonRace(String);
impl std::fmt::Display for DaemonRace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "another lttng-sessiond started first: {}", self.0)
    }
}
impl std::error::Error for DaemonRace {}

static SESSION_SEQ: AtomicU32 = AtomicU32::new(0);

/// A private tracing session.
pub struct Session {
    pub name: String,
    pub tools: Tools,
    /// The trace folder, as the tools see it.
    pub output: PathBuf,
    pub daemon: Option<Daemon>,
    /// Command lines run, for the manifest.
    pub commands: Vec<String>,
    active: bool,
    closed: bool,
}

impl Session {
    /// Makes sure a daemon runs (starting one if absent; its log goes to `daemon_log`, a host
    /// path), removes sessions left by dead harnesses, and creates a new session writing to
    /// `output` (a path as the tools see it).
    pub fn open(tools: Tools, output: &Path, daemon_log: &Path) -> Result<Session> {
        let mut commands = Vec::new();
        let daemon = if tools.daemon_answers() {
            sweep_stale(&tools, &mut commands)?;
            None
        } else {
            commands.push(crate::host::proc::quoted(tools.argv("lttng-sessiond", &["--no-kernel"])));
            match start_daemon(&tools, daemon_log) {
                Ok(d) => Some(d),
                Err(e) if e.downcast_ref::<DaemonRace>().is_some() => None,
                Err(e) => return Err(e),
            }
        };
        let name = format!(
            "{SESSION_PREFIX}{}-{}",
            std::process::id(),
            SESSION_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut session = Session { name, tools, output: output.to_path_buf(), daemon, commands, active: false, closed: false };
        let out_arg = format!("--output={}", output.display());
        session.run(&["create", &session.name.clone(), &out_arg])?;
        Ok(session)
    }

    fn run(&mut self, args: &[&str]) -> Result<String> {
        self.commands.push(crate::host::proc::quoted(self.tools.argv("lttng", args)));
        self.tools.lttng_ok(args)
    }

    /// Enables tracepoints by name (the runtime's provider ignores log levels, so perfcollect
    /// names every tracepoint) and adds the vpid, vtid and procname contexts.
    pub fn enable(&mut self, tracepoints: &[String]) -> Result<()> {
        let name = self.name.clone();
        // One client call per few hundred names keeps each command line short.
        for chunk in tracepoints.chunks(200) {
            let list = chunk.join(",");
            self.run(&["enable-event", "--userspace", "--session", &name, &list])?;
        }
        self.run(&["add-context", "--userspace", "--session", &name, "-t", "vpid", "-t", "vtid", "-t", "procname"])?;
        Ok(())
    }

    /// Starts recording. `lttng start` returns after the registered apps got the session.
    pub fn start(&mut self) -> Result<()> {
        let name = self.name.clone();
        self.run(&["start", &name])?;
        self.active = true;
        Ok(())
    }

    /// Stops (flushing every buffer to the trace folder) and destroys the session, then stops
    /// the daemon if we started it. Idempotent; the first error is returned after all steps ran.
    pub(crate) fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let name = self.name.clone();
        let mut first: Option<anyhow::Error> = None;
        if self.active {
            if let Err(e) = self.run(&["stop", &name]) {
                first.get_or_insert(e);
            }
            self.active = false;
        }
        if let Err(e) = self.run(&["destroy", &name]) {
            first.get_or_insert(e);
        }
        if let Some(d) = self.daemon.take()
            && let Err(e) = d.stop()
        {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            // (`say`: a Drop may run during an unwind, where a panic on a closed stderr aborts.)
            crate::host::owner::say(&format!("tracelab: closing LTTng session {}: {e:#}", self.name));
        }
    }
}

/// Destroys `tracelab-<pid>-<n>` sessions whose harness pid no longer runs.
pub fn sweep_stale(tools: &Tools, commands: &mut Vec<String>) -> Result<Vec<String>> {
    let mut swept = Vec::new();
    for name in tools.session_names()? {
        let Some(rest) = name.strip_prefix(SESSION_PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        commands.push(crate::host::proc::quoted(tools.argv("lttng", &["destroy", &name])));
        tools.lttng_ok(&["destroy", &name])?;
        swept.push(name);
    }
    Ok(swept)
}

/// Counts `provider:` tracepoints under the `PID: pid - Name: …` block of `lttng list -u`.
pub(crate) fn count_registered(listing: &str, pid: u32, provider: &str) -> usize {
    let header = format!("PID: {pid} - ");
    let needle = format!("{provider}:");
    let mut in_block = false;
    let mut n = 0;
    for line in listing.lines() {
        let t = line.trim_start();
        if t.starts_with("PID: ") {
            in_block = t.starts_with(&header);
            continue;
        }
        if in_block && t.starts_with(&needle) {
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_parse() {
        let listing = "Available tracing sessions:\n  1) tracelab-12-0 [active]\n    Trace output: /tmp/x\n\n  2) auto-2026 [inactive]\n\nUse lttng list <session_name> for more details\n";
        assert_eq!(parse_session_names(listing), vec!["tracelab-12-0", "auto-2026"]);
    }

    #[test]
    fn registered_tracepoints_count_per_pid() {
        // As `lttng list -u` (2.12) prints it.
        let listing = "UST events:\n-------------\n\nPID: 1 - Name: /opt/dotnet/dotnet\n      DotNETRuntimeMonoProfiler:MonoProfilerGCHeapDumpVTableClassReference (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n      DotNETRuntime:GCStart_V2 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n      DotNETRuntime:GCEnd_V1 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n\nPID: 7 - Name: other\n      DotNETRuntime:GCStart_V2 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n";
        assert_eq!(count_registered(listing, 1, "DotNETRuntime"), 2);
        assert_eq!(count_registered(listing, 7, "DotNETRuntime"), 1);
        assert_eq!(count_registered(listing, 9, "DotNETRuntime"), 0);
    }

    #[test]
    fn namespaced_commands_enter_all_but_the_pid_namespace() {
        let tools = Tools { place: Place::Namespaces { anchor: 42 }, lttng_home: "/tmp/h".into() };
        assert_eq!(tools.argv("lttng", &["list"]).join(" "), "nsenter -t 42 -m -i -u -n -- lttng list");
    }
}
