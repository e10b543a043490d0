//! Writing one run down: `results/<utc>-<scenario>-<env>/` with manifest.json (a contract: CI,
//! reports and other tools read it — shared/DESIGN.md §5), summary.md, junit.xml, artifacts/,
//! stacks/ and flame graphs. Everything is written into a staging folder and renamed at the end,
//! so a crashed run leaves nothing that looks complete; `results/latest` then points at it.

pub mod junit;
pub mod merge;
pub mod pages;
mod quality;
mod findings;
mod tables;
mod viewers;

pub(crate) use findings::{diagnose, resolution_json};
pub(crate) use tables::share_tables;
pub(crate) use viewers::write_stacks;
pub use viewers::{ViewerFile, open_next, viewer_list};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use judge::{Check, Verdict};
use crate::host::environment::Environment;

/// manifest.json. Fields may be added; none renamed without a reason in the closing note.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub scenario: String,
    pub verdict: Verdict,
    pub reason: Option<String>,
    pub checks: Vec<Check>,
    /// Flat map name → number: samples_total, resolved_ratio_jit, share_error_pts_max, per-class
    /// ratios (`resolved_ratio_<class>`), per-collector figures (`<collector>.<metric>`).
    pub metrics: BTreeMap<String, f64>,
    pub environment: Environment,
    pub commands: Vec<String>,
    pub durations_s: BTreeMap<String, f64>,
    /// Tolerances used where the scenario stated none.
    pub default_tolerances: BTreeMap<String, f64>,
    pub workload: Option<String>,
    pub collectors: Vec<String>,
    pub started_utc: String,
    pub run_id: String,
    /// Per collector: per-DSO-class resolution of leaf and all frames.
    #[serde(default)]
    pub resolution: BTreeMap<String, serde_json::Value>,
    /// Per collector: how far stacks unwind (filled where a collector reports it).
    #[serde(default)]
    pub completeness: BTreeMap<String, serde_json::Value>,
    /// Diagnoses the engine made (e.g. W^X doublemapper frames), shown in summary.md.
    #[serde(default)]
    pub findings: Vec<String>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// Verdict tables: for each set of compared methods, every collector's shares beside truth.
    #[serde(default)]
    pub share_tables: Vec<ShareTable>,
    /// The load generator's report (requests, errors, latency per route), for web scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<serde_json::Value>,
    /// Earlier attempts of this run that were inconclusive (`[sufficiency] attempts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_attempts: Vec<EarlierAttempt>,
    /// What runs killed before this one had left (staging folders, /tmp files, containers),
    /// removed when this run started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub swept_at_start: Vec<String>,
    /// Per collector: the files viewers open, relative to the run folder (Firefox Profiler
    /// profile, pprof, speedscope, perfcollect-style trace.zip).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub viewer_files: BTreeMap<String, Vec<String>>,
    /// When the app and each collector ran, per launch: seconds from the app's launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WindowReport>,
}

/// One launch's moments, in seconds from the app's launch: the measured window the checks judged
/// (samples outside it are recorded, not judged) and each collector's recording.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// The runtime held the app at start until every collector recorded.
    pub held_at_start: bool,
    /// `--attach PID`: the app was running already; seconds count from the attach.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attached: bool,
    /// When the app was ready (its ready line, port or diagnostics socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_from_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_to_s: Option<f64>,
    /// Collector → [recording from, stopped at].
    #[serde(default)]
    pub collectors: BTreeMap<String, [Option<f64>; 2]>,
}

/// An inconclusive attempt of a run that was run again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EarlierAttempt {
    /// Its results folder's name (beside this one).
    pub run_id: String,
    pub reason: String,
}

/// Rows = collectors, columns = the compared methods (e.g. the two routes of the web experiment).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShareTable {
    pub columns: Vec<String>,
    /// Truth per column where the scenario names one (fraction).
    pub truth: Vec<Option<f64>>,
    pub rows: Vec<ShareRow>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShareRow {
    pub collector: String,
    /// Samples attributed to any of the columns.
    pub samples: u64,
    pub shares: Vec<f64>,
    /// |share − truth| in points, where truth is known.
    pub error_pts: Vec<Option<f64>>,
    /// What this collector measures, in one line.
    #[serde(default)]
    pub measures: String,
    /// Truth per column from the run this collector observed: scenarios with separate runs
    /// (`runs = [[…], […]]`) have one truth per run, and a row is scored against its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truth: Vec<Option<f64>>,
}

