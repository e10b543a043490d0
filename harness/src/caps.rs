//! Capability matrix: for each collector and each container capability set, a short real probe
//! that records whether collection works, and the exact error when it does not.
//!
//! Probes run the tool where the `container` target runs it: inside the app's container, with the
//! capability set on that container (a sidecar gets the same set in the same way). The EventPipe
//! probe is the exception: our IPC client (crates/eventpipe) runs on the host and reaches the
//! app's diagnostics socket through /proc/PID/root/tmp, so only the app container's set varies.
//!
//! Results go to `results/<utc>-matrix-caps/` (`caps.md`, `caps.json`), written to a temp folder
//! and renamed at the end. [`least_working`] reads the newest one so scenarios can default to
//! the least set measured to work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::docker::{ContainerSpec, Docker};

/// Capability sets, least first (the order [`least_working`] prefers).
pub const CAP_SETS: &[(&str, &[&str])] = &[
    ("none", &[]),
    ("PERFMON", &["PERFMON"]),
    ("SYS_PTRACE", &["SYS_PTRACE"]),
    ("PERFMON+SYS_PTRACE", &["PERFMON", "SYS_PTRACE"]),
    ("SYS_ADMIN", &["SYS_ADMIN"]),
    ("SYS_ADMIN+SYS_PTRACE", &["SYS_ADMIN", "SYS_PTRACE"]),
    ("privileged", &["privileged"]),
];

/// Collectors probed, by their scenario kind.
pub const COLLECTORS: &[&str] = &["perf-cpu", "perf-offcpu", "lttng", "eventpipe", "dotnet-trace"];

/// One cell of the matrix.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    pub collector: String,
    /// Name of the capability set (`none`, `SYS_ADMIN`, `privileged` …).
    pub caps: String,
    pub works: bool,
    /// What a working probe measured (`samples=812 jit_frames=640`).
    pub detail: String,
    /// The exact error (the tool's or the daemon's) when it did not work.
    pub error: Option<String>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Matrix {
    pub axis: String,
    pub created_utc: String,
    pub suite: String,
    pub image: String,
    pub docker_version: String,
    pub kernel: String,
    pub probes: Vec<Probe>,
}

impl Matrix {
    pub fn get(&self, collector: &str, caps: &str) -> Option<&Probe> {
        self.probes.iter().find(|p| p.collector == collector && p.caps == caps)
    }

    /// The table: collectors as rows, capability sets as columns, errors as footnotes.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# Capability matrix\n\nImage `{}` (Debian {}), Docker {}, kernel {}, {}.\n\
             Each cell is a short real probe; ✅ works, ❌ fails with the error in the footnote.\n\n",
            self.image, self.suite, self.docker_version, self.kernel, self.created_utc
        );
        s.push_str("| collector |");
        for (name, _) in CAP_SETS {
            s.push_str(&format!(" {name} |"));
        }
        s.push_str(" least set |\n|---|");
        for _ in CAP_SETS {
            s.push_str("---|");
        }
        s.push_str("---|\n");
        let mut notes: Vec<String> = Vec::new();
        for collector in COLLECTORS {
            s.push_str(&format!("| {collector} |"));
            for (caps, _) in CAP_SETS {
                match self.get(collector, caps) {
                    Some(p) if p.works => s.push_str(" ✅ |"),
                    Some(p) => {
                        let error = p.error.clone().unwrap_or_default();
                        let n = match notes.iter().position(|e| *e == error) {
                            Some(i) => i + 1,
                            None => {
                                notes.push(error);
                                notes.len()
                            }
                        };
                        s.push_str(&format!(" ❌ [{n}] |"));
                    }
                    None => s.push_str(" – |"),
                }
            }
            let least = least_in(self, collector).map(|c| if c.is_empty() { "none".into() } else { c.join("+") });
            s.push_str(&format!(" {} |\n", least.unwrap_or_else(|| "none works".into())));
        }
        s.push_str("\nWhat worked measured:\n\n");
        for p in self.probes.iter().filter(|p| p.works) {
            s.push_str(&format!("- {} / {}: {} ({:.1} s)\n", p.collector, p.caps, p.detail, p.seconds));
        }
        s.push_str("\nErrors:\n\n");
        for (i, e) in notes.iter().enumerate() {
            s.push_str(&format!("{}. `{}`\n", i + 1, e.replace('`', "'").replace('\n', " ⏎ ")));
        }
        s
    }
}

