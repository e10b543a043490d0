//! Processes as the kernel shows them: signals, a process's start time and descendants (from
//! /proc), its pids in nested pid namespaces (NSpid), a child that dies with its owner, and a
//! command line quoted for a shell. Knows nothing of runs, targets or collectors.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// A command line as it can be pasted into a shell: each argument quoted where it needs it
/// (programs are always started from the argv, never through a shell).
pub(crate) fn quoted<I, S>(argv: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    shell_words::join(argv)
}

pub fn signal(pid: u32, sig: i32) -> Result<()> {
    unsafe extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { kill(pid as i32, sig) } != 0 {
        bail!("kill({pid}, {sig}) failed: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// The pids of a process in each pid namespace it belongs to, outermost first (the `NSpid` line
/// of /proc/PID/status).
pub(crate) fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids: Option<Vec<u32>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
    pids.filter(|p| !p.is_empty())
}

/// NSpid of a host process.
pub fn nspid(host_pid: u32) -> Result<Vec<u32>> {
    let path = format!("/proc/{host_pid}/status");
    let status = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {path}: process {host_pid} is gone or not visible"))?;
    parse_nspid(&status).with_context(|| format!("{path} has no NSpid line (kernel older than 4.1?)"))
}

/// The pid a host process has inside its own (innermost) pid namespace: what names its
/// perf-PID.map and its diagnostics socket.
pub(crate) fn pid_in_own_namespace(host_pid: u32) -> Result<u32> {
    Ok(*nspid(host_pid)?.last().unwrap())
}

/// The host pid of the process that is `ns_pid` inside the pid namespace of host process
/// `member` (a tool started inside a container reports its own pid in the container's view).
pub fn host_pid_in_namespace_of(member: u32, ns_pid: u32) -> Result<u32> {
    let ns_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let want = ns_of(&member.to_string())
        .with_context(|| format!("cannot read the pid namespace of process {member}: is it gone?"))?;
    for entry in std::fs::read_dir("/proc").context("cannot list /proc")?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        if ns_of(pid).as_ref() != Some(&want) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        if parse_nspid(&status).and_then(|p| p.last().copied()) == Some(ns_pid) {
            return pid.parse().context("pid");
        }
    }
    bail!("no process is pid {ns_pid} in the pid namespace of process {member}")
}

/// The child is killed when the thread that started it ends with its process (even of SIGKILL):
/// an app or tool never outlives the run that owns it.
pub fn die_with_owner(cmd: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches only the child being spawned.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Field 22 of /proc/PID/stat (start time in clock ticks).
pub(crate) fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

pub(crate) fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string)))
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Every process whose parent chain leads to `root` (read from /proc).
pub(crate) fn descendants(root: u32) -> Vec<u32> {
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

/// CLOCK_MONOTONIC in nanoseconds: the clock perf (`-k 1`), EventPipe (QPC on Linux) and LTTng
/// stamp their records with, so the engine's own moments (ready, stop) compare with them.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from the host's /proc/HOSTPID/status of `sh` as pid 1 of a Docker container
    /// (tracelab/runtime:bullseye, Docker 20.10, kernel 6.18).
    const CONTAINER_INIT_STATUS: &str = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t13857\n\
        Ngid:\t0\nPid:\t13857\nPPid:\t13825\nTracerPid:\t0\nNStgid:\t13857\t1\nNSpid:\t13857\t1\n\
        NSpgid:\t13857\t1\nNSsid:\t13857\t1\nThreads:\t1\n";

    #[test]
    fn nspid_lists_the_pid_in_each_namespace() {
        assert_eq!(parse_nspid(CONTAINER_INIT_STATUS), Some(vec![13857, 1]));
        assert_eq!(parse_nspid("Name:\tdotnet\nNSpid:\t4242\n"), Some(vec![4242]));
        assert_eq!(parse_nspid("NSpid:\t900\t37\t7\n"), Some(vec![900, 37, 7]));
    }

    #[test]
    fn nspid_absent_or_garbled_is_none() {
        assert_eq!(parse_nspid("Name:\tsh\nPid:\t1\n"), None);
        assert_eq!(parse_nspid("NSpid:\t12 x\n"), None);
        assert_eq!(parse_nspid("NSpid:\n"), None);
    }

    #[test]
    fn own_process_is_in_its_own_namespace() {
        let me = std::process::id();
        let ns = nspid(me).unwrap();
        assert_eq!(ns[0], me);
        assert_eq!(host_pid_in_namespace_of(me, *ns.last().unwrap()).unwrap(), me);
        assert!(nspid(u32::MAX - 1).unwrap_err().to_string().contains("is gone"));
    }

    #[test]
    fn descendants_are_found_through_the_parent_chain() {
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & wait"]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let below = descendants(std::process::id());
        let below_sh = descendants(child.id());
        for p in &below_sh {
            let _ = crate::host::proc::signal(*p, 9);
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(below.contains(&child.id()), "{below:?}");
        assert_eq!(below_sh.len(), 1, "the sleep below sh: {below_sh:?}");
        assert!(below.contains(&below_sh[0]), "{below:?}");
    }
}