impl ShareTable {
    /// Rows grouped by the truth they are held against, in row order: one group per run (the
    /// table's truth for rows written before rows carried their own).
    pub(crate) fn truth_groups(&self) -> Vec<(Vec<Option<f64>>, Vec<&ShareRow>)> {
        let mut groups: Vec<(Vec<Option<f64>>, Vec<&ShareRow>)> = Vec::new();
        for r in &self.rows {
            let truth = if r.truth.is_empty() { self.truth.clone() } else { r.truth.clone() };
            match groups.iter_mut().find(|(t, _)| *t == truth) {
                Some((_, rows)) => rows.push(r),
                None => groups.push((truth, vec![r])),
            }
        }
        groups
    }
}

/// A truth row's label: which collectors' run it is the truth of, when the table has several.
pub(crate) fn truth_label(rows: &[&ShareRow], several: bool) -> String {
    if several {
        format!("truth (run of {})", rows.iter().map(|r| r.collector.as_str()).collect::<Vec<_>>().join(", "))
    } else {
        "truth".into()
    }
}

/// One line per collector kind on what its samples mean.
pub(crate) fn collector_measures(kind: crate::collect::CollectorKind) -> &'static str {
    use crate::collect::CollectorKind;
    match kind {
        CollectorKind::PerfCpu => "on-CPU time: cpu-clock samples only threads that are running",
        CollectorKind::PerfOffcpu => "off-CPU time: sched_switch, weighted by time from switch-out to switch-in",
        CollectorKind::PerfOffwake => {
            "blocked time with its waker: sched_switch joined to sched_waking, blocked stack ; -- ; waker stack, weighted by blocked time"
        }
        CollectorKind::PerfSyscalls => "system calls: every sys_enter of the chosen calls, with the stack that made it",
        CollectorKind::EventPipe | CollectorKind::DotnetTrace => {
            "thread time: SampleProfiler samples every managed thread, running or blocked"
        }
        CollectorKind::CollectLinux => {
            "perf through the kernel's user_events: cpu-sampling samples running threads (on-CPU time), thread-time adds context switches; runtime events with stacks"
        }
        CollectorKind::Lttng => "runtime events (no stacks)",
        CollectorKind::Dump => "core dumps: the threads and mapped files each dump lists (no samples)",
        CollectorKind::Perfcollect => {
            "Microsoft's perfcollect, as users run it: perf cpu-clock samples of the app (on-CPU time) named as perf names them, and its LTTng runtime events"
        }
    }
}

/// A results folder being written. Dropped unfinished (an error, a panic), its staging folder
/// goes with it: nothing half-written stays on the disk, least of all a full one.
pub(crate) struct ResultsDir {
    root: PathBuf,
    staging: PathBuf,
    name: String,
    finished: bool,
}

/// The results folder cannot be written (a full disk, a read-only or failing file system): an
/// infrastructure error (exit 5) naming the path, not a usage error — the scenario was fine.
fn unwritable(what: &str, path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    crate::host::errors::Infrastructure::wrap(format!(
        "cannot {what} {}: {e:#} (the results folder: free space there, or choose another with --results DIR)",
        path.display()
    ))
}

impl Drop for ResultsDir {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_dir_all(&self.staging);
            crate::host::owner::disown_staging(&self.staging);
        }
    }
}

impl ResultsDir {
    /// Starts a run named `name` in a hidden staging folder of its own,
    /// `root/.staging-<name>-<pid>-<random>`, created exclusively and journaled to this process
    /// ([`crate::host::owner`]): a signal removes it, a later run sweeps it if this process was killed.
    /// The run's final name is taken only when it finishes ([`ResultsDir::finish`]): `name`, or
    /// `name-2`, `name-3` … when another run took it.
    pub(crate) fn create(root: &Path, name: &str) -> Result<ResultsDir> {
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) || name == ".." {
            bail!("`{name}` cannot name a results folder: it would leave {}", root.display());
        }
        std::fs::create_dir_all(root).map_err(|e| unwritable("create", root, e))?;
        let staging = loop {
            let staging = root.join(format!(".staging-{name}-{}-{:08x}", std::process::id(), random_u32()));
            match std::fs::create_dir(&staging) {
                Ok(()) => break staging,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(unwritable("create", &staging, e)),
            }
        };
        // From here the folder is removed on any error (Drop).
        let dir = ResultsDir { root: root.to_path_buf(), staging, name: name.to_string(), finished: false };
        crate::host::owner::own_staging(&dir.staging).map_err(|e| unwritable("write", &dir.staging.join(crate::host::owner::JOURNAL), e))?;
        for sub in ["artifacts", "stacks"] {
            let path = dir.staging.join(sub);
            std::fs::create_dir_all(&path).map_err(|e| unwritable("create", &path, e))?;
        }
        Ok(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.staging
    }
    pub(crate) fn artifacts(&self) -> PathBuf {
        self.staging.join("artifacts")
    }
    pub(crate) fn stacks(&self) -> PathBuf {
        self.staging.join("stacks")
    }

