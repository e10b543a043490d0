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

/// Writes `path` whole or not at all: `write` fills a file beside it (buffered), which is renamed
/// into place when complete, so a reader never sees half a file and a failed write leaves none.
pub fn write_whole(path: &Path, write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut out = std::io::BufWriter::new(tmp.as_file_mut());
    write(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

use anyhow::{Context, Result, bail};

/// Set from inside the signal handler itself, so a thread that wakes up because the app died of
/// the same Ctrl-C already sees it.
static SHUTTING_DOWN: std::sync::LazyLock<Arc<AtomicBool>> = std::sync::LazyLock::new(|| Arc::new(AtomicBool::new(false)));
/// Held while a finished run is renamed into place, and by the signal handler while it cleans up:
/// a run is either finished or removed, never both.
static FINISHING: Mutex<()> = Mutex::new(());
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
pub fn tag() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", process_start_time(pid).unwrap_or(0))
}

/// Field 22 of /proc/PID/stat (start time in clock ticks).
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True when the process named by an owner tag still runs.
pub fn alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.trim().split_once(':') else { return false };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
    process_start_time(pid) == Some(start)
}

/// True once SIGINT or SIGTERM arrived: nothing new is started, nothing is finished.
pub fn shutting_down() -> bool {
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
            eprintln!("tracelab: could not install the Ctrl-C handler; `cargo xtask sweep` removes what a killed run leaves");
            return;
        };
        std::thread::Builder::new()
            .name("tracelab-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                    eprintln!("tracelab: {name}: stopping this run's processes and removing its containers, files and staging folder");
                    // The door stays shut until the process is gone: nothing is finished after this.
                    let _finishing = FINISHING.lock().unwrap_or_else(|p| p.into_inner());
                    clean_up_now();
                    std::process::exit(128 + sig);
                }
            })
            .ok();
    });
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
    crate::docker::remove_registered();
    // .NET children that were not the app (dotnet-trace, a build outside the scratch folder).
    for pid in stopped {
        for f in runtime_files(pid, &crate::run::host_tmp()) {
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
            let _ = crate::run::signal(pid, sig);
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

fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string)))
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Every process whose parent chain leads to `root` (read from /proc).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let Some(ppid) = stat.rfind(')').and_then(|i| stat[i + 2..].split(' ').nth(1)).and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// A staging folder is this process's from now on: its journal names the owner.
pub fn own_staging(dir: &Path) -> Result<()> {
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
pub fn disown_staging(dir: &Path) {
    OWNED.lock().unwrap_or_else(|p| p.into_inner()).staging.retain(|d| d != dir);
}

/// The one door to results/: held while a finished run is renamed into place. Fails once a
/// signal arrived, so an interrupted run never looks finished.
pub fn finishing() -> Result<MutexGuard<'static, ()>> {
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
/// debugger pipes) into the host folder `tmp`, and owns it ([`own_process`]) — under the lock the
/// signal handler takes before it lists what to stop, so the handler either stops the process
/// and removes its files, or the process never starts (`Interrupted` after SIGINT/SIGTERM).
pub fn spawn_owned(cmd: &mut std::process::Command, tmp: &Path) -> std::io::Result<std::process::Child> {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    if shutting_down() {
        return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "interrupted: nothing new is started"));
    }
    let child = cmd.spawn()?;
    record_process(&mut owned, child.id(), tmp);
    Ok(child)
}

