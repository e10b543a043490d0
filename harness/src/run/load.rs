//! Machine load during a run: shares measured beside a CPU hog are not the shares of a quiet
//! machine, and a verdict must say which it was. Read off /proc only: the load average at the
//! start and end, and how busy the CPUs were (from /proc/stat deltas) apart from the app itself
//! (its own CPU time from /proc/PID/stat, sampled while it runs since it is gone at the end).

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Aggregate CPU ticks from /proc/stat's `cpu` line: (busy, total).
pub(crate) fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).take(8).filter_map(|w| w.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().sum();
    // idle and iowait are the ticks nothing ran.
    Some((total - v[3] - v[4], total))
}

/// A process's user + system ticks from /proc/PID/stat (fields 14 and 15; the command name may
/// hold spaces and parentheses, so fields are counted after its last `)`).
pub(crate) fn parse_pid_stat(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn loadavg1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

fn cpu_ticks() -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn pid_ticks(pid: u32) -> Option<u64> {
    parse_pid_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process's (name, user + system ticks) by pid, from /proc.
fn process_ticks() -> BTreeMap<u32, (String, u64)> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if let Some(ticks) = parse_pid_stat(&stat) {
            out.insert(pid, (stat[open + 1..close].to_string(), ticks));
        }
    }
    out
}

/// What else ran while the app was measured: the busiest other processes by name (several of
/// one name summed, `stress-ng-cpu ×2`), each with its share of all CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct OtherLoad {
    pub(crate) top: Vec<(String, f64)>,
}

/// How many other processes a run's load names.
const TOP_OTHERS: usize = 3;

/// The other processes' CPU between two readings of every process, `total` CPU ticks apart (all
/// CPUs), leaving out `app` (and the shares under half a percent).
fn other_load(before: &BTreeMap<u32, (String, u64)>, after: &BTreeMap<u32, (String, u64)>, app: u32, total: u64) -> OtherLoad {
    let mut by_name: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    for (pid, (name, ticks)) in after {
        if *pid == app || total == 0 {
            continue;
        }
        // A process that started after the first reading counts all of its ticks.
        let spent = ticks.saturating_sub(before.get(pid).filter(|(n, _)| n == name).map_or(0, |(_, t)| *t));
        if spent > 0 {
            let e = by_name.entry(name.clone()).or_default();
            e.0 += spent;
            e.1 += 1;
        }
    }
    let mut top: Vec<(String, f64)> = by_name
        .into_iter()
        .map(|(name, (ticks, n))| (if n > 1 { format!("{name} ×{n}") } else { name }, ticks as f64 / total as f64))
        .filter(|(_, share)| *share >= 0.005)
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top.truncate(TOP_OTHERS);
    OtherLoad { top }
}