    /// Writes manifest.json, summary.md and junit.xml, renames the folder into place under the
    /// first free name (`run_id` and the staging paths in `commands` become the final ones) and
    /// points `latest` at it. Returns the final path. After SIGINT/SIGTERM it refuses: an
    /// interrupted run is removed, never finished.
    pub(crate) fn finish(mut self, manifest: &Manifest) -> Result<PathBuf> {
        let _door = crate::host::owner::finishing()?;
        let write = |path: PathBuf, text: String| std::fs::write(&path, text).map_err(|e| unwritable("write", &path, e));
        let mut manifest = manifest.clone();
        // The staging folder's own name (`.staging-NAME-PID-RANDOM`, letters, digits and `-._`)
        // is replaced wherever the manifest says it — commands, reason, check details — so the
        // paths hold however the results folder above it was quoted.
        let staged = self.staging.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut n = 1;
        let dest = loop {
            let name = if n == 1 { self.name.clone() } else { format!("{}-{n}", self.name) };
            let dest = self.root.join(&name);
            manifest.run_id = name.clone();
            let m: Manifest = serde_json::from_str(&serde_json::to_string(&manifest)?.replace(&staged, &name))?;
            let json = serde_json::to_string_pretty(&m)?;
            write(self.staging.join("manifest.json"), json)?;
            write(self.staging.join("summary.md"), summary_markdown(&m, &self.staging))?;
            write(self.staging.join("junit.xml"), junit_xml(&m))?;
            // The journal is the staging folder's, not the finished run's.
            let _ = std::fs::remove_file(self.staging.join(crate::host::owner::JOURNAL));
            match rename_no_replace(&self.staging, &dest) {
                Ok(()) => break dest,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(unwritable(&format!("rename {} to", self.staging.display()), &dest, e)),
            }
        };
        self.finished = true;
        crate::host::owner::disown_staging(&self.staging);
        // `latest` is replaced in one rename, so two runs finishing together never see it missing
        // nor fail on each other's link.
        let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let latest = self.root.join("latest");
        let next = self.root.join(format!(".latest-{name}"));
        let _ = std::fs::remove_file(&next);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&name, &next).map_err(|e| unwritable("link", &next, e))?;
        std::fs::rename(&next, &latest).map_err(|e| unwritable("replace", &latest, e))?;
        Ok(dest)
    }

}

/// Most of a scenario's free-text `notes` copied into manifest.json and summary.md: a 60 MB note
/// was copied into both whole. The scenario file keeps the rest.
const NOTE_MAX_CHARS: usize = 2000;
const NOTES_MAX: usize = 50;

/// The scenario's notes as a run's results carry them: at most [`NOTES_MAX`] notes of at most
/// [`NOTE_MAX_CHARS`] characters, each cut one saying so.
pub(crate) fn capped_notes(notes: &[String]) -> Vec<String> {
    let mut out: Vec<String> = notes
        .iter()
        .take(NOTES_MAX)
        .map(|n| match n.char_indices().nth(NOTE_MAX_CHARS) {
            None => n.clone(),
            Some((cut, _)) => format!("{}… (cut: {} more bytes in the scenario file)", &n[..cut], n.len() - cut),
        })
        .collect();
    if notes.len() > NOTES_MAX {
        out.push(format!("… {} more notes in the scenario file", notes.len() - NOTES_MAX));
    }
    out
}

/// rename(2) that fails with AlreadyExists instead of replacing `to` (renameat2 RENAME_NOREPLACE).
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let from = std::ffi::CString::new(from.as_os_str().as_bytes())?;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// A per-process random number for staging names (std's hasher keys are random per process).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish() as u32
}

