//! One run = one owner: what this process starts (staging folders, child processes, the app's
//! files in /tmp, containers) is written down as it is made, so that
//!
//! - SIGINT / SIGTERM ([`install`], before anything starts, builds included) stop the children,
//!   remove the containers, this run's /tmp files and its staging folder, and exit 130 / 143 —
//!   never renaming a half-done run into place ([`finishing`] is the one door to `results/`);
//! - after a SIGKILL, the staging folder's journal (`.owner`) tells the next run's start-up
//!   [`sweep_dead`] (and `cargo xtask sweep`) what the dead owner left, and a guardian process
//!   ([`guard_containers`]) removes the owner's containers within a minute of its death.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

use anyhow::{Context, Result, bail};

use super::proc::{descendants, pid_alive, process_start_time};
use super::runtime_files::runtime_files;

/// Set from inside the signal handler itself, so a thread that wakes up because the app died of
/// the same Ctrl-C already sees it.
static SHUTTING_DOWN: std::sync::LazyLock<Arc<AtomicBool>> = std::sync::LazyLock::new(|| Arc::new(AtomicBool::new(false)));
/// Held while a finished run is renamed into place, and by the signal handler while it cleans up:
/// a run is either finished or removed, never both.
static FINISHING: Mutex<()> = Mutex::new(());
/// What the signal handler also calls once this run's processes are stopped: removals registered
/// by the parts of the host that make things outside this process (Docker's containers).
static ON_SIGNAL: Mutex<Vec<fn()>> = Mutex::new(Vec::new());
static OWNED: Mutex<Owned> = Mutex::new(Owned { staging: Vec::new(), pids: Vec::new(), guardian: None, scratch: None });

struct Owned {
    /// Staging folders of runs in progress (their journals).
    staging: Vec<PathBuf>,
    /// Processes whose runtime files live in a host /tmp: (pid, that /tmp).
    pids: Vec<(u32, PathBuf)>,
    guardian: Option<u32>,
    /// This process's own temporary folder ([`scratch_dir`]).
    scratch: Option<PathBuf>,
}

/// The journal inside each staging folder: the owner's tag on the first line, then one line per
/// thing made (`pid PID TMPDIR`).
pub const JOURNAL: &str = ".owner";

/// `PID:STARTTIME` of this process: tells a live owner from a reused pid.
pub(crate) fn tag() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", process_start_time(pid).unwrap_or(0))
}

/// True when the process named by an owner tag still runs.
pub(crate) fn alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.trim().split_once(':') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    process_start_time(pid) == Some(start)
}

/// True once SIGINT or SIGTERM arrived: nothing new is started, nothing is finished.
pub(crate) fn shutting_down() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst)
}

/// Installs (once) the SIGINT/SIGTERM handling described above. Called first thing by xtask and
/// by the engine (for callers that are not xtask).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        for sig in [SIGINT, SIGTERM] {
            let _ = signal_hook::flag::register(sig, Arc::clone(&SHUTTING_DOWN));
        }
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            say("tracelab: could not install the Ctrl-C handler; `cargo xtask sweep` removes what a killed run leaves");
            return;
        };
        let wake = signals.handle();
        let started = std::thread::Builder::new()
            .name("tracelab-signals".into())
            .spawn(move || {
                // The wait ends with a signal, or without one when [`output_closed`] closes it.
                let code = match signals.forever().next() {
                    Some(sig) => {
                        let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                        // Never a panic here: on a closed stderr it killed this thread, and every
                        // later SIGINT/SIGTERM was swallowed by the flag handlers (issue 41).
                        say(&format!("tracelab: {name}: stopping this run's processes and removing its containers, files and staging folder"));
                        128 + sig
                    }
                    // 141: `judge::exit::CLOSED_STDOUT` (the floor imports nothing, judge included).
                    None if OUTPUT_CLOSED.load(Ordering::SeqCst) => 141,
                    None => return,
                };
                // The door stays shut until the process is gone: nothing is finished after this.
                let _finishing = FINISHING.lock().unwrap_or_else(|p| p.into_inner());
                clean_up_now();
                std::process::exit(code);
            });
        if started.is_ok() {
            let _ = WAKE.set(wake);
        }
    });
}

/// Closes the signal thread's wait: how [`output_closed`] hands the clean-up to it.
static WAKE: std::sync::OnceLock<signal_hook::iterator::Handle> = std::sync::OnceLock::new();
/// Set once whoever read this process's stderr went away.
static OUTPUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `text` and a newline to stderr, never panicking: progress lines, notes printed while
/// cleaning up (from the signal thread, from `Drop` during an unwind, where a second panic
/// aborts). A closed stderr (`… 2>&1 | head -2`) ends the run as a closed stdout does: see
/// [`output_closed`].
pub fn say(text: &str) {
    // Above a running spinner: written through it, the line was erased by its next frame.
    let written = super::progress::above_spinner(|| writeln!(std::io::stderr().lock(), "{text}"));
    if let Err(e) = written
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        output_closed();
    }
}

