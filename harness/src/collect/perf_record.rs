//! One `perf record` process of the tracepoint collectors (`perf-offcpu`, `perf-offwake`,
//! `perf-syscalls`): tracefs mounted first, the recording started and waited for until perf is
//! surely recording, stopped by SIGINT when the app outlives it, its stderr kept as a log.
//! A tracepoint the kernel does not have is an [`Unsupported`] quoting perf's (the kernel's)
//! words, never a failure.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Unsupported;
use crate::run::{RunningApp, Target, ToolProcess};

/// Mounts tracefs in the target when it is not (tracepoints need it; in a container that takes
/// SYS_ADMIN). `what` says which events need it, for the error.
pub fn ensure_tracefs(target: &mut dyn Target, app: &RunningApp, what: &str, commands: &mut Vec<String>) -> Result<()> {
    let script = "test -d /sys/kernel/tracing/events/sched || mount -t tracefs nodev /sys/kernel/tracing";
    let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
    commands.push(crate::run::quoted(&argv));
    let mut tool = target.spawn_tool(app, &argv, &[])?;
    let status = tool.wait(Duration::from_secs(20))?;
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = tool.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        bail!(
            "tracefs is not mounted at /sys/kernel/tracing and `mount -t tracefs nodev /sys/kernel/tracing` failed \
             ({status}): {}; {what} needs it (in a container: --cap-add SYS_ADMIN)",
            err.trim()
        );
    }
    Ok(())
}

/// The perf binary for `app`'s target: the configured one, else the host's `perf`/`perf_X.Y`,
/// else `perf` on the container's PATH.
pub fn perf_binary(configured: Option<&str>, app: &RunningApp) -> Result<String> {
    Ok(match configured {
        Some(p) => p.to_string(),
        None if app.container_id.is_none() => crate::collect::perf::detect_perf_binary()
            .context("no `perf` (or `perf_X.Y`) on PATH: install linux-perf (Debian) / linux-tools")?
            .display()
            .to_string(),
        None => "perf".to_string(),
    })
}

/// The app environment the perf collectors that walk managed stacks need: the JIT's perf map,
/// and W^X off (with it on, JIT code runs from a memfd alias no perf map describes).
pub fn perf_map_env() -> Vec<(String, String)> {
    vec![("DOTNET_PerfMapEnabled".into(), "1".into()), ("DOTNET_EnableWriteXorExecute".into(), "0".into())]
}

/// The app's root directory held open from the start (containers only): its files (libc, the
/// runtime) stay readable through it after the app and its container are gone.
pub fn open_target_root(app: &RunningApp) -> Option<std::fs::File> {
    app.container_id.as_ref()?;
    std::fs::File::open(format!("/proc/{}/root", app.host_pid)).ok()
}

/// Where the tools of `app`'s target see a file the engine put in the artifacts folder: the
/// engine makes that folder the app's work dir, which containers see at `work_dir_in_target`.
pub fn target_view(host: &Path, app: &RunningApp) -> PathBuf {
    if app.container_id.is_none() {
        return host.to_path_buf();
    }
    app.work_dir_in_target.join(host.file_name().unwrap_or_default())
}

/// The end of an app recording's perf command line: the ring buffer (`-m`: the scenario's pages,
/// else [`super::offcpu::default_mmap_pages`]), the app's pid and the output file as the
/// target's tools see it.
pub fn app_recording_args(mmap_pages: Option<u64>, app: &RunningApp, out: &Path) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(pages) = mmap_pages.or_else(|| super::offcpu::default_mmap_pages(app)) {
        argv.extend(["-m".into(), pages.to_string()]);
    }
    argv.extend(["-p".into(), app.target_pid.to_string(), "-o".into(), target_view(out, app).display().to_string()]);
    argv
}