/// UTC timestamp for folder names: `20261122T083000Z`.
pub fn utc_stamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z"))
        .unwrap_or_else(|_| "unknown-time".into())
}

pub fn utc_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn escape_md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The measured window of each launch and when each collector recorded, in seconds from launch.
fn window_markdown(s: &mut String, windows: &[WindowReport]) {
    let secs = |t: Option<f64>| t.map_or_else(|| "–".to_string(), |t| format!("{t:.2}"));
    for (i, w) in windows.iter().enumerate() {
        let launch = if windows.len() > 1 { format!(" (launch {})", i + 1) } else { String::new() };
        let _ = writeln!(
            s,
            "## Measured window{launch}\n\nSeconds from the app's launch{}. Ready at {} s; samples judged from {} s to {} s \
             (start-up and warm-up are recorded, not judged).\n\n| collector | recording from | stopped at |\n|---|---|---|",
            if w.attached {
                " — here from attaching to the running app, whose window opens when its last collector recorded"
            } else if w.held_at_start {
                ", held at start until every collector recorded"
            } else {
                " (not held at start)"
            },
            secs(w.ready_s),
            secs(w.measured_from_s),
            secs(w.measured_to_s)
        );
        for (c, [from, to]) in &w.collectors {
            let _ = writeln!(s, "| {c} | {} | {} |", secs(*from), secs(*to));
        }
        s.push('\n');
    }
}