/// Options of a matrix run.
#[derive(Clone, Debug)]
pub struct MatrixOptions {
    pub suite: String,
    pub collectors: Vec<String>,
    pub cap_sets: Vec<String>,
    pub timeout: Duration,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            suite: crate::image::DEFAULT_SUITE.into(),
            collectors: COLLECTORS.iter().map(|s| s.to_string()).collect(),
            cap_sets: CAP_SETS.iter().map(|(n, _)| n.to_string()).collect(),
            timeout: Duration::from_secs(90),
        }
    }
}

fn cap_list(set: &str) -> Result<&'static [&'static str]> {
    CAP_SETS.iter().find(|(n, _)| *n == set).map(|(_, c)| *c).with_context(|| {
        format!("unknown capability set `{set}`: expected one of {}", CAP_SETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))
    })
}

/// Everything a probe needs that is the same for every cell.
struct ProbeKit {
    docker: Docker,
    image: String,
    /// The app started by probes that need one (gc-heavy: GC events for LTTng and EventPipe).
    app_dll: PathBuf,
    /// dotnet-trace installed on the host, bind-mounted at the same path.
    dotnet_trace: Option<PathBuf>,
    work: PathBuf,
    timeout: Duration,
}

const OK_MARK: &str = "TRACELAB-PROBE OK";

/// The shell script a probe runs inside its container; it prints [`OK_MARK`] and what it
/// measured when collection worked.
fn probe_script(collector: &str, app: &str, dotnet_trace: Option<&Path>, work: &str) -> Result<String> {
    let run_app = format!("dotnet {app} --seconds 1 --induced 3 --alloc-mb-per-s 50");
    Ok(match collector {
        "perf-cpu" => format!(
            "set -e\nexport DOTNET_PerfMapEnabled=1 DOTNET_EnableWriteXorExecute=0\n\
             perf record -q -e cpu-clock -F 999 -g -o {work}/probe.data -- {run_app} >/dev/null\n\
             perf script -i {work}/probe.data > {work}/probe.txt 2>/dev/null\n\
             n=$(grep -c cpu-clock {work}/probe.txt || true); j=$(grep -c 'Tracelab.Workloads' {work}/probe.txt || true)\n\
             [ \"$n\" -gt 0 ] || {{ echo 'perf recorded no samples' >&2; exit 1; }}\n\
             echo \"{OK_MARK} samples=$n jit_frames=$j\""
        ),
        "perf-offcpu" => format!(
            "set -e\nexport DOTNET_PerfMapEnabled=1\n\
             if [ ! -e /sys/kernel/tracing/events/sched/sched_switch ]; then mount -t tracefs nodev /sys/kernel/tracing; fi\n\
             perf record -q -e sched:sched_switch -g -o {work}/probe.data -- {run_app} >/dev/null\n\
             perf script -i {work}/probe.data > {work}/probe.txt 2>/dev/null\n\
             n=$(grep -c sched_switch {work}/probe.txt || true)\n\
             [ \"$n\" -gt 0 ] || {{ echo 'perf recorded no sched_switch events' >&2; exit 1; }}\n\
             echo \"{OK_MARK} switches=$n\""
        ),
        "lttng" => format!(
            "set -e\nexport HOME=/tmp\n\
             lttng-sessiond --no-kernel --daemonize\n\
             lttng create probe --output={work}/lttng >/dev/null\n\
             lttng enable-event -u 'DotNETRuntime:*' >/dev/null\n\
             lttng add-context -u -t vpid -t vtid >/dev/null\n\
             lttng start >/dev/null\n\
             DOTNET_EnableEventLog=1 {run_app} >/dev/null\n\
             lttng stop >/dev/null; lttng destroy >/dev/null\n\
             if command -v babeltrace2 >/dev/null; then bt=babeltrace2; else bt=babeltrace; fi\n\
             $bt {work}/lttng > {work}/lttng.txt\n\
             n=$(grep -c 'DotNETRuntime:' {work}/lttng.txt || true); g=$(grep -c 'DotNETRuntime:GCStart' {work}/lttng.txt || true)\n\
             [ \"$n\" -gt 0 ] || {{ echo 'the LTTng session recorded no DotNETRuntime events' >&2; exit 1; }}\n\
             echo \"{OK_MARK} events=$n gc_start=$g\""
        ),
        "dotnet-trace" => {
            let tool = dotnet_trace.context("dotnet-trace is not installed (harness::dotnet::Dotnet::install_tool)")?;
            format!(
                "set -e\n\
                 dotnet {app} --seconds 4 --induced 8 --alloc-mb-per-s 50 >{work}/app.out & app=$!\n\
                 for i in $(seq 300); do grep -q 'TRACELAB READY' {work}/app.out && break; sleep 0.1; done\n\
                 {tool} collect -p $app --profile gc-collect --duration 00:00:00:02 -o {work}/probe.nettrace >{work}/dotnet-trace.log 2>&1 || \
                 {{ grep -v -e '^ *at ' -e 'End of stack trace' {work}/dotnet-trace.log | tail -5 >&2; exit 1; }}\n\
                 wait $app\n\
                 s=$(stat -c %s {work}/probe.nettrace)\n\
                 [ \"$s\" -gt 1024 ] || {{ echo \"nettrace of $s bytes\" >&2; exit 1; }}\n\
                 echo \"{OK_MARK} nettrace_bytes=$s\"",
                tool = tool.display()
            )
        }
        other => bail!("no probe for collector `{other}`"),
    })
}

