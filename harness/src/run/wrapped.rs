//! What the container and pod targets share: an app started under an init shell that outlives it
//! (its exit code written to a file), tools that write their in-namespace pid to a file first,
//! and the host folders of an app's files that are bound into its container.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::RunningApp;
use crate::host::proc::host_pid_in_namespace_of;

/// A system folder (`/bin`, `/usr`, the installed .NET …): the image's own, never bound over
/// (host binaries would run against the image's libc).
pub(crate) fn is_system_dir(dir: &Path) -> bool {
    ["/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc", "/opt/tracelab-dotnet"]
        .iter()
        .any(|sys| dir == Path::new("/") || (dir.starts_with(sys) && !dir.starts_with("/usr/local")))
}

/// The host pid of the first child of host process `parent` (the app under the init shell).
pub(crate) fn child_of(parent: u32, timeout: Duration) -> Result<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        for entry in std::fs::read_dir("/proc")?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
            let ppid = status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|v| v.trim().parse::<u32>().ok());
            if ppid == Some(parent) {
                return Ok(pid);
            }
        }
        if Instant::now() >= deadline {
            bail!("process {parent} started no child within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the pid file a wrapped tool writes first and returns its host pid, looked up in the
/// pid namespace of `member`; 0 when the tool already ended (nothing left to signal).
pub(crate) fn tool_host_pid(member: u32, pid_file: &Path, child: &mut std::process::Child) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(pid_file)
            && let Ok(ns_pid) = text.trim().parse::<u32>()
        {
            let _ = std::fs::remove_file(pid_file);
            return match host_pid_in_namespace_of(member, ns_pid) {
                Ok(pid) => Ok(pid),
                Err(e) => {
                    // A short tool (a mount, a one-shot lttng command) can be done before we
                    // look it up: that is no failure. A tool that fails at once (perf without its
                    // budget) is gone too, and its client takes a moment to say so: its own error
                    // must be the one reported, not this lookup's.
                    let settle = Instant::now() + Duration::from_secs(3);
                    while Instant::now() < settle {
                        if child.try_wait()?.is_some() {
                            return Ok(0);
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e)
                }
            };
        }
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            bail!("the tool ended before it started ({status}): {}", err.trim());
        }
        if Instant::now() >= deadline {
            bail!("the tool did not start within 30 s (no {})", pid_file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a tool's client (`docker exec`, `podman exec`, `docker start -a`) whose tool writes its
/// pid to `pid_file` first; the tool is signalled by its host pid (found in `member`'s pid
/// namespace), since a signal to the client would not reach it.
pub(crate) fn start_tool(mut client: std::process::Command, member: u32, pid_file: &Path, description: String, cannot_run: &str) -> Result<super::ToolProcess> {
    use anyhow::Context as _;
    use std::process::Stdio;
    let mut child = client.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context(cannot_run.to_string())?;
    let host_pid = tool_host_pid(member, pid_file, &mut child).with_context(|| format!("starting {description}"))?;
    Ok(super::ToolProcess { child, signal_via: (host_pid != 0).then(|| vec!["kill".into(), "-INT".into(), host_pid.to_string()]), description })
}

/// Waits for the app's exit code: from `exit_file` (its init shell writes it), or, when its whole
/// container ended (killed, out of memory), from `ended` (the container's own exit code, asked
/// every 500 ms); kills the app after `timeout`.
pub(crate) fn wait_for_exit(
    app: &mut RunningApp,
    exit_file: &Path,
    timeout: Duration,
    mut ended: impl FnMut() -> Result<Option<i32>>,
) -> Result<i32> {
    let deadline = Instant::now() + timeout;
    let mut next_inspect = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(exit_file)
            && let Ok(code) = text.trim().parse::<i32>()
        {
            app.drain_output();
            return Ok(code);
        }
        if Instant::now() >= next_inspect {
            if !exit_file.exists()
                && let Some(code) = ended()?
            {
                app.drain_output();
                return Ok(code);
            }
            next_inspect = Instant::now() + Duration::from_millis(500);
        }
        if Instant::now() >= deadline {
            let _ = crate::host::proc::signal(app.host_pid, 9);
            app.drain_output();
            return Err(anyhow::Error::new(super::StillRunning(timeout))
                .context(format!("the app (host pid {}) did not exit within {timeout:?}; killed", app.host_pid)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