pub(crate) fn summary_markdown(m: &Manifest, dir: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} — {}\n", m.scenario, m.verdict.upper());
    if let Some(r) = &m.reason {
        let _ = writeln!(s, "**Reason:** {r}\n");
    }
    s.push_str(&quality::block(m));
    for f in &m.findings {
        let _ = writeln!(s, "- **Finding:** {f}");
    }
    for f in &m.swept_at_start {
        let _ = writeln!(s, "- **Removed at start:** {f}");
    }
    if !m.findings.is_empty() || !m.swept_at_start.is_empty() {
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "Workload `{}`, collectors {}, target `{}`{}, started {}.\n",
        m.workload.as_deref().unwrap_or("?"),
        m.collectors.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
        m.environment.target,
        m.environment.pod_shape.as_deref().map(|s| format!(" (pod shape `{s}`, its YAML in artifacts/pod.yaml)")).unwrap_or_default(),
        m.started_utc
    );
    if !m.checks.is_empty() {
        let _ = writeln!(s, "## Checks\n\n| check | collector | verdict | expected | measured |\n|---|---|---|---|---|");
        for c in &m.checks {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                escape_md(&c.name),
                c.collector.as_deref().unwrap_or(""),
                c.verdict.upper(),
                escape_md(&c.expected),
                escape_md(&c.measured)
            );
        }
        s.push('\n');
        for c in m.checks.iter().filter(|c| !c.details.is_empty()) {
            let _ = writeln!(s, "### {}\n\n```", c.name);
            for line in &c.details {
                let _ = writeln!(s, "{line}");
            }
            s.push_str("```\n\n");
        }
    }
    let viewers = viewer_list(dir, &m.viewer_files);
    if !viewers.is_empty() {
        let _ = writeln!(s, "## Open\n\n| file | how to open it |\n|---|---|");
        for v in &viewers {
            let _ = writeln!(s, "| [{}]({}) | {} |", escape_md(&v.path), v.path.replace(' ', "%20"), escape_md(v.how));
        }
        s.push('\n');
    }
    window_markdown(&mut s, &m.windows);
    if let Some(enabled) = m.metrics.get("attach.perf_map_enabled_by_tracelab") {
        let _ = writeln!(
            s,
            "Perf map: {}\n",
            if *enabled > 0.0 {
                format!(
                    "the app wrote none; tracelab switched it on over the diagnostics IPC (EnablePerfMap), its rundown named {} \
                     methods compiled before, and switched it off after (DisablePerfMap)",
                    m.metrics.get("attach.perf_map_rundown_methods").copied().unwrap_or(0.0)
                )
            } else {
                "the app's own (it runs with the perf map on)".to_string()
            }
        );
    }
    for t in &m.share_tables {
        let _ = writeln!(s, "## Shares by collector\n");
        s.push_str(&share_table_markdown(t));
        s.push('\n');
    }
    if !m.resolution.is_empty() {
        let _ = writeln!(s, "## Frame resolution (per DSO class)\n\n| collector | class | leaf frames | leaf named | all frames | all named |\n|---|---|---|---|---|---|");
        for (collector, rep) in &m.resolution {
            if let Some(classes) = rep.get("classes").and_then(|c| c.as_object()) {
                for (class, v) in classes {
                    let g = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
                    let pct = |n: f64, t: f64| if t > 0.0 { format!("{n} ({:.1} %)", n / t * 100.0) } else { "—".into() };
                    let _ = writeln!(
                        s,
                        "| {collector} | {class} | {} | {} | {} | {} |",
                        g("leaf_total"),
                        pct(g("leaf_named"), g("leaf_total")),
                        g("all_total"),
                        pct(g("all_named"), g("all_total"))
                    );
                }
            }
        }
        s.push('\n');
    }
    if !m.completeness.is_empty() {
        let _ = writeln!(s, "## Stack completeness\n");
        let _ = writeln!(s, "| collector | stacks | reached the thread's root | deepest (user frames) | stopped early in |\n|---|---|---|---|---|");
        for (collector, rep) in &m.completeness {
            let Ok(c) = serde_json::from_value::<stacks::Completeness>(rep.clone()) else {
                // Never raw JSON in a page people read: the figures stay in manifest.json.
                let _ = writeln!(s, "| `{collector}` | in manifest.json `completeness` | | | |");
                continue;
            };
            let mut stopped: Vec<(&String, &u64)> = c.stopped_in_dso.iter().collect();
            stopped.sort_by(|a, b| b.1.cmp(a.1));
            let stopped: Vec<String> = stopped.iter().take(3).map(|(dso, n)| format!("{dso} ×{n}")).collect();
            let _ = writeln!(
                s,
                "| `{collector}` | {} | {} ({:.1} %) | {} | {} |",
                c.stacks,
                c.reached_root,
                c.root_ratio() * 100.0,
                c.max_frames,
                if stopped.is_empty() { "—".to_string() } else { stopped.join(", ") }
            );
        }
        s.push('\n');
    }
    // Every figure is in manifest.json `metrics`; here they stay folded (70–207 rows of slugs
    // once pushed the environment and commands off the first screens).
    if !m.metrics.is_empty() {
        let _ = writeln!(
            s,
            "<details><summary>All {} metrics (also in manifest.json <code>metrics</code>)</summary>\n\n| metric | value |\n|---|---|",
            m.metrics.len()
        );
        for (k, v) in &m.metrics {
            let _ = writeln!(s, "| {} | {} |", escape_md(k), fmt_num(*v));
        }
        let _ = writeln!(s, "\n</details>");
    }
    let _ = writeln!(s, "\n## Environment\n");
    let e = &m.environment;
    let _ = writeln!(s, "- kernel {}, {}", e.kernel, e.distro);
    let _ = writeln!(s, "- perf: {}", e.perf.as_deref().unwrap_or("absent"));
    let _ = writeln!(s, "- LTTng: {} (UST {})", e.lttng.as_deref().unwrap_or("absent"), e.lttng_ust.join(", "));
    let _ = writeln!(s, "- .NET: {}", e.dotnet_runtimes.join("; "));
    let _ = writeln!(s, "- docker: {}", e.docker.as_deref().unwrap_or("absent"));
    let _ = writeln!(s, "- target: {} {} caps [{}]", e.target, e.image.as_deref().unwrap_or(""), e.target_capabilities.join(","));
    let _ = writeln!(s, "\n## Commands\n");
    for c in &m.commands {
        let _ = writeln!(s, "    {c}");
    }
    let _ = writeln!(s, "\n## Durations (s)\n");
    for (k, v) in &m.durations_s {
        let _ = writeln!(s, "- {k}: {v:.2}");
    }
    for n in &m.notes {
        let _ = writeln!(s, "\n> {n}");
    }
    s
}

/// A share table in markdown: one truth row per run, each followed by the rows it scores.
pub(crate) fn share_table_markdown(t: &ShareTable) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| collector | samples | {} | measures |", t.columns.iter().map(|c| format!("`{}`", escape_md(c))).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(s, "|---|---|{}---|", "---|".repeat(t.columns.len()));
    let groups = t.truth_groups();
    for (truth, rows) in &groups {
        if truth.iter().any(Option::is_some) {
            let _ = writeln!(s, "| **{}** | | {} | the app's own measurement |", truth_label(rows, groups.len() > 1), truth.iter().map(|v| v.map(|v| format!("{:.1} %", v * 100.0)).unwrap_or_default()).collect::<Vec<_>>().join(" | "));
        }
        for r in rows {
            let _ = writeln!(s, "| {} | {} | {} | {} |", r.collector, r.samples, share_cells(r).join(" | "), r.measures);
        }
    }
    s
}