/// Runs one probe container to its end; Ok((works, detail, error)).
fn run_probe(kit: &ProbeKit, collector: &str, caps: &str) -> Result<Probe> {
    let started = Instant::now();
    let work = kit.work.join(format!("{collector}-{caps}"));
    let tmp = work.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
    }
    let app_dir = kit.app_dll.parent().unwrap();
    let mut binds = vec![
        format!("{}:/tmp", tmp.display()),
        format!("{0}:{0}", work.display()),
        format!("{0}:{0}:ro", app_dir.display()),
    ];
    if let Some(tool) = &kit.dotnet_trace {
        let dir = tool.parent().unwrap();
        binds.push(format!("{0}:{0}:ro", dir.display()));
    }
    let work_s = work.display().to_string();
    let app_s = kit.app_dll.display().to_string();
    let cmd = if collector == "eventpipe" {
        vec!["dotnet".into(), app_s.clone(), "--seconds".into(), "5".into(), "--induced".into(), "3".into()]
    } else {
        vec!["sh".into(), "-c".into(), probe_script(collector, &app_s, kit.dotnet_trace.as_deref(), &work_s)?]
    };
    let mut spec = ContainerSpec::new(&kit.image, "probe", cmd);
    spec.binds = binds;
    spec.working_dir = Some(work_s.clone());
    for cap in cap_list(caps)? {
        if *cap == "privileged" {
            spec.privileged = true;
        } else {
            spec.cap_add.push(cap.to_string());
        }
    }
    let mut probe = Probe {
        collector: collector.into(),
        caps: caps.into(),
        works: false,
        detail: String::new(),
        error: None,
        seconds: 0.0,
    };
    let id = match kit.docker.create(&spec) {
        Ok(id) => id,
        Err(e) => {
            probe.error = Some(format!("{e:#}"));
            probe.seconds = started.elapsed().as_secs_f64();
            return Ok(probe);
        }
    };
    let outcome = (|| -> Result<(i64, Vec<String>, String)> {
        let (tx, rx) = std::sync::mpsc::channel();
        kit.docker.forward_output(&id, tx)?;
        kit.docker.start(&id)?;
        let mut extra = String::new();
        let mut lines: Vec<String> = Vec::new();
        if collector == "eventpipe" {
            // Trace the app's measured phase, not its start-up.
            let deadline = Instant::now() + Duration::from_secs(30);
            while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                let ready = line.starts_with("TRACELAB READY");
                lines.push(line);
                if ready {
                    break;
                }
            }
            extra = match eventpipe_probe(&kit.docker, &id, &tmp) {
                Ok(d) => d,
                Err(e) => format!("ERROR {e:#}"),
            };
        }
        let code = kit.docker.wait(&id, kit.timeout)?;
        lines.extend(rx.try_iter());
        Ok((code, lines, extra))
    })();
    let _ = kit.docker.remove(&id);
    match outcome {
        Err(e) => probe.error = Some(format!("{e:#}")),
        Ok((code, lines, extra)) => {
            if collector == "eventpipe" {
                if let Some(err) = extra.strip_prefix("ERROR ") {
                    probe.error = Some(err.to_string());
                } else {
                    probe.works = true;
                    probe.detail = extra;
                }
            } else if let Some(ok) = lines.iter().find_map(|l| l.strip_prefix(OK_MARK)).filter(|_| code == 0) {
                probe.works = true;
                probe.detail = ok.trim().to_string();
            } else {
                let meaningful: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
                let tail = meaningful[meaningful.len().saturating_sub(4)..].iter().map(|s| s.trim()).collect::<Vec<_>>();
                probe.error = Some(format!("exit {code}: {}", tail.join(" | ")));
            }
        }
    }
    probe.error = probe.error.map(|e| without_ids(&e));
    probe.seconds = started.elapsed().as_secs_f64();
    Ok(probe)
}

