//! One `perf record` process of the tracepoint collectors (`perf-offcpu`, `perf-offwake`,
//! `perf-syscalls`): tracefs mounted first, the recording started and waited for until perf is
//! surely recording, stopped by SIGINT when the app outlives it, its stderr kept as a log.
//! A tracepoint the kernel does not have is an [`Unsupported`] quoting perf's (the kernel's)
//! words, never a failure.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::host::errors::Unsupported;
use crate::run::{RunningApp, Target, ToolProcess};

/// Mounts tracefs in the target when it is not (tracepoints need it; in a container that takes
/// SYS_ADMIN). `what` says which events need it, for the error.
pub(crate) fn ensure_tracefs(target: &mut dyn Target, app: &RunningApp, what: &str, commands: &mut Vec<String>) -> Result<()> {
    let script = "test -d /sys/kernel/tracing/events/sched || mount -t tracefs nodev /sys/kernel/tracing";
    let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
    commands.push(crate::host::proc::quoted(&argv));
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
pub(crate) fn perf_binary(configured: Option<&str>, app: &RunningApp) -> Result<String> {
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
pub(crate) fn perf_map_env() -> Vec<(String, String)> {
    vec![("DOTNET_PerfMapEnabled".into(), "1".into()), ("DOTNET_EnableWriteXorExecute".into(), "0".into())]
}

/// The app's root directory held open from the start (containers only): its files (libc, the
/// runtime) stay readable through it after the app and its container are gone.
pub(crate) fn open_target_root(app: &RunningApp) -> Option<std::fs::File> {
    app.container_id.as_ref()?;
    std::fs::File::open(format!("/proc/{}/root", app.host_pid)).ok()
}

/// Where the tools of `app`'s target see a file the engine put in the artifacts folder: the
/// engine makes that folder the app's work dir, which containers see at `work_dir_in_target`.
pub(crate) fn target_view(host: &Path, app: &RunningApp) -> PathBuf {
    if app.container_id.is_none() {
        return host.to_path_buf();
    }
    app.work_dir_in_target.join(host.file_name().unwrap_or_default())
}

/// The end of an app recording's perf command line: the ring buffer (`-m`: the scenario's pages,
/// else [`super::offcpu::default_mmap_pages`]), the app's pid and the output file as the
/// target's tools see it.
pub(crate) fn app_recording_args(mmap_pages: Option<u64>, app: &RunningApp, out: &Path) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(pages) = mmap_pages.or_else(|| super::offcpu::default_mmap_pages(app)) {
        argv.extend(["-m".into(), pages.to_string()]);
    }
    argv.extend(["-p".into(), app.tool_pid().to_string(), "-o".into(), target_view(out, app).display().to_string()]);
    argv
}

/// The skip reason when perf's error says the kernel lacks a tracepoint, in perf's own words
/// (`event syntax error: 'syscalls:sys_enter_clone3' … unknown tracepoint`).
pub(crate) fn missing_tracepoint(stderr: &str) -> Option<String> {
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
pub(crate) fn start_limit() -> Duration {
    if std::env::var_os("TRACELAB_IN_GUEST").is_some() { Duration::from_secs(180) } else { Duration::from_secs(20) }
}

/// How long a perf collector waits for the locked-memory budget other perf sessions hold,
/// seconds ([`set_budget_wait`]).
static BUDGET_WAIT_S: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(90);

/// How long a perf collector of this process waits for perf's locked-memory budget (default
/// 90 s). The capability matrix, which holds the budget on purpose, waits for nothing.
pub fn set_budget_wait(wait: Duration) {
    BUDGET_WAIT_S.store(wait.as_secs(), std::sync::atomic::Ordering::Relaxed);
}

/// perf's words when the per-user locked-memory budget for its ring buffers is used up.
fn budget_used_up(err: &anyhow::Error) -> bool {
    let text = format!("{err:#}");
    text.contains("Permission error mapping pages") || text.contains("perf_event_mlock_kb")
}

/// The perf processes of uid 0 running now (any container's, the host's, a user's own).
fn root_perf_sessions() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let root = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|u| u.split_whitespace().nth(1)) == Some("0");
            (comm.trim() == "perf" || comm.trim().starts_with("perf_")) && root
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// Why perf could not map its buffer, in words a stranger can act on.
fn budget_cause() -> String {
    let current = super::offcpu::perf_mlock_kb();
    let kb = current.map_or_else(|| "?".into(), |k| k.to_string());
    // Twice what it is: room for one more session of the same size.
    let raised = current.map_or(8192, |k| (k * 2).max(8192));
    let sessions = root_perf_sessions();
    format!(
        "perf's locked-memory budget for ring buffers (kernel.perf_event_mlock_kb = {kb} KiB per CPU, × {} CPUs) is shared by \
         every perf session of uid 0 — on the host and in every container; {} running now (pids {:?}) — and is used up, and \
         this perf lacks CAP_IPC_LOCK, which lifts the bound. Grant it (`capabilities = [\"SYS_ADMIN\", \"IPC_LOCK\"]`; \
         the capability table's perf sets hold it), raise the budget (`sysctl -w kernel.perf_event_mlock_kb={raised}`), or run \
         when the other sessions have ended",
        super::offcpu::online_cpus(),
        sessions.len(),
        sessions
    )
}

/// Runs `attempt` (a perf start) again while perf finds its locked-memory budget used up by other
/// sessions — the loser of several runs started together waits, then records — for at most
/// the budget wait ([`set_budget_wait`]); then an infrastructure error naming the cause and the fix.
pub(crate) fn waiting_for_budget<T>(what: &str, attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let wait = Duration::from_secs(BUDGET_WAIT_S.load(std::sync::atomic::Ordering::Relaxed));
    wait_for_budget(what, wait, Duration::from_secs(2), attempt)
}

fn wait_for_budget<T>(what: &str, wait: Duration, poll: Duration, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let mut noted = false;
    loop {
        match attempt() {
            Err(e) if budget_used_up(&e) && started.elapsed() < wait => {
                if !noted {
                    crate::host::progress::note(
                        "launch",
                        &format!(
                            "{what}: perf's locked-memory budget is used up by {} other perf session(s) of uid 0; waiting up to {} s",
                            root_perf_sessions().len(),
                            wait.as_secs()
                        ),
                    );
                    noted = true;
                }
                std::thread::sleep(poll);
            }
            Err(e) if budget_used_up(&e) => {
                return Err(crate::host::errors::Infrastructure::wrap(
                    e.context(format!("waited {} s: {}", started.elapsed().as_secs(), budget_cause())),
                ));
            }
            other => return other,
        }
    }
}

/// perf's control FIFOs (`--control fifo:CTL,ACK` with `-D -1`): perf opens its events disabled,
/// synthesizes the app's mappings, and enables them when told, answering `ack` once the enabling
/// ioctls are done. That answer is the moment recording surely runs: a header on disk and a
/// fixed wait (what came before) raced the app under emulation, where 6.12's guest lost the first
/// of three rounds of openat calls. The FIFOs lie beside the output file, which the target sees
/// at the same relative place, and are removed when this is dropped.
pub(crate) struct PerfControl {
    ctl_host: PathBuf,
    ack_host: PathBuf,
    ctl: std::fs::File,
    ack: std::fs::File,
    ctl_in_target: PathBuf,
    ack_in_target: PathBuf,
    acked: String,
}

impl PerfControl {
    /// Makes the two FIFOs beside `host_output` (the recording, in the artifacts folder).
    pub(crate) fn beside(host_output: &Path, app: &RunningApp) -> Result<PerfControl> {
        let name = host_output.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let dir = host_output.parent().unwrap_or(Path::new("."));
        let (mut ctl_host, ack_host) = (dir.join(format!(".{name}.ctl")), dir.join(format!(".{name}.ack")));
        // perf splits `fifo:CTL,ACK` at the first comma: a results folder with a comma in its
        // path cut CTL short and every perf run failed. A container's tools see the run's /tmp
        // at /tmp, a path without one: CTL goes there.
        let comma = |p: &Path| p.as_os_str().as_encoded_bytes().contains(&b',');
        let mut ctl_view = None;
        if app.container_id.is_some() && comma(&target_view(&ctl_host, app)) {
            let file = format!(".{name}.{}.ctl", std::process::id());
            ctl_host = app.tmp_dir_host.join(&file);
            ctl_view = Some(PathBuf::from("/tmp").join(file));
        }
        let open = |path: &Path| -> Result<std::fs::File> {
            let _ = std::fs::remove_file(path);
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).context("a FIFO path with a NUL byte")?;
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(std::io::Error::last_os_error()).with_context(|| format!("cannot make perf's control FIFO {}", path.display()));
            }
            // Read-write and non-blocking, as perf opens them: neither side waits for the other to
            // open, and what is written stays until read.
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .with_context(|| format!("cannot open perf's control FIFO {}", path.display()))
        };
        let ctl = open(&ctl_host)?;
        let ack = open(&ack_host).inspect_err(|_| {
            let _ = std::fs::remove_file(&ctl_host);
        })?;
        // A host tool reaches the same FIFO through this process's open descriptor, a path
        // without a comma.
        let mut ctl_in_target = ctl_view.unwrap_or_else(|| target_view(&ctl_host, app));
        if app.container_id.is_none() && comma(&ctl_in_target) {
            use std::os::fd::AsRawFd as _;
            ctl_in_target = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), ctl.as_raw_fd()));
        }
        Ok(PerfControl {
            ctl_in_target,
            ack_in_target: target_view(&ack_host, app),
            ctl_host,
            ack_host,
            ctl,
            ack,
            acked: String::new(),
        })
    }

    /// perf's options for it: events start disabled, enabled through the FIFOs.
    pub(crate) fn args(&self) -> Vec<String> {
        vec![
            "-D".into(),
            "-1".into(),
            "--control".into(),
            format!("fifo:{},{}", self.ctl_in_target.display(), self.ack_in_target.display()),
        ]
    }

    /// Asks perf to enable its events (read when perf reaches its recording loop).
    pub(crate) fn request_enable(&mut self) -> Result<()> {
        use std::io::Write;
        self.ctl.write_all(b"enable\n").context("cannot write to perf's control FIFO")
    }

    /// Whether perf has answered `ack` (events enabled); reads what has arrived, never waits.
    pub(crate) fn acknowledged(&mut self) -> bool {
        use std::io::Read;
        let mut buf = [0u8; 64];
        while let Ok(n) = self.ack.read(&mut buf) {
            if n == 0 {
                break;
            }
            self.acked.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        self.acked.contains("ack")
    }
}

