//! Writing one run down: `results/<utc>-<scenario>-<env>/` with manifest.json (a contract: CI,
//! reports and other tools read it — shared/DESIGN.md §5), summary.md, junit.xml, artifacts/,
//! stacks/ and flame graphs. Everything is written into a staging folder and renamed at the end,
//! so a crashed run leaves nothing that looks complete; `results/latest` then points at it.

pub mod junit;
pub mod merge;
mod quality;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::assert::{Check, Verdict};
use crate::environment::Environment;

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
    pub fn truth_groups(&self) -> Vec<(Vec<Option<f64>>, Vec<&ShareRow>)> {
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
pub fn truth_label(rows: &[&ShareRow], several: bool) -> String {
    if several {
        format!("truth (run of {})", rows.iter().map(|r| r.collector.as_str()).collect::<Vec<_>>().join(", "))
    } else {
        "truth".into()
    }
}

/// One line per collector kind on what its samples mean.
pub fn collector_measures(kind: crate::collect::CollectorKind) -> &'static str {
    use crate::collect::CollectorKind;
    match kind {
        CollectorKind::PerfCpu => "on-CPU time: cpu-clock samples only threads that are running",
        CollectorKind::PerfOffcpu => "off-CPU time: sched_switch, weighted by time from switch-out to switch-in",
        CollectorKind::EventPipe | CollectorKind::DotnetTrace => {
            "thread time: SampleProfiler samples every managed thread, running or blocked"
        }
        CollectorKind::Lttng => "runtime events (no stacks)",
    }
}

/// A results folder being written.
pub struct ResultsDir {
    root: PathBuf,
    staging: PathBuf,
    name: String,
}

impl ResultsDir {
    /// Starts `root/<name>` as a hidden staging folder `root/.staging-<name>`. Two runs started
    /// in the same second would share that name: the staging folder is created exclusively, and a
    /// name already taken (staged or finished) gets the next free `-2`, `-3` … suffix, so a run
    /// never writes into, or removes, another run's folder. [`ResultsDir::name`] is the name
    /// taken.
    pub fn create(root: &Path, name: &str) -> Result<ResultsDir> {
        std::fs::create_dir_all(root).with_context(|| format!("cannot create {}", root.display()))?;
        let mut n = 1;
        let (name, staging) = loop {
            let candidate = if n == 1 { name.to_string() } else { format!("{name}-{n}") };
            let staging = root.join(format!(".staging-{candidate}"));
            if !root.join(&candidate).exists() {
                match std::fs::create_dir(&staging) {
                    Ok(()) => break (candidate, staging),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e).with_context(|| format!("cannot create {}", staging.display())),
                }
            }
            n += 1;
            if n > 1000 {
                bail!("no free results folder name for {name} in {}", root.display());
            }
        };
        for sub in ["artifacts", "stacks"] {
            std::fs::create_dir_all(staging.join(sub))
                .with_context(|| format!("cannot create {}", staging.join(sub).display()))?;
        }
        Ok(ResultsDir { root: root.to_path_buf(), staging, name })
    }

    pub fn path(&self) -> &Path {
        &self.staging
    }
    pub fn artifacts(&self) -> PathBuf {
        self.staging.join("artifacts")
    }
    pub fn stacks(&self) -> PathBuf {
        self.staging.join("stacks")
    }
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes manifest.json, summary.md and junit.xml, renames the folder into place and points
    /// `latest` at it. Returns the final path.
    pub fn finish(self, manifest: &Manifest) -> Result<PathBuf> {
        let json = serde_json::to_string_pretty(manifest)?;
        std::fs::write(self.staging.join("manifest.json"), json)?;
        std::fs::write(self.staging.join("summary.md"), summary_markdown(manifest, &self.staging))?;
        std::fs::write(self.staging.join("junit.xml"), junit_xml(manifest))?;
        // The name was free when the run started and no other run takes a name that is staged.
        let dest = self.root.join(&self.name);
        if dest.exists() {
            bail!("{} appeared while this run was staged in {}: left as it is", dest.display(), self.staging.display());
        }
        std::fs::rename(&self.staging, &dest)
            .with_context(|| format!("cannot rename {} to {}", self.staging.display(), dest.display()))?;
        // `latest` is replaced in one rename, so two runs finishing together never see it missing
        // nor fail on each other's link.
        let latest = self.root.join("latest");
        let next = self.root.join(format!(".latest-{}", self.name));
        let _ = std::fs::remove_file(&next);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&self.name, &next).with_context(|| format!("cannot link {}", next.display()))?;
        std::fs::rename(&next, &latest).with_context(|| format!("cannot replace {}", latest.display()))?;
        Ok(dest)
    }

    /// Removes the staging folder (a run that could not even be judged).
    pub fn abandon(self) {
        let _ = std::fs::remove_dir_all(&self.staging);
    }
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

pub fn summary_markdown(m: &Manifest, dir: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {} — {}\n", m.scenario, m.verdict.upper());
    if let Some(r) = &m.reason {
        let _ = writeln!(s, "**Reason:** {r}\n");
    }
    s.push_str(&quality::block(m));
    for f in &m.findings {
        let _ = writeln!(s, "- **Finding:** {f}");
    }
    if !m.findings.is_empty() {
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "Workload `{}`, collectors {}, target `{}`, started {}.\n",
        m.workload.as_deref().unwrap_or("?"),
        m.collectors.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", "),
        m.environment.target,
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
        for (collector, rep) in &m.completeness {
            let _ = writeln!(s, "- `{collector}`: {}", rep);
        }
        s.push('\n');
    }
    let _ = writeln!(s, "## Metrics\n\n| metric | value |\n|---|---|");
    for (k, v) in &m.metrics {
        let _ = writeln!(s, "| {k} | {} |", fmt_num(*v));
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
    let flames: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".svg")).collect())
        .unwrap_or_default();
    if !flames.is_empty() {
        let _ = writeln!(s, "\n## Flame graphs\n");
        for f in flames {
            let _ = writeln!(s, "- [{f}]({f})");
        }
    }
    for n in &m.notes {
        let _ = writeln!(s, "\n> {n}");
    }
    s
}

/// A share table in markdown: one truth row per run, each followed by the rows it scores.
pub fn share_table_markdown(t: &ShareTable) -> String {
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
pub fn share_cells(r: &ShareRow) -> Vec<String> {
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
    #[test]
    fn runs_started_in_the_same_second_get_their_own_folders() {
        let root = tempfile::tempdir().unwrap();
        let name = "20261125T031509Z-cpu-bound-host-k6.18";
        let a = ResultsDir::create(root.path(), name).unwrap();
        std::fs::write(a.artifacts().join("mine"), "a").unwrap();
        let b = ResultsDir::create(root.path(), name).unwrap();
        assert_eq!(b.name(), format!("{name}-2"));
        assert!(a.artifacts().join("mine").is_file(), "the second run touched the first's staging folder");
        let (ma, mb) = (manifest(a.name()), manifest(b.name()));
        let (da, db) = (a.finish(&ma).unwrap(), b.finish(&mb).unwrap());
        assert_ne!(da, db);
        assert_eq!(std::fs::read_to_string(da.join("artifacts/mine")).unwrap(), "a");
        // A finished name is not taken again either.
        let c = ResultsDir::create(root.path(), name).unwrap();
        assert_eq!(c.name(), format!("{name}-3"));
        c.abandon();
    }
}