/// A process that writes runtime files (perf map, jitdump, diagnostics socket, debugger pipes)
/// into the host folder `tmp`: written into every open journal, removed on a signal.
pub fn own_process(pid: u32, tmp: &Path) {
    record_process(&mut OWNED.lock().unwrap_or_else(|p| p.into_inner()), pid, tmp);
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
pub fn disown_process(pid: u32) {
    OWNED.lock().unwrap_or_else(|p| p.into_inner()).pids.retain(|(p, _)| *p != pid);
}

/// The files a .NET process (or perf's JIT support) leaves in `tmp` when it is killed.
pub fn runtime_files(pid: u32, tmp: &Path) -> Vec<PathBuf> {
    let exact = [
        format!("perf-{pid}.map"),
        format!("perfinfo-{pid}.map"),
        format!("jit-{pid}.dump"),
        crate::collect::dump::crash_dump_file(pid),
    ];
    // `dotnet-diagnostic-PID-DISAMBIGUATION-socket`, `clr-debug-pipe-PID-DISAMBIGUATION-in|out`.
    let socket_prefix = format!("dotnet-diagnostic-{pid}-");
    let pipe_prefix = format!("clr-debug-pipe-{pid}-");
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            exact.iter().any(|x| *x == name)
                || (name.starts_with(&socket_prefix) && name.ends_with("-socket"))
                || (name.starts_with(&pipe_prefix) && (name.ends_with("-in") || name.ends_with("-out")))
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the runtime files that owned processes which have ended left in their /tmp (a
/// socket and debugger pipes after a signal; maps the run did not keep) and forgets them.
/// Returns the files that could not be removed.
pub fn release_ended_processes() -> Vec<String> {
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
const SCRATCH_PREFIX: &str = "tracelab-";

/// This process's own temporary folder, `/tmp/tracelab-PID-STARTTIME`: the TMPDIR of the builds
/// it runs, so that what a killed `dotnet build` leaves (the debugger pipes and diagnostics
/// sockets of MSBuild and the compiler) is in a folder the signal handler or, after SIGKILL, the
/// next sweep removes whole. Removed by [`remove_scratch_dir`] when a run ends.
pub fn scratch_dir() -> Result<PathBuf> {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(dir) = &owned.scratch
        && dir.is_dir()
    {
        return Ok(dir.clone());
    }
    let dir = crate::run::host_tmp().join(format!("{SCRATCH_PREFIX}{}", tag().replace(':', "-")));
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
pub fn remove_scratch_dir() {
    if let Some(dir) = OWNED.lock().unwrap_or_else(|p| p.into_inner()).scratch.take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// What a sweep removed, in words for the user.
#[derive(Debug, Default)]
pub struct Swept {
    pub staging: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
    /// Dead processes' own temporary folders ([`scratch_dir`]: their builds' leftovers).
    pub scratch: Vec<PathBuf>,
    /// Diagnostics sockets and debugger pipes of .NET processes that are gone
    /// ([`remove_orphaned_endpoints`]).
    pub endpoints: Vec<PathBuf>,
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
    /// Containers of live runs, left alone.
    pub kept_alive: usize,
}

impl Swept {
    pub fn is_empty(&self) -> bool {
        self.staging.is_empty()
            && self.files.is_empty()
            && self.scratch.is_empty()
            && self.endpoints.is_empty()
            && self.containers.is_empty()
            && self.volumes.is_empty()
    }

    /// One line per thing removed.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.staging.iter().map(|p| format!("staging folder of a dead run {}", p.display())));
        out.extend(self.files.iter().map(|p| format!("file of a dead run's app {}", p.display())));
        out.extend(self.scratch.iter().map(|p| format!("temporary folder of a dead tracelab process {}", p.display())));
        out.extend(self.endpoints.iter().map(|p| format!("diagnostics endpoint of an ended .NET process {}", p.display())));
        out.extend(self.containers.iter().map(|c| format!("container of a dead run {}", crate::docker::short(c))));
        out.extend(self.volumes.iter().map(|v| format!("volume of a dead run {v}")));
        out
    }
}

/// Removes what dead owners left: staging folders under `results_root` whose journal names a
/// process that is gone (with the /tmp files of the processes the journal lists, when those are
/// gone too), and, when a Docker daemon answers, tracelab containers and volumes of dead owners.
/// Live runs' folders and containers are left alone. A staging folder without a journal is left
/// alone unless it is older than a day (a run of a version before journals).
pub fn sweep_dead(results_root: &Path, with_docker: bool) -> Result<Swept> {
    let mut swept = Swept::default();
    if let Ok(entries) = std::fs::read_dir(results_root) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if !name.starts_with(".staging-") || !path.is_dir() {
                continue;
            }
            let journal = std::fs::read_to_string(path.join(JOURNAL)).ok();
            // `.staging-NAME-PID-RANDOM`: without a journal (a folder something recreated after
            // its run removed it), the pid in the name tells whether its owner still runs.
            let pid_in_name = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
            let dead = match (&journal, pid_in_name) {
                (Some(text), _) => !alive(text.lines().next().unwrap_or("")),
                (None, Some(pid)) => process_start_time(pid).is_none(),
                (None, None) => path
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .is_some_and(|age| age.as_secs() > 24 * 3600),
            };
            if !dead {
                continue;
            }
            for line in journal.as_deref().unwrap_or("").lines().skip(1) {
                let Some(rest) = line.strip_prefix("pid ") else { continue };
                let Some((pid_tag, tmp)) = rest.split_once(' ') else { continue };
                let Some(pid) = pid_tag.split(':').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
                // An app of a dead run that outlived it (the same pid and start time): its
                // owner will never stop it.
                if alive(pid_tag) {
                    let _ = crate::run::signal(pid, 9);
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
                    while alive(pid_tag) && std::time::Instant::now() < deadline {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
                // pid_max is 32768 on small machines: under load pids wrap within the hour. A live
                // process that now holds the dead app's pid in the host's /tmp owns the files of
                // that name (its diagnostics socket): removing them broke another run's
                // dotnet-trace ("Unable to connect to Process"). Container apps' /tmp folders are
                // their run's own, so only the host's /tmp is shared.
                if Path::new(tmp) == crate::run::host_tmp() && process_start_time(pid).is_some() {
                    continue;
                }
                for f in runtime_files(pid, Path::new(tmp)) {
                    if std::fs::remove_file(&f).is_ok() {
                        swept.files.push(f);
                    }
                }
            }
            std::fs::remove_dir_all(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            swept.staging.push(path);
        }
    }
    swept.endpoints = remove_orphaned_endpoints(&crate::run::host_tmp());
    // Temporary folders of dead processes (their builds' leftovers).
    let tmp = crate::run::host_tmp();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(SCRATCH_PREFIX) else { continue };
            let Some((pid, start)) = rest.split_once('-') else { continue };
            if pid.parse::<u32>().is_err() || start.parse::<u64>().is_err() || alive(&format!("{pid}:{start}")) {
                continue;
            }
            if std::fs::remove_dir_all(e.path()).is_ok() {
                swept.scratch.push(e.path());
            }
        }
    }
    if with_docker && let Ok(docker) = crate::docker::Docker::connect() {
        let d = docker.sweep(false)?;
        swept.containers = d.containers;
        swept.volumes = d.volumes;
        swept.kept_alive = d.kept_alive.len();
    }
    Ok(swept)
}

/// The diagnostics sockets and debugger pipes in `tmp` of .NET processes that are gone, removed:
/// the runtime names them `dotnet-diagnostic-PID-KEY-socket` and `clr-debug-pipe-PID-KEY-in|out`
/// with KEY its start time (/proc/PID/stat field 22), so a file whose PID does not run with that
/// start time belongs to no process and nothing can ever connect to it. A .NET process that dies
/// of a signal leaves them; tracelab removes those of processes it knows, and this catches the
/// rest (CI runs left one such set of files in 2 of 2 runs, from a process nothing recorded).
///
/// A process in another pid namespace that shares this /tmp (a container started with
/// `-v /tmp:/tmp`) writes its namespace's pid: so a set is removed only when, besides, its
/// diagnostics socket refuses connections (no runtime listens); a set without a socket is left.
pub fn remove_orphaned_endpoints(tmp: &Path) -> Vec<PathBuf> {
    let mut by_owner: std::collections::BTreeMap<(u32, u64), Vec<PathBuf>> = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(owner) = endpoint_owner(&name) {
            by_owner.entry(owner).or_default().push(e.path());
        }
    }
    let mut removed = Vec::new();
    for ((pid, key), files) in by_owner {
        if process_start_time(pid) == Some(key) {
            continue;
        }
        let socket = tmp.join(format!("dotnet-diagnostic-{pid}-{key}-socket"));
        let refused = matches!(
            std::os::unix::net::UnixStream::connect(&socket),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if !refused {
            continue;
        }
        for f in files {
            if std::fs::remove_file(&f).is_ok() {
                removed.push(f);
            }
        }
    }
    removed.sort();
    removed
}

/// (PID, KEY) of a runtime's IPC endpoint file name.
fn endpoint_owner(name: &str) -> Option<(u32, u64)> {
    let rest = name
        .strip_prefix("dotnet-diagnostic-")
        .and_then(|r| r.strip_suffix("-socket"))
        .or_else(|| name.strip_prefix("clr-debug-pipe-").and_then(|r| r.strip_suffix("-in").or_else(|| r.strip_suffix("-out"))))?;
    let (pid, key) = rest.split_once('-')?;
    Some((pid.parse().ok()?, key.parse().ok()?))
}

/// Seconds a guardian waits for the owner's next renewal before it removes the owner's
/// containers (the lease).
pub const LEASE_S: u64 = 60;
const RENEW_EVERY_S: u64 = 15;

/// Starts (once per process) a guardian for this process's containers: a `bash` process in its
/// own session, reading a pipe this process renews every 15 s. When the pipe closes (this process
/// died, even of SIGKILL) or no renewal came for [`LEASE_S`] s, it removes every container and
/// volume labelled with this owner's tag through the `docker` CLI and ends. It depends on nothing
/// inside the containers, so a user's image keeps its own entrypoint.
pub fn guard_containers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| match start_guardian() {
        Ok(pid) => OWNED.lock().unwrap_or_else(|p| p.into_inner()).guardian = Some(pid),
        Err(e) => eprintln!(
            "tracelab: no guardian for this run's containers ({e:#}); if tracelab is killed, the next run or `cargo xtask sweep` removes them"
        ),
    });
}

fn start_guardian() -> Result<u32> {
    use std::os::unix::process::CommandExt as _;
    let docker = which("docker").context("the `docker` command is not on PATH")?;
    let owner = format!("{}={}", crate::docker::LABEL_OWNER, tag());
    // The label value is PID:STARTTIME (digits and a colon): no quoting needed inside the script.
    let script = format!(
        "while read -r -t {LEASE_S} _; do :; done
ids=$(\"$0\" ps -aq --filter label={owner})
[ -n \"$ids\" ] && \"$0\" rm -f -v $ids >/dev/null 2>&1
vols=$(\"$0\" volume ls -q --filter label={owner})
[ -n \"$vols\" ] && \"$0\" volume rm $vols >/dev/null 2>&1
exit 0"
    );
    let (reader, mut writer) = std::io::pipe().context("cannot make the guardian's pipe")?;
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c").arg(script).arg(&docker);
    cmd.stdin(reader).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe; the guardian leaves the process group, so a Ctrl-C or
    // a SIGKILL to the owner's group does not take it along.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn().context("cannot start bash for the guardian")?;
    let pid = child.id();
    // The child is reaped by init once this process is gone; while it lives, nobody waits on it.
    std::mem::forget(child);
    std::thread::Builder::new()
        .name("tracelab-lease".into())
        .spawn(move || {
            loop {
                if writer.write_all(b"\n").is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_secs(RENEW_EVERY_S));
            }
        })
        .context("cannot start the lease thread")?;
    Ok(pid)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_folder_of_a_dead_owner_is_swept_with_its_apps_files_and_a_live_ones_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        // A dead owner: pid 1's real start time plus one can never match.
        let dead_tag = format!("1:{}", process_start_time(1).unwrap() + 1);
        let dead = root.path().join(".staging-x-1-dead");
        std::fs::create_dir(&dead).unwrap();
        // pid 4194304 is above any pid_max: never a live process.
        std::fs::write(dead.join(JOURNAL), format!("{dead_tag}\npid 4194304:7 {}\n", tmp.path().display())).unwrap();
        for f in ["perf-4194304.map", "dotnet-diagnostic-4194304-123-socket", "clr-debug-pipe-4194304-in", "perf-42.map"] {
            std::fs::write(tmp.path().join(f), "").unwrap();
        }
        let live = root.path().join(".staging-x-2-live");
        std::fs::create_dir(&live).unwrap();
        std::fs::write(live.join(JOURNAL), format!("{}\n", tag())).unwrap();
        let finished = root.path().join("20261125T000000Z-x-host");
        std::fs::create_dir(&finished).unwrap();

        let swept = sweep_dead(root.path(), false).unwrap();
        assert_eq!(swept.staging, vec![dead.clone()]);
        assert_eq!(swept.files.len(), 3, "{:?}", swept.files);
        assert!(!dead.exists() && live.exists() && finished.exists());
        // Another process's file is not this run's to remove.
        assert!(tmp.path().join("perf-42.map").exists());
        // (The sweep also removes other dead processes' scratch folders in the real /tmp.)
        assert_eq!(swept.lines().len(), 1 + swept.files.len() + swept.scratch.len() + swept.endpoints.len());
    }

    #[test]
    fn a_dead_apps_pid_now_held_by_a_live_process_keeps_its_files_in_the_hosts_tmp() {
        let root = tempfile::tempdir().unwrap();
        let dead_tag = format!("1:{}", process_start_time(1).unwrap() + 1);
        let dead = root.path().join(".staging-x-1-dead");
        std::fs::create_dir(&dead).unwrap();
        // The dead app had this test's pid (another start time): the pid was reused by us.
        let me = std::process::id();
        let reused = format!("{me}:{}", process_start_time(me).unwrap() + 1);
        let host_tmp = crate::run::host_tmp();
        std::fs::write(dead.join(JOURNAL), format!("{dead_tag}\npid {reused} {}\n", host_tmp.display())).unwrap();
        // The live process's own socket: its name carries its start time.
        let socket = host_tmp.join(format!("dotnet-diagnostic-{me}-{}-socket", process_start_time(me).unwrap()));
        std::fs::write(&socket, "").unwrap();
        let swept = sweep_dead(root.path(), false);
        let kept = socket.exists();
        let _ = std::fs::remove_file(&socket);
        let swept = swept.unwrap();
        assert_eq!(swept.staging, vec![dead]);
        assert!(kept, "the live process's socket was removed: {:?}", swept.files);
    }

    #[test]
    fn descendants_are_found_through_the_parent_chain() {
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let below = descendants(std::process::id());
        let below_sh = descendants(child.id());
        for p in &below_sh {
            let _ = crate::run::signal(*p, 9);
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(below.contains(&child.id()), "{below:?}");
        assert_eq!(below_sh.len(), 1, "the sleep below sh: {below_sh:?}");
        assert!(below.contains(&below_sh[0]), "{below:?}");
    }

    #[test]
    fn endpoints_of_ended_dotnet_processes_are_removed_and_a_live_ones_kept() {
        use std::os::unix::net::UnixListener;
        let tmp = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let start = process_start_time(me).unwrap();
        // A socket nobody listens on any more: what a killed runtime leaves.
        let dead_socket = |name: &str| drop(UnixListener::bind(tmp.path().join(name)).unwrap());
        let live = [format!("dotnet-diagnostic-{me}-{start}-socket"), format!("clr-debug-pipe-{me}-{start}-in")];
        // Same pid, another start time: a process that held this pid before.
        let reused = [format!("dotnet-diagnostic-{me}-{}-socket", start + 1), format!("clr-debug-pipe-{me}-{}-out", start + 1)];
        let gone = [format!("dotnet-diagnostic-4194304-123-socket"), format!("clr-debug-pipe-4194304-123-in")];
        // Another pid namespace's runtime sharing this folder: its pid means nothing here, but
        // it listens.
        let namespaced = "dotnet-diagnostic-4194303-77-socket";
        let _listening = UnixListener::bind(tmp.path().join(namespaced)).unwrap();
        // Pipes without a socket: left.
        let other = ["perf-4194304.map", "dotnet-diagnostic-x-socket", "clr-debug-pipe-12-in", "clr-debug-pipe-4194302-5-out"];
        for f in gone.iter().chain(&reused) {
            if f.ends_with("-socket") {
                dead_socket(f);
            } else {
                std::fs::write(tmp.path().join(f), "").unwrap();
            }
        }
        for f in live.iter().map(String::as_str).chain(other) {
            std::fs::write(tmp.path().join(f), "").unwrap();
        }
        let gone: Vec<String> = gone.into_iter().chain(reused).collect();
        let removed = remove_orphaned_endpoints(tmp.path());
        let mut want: Vec<PathBuf> = gone.iter().map(|f| tmp.path().join(f)).collect();
        want.sort();
        assert_eq!(removed, want);
        for f in live.iter().map(String::as_str).chain(other).chain([namespaced]) {
            assert!(tmp.path().join(f).exists(), "{f} was removed");
        }
    }
}