/// Whoever read this process's output went away. With [`install`]ed handling, the run stops as it
/// does on a signal — processes stopped, containers, /tmp files and staging folder removed — and
/// exits 141, what a shell shows for a program ended by SIGPIPE (`cat` in `cat f | head`). The
/// clean-up runs on the signal thread, not the caller's: the caller may hold the locks it takes.
/// Without [`install`] (a library caller) the line is only dropped.
pub fn output_closed() {
    let Some(wake) = WAKE.get() else { return };
    if OUTPUT_CLOSED.swap(true, Ordering::SeqCst) {
        return;
    }
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    wake.close();
}

/// True when stdout or stderr is a pipe whose reading end is closed (poll(2) reports POLLERR on
/// such a pipe's writing end): tells an error that came from our own output (`trace fold … |
/// head`) from a broken pipe to a child process.
pub fn output_is_closed() -> bool {
    let mut fds = [libc::pollfd { fd: 1, events: 0, revents: 0 }, libc::pollfd { fd: 2, events: 0, revents: 0 }];
    // SAFETY: two valid pollfd entries, no timeout.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    ready > 0 && fds.iter().any(|f| f.revents & libc::POLLERR != 0)
}

/// What the signal handler does: children, containers, /tmp files, staging folders.
/// The caller holds [`FINISHING`]: a rename already under way completed first; none starts after.
fn clean_up_now() {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    // Held from before the descendants are listed: [`spawn_owned`] starts processes under this
    // lock and refuses once the flag is set, so no app starts between the listing and the end
    // (one did, as the kill test's launch cell raced it: killed with its owner, it left its
    // diagnostics socket and debugger pipes in /tmp, recorded nowhere).
    let mut owned_now = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    let guardian = owned_now.guardian;
    let stopped = stop_descendants(guardian);
    for hook in ON_SIGNAL.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        hook();
    }
    // .NET children that were not the app (dotnet-trace, a build outside the scratch folder).
    for pid in stopped {
        for f in runtime_files(pid, &crate::host::runtime_files::host_tmp()) {
            let _ = std::fs::remove_file(f);
        }
    }
    let owned = std::mem::replace(&mut *owned_now, Owned { staging: Vec::new(), pids: Vec::new(), guardian, scratch: None });
    drop(owned_now);
    if let Some(dir) = &owned.scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    for (pid, tmp) in &owned.pids {
        for f in runtime_files(*pid, tmp) {
            let _ = std::fs::remove_file(f);
        }
    }
    // Until the process exits, the run's own thread may still write into its folder, and the
    // Docker daemon recreates a bind mount's missing host folder when it starts a container it
    // was asked to start just before: three rounds, 200 ms apart, catch both.
    for round in 0..3 {
        if round > 0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for dir in &owned.staging {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// SIGTERM to every process below this one (app, tools, builds, `docker exec` clients), then
/// SIGKILL to those still there after 3 s. The guardian is left to do its work.
fn stop_descendants(except: Option<u32>) -> Vec<u32> {
    let me = std::process::id();
    let mut signalled = Vec::new();
    for sig in [15, 9] {
        let pids: Vec<u32> = descendants(me).into_iter().filter(|p| Some(*p) != except).collect();
        if pids.is_empty() {
            break;
        }
        for &pid in &pids {
            let _ = crate::host::proc::signal(pid, sig);
        }
        signalled.extend(pids);
        if sig == 15 {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
            while std::time::Instant::now() < deadline && signalled.iter().any(|p| pid_alive(*p)) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    signalled
}

/// `hook` runs when SIGINT or SIGTERM stops this run, after its processes are stopped (once per
/// registration; register once).
pub(crate) fn on_signal(hook: fn()) {
    ON_SIGNAL.lock().unwrap_or_else(|p| p.into_inner()).push(hook);
}

/// `pid` outlives this process on purpose (the containers' guardian): the signal handler leaves
/// it running.
pub(crate) fn spare_on_signal(pid: u32) {
    OWNED.lock().unwrap_or_else(|p| p.into_inner()).guardian = Some(pid);
}

/// A staging folder is this process's from now on: its journal names the owner.
pub(crate) fn own_staging(dir: &Path) -> Result<()> {
    // Under the lock the handler empties: a folder made after a signal is removed here, one made
    // before is the handler's to remove.
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    if shutting_down() {
        let _ = std::fs::remove_dir_all(dir);
        drop(owned);
        await_signal_exit();
        bail!("interrupted before the run started");
    }
    owned.staging.push(dir.to_path_buf());
    let journal = dir.join(JOURNAL);
    std::fs::write(&journal, format!("{}\n", tag())).with_context(|| format!("cannot write {}", journal.display()))?;
    Ok(())
}

/// The staging folder became a finished run (or was removed): not ours to clean any more.
pub(crate) fn disown_staging(dir: &Path) {
    OWNED.lock().unwrap_or_else(|p| p.into_inner()).staging.retain(|d| d != dir);
}

/// The one door to results/: held while a finished run is renamed into place. Fails once a
/// signal arrived, so an interrupted run never looks finished.
pub(crate) fn finishing() -> Result<MutexGuard<'static, ()>> {
    let guard = FINISHING.lock().unwrap_or_else(|p| p.into_inner());
    if shutting_down() {
        drop(guard);
        await_signal_exit();
        bail!("interrupted: the run is not finished and its staging folder is removed");
    }
    Ok(guard)
}

/// After SIGINT/SIGTERM the handler ends the process with 130/143 once it has cleaned up; a
/// caller that finished its own work meanwhile waits for that, so the exit code is the signal's
/// and not whatever the interrupted work returned. (Bounded, should the handler be stuck.)
pub fn await_signal_exit() {
    if !shutting_down() {
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Starts `cmd`, a process that writes runtime files (perf map, jitdump, diagnostics socket,
/// debugger pipes) into the host folder `tmp`, and owns it — under the lock the
/// signal handler takes before it lists what to stop, so the handler either stops the process
/// and removes its files, or the process never starts (`Interrupted` after SIGINT/SIGTERM).
pub(crate) fn spawn_owned(cmd: &mut std::process::Command, tmp: &Path) -> std::io::Result<std::process::Child> {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    if shutting_down() {
        return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted: nothing new is started"));
    }
    let child = cmd.spawn()?;
    record_process(&mut owned, child.id(), tmp);
    Ok(child)
}

fn record_process(owned: &mut Owned, pid: u32, tmp: &Path) {
    owned.pids.push((pid, tmp.to_path_buf()));
    let start = process_start_time(pid).unwrap_or(0);
    for dir in &owned.staging {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(dir.join(JOURNAL)) {
            let _ = writeln!(f, "pid {pid}:{start} {}", tmp.display());
        }
    }
}

/// The process ended and its files were kept or removed by the run.
pub(crate) fn disown_process(pid: u32) {
    OWNED.lock().unwrap_or_else(|p| p.into_inner()).pids.retain(|(p, _)| *p != pid);
}

/// Removes the runtime files that owned processes which have ended left in their /tmp (a
/// socket and debugger pipes after a signal; maps the run did not keep) and forgets them.
/// Returns the files that could not be removed.
pub(crate) fn release_ended_processes() -> Vec<String> {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    let mut failed = Vec::new();
    owned.pids.retain(|(pid, tmp)| {
        if pid_alive(*pid) {
            return true;
        }
        for f in runtime_files(*pid, tmp) {
            if let Err(e) = std::fs::remove_file(&f) {
                failed.push(format!("{}: {e}", f.display()));
            }
        }
        false
    });
    failed
}

/// Prefix of [`scratch_dir`]s in the host's /tmp: `tracelab-PID-STARTTIME`.
pub(crate) const SCRATCH_PREFIX: &str = "tracelab-";

/// This process's own temporary folder, `/tmp/tracelab-PID-STARTTIME`: the TMPDIR of the builds
/// it runs, so that what a killed `dotnet build` leaves (the debugger pipes and diagnostics
/// sockets of MSBuild and the compiler) is in a folder the signal handler or, after SIGKILL, the
/// next sweep removes whole. Removed by [`remove_scratch_dir`] when a run ends.
pub(crate) fn scratch_dir() -> Result<PathBuf> {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = &owned.scratch
        && dir.is_dir()
    {
        return Ok(dir.clone());
    }
    let dir = crate::host::runtime_files::host_tmp().join(format!("{SCRATCH_PREFIX}{}", tag().replace(':', "-")));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    owned.scratch = Some(dir.clone());
    // Callers that are not a run (tests, `images`) end without calling remove_scratch_dir.
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        extern "C" fn remove_at_exit() {
            remove_scratch_dir();
        }
        // SAFETY: registers a plain function; it runs once, at exit, on the exiting thread.
        unsafe { libc::atexit(remove_at_exit) };
    });
    Ok(dir)
}

/// Removes this process's temporary folder (the end of a run).
pub(crate) fn remove_scratch_dir() {
    if let Some(dir) = OWNED.lock().unwrap_or_else(|p| p.into_inner()).scratch.take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