/// A row's shares, with the error against its run's truth where it is scored.
pub(crate) fn share_cells(r: &ShareRow) -> Vec<String> {
    r.shares
        .iter()
        .zip(&r.error_pts)
        .map(|(v, e)| match e {
            Some(e) => format!("{:.1} % (error {e:.1} pts)", v * 100.0),
            None => format!("{:.1} %", v * 100.0),
        })
        .collect()
}

fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v:.4}") }
}

/// junit.xml of one run ([`junit`]: valid against the strict JUnit schema).
pub fn junit_xml(m: &Manifest) -> String {
    junit::document(&serde_json::to_value(m).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real manifest (a recorded soak run) to finish folders with.
    fn manifest(run_id: &str) -> Manifest {
        let dir = crate::project_root().join("harness/tests/fixtures/soak/manifests");
        let first = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "json")).unwrap();
        let mut m: Manifest = serde_json::from_str(&std::fs::read_to_string(first).unwrap()).unwrap();
        m.run_id = run_id.to_string();
        m
    }

    /// Two runs started in the same second (same scenario, target, kernel) get two folders:
    /// neither removes nor writes into the other's (seen: 3 of 5 such pairs broke each other).
    /// The name is taken at the end, so the run finishing second gets `-2`, whichever started first.
    #[test]
    fn runs_started_in_the_same_second_get_their_own_folders() {
        let root = tempfile::tempdir().unwrap();
        let name = "20261125T031509Z-cpu-bound-host-k6.18";
        let a = ResultsDir::create(root.path(), name).unwrap();
        std::fs::write(a.artifacts().join("mine"), "a").unwrap();
        let b = ResultsDir::create(root.path(), name).unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().join(crate::host::owner::JOURNAL).is_file(), "the staging folder names its owner");
        assert!(a.artifacts().join("mine").is_file(), "the second run touched the first's staging folder");
        let mut mb = manifest("?");
        mb.commands = vec![format!("perf record -o {}/artifacts/perf.data", b.path().display())];
        let db = b.finish(&mb).unwrap();
        let da = a.finish(&manifest("?")).unwrap();
        assert_eq!(db, root.path().join(name));
        assert_eq!(da, root.path().join(format!("{name}-2")));
        assert_eq!(std::fs::read_to_string(da.join("artifacts/mine")).unwrap(), "a");
        // The manifest names the folder the run got, and its commands point into it.
        let m: Manifest = serde_json::from_str(&std::fs::read_to_string(db.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(m.run_id, name);
        assert_eq!(m.commands, vec![format!("perf record -o {}/artifacts/perf.data", db.display())]);
        assert!(!db.join(crate::host::owner::JOURNAL).exists());
        assert_eq!(std::fs::read_link(root.path().join("latest")).unwrap(), Path::new(&format!("{name}-2")));
        let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 3, "two runs and latest: {left:?}");
    }

    /// Commands are quoted for a shell and name the finished folder, even under a results folder
    /// whose path needs quoting: pasted back, each argument is a path that exists.
    #[test]
    fn commands_can_be_pasted_and_name_the_finished_folder() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("it's my results");
        let run = ResultsDir::create(&root, "20261125T031509Z-x-host").unwrap();
        let data = run.artifacts().join("perf.data");
        std::fs::write(&data, "").unwrap();
        let mut m = manifest("?");
        m.commands = vec![crate::host::proc::quoted(["perf".to_string(), "record".into(), "-o".into(), data.display().to_string()])];
        m.reason = Some(format!("cannot read {}", data.display()));
        let done = run.finish(&m).unwrap();
        let m: Manifest = serde_json::from_str(&std::fs::read_to_string(done.join("manifest.json")).unwrap()).unwrap();
        let argv = shell_words::split(&m.commands[0]).unwrap();
        assert_eq!(argv[3], done.join("artifacts/perf.data").display().to_string(), "{}", m.commands[0]);
        assert!(Path::new(&argv[3]).is_file());
        assert_eq!(m.reason.as_deref(), Some(format!("cannot read {}", done.join("artifacts/perf.data").display()).as_str()));
        let summary = std::fs::read_to_string(done.join("summary.md")).unwrap();
        assert!(summary.contains(&format!("    {}", m.commands[0])) && !summary.contains(".staging-"), "{summary}");
    }

    #[test]
    fn a_results_folder_that_cannot_be_written_is_an_infrastructure_error_naming_the_path_and_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        // A write that fails as on a full disk (this test may run as root, which ignores modes):
        // manifest.json is a folder.
        let run = ResultsDir::create(root.path(), "20261125T031509Z-x-host").unwrap();
        let staging = run.path().to_path_buf();
        std::fs::create_dir(staging.join("manifest.json")).unwrap();
        let e = run.finish(&manifest("?")).unwrap_err();
        assert!(crate::host::errors::is_infrastructure(&e), "{e:#}");
        assert!(format!("{e:#}").contains(&format!("cannot write {}", staging.join("manifest.json").display())), "{e:#}");
        assert!(!staging.exists(), "the staging folder stayed");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "something was left in the results folder");
        // A results folder below a file cannot be made: the same error, naming it.
        let file = root.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let e = ResultsDir::create(&file.join("results"), "x").err().unwrap();
        assert!(crate::host::errors::is_infrastructure(&e) && format!("{e:#}").contains(&format!("cannot create {}", file.join("results").display())), "{e:#}");
    }

    /// summary.md as a person reads it: each viewer file with how to open it (an event-only
    /// run's .nettrace too), the metrics folded away, no raw JSON.
    #[test]
    fn summary_lists_viewer_files_and_folds_the_metrics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("artifacts")).unwrap();
        for f in ["flamegraph-perf-cpu.svg", "perf-cpu.speedscope.json", "perf-cpu.firefox.json.gz", "perf-cpu.pb.gz", "s.trace.zip", "artifacts/eventpipe.nettrace"] {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        let mut m = manifest("r");
        m.viewer_files = [("perf-cpu".to_string(), vec!["perf-cpu.speedscope.json".into(), "perf-cpu.firefox.json.gz".into(), "perf-cpu.pb.gz".into(), "s.trace.zip".into()])].into();
        m.completeness = [("perf-cpu".to_string(), serde_json::json!({"odd": [1, 2]}))].into();
        assert!(m.metrics.len() > 20, "the fixture has metrics to fold");
        let text = summary_markdown(&m, dir.path());
        let open = text.split("## Open").nth(1).unwrap_or_else(|| panic!("no Open section:\n{text}"));
        for (file, how) in [
            ("flamegraph-perf-cpu.svg", "browser"),
            ("perf-cpu.speedscope.json", "speedscope.app"),
            ("perf-cpu.firefox.json.gz", "cargo xtask open"),
            ("perf-cpu.pb.gz", "go tool pprof"),
            ("s.trace.zip", "PerfView"),
            ("artifacts/eventpipe.nettrace", "trace inspect"),
        ] {
            let row = open.lines().find(|l| l.starts_with(&format!("| [{file}]"))).unwrap_or_else(|| panic!("{file} not listed:\n{open}"));
            assert!(row.contains(how), "{row}");
        }
        assert!(text.contains(&format!("<details><summary>All {} metrics", m.metrics.len())) && !text.contains("## Metrics"), "{text}");
        assert!(!text.contains("{\"") && !text.contains("[1, 2]") && !text.contains("[1,2]"), "raw JSON in:\n{text}");
    }

    #[test]
    fn free_text_notes_are_capped_where_copied() {
        let long = "é".repeat(NOTE_MAX_CHARS + 10);
        let many: Vec<String> = std::iter::once(long).chain((0..NOTES_MAX + 5).map(|i| format!("n{i}"))).collect();
        let capped = capped_notes(&many);
        assert_eq!(capped.len(), NOTES_MAX + 1);
        assert!(capped[0].starts_with(&"é".repeat(NOTE_MAX_CHARS)) && capped[0].ends_with("(cut: 20 more bytes in the scenario file)"), "{}", &capped[0][NOTE_MAX_CHARS * 2..]);
        assert_eq!(capped[NOTES_MAX], "… 6 more notes in the scenario file");
        assert_eq!(capped_notes(&["short".to_string()]), vec!["short".to_string()]);
    }

    #[test]
    fn a_name_that_would_leave_the_results_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/../../b", "..", ".hidden", ""] {
            let e = ResultsDir::create(root.path(), bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(format!("{e:#}").contains("cannot name a results folder"), "{e:#}");
        }
    }
}