/// The error with container ids replaced by `<id>`, so equal failures compare equal.
fn without_ids(error: &str) -> String {
    let ids = regex::Regex::new(r"\b[0-9a-f]{12}(?:[0-9a-f]{52})?\b").expect("valid regex");
    ids.replace_all(error, "<id>").into_owned()
}

/// A real EventPipe session through our IPC client (crates/eventpipe) from the host: finds the
/// app's socket through /proc/PID/root/tmp (pid namespace translated), asks ProcessInfo, starts a
/// GC session, stops it and counts the nettrace bytes.
fn eventpipe_probe(docker: &Docker, id: &str, _tmp: &Path) -> Result<String> {
    use eventpipe::ipc::{DiagnosticsClient, Provider, SessionConfig};
    let deadline = Instant::now() + Duration::from_secs(20);
    let init = docker.host_pid(id)?;
    // The probe container runs the app as its pid 1.
    let client = loop {
        match DiagnosticsClient::for_pid(init) {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => bail!("no diagnostics socket: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let info = client.process_info().map_err(|e| anyhow::anyhow!("ProcessInfo: {e}"))?;
    let config = SessionConfig {
        providers: vec![Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 5)],
        buffer_mb: 64,
        rundown: false,
        stackwalk: false,
    };
    let session = client.start_session(&config).map_err(|e| anyhow::anyhow!("CollectTracing: {e}"))?;
    let mut drain = session.drain_to(std::io::sink());
    std::thread::sleep(Duration::from_millis(1500));
    client.stop_tracing(drain.session_id).map_err(|e| anyhow::anyhow!("StopTracing: {e}"))?;
    let bytes = drain.wait(Duration::from_secs(20)).map_err(|e| anyhow::anyhow!("draining the session: {e}"))?;
    if bytes < 1024 {
        bail!("the session streamed only {bytes} bytes");
    }
    Ok(format!("ProcessInfo pid={} CollectTracing{} nettrace_bytes={bytes}", info.pid, drain.command_version))
}

/// Runs the capability matrix. `on_probe` sees each cell as it finishes (progress).
pub fn run_matrix(options: &MatrixOptions, on_probe: &mut dyn FnMut(&Probe)) -> Result<Matrix> {
    crate::docker::install_signal_cleanup();
    let docker = Docker::connect()?;
    let dotnet = crate::dotnet::Dotnet::locate_or_install()?;
    let suite = crate::image::suite(&options.suite)?;
    let image = crate::image::build(&docker, suite, &dotnet.root)?.runtime.tag;
    let app = crate::workload::build_named(&dotnet, "gc-heavy", false)?;
    let dotnet_trace = if options.collectors.iter().any(|c| c == "dotnet-trace") {
        let dir = crate::project_root().join(".build").join("tools");
        Some(dotnet.install_tool("dotnet-trace", &dir)?)
    } else {
        None
    };
    let work = tempfile::Builder::new()
        .prefix("matrix-caps-")
        .tempdir_in(crate::project_root().join(".build"))
        .context("cannot create a work folder under .build/")?;
    let kit = ProbeKit {
        docker,
        image: image.clone(),
        app_dll: app.dll,
        dotnet_trace,
        work: work.path().to_path_buf(),
        timeout: options.timeout,
    };
    let mut probes = Vec::new();
    for collector in &options.collectors {
        for caps in &options.cap_sets {
            cap_list(caps)?;
            let probe = run_probe(&kit, collector, caps)?;
            on_probe(&probe);
            probes.push(probe);
        }
    }
    Ok(Matrix {
        axis: "caps".into(),
        created_utc: utc_now(),
        suite: suite.name.into(),
        image,
        docker_version: kit.docker.server_version().unwrap_or_default(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into(),
        probes,
    })
}

fn utc_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Writes `caps.md` and `caps.json` into `results/<utc>-matrix-caps/` (temp folder, then rename).
pub fn write(matrix: &Matrix, results: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(results)?;
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"))
        .unwrap_or_default();
    let final_dir = results.join(format!("{stamp}-matrix-caps"));
    let tmp = tempfile::Builder::new().prefix(".matrix-caps-").tempdir_in(results)?;
    std::fs::write(tmp.path().join("caps.json"), serde_json::to_string_pretty(matrix)?)?;
    std::fs::write(tmp.path().join("caps.md"), matrix.markdown())?;
    let tmp = tmp.keep();
    std::fs::rename(&tmp, &final_dir).with_context(|| format!("cannot rename into {}", final_dir.display()))?;
    Ok(final_dir)
}

/// The newest recorded caps matrix under `results`.
pub fn latest(results: &Path) -> Option<Matrix> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with("-matrix-caps")))
        .collect();
    dirs.sort();
    dirs.iter().rev().find_map(|d| serde_json::from_str(&std::fs::read_to_string(d.join("caps.json")).ok()?).ok())
}