impl Drop for PerfControl {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ctl_host);
        let _ = std::fs::remove_file(&self.ack_host);
    }
}

/// Inserts `control`'s options right after `record` in a `perf record` command line, and
/// `--no-buildid-cache`: at its end perf would otherwise copy every binary the samples touched into
/// the user's ~/.debug (24 MB for one host run of a .NET app), which no run asked for. The build ids
/// stay in the recording's header, which is where tracelab reads them.
pub(crate) fn with_control(mut argv: Vec<String>, control: &PerfControl) -> Vec<String> {
    let at = argv.iter().position(|a| a == "record").map_or(argv.len(), |i| i + 1);
    argv.splice(at..at, control.args().into_iter().chain(["--no-buildid-cache".to_string()]));
    argv
}

/// A running `perf record`.
pub(crate) struct PerfRecord {
    tool: ToolProcess,
    /// Kept until the recording ends: perf holds the FIFOs open.
    _control: PerfControl,
    argv: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    log: PathBuf,
}

impl PerfRecord {
    /// Starts `argv` (a `perf record … -o FILE` whose FILE the host sees at `host_output`) in the
    /// target with its events disabled and returns once perf has acknowledged enabling them
    /// ([`PerfControl`]): from then on every event of the app is recorded.
    pub(crate) fn start(target: &mut dyn Target, app: &RunningApp, argv: Vec<String>, host_output: PathBuf, log: PathBuf) -> Result<PerfRecord> {
        waiting_for_budget(&argv.join(" "), || Self::start_once(target, app, argv.clone(), host_output.clone(), log.clone()))
    }

