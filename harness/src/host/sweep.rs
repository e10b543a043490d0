//! What dead owners left, removed: staging folders whose journal names a process that is gone,
//! their apps and the apps' files in /tmp, dead processes' scratch folders, orphaned diagnostics
//! endpoints, and (through Docker and podman) containers, volumes and pods of dead owners. Run at the start of
//! every run and by `cargo xtask sweep`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::owner::{JOURNAL, SCRATCH_PREFIX, alive};
use super::proc::process_start_time;
use super::runtime_files::runtime_files;

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
    /// Pods of dead runs (podman).
    pub pods: Vec<String>,
    /// Containers of live runs, left alone.
    pub kept_alive: usize,
}

impl Swept {

    /// One line per thing removed.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.staging.iter().map(|p| format!("staging folder of a dead run {}", p.display())));
        out.extend(self.files.iter().map(|p| format!("file of a dead run's app {}", p.display())));
        out.extend(self.scratch.iter().map(|p| format!("temporary folder of a dead tracelab process {}", p.display())));
        out.extend(self.endpoints.iter().map(|p| format!("diagnostics endpoint of an ended .NET process {}", p.display())));
        out.extend(self.containers.iter().map(|c| format!("container of a dead run {}", crate::host::docker::short(c))));
        out.extend(self.volumes.iter().map(|v| format!("volume of a dead run {v}")));
        out.extend(self.pods.iter().map(|p| format!("pod of a dead run {p}")));
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
                    let _ = crate::host::proc::signal(pid, 9);
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
                if Path::new(tmp) == crate::host::runtime_files::host_tmp() && process_start_time(pid).is_some() {
                    continue;
                }
                // And /tmp: a run of a version that did not point the runtime's perf map and
                // jitdump at TMPDIR left them there (the pid is not live: checked above for the
                // host's folder; checked here for /tmp, shared the same way).
                let legacy = Path::new("/tmp");
                let also_legacy = Path::new(tmp) != legacy && process_start_time(pid).is_none();
                for dir in std::iter::once(Path::new(tmp)).chain(also_legacy.then_some(legacy)) {
                    for f in runtime_files(pid, dir) {
                        if std::fs::remove_file(&f).is_ok() {
                            swept.files.push(f);
                        }
                    }
                }
            }
            std::fs::remove_dir_all(&path).with_context(|| format!("cannot remove {}", path.display()))?;
            swept.staging.push(path);
        }
    }
    swept.endpoints = remove_orphaned_endpoints(&crate::host::runtime_files::host_tmp());
    // Temporary folders of dead processes (their builds' leftovers).
    let tmp = crate::host::runtime_files::host_tmp();
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
    if with_docker && let Ok(docker) = crate::host::docker::Docker::connect() {
        let d = docker.sweep(false)?;
        swept.containers = d.containers;
        swept.volumes = d.volumes;
        swept.kept_alive = d.kept_alive.len();
    }
    if with_docker {
        let (pods, kept) = crate::host::podman::sweep(false)?;
        swept.pods = pods;
        swept.kept_alive += kept;
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
pub(crate) fn remove_orphaned_endpoints(tmp: &Path) -> Vec<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::owner::tag;
    

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
    fn a_dead_run_with_tmpdir_set_has_its_maps_in_tmp_swept_too() {
        // A run of a version that did not point the runtime's maps at TMPDIR: its journal names
        // the app's TMPDIR, its perf map and jitdump are in /tmp.
        let root = tempfile::tempdir().unwrap();
        let app_tmp = tempfile::tempdir().unwrap();
        let dead = root.path().join(".staging-x-1-dead");
        std::fs::create_dir(&dead).unwrap();
        let dead_tag = format!("1:{}", process_start_time(1).unwrap() + 1);
        // pid 4194303 is above any pid_max: never a live process, never another test's file.
        std::fs::write(dead.join(JOURNAL), format!("{dead_tag}\npid 4194303:7 {}\n", app_tmp.path().display())).unwrap();
        let in_tmp = [Path::new("/tmp/perf-4194303.map").to_path_buf(), Path::new("/tmp/jit-4194303.dump").to_path_buf()];
        for f in &in_tmp {
            std::fs::write(f, "").unwrap();
        }
        std::fs::write(app_tmp.path().join("dotnet-diagnostic-4194303-9-socket"), "").unwrap();
        let swept = sweep_dead(root.path(), false);
        let left: Vec<_> = in_tmp.iter().filter(|f| f.exists()).cloned().collect();
        for f in &left {
            let _ = std::fs::remove_file(f);
        }
        let swept = swept.unwrap();
        assert!(left.is_empty(), "left in /tmp: {left:?}");
        assert_eq!(swept.files.len(), 3, "{:?}", swept.files);
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
        let host_tmp = crate::host::runtime_files::host_tmp();
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