fn least_in(matrix: &Matrix, collector: &str) -> Option<Vec<String>> {
    CAP_SETS.iter().find_map(|(name, caps)| {
        matrix.get(collector, name).filter(|p| p.works).map(|_| caps.iter().map(|c| c.to_string()).collect())
    })
}

/// The least capability set measured to work for `collector` (`perf-cpu`, `lttng` …), from the
/// newest matrix in `results/`; without one, what was measured on Debian docker.io 20.10
/// (shared/DESIGN.md §6): SYS_ADMIN for perf, none for LTTng and EventPipe. `None` when the
/// recorded matrix says nothing works.
pub fn least_working(collector: &str) -> Option<Vec<String>> {
    if let Some(matrix) = latest(&crate::project_root().join("results"))
        && matrix.probes.iter().any(|p| p.collector == collector)
    {
        return least_in(&matrix, collector);
    }
    Some(match collector {
        "perf-cpu" | "perf-offcpu" => vec!["SYS_ADMIN".to_string()],
        _ => Vec::new(),
    })
}

/// The union of the least sets of several collectors (one container runs them all).
pub fn least_working_for(collectors: &[&str]) -> Option<Vec<String>> {
    let mut all = BTreeMap::new();
    for c in collectors {
        for cap in least_working(c)? {
            all.insert(cap, ());
        }
    }
    Some(all.into_keys().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(collector: &str, caps: &str, works: bool) -> Probe {
        Probe {
            collector: collector.into(),
            caps: caps.into(),
            works,
            detail: String::new(),
            error: (!works).then(|| "exit 1: perf_event_open(..., PERF_FLAG_FD_CLOEXEC) failed".into()),
            seconds: 1.0,
        }
    }

    fn matrix(probes: Vec<Probe>) -> Matrix {
        Matrix {
            axis: "caps".into(),
            created_utc: "2026-11-22T09:00:00Z".into(),
            suite: "bullseye".into(),
            image: "tracelab/runtime:bullseye".into(),
            docker_version: "20.10.24".into(),
            kernel: "6.18".into(),
            probes,
        }
    }

    #[test]
    fn least_is_the_first_working_set_in_order() {
        let m = matrix(vec![
            probe("perf-cpu", "none", false),
            probe("perf-cpu", "PERFMON", false),
            probe("perf-cpu", "SYS_ADMIN+SYS_PTRACE", true),
            probe("perf-cpu", "SYS_ADMIN", true),
            probe("lttng", "none", true),
        ]);
        assert_eq!(least_in(&m, "perf-cpu"), Some(vec!["SYS_ADMIN".to_string()]));
        assert_eq!(least_in(&m, "lttng"), Some(vec![]));
        assert_eq!(least_in(&m, "eventpipe"), None);
    }

    #[test]
    fn markdown_has_a_row_per_collector_and_footnotes() {
        let m = matrix(vec![probe("perf-cpu", "none", false), probe("perf-cpu", "SYS_ADMIN", true)]);
        let md = m.markdown();
        assert!(md.contains("| perf-cpu | ❌ [1] |"), "{md}");
        assert!(md.contains("1. `exit 1: perf_event_open"), "{md}");
        assert!(md.contains("| SYS_ADMIN |"), "{md}");
        let back: Matrix = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back.probes.len(), 2);
    }

    #[test]
    fn write_then_latest_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let m = matrix(vec![probe("lttng", "none", true)]);
        let out = write(&m, dir.path()).unwrap();
        assert!(out.join("caps.md").is_file());
        let back = latest(dir.path()).unwrap();
        assert_eq!(back.probes[0].collector, "lttng");
        // No half-written folder is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn container_ids_are_masked_in_errors() {
        assert_eq!(
            without_ids("cannot start container 3cdcd46f685d: unable to apply caps"),
            "cannot start container <id>: unable to apply caps"
        );
        assert_eq!(without_ids("exit 32: mount: permission denied."), "exit 32: mount: permission denied.");
    }

    #[test]
    fn unknown_cap_set_is_named() {
        let e = cap_list("NET_ADMIN").unwrap_err().to_string();
        assert!(e.contains("NET_ADMIN") && e.contains("SYS_ADMIN"), "{e}");
    }
}