    fn start_once(target: &mut dyn Target, app: &RunningApp, argv: Vec<String>, host_output: PathBuf, log: PathBuf) -> Result<PerfRecord> {
        let _ = std::fs::remove_file(&host_output);
        let mut control = PerfControl::beside(&host_output, app)?;
        let argv = with_control(argv, &control);
        control.request_enable()?;
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
            if control.acknowledged() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = tool.interrupt();
                let wrote = std::fs::metadata(&host_output).map(|m| m.len()).unwrap_or(0);
                bail!(
                    "`{}` did not enable its events within {} s (no `ack` on its control FIFO; {} holds {wrote} bytes)",
                    argv.join(" "),
                    limit.as_secs(),
                    host_output.display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(PerfRecord { tool, _control: control, argv, stderr, log })
    }

    /// Ends the recording: a per-process perf (`-p`) ends with the app; one still running
    /// (system-wide, or a run cut short) gets SIGINT. The log is written beside the artifacts.
    pub(crate) fn stop(mut self, app: &RunningApp) -> Result<()> {
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

    /// perf's own words when its ring buffer does not fit the budget (perf 6.1).
    const MAPPING_ERROR: &str = "Permission error mapping pages.\nConsider increasing /proc/sys/kernel/perf_event_mlock_kb,\n\
                                 or try again with a smaller value of -m/--mmap_pages.\n(current value: 4294967295,129)";

    #[test]
    fn a_used_up_budget_is_waited_for_then_named_as_infrastructure() {
        // Freed after two tries: the third start records.
        let mut tries = 0;
        let started = wait_for_budget("perf-cpu", Duration::from_secs(5), Duration::from_millis(1), || {
            tries += 1;
            if tries < 3 { Err(anyhow::anyhow!("perf exited at start: {MAPPING_ERROR}")) } else { Ok(tries) }
        });
        assert_eq!(started.unwrap(), 3);
        // Never freed: an infrastructure error naming the budget, who shares it and the fix.
        let err = wait_for_budget("perf-cpu", Duration::from_millis(20), Duration::from_millis(5), || -> Result<()> {
            Err(anyhow::anyhow!("perf exited at start: {MAPPING_ERROR}"))
        })
        .unwrap_err();
        assert!(crate::host::errors::is_infrastructure(&err), "{err:#}");
        let text = format!("{err:#}");
        assert!(text.contains("locked-memory budget") && text.contains("every perf session of uid 0") && text.contains("IPC_LOCK"), "{text}");
        // Any other failure is not waited for.
        let mut tries = 0;
        let other = wait_for_budget("perf-cpu", Duration::from_secs(5), Duration::from_millis(1), || -> Result<()> {
            tries += 1;
            Err(anyhow::anyhow!("perf exited at start: No permission to enable cpu-clock event."))
        });
        assert!(other.is_err() && tries == 1);
    }

    #[test]
    fn control_options_go_right_after_record() {
        let argv: Vec<String> = ["perf", "record", "-k", "1", "-p", "7", "-o", "x.data"].iter().map(|s| s.to_string()).collect();
        let dir = tempfile::tempdir().unwrap();
        // A host app (no container, no child): tools see the artifacts folder where the host does.
        let app = RunningApp {
            host_pid: 7,
            target_pid: 7,
            tmp_dir_host: dir.path().to_path_buf(),
            work_dir_in_target: dir.path().to_path_buf(),
            container_id: None,
            output: std::sync::mpsc::channel().1,
            child: None,
            transcript: Vec::new(),
            held_at_start: false,
        };
        let control = PerfControl::beside(&dir.path().join("x.data"), &app).unwrap();
        let ctl = dir.path().join(".x.data.ctl");
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(&ctl).unwrap().file_type().is_fifo());
        let with = with_control(argv, &control);
        assert_eq!(&with[..6], ["perf", "record", "-D", "-1", "--control", &format!("fifo:{},{}", ctl.display(), dir.path().join(".x.data.ack").display())]);
        assert_eq!(&with[6..], ["--no-buildid-cache", "-k", "1", "-p", "7", "-o", "x.data"]);
        drop(control);
        assert!(!ctl.exists(), "the FIFOs are removed with the control");
    }

    #[test]
    fn a_results_folder_with_a_comma_keeps_perfs_control_option_whole() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("runs,2026");
        std::fs::create_dir(&dir).unwrap();
        let app = RunningApp {
            host_pid: 7,
            target_pid: 7,
            tmp_dir_host: dir.clone(),
            work_dir_in_target: dir.clone(),
            container_id: None,
            output: std::sync::mpsc::channel().1,
            child: None,
            transcript: Vec::new(),
            held_at_start: false,
        };
        let control = PerfControl::beside(&dir.join("x.data"), &app).unwrap();
        let option = control.args().pop().unwrap();
        // perf's own split: CTL up to the first comma, ACK after it.
        let (ctl, ack) = option.strip_prefix("fifo:").unwrap().split_once(',').unwrap();
        assert_eq!(ack, dir.join(".x.data.ack").display().to_string());
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(ctl).unwrap().file_type().is_fifo(), "{ctl}");
        // What is written through that path reaches the FIFO the control reads.
        use std::io::Write as _;
        std::fs::OpenOptions::new().write(true).open(ctl).unwrap().write_all(b"enable\n").unwrap();
        let mut got = [0u8; 7];
        use std::io::Read as _;
        (&control.ctl).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"enable\n");
    }

    #[test]
    fn a_missing_tracepoint_is_quoted() {
        let perf = "event syntax error: 'syscalls:sys_enter_clone3'\n                     \\___ unknown tracepoint\n\nError:\tFile /sys/kernel/tracing/events/syscalls/sys_enter_clone3 not found.\n";
        let why = missing_tracepoint(perf).unwrap();
        assert!(why.contains("sys_enter_clone3") && why.contains("unknown tracepoint") && why.contains("not found"), "{why}");
        assert_eq!(missing_tracepoint("No permission to enable sched:sched_switch event."), None);
    }
}