/// Watches the machine from the app's release to its exit.
pub(crate) struct LoadProbe {
    app_pid: u32,
    processes_start: BTreeMap<u32, (String, u64)>,
    loadavg_start: Option<f64>,
    cpu_start: Option<(u64, u64)>,
    app_start: Option<u64>,
    app_last: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoadProbe {
    /// Starts watching; `app_pid` is the app's pid as the host sees it.
    pub(crate) fn start(app_pid: u32) -> LoadProbe {
        let app_start = pid_ticks(app_pid);
        let app_last = Arc::new(AtomicU64::new(app_start.unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (last, halt) = (app_last.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("tracelab-load".into())
            .spawn(move || {
                while !halt.load(Ordering::Relaxed) {
                    if let Some(t) = pid_ticks(app_pid) {
                        last.store(t, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok();
        LoadProbe { app_pid, processes_start: process_ticks(), loadavg_start: loadavg1(), cpu_start: cpu_ticks(), app_start, app_last, stop, thread }
    }

    /// Stops watching and returns the `load.*` metrics (fractions of all CPUs; load averages) and
    /// the busiest other processes.
    pub(crate) fn finish(mut self) -> (BTreeMap<String, f64>, OtherLoad) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut m = BTreeMap::new();
        let mut other = OtherLoad::default();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        m.insert("load.cores".into(), cores);
        if let Some(l) = self.loadavg_start {
            m.insert("load.loadavg1_start".into(), l);
        }
        if let Some(l) = loadavg1() {
            m.insert("load.loadavg1_end".into(), l);
        }
        if let (Some((b0, t0)), Some((b1, t1))) = (self.cpu_start, cpu_ticks())
            && t1 > t0
        {
            let total = (t1 - t0) as f64;
            let busy = (b1 - b0) as f64 / total;
            m.insert("load.cpu_busy_share".into(), busy);
            if let Some(a0) = self.app_start {
                let app_ticks = self.app_last.load(Ordering::Relaxed).saturating_sub(a0);
                // SAFETY: sysconf reads a constant of the system; no memory is involved.
                let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
                m.insert("load.app_cpu_s".into(), app_ticks as f64 / hz);
                let app = app_ticks as f64 / total;
                m.insert("load.app_busy_share".into(), app);
                m.insert("load.other_busy_share".into(), (busy - app).max(0.0));
            }
            // /proc/stat counts ticks of all CPUs; a process's ticks are of one.
            other = other_load(&self.processes_start, &process_ticks(), self.app_pid, t1 - t0);
        }
        (m, other)
    }
}

impl Drop for LoadProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub(crate) use loadgen::Route;

/// The routes as the load generator takes them: each path requested as written and named after
/// itself (`/` is named `/`). Not through loadgen's `NAME=/path` syntax, which read the root route
/// as an empty name and a query's `=` as a name.
pub(crate) fn routes(paths: &[String]) -> Result<Vec<Route>> {
    paths
        .iter()
        .map(|path| {
            if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) || path.contains('#') {
                bail!("`[load] routes` are paths starting with / without spaces or `#` (e.g. [\"/\", \"/cpu?n=3\"]), got {path:?}");
            }
            let name = path.trim_start_matches('/');
            Ok(Route { name: if name.is_empty() { "/".into() } else { name.to_string() }, path: path.clone() })
        })
        .collect()
}

/// `HOST:PORT` of an `http://` URL whose host is this machine's loopback, decided by parsing
/// alone: an IP literal in 127.0.0.0/8 or `[::1]`, `localhost`, or the wildcards a server
/// prints for "every interface" (`0.0.0.0`, `[::]`, `+`, `*`), which it also serves on loopback.
/// Any other name is refused without a DNS query (`127.x.example` asked the resolver), and so is
/// a user part (`http://127.0.0.1@10.255.255.1:80/` names 10.255.255.1).
pub fn loopback_host_port(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("`{url}` is not an http:// URL (the load generator speaks plain HTTP on loopback)"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        bail!("`{url}`: a user part (`…@`) is not allowed; the host after it would receive the load: give http://127.0.0.1:PORT");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (ip, after) = v6.split_once(']').with_context(|| format!("`{url}`: `[` without its `]`"))?;
        (format!("[{ip}]"), after.strip_prefix(':').with_context(|| format!("`{url}` names no port"))?)
    } else {
        let (host, port) = authority.rsplit_once(':').with_context(|| format!("`{url}` names no port"))?;
        (host.to_string(), port)
    };
    let port: u16 = port.parse().with_context(|| format!("`{url}`: `{port}` is not a port"))?;
    let host = match host.as_str() {
        "0.0.0.0" | "[::]" | "+" | "*" | "localhost" | "[::1]" => "127.0.0.1".to_string(),
        h => match h.parse::<std::net::Ipv4Addr>() {
            Ok(ip) if ip.octets()[0] == 127 => ip.to_string(),
            Ok(_) => bail!("`{url}`: load goes to this machine's loopback only, not to `{h}`"),
            Err(_) => bail!(
                "`{url}`: `{h}` is not an IP literal nor `localhost`; load goes to loopback only, and a name is not looked up: give http://127.0.0.1:PORT"
            ),
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_urls_are_loopback_by_parsing_alone() {
        for (url, want) in [
            ("http://127.0.0.1:5000", "127.0.0.1:5000"),
            ("http://127.1.2.3:80/x?y", "127.1.2.3:80"),
            ("http://localhost:5000/", "127.0.0.1:5000"),
            ("http://[::1]:5000", "127.0.0.1:5000"),
            ("http://[::]:5000", "127.0.0.1:5000"),
            ("http://0.0.0.0:5000", "127.0.0.1:5000"),
            ("http://+:5000", "127.0.0.1:5000"),
        ] {
            assert_eq!(loopback_host_port(url).unwrap(), want, "{url}");
        }
        for (url, why) in [
            ("http://127.0.0.1@10.255.255.1:80/", "a user part"),
            ("http://127.0.0.1:1@10.255.255.1:80/", "a user part"),
            ("http://127.x.example:80/", "not an IP literal nor `localhost`"),
            ("http://127.0.0.1.nip.io:80/", "not an IP literal nor `localhost`"),
            ("http://10.0.0.1:80/", "loopback only, not to `10.0.0.1`"),
            ("http://[::ffff:10.0.0.1]:80/", "not an IP literal nor `localhost`"),
            ("http://127.0.0.1/", "names no port"),
            ("https://127.0.0.1:443/", "not an http:// URL"),
        ] {
            let err = format!("{:#}", loopback_host_port(url).unwrap_err());
            assert!(err.contains(why), "{url}: {err}");
        }
    }

    #[test]
    fn proc_files_parse() {
        // Read on this machine (2 cores): /proc/stat's first lines, and a bash's /proc/PID/stat
        // with a name given spaces and parentheses, which the field count must survive.
        let stat = "cpu  409243 3010 70661 128550 3752 0 1253 10073 0 0\ncpu0 202212 1343 34619 68524 1417 0 92 5020 0 0\n";
        let total = 409243 + 3010 + 70661 + 128550 + 3752 + 1253 + 10073;
        assert_eq!(parse_proc_stat(stat), Some((total - 128550 - 3752, total)));
        let pid = "31806 (ba) sh) S 31803 31806 31806 0 -1 4194560 9985 140183 0 6 3 8 151 57 20 0 1 0 294778 5332992 1050";
        assert_eq!(parse_pid_stat(pid), Some(3 + 8));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn a_probe_of_this_process_reports_its_busy_share() {
        let probe = LoadProbe::start(std::process::id());
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(1);
        }
        std::hint::black_box(x);
        let (m, _) = probe.finish();
        assert!(m["load.cores"] >= 1.0);
        assert!(m.contains_key("load.loadavg1_end"));
        let (busy, app) = (m["load.cpu_busy_share"], m["load.app_busy_share"]);
        assert!(app > 0.0 && app <= busy + 1e-9, "{m:?}");
    }

    #[test]
    fn the_busiest_other_processes_are_named_with_their_share() {
        let before: BTreeMap<u32, (String, u64)> =
            [(1, ("init".to_string(), 10)), (50, ("stress-ng-cpu".into(), 100)), (51, ("stress-ng-cpu".into(), 100)), (60, ("app".into(), 0))].into();
        let after: BTreeMap<u32, (String, u64)> = [
            (1, ("init".to_string(), 10)),
            (50, ("stress-ng-cpu".into(), 300)),
            (51, ("stress-ng-cpu".into(), 280)),
            (60, ("app".into(), 350)),
            // Started between the readings (a pid reused by another name counts whole).
            (70, ("perf".into(), 40)),
        ]
        .into();
        let other = other_load(&before, &after, 60, 1000);
        assert_eq!(other.top, vec![("stress-ng-cpu ×2".to_string(), 0.38), ("perf".to_string(), 0.04)]);
    }
}