/// The skip reason when perf's error says the kernel lacks a tracepoint, in perf's own words
/// (`event syntax error: 'syscalls:sys_enter_clone3' … unknown tracepoint`).
pub fn missing_tracepoint(stderr: &str) -> Option<String> {
    let lower = stderr.to_lowercase();
    if !lower.contains("unknown tracepoint") {
        return None;
    }
    let words: Vec<&str> = stderr.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).take(6).collect();
    Some(format!("this kernel lacks a tracepoint the collector records; perf says: {}", words.join(" | ")))
}

/// How long perf may take to open its events and write its header. Under the kernel matrix's
/// emulation (TCG, the guest job sets TRACELAB_IN_GUEST) a dwarf recording beside a system-wide
/// one took over 20 s to start on 6.1 (the wakeups scenario failed with "wrote no … within 20 s"
/// while perf was still synthesizing): a slow start there is emulation, not a broken collector.
pub fn start_limit() -> Duration {
    if std::env::var_os("TRACELAB_IN_GUEST").is_some() { Duration::from_secs(180) } else { Duration::from_secs(20) }
}

/// A running `perf record`.
pub struct PerfRecord {
    tool: ToolProcess,
    argv: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    log: PathBuf,
}

impl PerfRecord {
    /// Starts `argv` (a `perf record … -o FILE` whose FILE the host sees at `host_output`) in the
    /// target and returns once perf is recording: its header written, then 300 ms for it to
    /// synthesize the app's mappings and enable its events.
    pub fn start(target: &mut dyn Target, app: &RunningApp, argv: Vec<String>, host_output: PathBuf, log: PathBuf) -> Result<PerfRecord> {
        let _ = std::fs::remove_file(&host_output);
        let mut tool = target.spawn_tool(app, &argv, &[])?;
        let stderr = tool.child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                use std::io::Read;
                let mut all = String::new();
                let _ = e.read_to_string(&mut all);
                all
            })
        });
        let limit = start_limit();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = tool.child.try_wait()? {
                let err = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
                let _ = std::fs::write(&log, &err);
                if let Some(reason) = missing_tracepoint(&err) {
                    return Err(Unsupported { reason }.into());
                }
                bail!(
                    "`{}` ended before recording ({status}): {}",
                    argv.join(" "),
                    crate::collect::perf::explain_perf_failure(&err)
                );
            }
            if std::fs::metadata(&host_output).map(|m| m.len() >= 104).unwrap_or(false) {
                break;
            }
            if Instant::now() >= deadline {
                let _ = tool.interrupt();
                bail!("`{}` wrote no {} within {} s", argv.join(" "), host_output.display(), limit.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        Ok(PerfRecord { tool, argv, stderr, log })
    }

    /// Ends the recording: a per-process perf (`-p`) ends with the app; one still running
    /// (system-wide, or a run cut short) gets SIGINT. The log is written beside the artifacts.
    pub fn stop(mut self, app: &RunningApp) -> Result<()> {
        let system_wide = self.argv.iter().any(|a| a == "-a");
        let grace = if app.is_alive() || system_wide { 0 } else { 10 };
        let deadline = Instant::now() + Duration::from_secs(grace);
        while self.tool.child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                self.tool.interrupt()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = self.tool.wait(Duration::from_secs(60))?;
        let log = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        let _ = std::fs::write(&self.log, &log);
        if !status.success() && !log.contains("Captured and wrote") {
            bail!("`{}` ended with {status}: {}", self.argv.join(" "), log.trim());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tracepoint_is_quoted() {
        let perf = "event syntax error: 'syscalls:sys_enter_clone3'\n                     \\___ unknown tracepoint\n\nError:\tFile /sys/kernel/tracing/events/syscalls/sys_enter_clone3 not found.\n";
        let why = missing_tracepoint(perf).unwrap();
        assert!(why.contains("sys_enter_clone3") && why.contains("unknown tracepoint") && why.contains("not found"), "{why}");
        assert_eq!(missing_tracepoint("No permission to enable sched:sched_switch event."), None);
    }
}
