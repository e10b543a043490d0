//! One report over many runs: reads the `manifest.json` of every results folder given (a run
//! folder, or any folder holding run folders, as CI's downloaded artifacts do) and writes one HTML
//! page and one markdown file. Rows are scenario × collector, columns are environments (target,
//! image, kernel, .NET), each cell the verdict with its reason, a key metric and links to the
//! run's flame graphs. With a baseline it lists regressions: a cell that passed and no longer
//! does, and resolution ratios or rates that dropped beyond a threshold.
//!
//! Manifests are read as JSON values, not through [`super::Manifest`]: a report must still read
//! folders written by older or newer versions of tracelab.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::{ShareTable, junit};
use judge::Verdict;

/// One results folder.
#[derive(Clone, Debug)]
pub struct Run {
    pub dir: PathBuf,
    pub manifest: Value,
    pub scenario: String,
    pub verdict: String,
    pub reason: Option<String>,
    pub environment: String,
    pub collectors: Vec<String>,
    pub started: String,
    pub flamegraphs: Vec<PathBuf>,
}

impl Run {
    pub(crate) fn load(dir: &Path) -> Result<Run> {
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let manifest: Value = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{} is not valid JSON (line {}, column {}): {e}", path.display(), e.line(), e.column())
        })?;
        let scenario = manifest["scenario"]
            .as_str()
            .with_context(|| format!("{} has no `scenario`", path.display()))?
            .to_string();
        let verdict = manifest["verdict"]
            .as_str()
            .with_context(|| format!("{} has no `verdict`", path.display()))?
            .to_string();
        let mut collectors: Vec<String> =
            manifest["collectors"].as_array().map(|a| a.iter().filter_map(|c| c.as_str().map(String::from)).collect()).unwrap_or_default();
        if collectors.is_empty() {
            let from_checks: BTreeSet<String> = manifest["checks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["collector"].as_str().map(String::from))
                .collect();
            collectors = from_checks.into_iter().collect();
        }
        if collectors.is_empty() {
            collectors.push("(run)".into());
        }
        let mut flamegraphs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("flamegraph") && n.ends_with(".svg"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        flamegraphs.sort();
        Ok(Run {
            dir: dir.to_path_buf(),
            environment: environment_label(&manifest),
            reason: manifest["reason"].as_str().map(String::from),
            started: manifest["started_utc"].as_str().unwrap_or("").to_string(),
            scenario,
            verdict,
            collectors,
            flamegraphs,
            manifest,
        })
    }

    /// The verdict, reason and key metric of one collector in this run ([`SCENARIO_WIDE`]: the
    /// checks that belong to no one collector). A collector's cell is judged by its own checks
    /// only: another collector's failure or metric never shows in it. A run that ended before
    /// its checks gives every cell its verdict and reason (none of them was measured).
    pub(super) fn cell(&self, collector: &str) -> Cell {
        let checks: Vec<&Value> = self.manifest["checks"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
        let mine: Vec<&Value> = checks.iter().copied().filter(|c| check_owner(c) == collector).collect();
        let (verdict, reason) = if checks.is_empty() {
            (self.verdict.clone(), self.reason.clone())
        } else if mine.is_empty() {
            (UNCHECKED.to_string(), None)
        } else {
            let verdicts: Vec<Verdict> = mine.iter().map(|c| verdict_of(c["verdict"].as_str().unwrap_or(""))).collect();
            let verdict = Verdict::combine(verdicts);
            let reason = mine.iter().find(|c| verdict_of(c["verdict"].as_str().unwrap_or("")) == verdict && verdict != Verdict::Pass);
            (verdict.as_str().to_string(), reason.map(|c| check_text(c)))
        };
        let flamegraphs: Vec<PathBuf> = {
            let named: Vec<PathBuf> = self
                .flamegraphs
                .iter()
                .filter(|p| p.file_name().unwrap().to_string_lossy().contains(collector))
                .cloned()
                .collect();
            if named.is_empty() && self.collectors.len() == 1 { self.flamegraphs.clone() } else { named }
        };
        let metric = if collector == SCENARIO_WIDE { None } else { key_metric(&self.manifest, collector, self.collectors.len() == 1, &mine) };
        Cell { verdict, reason, metric, flamegraphs, run_dir: self.dir.clone(), runs: 1 }
    }
}

/// The row of checks that belong to no one collector (cross-collector agreement, run-wide
/// figures): shown once per scenario, apart from the collectors' rows.
pub(crate) const SCENARIO_WIDE: &str = "(scenario-wide)";
/// A collector the scenario ran but no check judged.
const UNCHECKED: &str = "unchecked";

/// The collector a check belongs to, or [`SCENARIO_WIDE`].
pub(super) fn check_owner(c: &Value) -> &str {
    c["collector"].as_str().filter(|s| !s.is_empty() && !s.contains(',')).unwrap_or(SCENARIO_WIDE)
}

/// A verdict as manifest.json spells it; anything unknown (a newer version's word) counts as an
/// error so that it is looked at.
fn verdict_of(s: &str) -> Verdict {
    serde_json::from_value(Value::String(s.to_string())).unwrap_or(Verdict::Error)
}

fn check_text(c: &Value) -> String {
    format!(
        "{}: expected {}, measured {}",
        c["name"].as_str().unwrap_or("check"),
        c["expected"].as_str().unwrap_or("?"),
        c["measured"].as_str().unwrap_or("?")
    )
}

/// The figure that says most about a cell: the share error of one of its checks, else its own
/// resolution ratio (`<collector>.resolved_ratio_*`; the unprefixed run-wide ratio only when the
/// run had this one collector), else what its first check measured.
fn key_metric(m: &Value, collector: &str, only_collector: bool, checks: &[&Value]) -> Option<String> {
    for c in checks {
        if let Some(e) = c["values"]["error_pts"].as_f64() {
            return Some(format!("share error {e:.1} pts"));
        }
    }
    let metrics = &m["metrics"];
    let mut keys = vec![format!("{collector}.resolved_ratio_managed"), format!("{collector}.resolved_ratio_jit")];
    if only_collector {
        keys.extend(["resolved_ratio_managed".to_string(), "resolved_ratio_jit".to_string()]);
    }
    for key in keys {
        if let Some(v) = metrics[&key].as_f64() {
            return Some(format!("JIT resolved {:.1} %", v * 100.0));
        }
    }
    checks.first().and_then(|c| c["measured"].as_str()).map(|s| s.chars().take(60).collect())
}

/// A column name for the environment a run saw: target (and image or guest kernel), kernel,
/// .NET runtime.
pub(crate) fn environment_label(m: &Value) -> String {
    environment_label_with(m, true)
}

/// The .NET runtime a run recorded (newest Microsoft.NETCore.App), if any.
fn dotnet_version(m: &Value) -> Option<String> {
    m["environment"]["dotnet_runtimes"]
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str())
        .filter(|s| s.contains("NETCore.App") || !s.contains(' '))
        .map(|s| s.split_whitespace().last().unwrap_or(s).to_string())
        .max()
}

fn environment_label_with(m: &Value, with_dotnet: bool) -> String {
    let env = &m["environment"];
    let target = env["target"].as_str().unwrap_or("?");
    let kernel = env["kernel"].as_str().map(short_kernel).unwrap_or_default();
    let dotnet = if with_dotnet { dotnet_version(m).unwrap_or_default() } else { String::new() };
    let mut label = match (target, env["image"].as_str(), m["vm"]["kernel"].as_str()) {
        (_, _, Some(k)) => format!("qemu {k}"),
        (t, Some(img), _) => format!("{t} {img} · k{kernel}"),
        (t, None, _) => format!("{t} · k{kernel}"),
    };
    let caps: Vec<&str> =
        env["target_capabilities"].as_array().map(|a| a.iter().filter_map(|v| v.as_str()).collect()).unwrap_or_default();
    if !caps.is_empty() && target != "host" {
        let _ = write!(label, " · +{}", caps.join(","));
    }
    if !dotnet.is_empty() {
        let _ = write!(label, " · .NET {dotnet}");
    }
    label
}

fn short_kernel(release: &str) -> String {
    let k = release.split('-').next().unwrap_or(release);
    k.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// One cell of the table.
#[derive(Clone, Debug)]
pub struct Cell {
    pub verdict: String,
    pub reason: Option<String>,
    pub metric: Option<String>,
    pub flamegraphs: Vec<PathBuf>,
    pub run_dir: PathBuf,
    /// Runs that fell into this cell (the newest is shown).
    pub runs: usize,
}

/// A drop against the baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Regression {
    pub scenario: String,
    pub collector: String,
    pub environment: String,
    pub what: String,
    pub before: String,
    pub after: String,
}

/// Thresholds for regressions.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// A resolution ratio (0..1) dropping by more than this is a regression.
    pub ratio_drop: f64,
    /// A rate dropping by more than this fraction of its baseline is a regression.
    pub rate_drop: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { ratio_drop: 0.05, rate_drop: 0.2 }
    }
}

/// The merged table.
#[derive(Clone, Debug, Default)]
pub struct MergedReport {
    pub columns: Vec<String>,
    pub rows: Vec<(String, String)>,
    pub cells: Cells,
    pub regressions: Vec<Regression>,
    pub inputs: Vec<PathBuf>,
    pub runs: usize,
    /// A baseline was given (so "no regressions" is a finding, not a default).
    pub baseline: Option<Vec<PathBuf>>,
    /// .NET runtimes the runs recorded (named in columns only when more than one).
    pub runtimes: Vec<String>,
    /// Share tables of the newest run per (scenario, environment), each row beside the truth of
    /// the run its collector observed.
    pub shares: Vec<Shares>,
    /// One `<testsuite>` per column and one testcase per cell, under one `<testsuites>`
    /// (junit.xml beside the report): its counts are the report's.
    pub junit: String,
    /// Every run, oldest first, with its column label (the run and history pages).
    pub run_list: Vec<Run>,
}

/// The share tables of one run, for the report.
#[derive(Clone, Debug)]
pub struct Shares {
    pub scenario: String,
    pub environment: String,
    pub run_dir: PathBuf,
    pub tables: Vec<ShareTable>,
}

/// Share tables of the newest run per (scenario, environment); runs are sorted oldest first.
fn shares(runs: &[Run]) -> Vec<Shares> {
    let mut newest: BTreeMap<(String, String), Shares> = BTreeMap::new();
    for run in relabel(runs) {
        let tables: Vec<ShareTable> = serde_json::from_value(run.manifest["share_tables"].clone()).unwrap_or_default();
        if tables.is_empty() {
            continue;
        }
        newest.insert(
            (run.scenario.clone(), run.environment.clone()),
            Shares { scenario: run.scenario, environment: run.environment, run_dir: run.dir, tables },
        );
    }
    newest.into_values().collect()
}

/// Every results folder (one holding manifest.json) under `inputs`, at most 4 levels down.
/// Staging folders (`.staging-*`) and the `latest` link are skipped.
pub(crate) fn find_runs(inputs: &[PathBuf]) -> Result<Vec<Run>> {
    let mut runs = Vec::new();
    let mut seen = BTreeSet::new();
    for input in inputs {
        if !input.is_dir() {
            bail!("{} is not a folder of results", input.display());
        }
        let mut stack = vec![(input.clone(), 0)];
        while let Some((dir, depth)) = stack.pop() {
            // A report written here before (`results/report`, the default): its run pages keep
            // copies of each run's manifest, which are not runs of their own.
            if dir.join("history.html").is_file() && dir.join("runs").is_dir() {
                continue;
            }
            if dir.join("manifest.json").is_file() {
                let canon = dir.canonicalize().unwrap_or(dir.clone());
                if seen.insert(canon) {
                    runs.push(Run::load(&dir)?);
                }
                continue;
            }
            if depth >= 4 {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                // `latest*` are links to run folders found anyway.
                if name.starts_with('.') || name.starts_with("latest") {
                    continue;
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    runs.sort_by(|a, b| (&a.started, &a.dir).cmp(&(&b.started, &b.dir)));
    Ok(runs)
}

/// Column order: host, container, sidecar, qemu guests, then anything else; by name within.
fn column_rank(label: &str) -> (u8, String) {
    let rank = ["host", "container", "sidecar", "qemu"].iter().position(|t| label.starts_with(t)).unwrap_or(9) as u8;
    (rank, label.to_string())
}

/// Runs with their column labels; the .NET runtime is part of the label only when the runs
/// saw more than one (otherwise it would only split columns between runs that recorded it and
/// runs that failed before they could).
fn relabel(runs: &[Run]) -> Vec<Run> {
    let versions: BTreeSet<String> = runs.iter().filter_map(|r| dotnet_version(&r.manifest)).collect();
    let with_dotnet = versions.len() > 1;
    runs.iter()
        .cloned()
        .map(|mut r| {
            r.environment = environment_label_with(&r.manifest, with_dotnet);
            r
        })
        .collect()
}

/// The .NET runtimes the runs recorded.
fn runtimes(runs: &[Run]) -> Vec<String> {
    let v: BTreeSet<String> = runs.iter().filter_map(|r| dotnet_version(&r.manifest)).collect();
    v.into_iter().collect()
}

/// (scenario, collector, environment) → cell.
type Cells = BTreeMap<(String, String, String), Cell>;

fn table(runs: &[Run]) -> (Vec<String>, Vec<(String, String)>, Cells) {
    let runs = &relabel(runs)[..];
    let mut columns = BTreeSet::new();
    let mut rows = BTreeSet::new();
    let mut cells: BTreeMap<(String, String, String), Cell> = BTreeMap::new();
    // Runs are sorted oldest first, so a later run of the same cell replaces an earlier one.
    for run in runs {
        columns.insert(run.environment.clone());
        let wide = run.manifest["checks"].as_array().into_iter().flatten().any(|c| check_owner(c) == SCENARIO_WIDE);
        for c in run.collectors.iter().map(String::as_str).chain(wide.then_some(SCENARIO_WIDE)) {
            let c = &c.to_string();
            rows.insert((run.scenario.clone(), c.clone()));
            let key = (run.scenario.clone(), c.clone(), run.environment.clone());
            let mut cell = run.cell(c);
            if let Some(old) = cells.get(&key) {
                cell.runs = old.runs + 1;
            }
            cells.insert(key, cell);
        }
    }
    let mut columns: Vec<String> = columns.into_iter().collect();
    columns.sort_by_key(|c| column_rank(c));
    let mut rows: Vec<(String, String)> = rows.into_iter().collect();
    // A scenario's collectors first, its scenario-wide checks after them.
    rows.sort_by(|a, b| (&a.0, a.1 == SCENARIO_WIDE, &a.1).cmp(&(&b.0, b.1 == SCENARIO_WIDE, &b.1)));
    (columns, rows, cells)
}

/// Builds the merged table from `inputs`, with regressions against `baseline` when given.
pub fn merge(inputs: &[PathBuf], baseline: Option<&[PathBuf]>, thresholds: Thresholds) -> Result<MergedReport> {
    let runs = find_runs(inputs)?;
    if runs.is_empty() {
        bail!(
            "no results folders (with manifest.json) under {}: run a scenario first (`cargo xtask scenario NAME`)",
            inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    let (columns, rows, cells) = table(&runs);
    let mut report = MergedReport {
        columns,
        rows,
        cells,
        inputs: inputs.to_vec(),
        runs: runs.len(),
        regressions: Vec::new(),
        baseline: baseline.map(<[PathBuf]>::to_vec),
        runtimes: runtimes(&runs),
        shares: shares(&runs),
        junit: String::new(),
        run_list: relabel(&runs),
    };
    report.junit = junit::merged(&report.junit_suites());
    if let Some(base) = baseline {
        let base_runs = find_runs(base)?;
        if base_runs.is_empty() {
            bail!("the baseline {} holds no results folders", base.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
        }
        report.regressions = regressions(&base_runs, &runs, thresholds);
    }
    Ok(report)
}

fn is_ratio(name: &str) -> bool {
    name.contains("resolved_ratio") || name.ends_with("_ratio")
}
fn is_rate(name: &str) -> bool {
    name.contains("rate") || name.ends_with("per_s") || name.ends_with("_per_sec")
}

/// How far above noise a ratio's drop must be to count: a one-sided z of 2.58 (99 %) on the
/// difference of two proportions, each over its own number of frames or samples.
const RATIO_DROP_Z: f64 = 2.58;

/// How many frames or samples a ratio metric of `run` was measured over, where the manifest says:
/// a check's `samples`/`frames` beside its `ratio`/`share`, or the resolution table's leaf or
/// all-frame count for `[<collector>.]resolved_ratio[_all_frames]_<class>` (unprefixed figures
/// are the first collector's).
fn ratio_count(run: &Value, name: &str) -> Option<f64> {
    let metrics = &run["metrics"];
    if let Some(stem) = name.strip_suffix(".ratio").or_else(|| name.strip_suffix(".share")) {
        return ["samples", "frames"].iter().find_map(|k| metrics[format!("{stem}.{k}")].as_f64());
    }
    let (collector, metric) = match name.split_once('.') {
        Some((c, m)) => (c.to_string(), m),
        None => (run["collectors"].as_array()?.first()?.as_str()?.to_string(), name),
    };
    let (all, class) = match metric.strip_prefix("resolved_ratio_all_frames_") {
        Some(class) => (true, class),
        None => (false, metric.strip_prefix("resolved_ratio_")?),
    };
    // manifest.json's `resolution.<collector>.classes.<class>` (engine::resolution_json).
    let classes = run["resolution"][&collector]["classes"].as_object()?;
    let key = if all { "all_total" } else { "leaf_total" };
    let wanted = |c: &str| match class {
        "managed" => c == "jit" || c == "r2r",
        "all" => true,
        one => c == one,
    };
    let counts: Vec<f64> = classes.iter().filter(|(c, _)| wanted(c)).filter_map(|(_, v)| v[key].as_f64()).collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// Whether a ratio's drop from `b` (over `nb`) to `a` (over `na`) is beyond sampling noise.
fn beyond_noise(b: f64, a: f64, nb: Option<f64>, na: Option<f64>) -> bool {
    let (Some(nb), Some(na)) = (nb.filter(|n| *n > 0.0), na.filter(|n| *n > 0.0)) else { return true };
    let se = (b * (1.0 - b) / nb + a * (1.0 - a) / na).sqrt();
    se == 0.0 || (b - a) / se >= RATIO_DROP_Z
}

/// Compares the newest run of each (scenario, environment) with the baseline's. Each change is
/// listed once: collectors that lost their verdict the same way (a run that ended before its
/// checks gives every collector its verdict) share one entry, a run-wide figure that only copies
/// a collector's own is not listed again, and metric drops of a collector whose verdict changed
/// join that entry. Ratio drops count only beyond [`Thresholds::ratio_drop`] and beyond sampling
/// noise for the frames they were measured over.
pub(crate) fn regressions(baseline: &[Run], current: &[Run], t: Thresholds) -> Vec<Regression> {
    let (_, _, base_cells) = table(baseline);
    let (_, _, cur_cells) = table(current);
    let mut out: Vec<Regression> = Vec::new();
    for (key, before) in &base_cells {
        let Some(after) = cur_cells.get(key) else { continue };
        if before.verdict == "pass" && after.verdict != "pass" {
            let after_text = format!("{}{}", after.verdict, after.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default());
            match out.iter_mut().find(|r| r.scenario == key.0 && r.environment == key.2 && r.after == after_text) {
                Some(same) => {
                    same.collector.push_str(", ");
                    same.collector.push_str(&key.1);
                }
                None => out.push(Regression {
                    scenario: key.0.clone(),
                    collector: key.1.clone(),
                    environment: key.2.clone(),
                    what: format!("verdict pass → {}", after.verdict),
                    before: "pass".into(),
                    after: after_text,
                }),
            }
        }
    }
    let newest = |runs: &[Run]| -> BTreeMap<(String, String), Value> {
        relabel(runs).into_iter().map(|r| ((r.scenario.clone(), r.environment.clone()), r.manifest)).collect()
    };
    let base_runs = newest(baseline);
    let cur_runs = newest(current);
    for (key, base) in &base_runs {
        let Some(cur) = cur_runs.get(key) else { continue };
        let (Some(before), Some(after)) = (base["metrics"].as_object(), cur["metrics"].as_object()) else { continue };
        for (name, b) in before {
            let (Some(b), Some(a)) = (b.as_f64(), after.get(name).and_then(|v| v.as_f64())) else { continue };
            // A run-wide figure that equals a collector's own, before and after, is that one.
            let copy = !name.contains('.')
                && before.iter().any(|(k, v)| {
                    k.ends_with(&format!(".{name}")) && v.as_f64() == Some(b) && after.get(k).and_then(|v| v.as_f64()) == Some(a)
                });
            if copy {
                continue;
            }
            let dropped = if is_ratio(name) {
                b - a > t.ratio_drop && beyond_noise(b, a, ratio_count(base, name), ratio_count(cur, name))
            } else if is_rate(name) {
                b > 0.0 && (b - a) / b > t.rate_drop
            } else {
                false
            };
            if !dropped {
                continue;
            }
            let collector = name.split_once('.').map(|(c, _)| c.to_string()).unwrap_or_default();
            let n = |run: &Value| ratio_count(run, name).map(|n| format!(" over {n:.0}")).unwrap_or_default();
            let (before_text, after_text) = (format!("{b:.4}{}", n(base)), format!("{a:.4}{}", n(cur)));
            let verdict_entry = out.iter_mut().find(|r| {
                r.scenario == key.0 && r.environment == key.1 && r.what.starts_with("verdict") && r.collector.split(", ").any(|c| c == collector)
            });
            match verdict_entry {
                Some(r) => {
                    let _ = write!(r.what, "; {name} {before_text} → {after_text}");
                }
                None => out.push(Regression {
                    scenario: key.0.clone(),
                    collector,
                    environment: key.1.clone(),
                    what: name.clone(),
                    before: before_text,
                    after: after_text,
                }),
            }
        }
    }
    out
}

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A share table as HTML: each collector's shares of the compared methods beside its run's truth,
/// and what the collector measures (on-CPU, off-CPU, thread time).
pub(super) fn share_table_html(t: &ShareTable, scenario: &str) -> String {
    let mut h = String::new();
    let groups = t.truth_groups();
    let _ = write!(h, "<table class=\"shares\" data-scenario=\"{}\"><thead><tr><th>collector</th><th>samples</th>", esc(scenario));
    for c in &t.columns {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("<th>measures</th></tr></thead><tbody>\n");
    for (truth, rows) in &groups {
        if truth.iter().any(Option::is_some) {
            let _ = write!(h, "<tr class=\"truth\"><th>{}</th><td></td>", esc(&super::truth_label(rows, groups.len() > 1)));
            for v in truth {
                let _ = write!(h, "<td>{}</td>", v.map(|v| format!("{:.1} %", v * 100.0)).unwrap_or_default());
            }
            h.push_str("<td>the app's own measurement</td></tr>\n");
        }
        for r in rows {
            let _ = write!(h, "<tr data-collector=\"{}\"><td>{}</td><td>{}</td>", esc(&r.collector), esc(&r.collector), r.samples);
            for c in super::share_cells(r) {
                let _ = write!(h, "<td>{}</td>", esc(&c));
            }
            let _ = writeln!(h, "<td>{}</td></tr>", esc(&r.measures));
        }
    }
    h.push_str("</tbody></table>\n");
    h
}

/// Flame graph file names in the report folder (copied there so the report stands alone).
fn flame_name(cell: &Cell, svg: &Path) -> String {
    format!(
        "{}--{}",
        cell.run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        svg.file_name().unwrap().to_string_lossy()
    )
}

impl MergedReport {
    /// The cells as JUnit suites: per (scenario, environment), the newest run's properties and
    /// one case per collector row (the scenario-wide row too), with the cell's verdict and its
    /// run's checks for that row.
    fn junit_suites(&self) -> Vec<junit::Suite<'_>> {
        let mut columns: BTreeMap<(&str, &str), Vec<(&str, &Cell)>> = BTreeMap::new();
        for (s, col) in &self.rows {
            for env in &self.columns {
                if let Some(cell) = self.cells.get(&(s.clone(), col.clone(), env.clone())) {
                    columns.entry((s.as_str(), env.as_str())).or_default().push((col.as_str(), cell));
                }
            }
        }
        let run_of = |dir: &Path| self.run_list.iter().find(|r| r.dir == dir);
        let mut suites = Vec::new();
        for (_, cells) in columns {
            // The newest run among the column's cells stands for the suite.
            let Some(newest) = cells.iter().filter_map(|(_, c)| run_of(&c.run_dir)).max_by(|a, b| (&a.started, &a.dir).cmp(&(&b.started, &b.dir)))
            else {
                continue;
            };
            let cases = cells
                .iter()
                .map(|(collector, cell)| {
                    let checks: Vec<&Value> = run_of(&cell.run_dir)
                        .and_then(|r| r.manifest["checks"].as_array())
                        .into_iter()
                        .flatten()
                        .filter(|c| check_owner(c) == *collector)
                        .collect();
                    let mut body = String::new();
                    for c in &checks {
                        let _ = writeln!(body, "{}: {}", c["name"].as_str().unwrap_or("check"), c["verdict"].as_str().unwrap_or("?").to_uppercase());
                        body.push_str(&junit::check_body(c));
                    }
                    if cell.runs > 1 {
                        let _ = writeln!(body, "the newest of {} runs of this cell", cell.runs);
                    }
                    let message = match (&cell.reason, cell.verdict.as_str()) {
                        (Some(r), _) => r.clone(),
                        (None, UNCHECKED) => format!("no check judged `{collector}`"),
                        (None, _) => checks.iter().map(|c| junit::check_message(c)).collect::<Vec<_>>().join("; "),
                    };
                    if body.is_empty() {
                        body = message.clone();
                    }
                    let name = if *collector == SCENARIO_WIDE { "scenario-wide".to_string() } else { collector.to_string() };
                    junit::Case { name, verdict: cell.verdict.clone(), message, body }
                })
                .collect();
            suites.push(junit::Suite { manifest: &newest.manifest, cases });
        }
        suites
    }

    fn counts(&self) -> BTreeMap<&str, usize> {
        let mut c = BTreeMap::new();
        for cell in self.cells.values() {
            *c.entry(cell.verdict.as_str()).or_default() += 1;
        }
        c
    }

    fn counts_line(&self) -> String {
        let c = self.counts();
        let mut line = format!(
            "{} runs{}, {} cells: {} pass, {} fail",
            self.runs,
            if self.runtimes.is_empty() { String::new() } else { format!(" (.NET {})", self.runtimes.join(", ")) },
            self.cells.len(),
            c.get("pass").unwrap_or(&0),
            c.get("fail").unwrap_or(&0),
        );
        for v in ["inconclusive", "error", "skip", UNCHECKED] {
            if let Some(n) = c.get(v) {
                let _ = write!(line, ", {n} {v}");
            }
        }
        line
    }

    pub(crate) fn html(&self) -> String {
        let mut h = String::new();
        h.push_str(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tracelab matrix report</title>\n<style>\n\
             body{font-family:'DejaVu Sans',sans-serif;margin:1.5em;color:#222}\n\
             table{border-collapse:collapse;font-size:13px}\n\
             th,td{border:1px solid #bbb;padding:6px 8px;vertical-align:top;text-align:left}\n\
             th{background:#eee;position:sticky;top:0}\n\
             td.pass{background:#d7f5d7}td.fail{background:#f9d2d2}td.skip{background:#f3ecc8}td.inconclusive{background:#e3ddf5}td.error{background:#f5c38f}td.none,td.unchecked{background:#f7f7f7;color:#999}tr.wide td{border-top:2px solid #888;font-style:italic}\n\
             .v{font-weight:bold}.why{font-size:11px;color:#444;max-width:28em;overflow-wrap:anywhere}.m{font-size:11px;color:#135}\n\
             </style></head><body>\n<h1>tracelab matrix report</h1>\n",
        );
        h.push_str("<nav><a href=\"history.html\">history</a></nav>\n");
        let _ = writeln!(h, "<p id=\"counts\">{}</p>", esc(&self.counts_line()));
        let pages = super::pages::page_names(&self.run_list);
        h.push_str("<table id=\"matrix\">\n<thead><tr><th>scenario</th><th>collector</th>");
        for c in &self.columns {
            let _ = write!(h, "<th>{}</th>", esc(c));
        }
        h.push_str("</tr></thead>\n<tbody>\n");
        for (s, col) in &self.rows {
            let wide = if col == SCENARIO_WIDE { " class=\"wide\"" } else { "" };
            let _ = write!(h, "<tr{wide}><td>{}</td><td>{}</td>", esc(s), esc(col));
            for env in &self.columns {
                match self.cells.get(&(s.clone(), col.clone(), env.clone())) {
                    None => h.push_str("<td class=\"none\">—</td>"),
                    Some(cell) => {
                        let _ = write!(
                            h,
                            "<td class=\"{}\" data-scenario=\"{}\" data-collector=\"{}\" data-environment=\"{}\"><span class=\"v\">{}</span>",
                            esc(&cell.verdict),
                            esc(s),
                            esc(col),
                            esc(env),
                            esc(&cell.verdict.to_uppercase())
                        );
                        if let Some(m) = &cell.metric {
                            let _ = write!(h, "<div class=\"m\">{}</div>", esc(m));
                        }
                        if let Some(r) = &cell.reason {
                            let _ = write!(h, "<div class=\"why\">{}</div>", esc(&truncate(r, 300)));
                        }
                        if let Some(page) = pages.get(&cell.run_dir) {
                            let _ = write!(h, "<div><a class=\"run\" href=\"runs/{}\">run page</a></div>", esc(page));
                        }
                        for svg in &cell.flamegraphs {
                            let name = flame_name(cell, svg);
                            let what = if name.ends_with(".leaves.svg") { "flame graph by leaf" } else { "flame graph" };
                            let _ = write!(h, "<div><a href=\"flamegraphs/{}\">{what}</a></div>", esc(&name));
                        }
                        h.push_str("</td>");
                    }
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</tbody></table>\n");
        for sh in &self.shares {
            let _ = writeln!(h, "<h2>Shares by collector: {} · {}</h2>", esc(&sh.scenario), esc(&sh.environment));
            for t in &sh.tables {
                h.push_str(&share_table_html(t, &sh.scenario));
            }
        }
        if self.baseline.is_some() && self.regressions.is_empty() {
            h.push_str("<h2>Regressions against the baseline</h2>\n<p id=\"regressions\">none</p>\n");
        }
        if !self.regressions.is_empty() {
            h.push_str("<h2>Regressions against the baseline</h2>\n<table id=\"regressions\"><thead><tr><th>scenario</th><th>collector</th><th>environment</th><th>what</th><th>before</th><th>after</th></tr></thead><tbody>\n");
            for r in &self.regressions {
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&r.scenario),
                    esc(&r.collector),
                    esc(&r.environment),
                    esc(&r.what),
                    esc(&r.before),
                    esc(&truncate(&r.after, 200))
                );
            }
            h.push_str("</tbody></table>\n");
        }
        h.push_str("</body></html>\n");
        h
    }

    pub fn markdown(&self) -> String {
        let mut m = String::from("# tracelab matrix report\n\n");
        let _ = writeln!(m, "{}\n", self.counts_line());
        let _ = writeln!(m, "| scenario | collector | {} |", self.columns.iter().map(|c| md_cell(c)).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(m, "|---|---|{}", "---|".repeat(self.columns.len()));
        for (s, col) in &self.rows {
            let _ = write!(m, "| {} | {} |", md_cell(s), md_cell(col));
            for env in &self.columns {
                match self.cells.get(&(s.clone(), col.clone(), env.clone())) {
                    None => m.push_str(" — |"),
                    Some(cell) => {
                        let mut text = cell.verdict.to_uppercase();
                        if let Some(x) = &cell.metric {
                            let _ = write!(text, " · {x}");
                        }
                        if let Some(r) = &cell.reason {
                            let _ = write!(text, " · {}", truncate(r, 120));
                        }
                        for svg in &cell.flamegraphs {
                            let _ = write!(text, " [flame graph](flamegraphs/{})", flame_name(cell, svg));
                        }
                        let _ = write!(m, " {} |", md_cell(&text));
                    }
                }
            }
            m.push('\n');
        }
        for sh in &self.shares {
            let _ = writeln!(m, "\n## Shares by collector: {} · {}\n", sh.scenario, sh.environment);
            for t in &sh.tables {
                m.push_str(&super::share_table_markdown(t));
            }
        }
        if self.baseline.is_some() && self.regressions.is_empty() {
            m.push_str("\n## Regressions against the baseline\n\nnone\n");
        }
        if !self.regressions.is_empty() {
            m.push_str("\n## Regressions against the baseline\n\n| scenario | collector | environment | what | before | after |\n|---|---|---|---|---|---|\n");
            for r in &self.regressions {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {} |",
                    md_cell(&r.scenario),
                    md_cell(&r.collector),
                    md_cell(&r.environment),
                    md_cell(&r.what),
                    md_cell(&r.before),
                    md_cell(&truncate(&r.after, 120))
                );
            }
        }
        m
    }

    /// Writes `index.html`, `report.md`, `junit.xml` (every run's testsuite) and the linked flame
    /// graphs into `out`.
    pub fn write(&self, out: &Path) -> Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(out.join("flamegraphs")).with_context(|| format!("cannot create {}", out.display()))?;
        for cell in self.cells.values() {
            for svg in &cell.flamegraphs {
                let dest = out.join("flamegraphs").join(flame_name(cell, svg));
                std::fs::copy(svg, &dest).with_context(|| format!("cannot copy {}", svg.display()))?;
            }
        }
        let html = out.join("index.html");
        let md = out.join("report.md");
        std::fs::write(&html, self.html())?;
        std::fs::write(&md, self.markdown())?;
        std::fs::write(out.join("junit.xml"), &self.junit)?;
        super::pages::write(self, out)?;
        Ok((html, md))
    }
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn truncate(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= n { one_line } else { format!("{}…", one_line.chars().take(n).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn write_run(root: &Path, name: &str, m: Value) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m).unwrap()).unwrap();
        dir
    }

    fn manifest(scenario: &str, verdict: &str, target: &str, kernel: &str, jit: f64) -> Value {
        json!({
            "scenario": scenario, "verdict": verdict, "reason": if verdict == "pass" { Value::Null } else { json!("perf record failed") },
            "checks": [{"name": "share", "verdict": verdict, "expected": "75 ± 5", "measured": "74.1", "collector": "perf-cpu", "values": {"error_pts": 0.9}}],
            "metrics": {"resolved_ratio_jit": jit, "perf-cpu.decode_rate_per_s": 1000.0},
            "environment": {"kernel": kernel, "target": target, "dotnet_runtimes": ["Microsoft.NETCore.App 10.0.12"]},
            "collectors": ["perf-cpu"], "started_utc": "2026-11-22T09:00:00Z"
        })
    }

    #[test]
    fn rows_are_scenario_by_collector_and_columns_environments() {
        let d = tempfile::tempdir().unwrap();
        write_run(d.path(), "a", manifest("cpu-bound", "pass", "host", "6.18.0-1-amd64", 0.99));
        let mut q = manifest("cpu-bound", "fail", "qemu", "6.1.0-50-cloud-amd64", 0.9);
        q["vm"] = json!({"kernel": "6.1"});
        write_run(&d.path().join("nested"), "b", q);
        let r = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        assert_eq!(r.rows, vec![("cpu-bound".to_string(), "perf-cpu".to_string())]);
        assert_eq!(r.columns, vec!["host · k6.18", "qemu 6.1"]);
        assert!(r.html().contains("2 runs (.NET 10.0.12)"));
        let html = r.html();
        assert!(html.contains("<table id=\"matrix\">") && html.contains("share error 0.9 pts"), "{html}");
        let md = r.markdown();
        assert!(md.contains("| cpu-bound | perf-cpu | PASS · share error 0.9 pts | FAIL"), "{md}");
    }

    #[test]
    fn a_second_runtime_becomes_its_own_column() {
        let d = tempfile::tempdir().unwrap();
        write_run(d.path(), "a", manifest("cpu-bound", "pass", "host", "6.18.0", 0.99));
        let mut newer = manifest("cpu-bound", "pass", "host", "6.18.0", 0.99);
        newer["environment"]["dotnet_runtimes"] = json!(["Microsoft.AspNetCore.App 11.0.1", "Microsoft.NETCore.App 11.0.1"]);
        write_run(d.path(), "b", newer);
        let r = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        assert_eq!(r.columns, vec!["host · k6.18 · .NET 10.0.12", "host · k6.18 · .NET 11.0.1"]);
    }

    #[test]
    fn baseline_regressions_name_verdict_and_ratio_drops() {
        let d = tempfile::tempdir().unwrap();
        write_run(&d.path().join("base"), "a", manifest("cpu-bound", "pass", "host", "6.18.0", 0.99));
        let mut now = manifest("cpu-bound", "skip", "host", "6.18.0", 0.80);
        now["metrics"]["perf-cpu.decode_rate_per_s"] = json!(500.0);
        write_run(&d.path().join("now"), "a", now);
        let r = merge(&[d.path().join("now")], Some(&[d.path().join("base")]), Thresholds::default()).unwrap();
        let whats: Vec<&str> = r.regressions.iter().map(|x| x.what.as_str()).collect();
        // perf-cpu's rate drop joins its verdict's entry: one change, listed once.
        assert!(whats.iter().any(|w| w.starts_with("verdict pass → skip") && w.contains("perf-cpu.decode_rate_per_s")), "{whats:?}");
        assert!(whats.contains(&"resolved_ratio_jit"), "{whats:?}");
        assert_eq!(whats.len(), 2, "{whats:?}");
        // Within the threshold: no regression.
        let r2 = regressions(&find_runs(&[d.path().join("base")]).unwrap(), &find_runs(&[d.path().join("base")]).unwrap(), Thresholds::default());
        assert!(r2.is_empty());
    }

    /// A ratio that dropped 0.50 → 0.39 over ~50 frames is noise; the same drop over 5000 frames
    /// is not. A run that failed before its checks lists its pass → fail once, not per collector.
    #[test]
    fn baseline_thresholds_follow_sample_counts_and_list_each_change_once() {
        let d = tempfile::tempdir().unwrap();
        let run = |verdict: &str, ratio: f64, frames: u64| {
            let mut m = manifest("web", verdict, "host", "6.18.0", 0.99);
            m["collectors"] = json!(["perf-cpu", "perf-offcpu", "eventpipe", "dotnet-trace"]);
            m["metrics"]["perf-offcpu.resolved_ratio_jit"] = json!(ratio);
            m["resolution"] = json!({"perf-offcpu": {"classes": {"jit": {"leaf_total": frames}}}});
            m
        };
        write_run(&d.path().join("base"), "a", run("pass", 0.50, 50));
        write_run(&d.path().join("noise"), "a", run("pass", 0.39, 48));
        let r = merge(&[d.path().join("noise")], Some(&[d.path().join("base")]), Thresholds::default()).unwrap();
        assert!(r.regressions.is_empty(), "{:?}", r.regressions);
        write_run(&d.path().join("base-big"), "a", run("pass", 0.50, 5000));
        write_run(&d.path().join("real"), "a", run("pass", 0.39, 5000));
        let r = merge(&[d.path().join("real")], Some(&[d.path().join("base-big")]), Thresholds::default()).unwrap();
        assert_eq!(r.regressions.len(), 1, "{:?}", r.regressions);
        assert_eq!(r.regressions[0].what, "perf-offcpu.resolved_ratio_jit");
        assert_eq!(r.regressions[0].after, "0.3900 over 5000");
        // No checks ran: every collector's cell has the run's fail, listed once.
        let mut failed = run("fail", 0.50, 50);
        failed["checks"] = json!([]);
        write_run(&d.path().join("failed"), "a", failed);
        let mut base = run("pass", 0.50, 50);
        base["checks"] = json!([]);
        write_run(&d.path().join("base-nochecks"), "a", base);
        let r = merge(&[d.path().join("failed")], Some(&[d.path().join("base-nochecks")]), Thresholds::default()).unwrap();
        assert_eq!(r.regressions.len(), 1, "{:?}", r.regressions);
        assert_eq!(r.regressions[0].collector, "dotnet-trace, eventpipe, perf-cpu, perf-offcpu");
    }

    /// Four collectors in one run, only perf-offcpu failed, one cross-collector check: each
    /// collector keeps its own verdict and numbers, the cross-collector check is its own row.
    #[test]
    fn each_collector_gets_its_own_verdict_and_numbers() {
        let d = tempfile::tempdir().unwrap();
        let check = |name: &str, collector: Option<&str>, verdict: &str| {
            json!({"name": name, "verdict": verdict, "expected": "≥ 90.0 %", "measured": "80.0 %", "collector": collector})
        };
        let mut m = manifest("on-vs-off-cpu", "fail", "host", "6.18.0", 0.998);
        m["collectors"] = json!(["perf-cpu", "perf-offcpu", "eventpipe", "dotnet-trace"]);
        m["checks"] = json!([
            check("perf-cpu share", Some("perf-cpu"), "pass"),
            check("perf-offcpu share", Some("perf-offcpu"), "fail"),
            check("eventpipe share", Some("eventpipe"), "pass"),
            check("dotnet-trace share", Some("dotnet-trace"), "inconclusive"),
            check("counts agree", None, "pass"),
        ]);
        m["metrics"] = json!({"resolved_ratio_jit": 0.998, "perf-cpu.resolved_ratio_jit": 0.998});
        write_run(d.path(), "a", m);
        let r = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        let cell = |c: &str| r.cells[&("on-vs-off-cpu".to_string(), c.to_string(), "host · k6.18".to_string())].clone();
        assert_eq!(cell("perf-cpu").verdict, "pass");
        assert_eq!(cell("perf-cpu").metric.as_deref(), Some("JIT resolved 99.8 %"));
        assert_eq!(cell("perf-offcpu").verdict, "fail");
        assert_eq!(cell("perf-offcpu").metric.as_deref(), Some("80.0 %"), "never perf-cpu's ratio");
        assert!(cell("perf-offcpu").reason.unwrap().starts_with("perf-offcpu share"));
        assert_eq!(cell("eventpipe").verdict, "pass");
        assert_eq!(cell("eventpipe").reason, None);
        assert_eq!(cell("dotnet-trace").verdict, "inconclusive");
        assert_eq!(cell(SCENARIO_WIDE).verdict, "pass");
        let rows: Vec<&str> = r.rows.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(rows, ["dotnet-trace", "eventpipe", "perf-cpu", "perf-offcpu", SCENARIO_WIDE]);
        assert!(r.counts_line().ends_with("3 pass, 1 fail, 1 inconclusive"), "{}", r.counts_line());
    }

    /// A scenario observed in two runs shows each run's truth above the rows it scores.
    #[test]
    fn share_tables_show_one_truth_per_run() {
        let d = tempfile::tempdir().unwrap();
        let mut m = manifest("on-vs-off-cpu", "pass", "host", "6.18.0", 0.99);
        let row = |c: &str, truth: [f64; 2]| json!({"collector": c, "samples": 500, "shares": [0.5, 0.5], "error_pts": [null, null], "measures": "", "truth": truth});
        m["share_tables"] = json!([{
            "columns": ["::CpuRoute", "::BlockedRoute"], "truth": [0.48, 0.52],
            "rows": [row("perf-cpu", [0.48, 0.52]), row("eventpipe", [0.61, 0.39]), row("dotnet-trace", [0.61, 0.39])]
        }]);
        write_run(d.path(), "a", m);
        let r = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        let md = r.markdown();
        assert!(md.contains("| **truth (run of perf-cpu)** | | 48.0 % | 52.0 % |"), "{md}");
        assert!(md.contains("| **truth (run of eventpipe, dotnet-trace)** | | 61.0 % | 39.0 % |"), "{md}");
        assert_eq!(r.html().matches("<tr class=\"truth\">").count(), 2);
        r.write(&d.path().join("out")).unwrap();
        let junit = std::fs::read_to_string(d.path().join("out/junit.xml")).unwrap();
        assert!(junit.contains("<testsuites name=\"tracelab\" tests=\"1\""), "{junit}");
        // A report written inside the folders it reads (`results/report`, the default) is not
        // read back as runs: its pages' copies of each manifest are not runs.
        assert!(d.path().join("out/runs/a/manifest.json").is_file(), "the run's manifest is copied beside its page");
        let again = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        assert_eq!(again.runs, 1);
    }

    /// The merged junit.xml counts what the report counts (issue 38: four runs of one cell made
    /// `failures="3"` beside "1 fail"): one testcase per cell, the newest run's; an infrastructure
    /// error is an `<error>`; every testcase has a time.
    #[test]
    fn merged_junit_counts_are_the_reports_counts() {
        let d = tempfile::tempdir().unwrap();
        let check = |name: &str, collector: Option<&str>, verdict: &str| {
            json!({"name": name, "verdict": verdict, "expected": "≥ 90.0 %", "measured": "80.0 %", "collector": collector})
        };
        for (i, verdict) in ["fail", "fail", "fail", "pass"].iter().enumerate() {
            let mut m = manifest("on-vs-off-cpu", if i == 3 { "fail" } else { verdict }, "host", "6.18.0", 0.99);
            m["collectors"] = json!(["perf-cpu", "perf-offcpu", "eventpipe", "lttng"]);
            m["started_utc"] = json!(format!("2026-11-2{i}T09:00:00Z"));
            m["durations_s"] = json!({"run": 8.0});
            m["checks"] = json!([
                check("perf-cpu share", Some("perf-cpu"), verdict),
                check("perf-offcpu share", Some("perf-offcpu"), "fail"),
                check("eventpipe share", Some("eventpipe"), "inconclusive"),
                check("counts agree", None, "pass"),
            ]);
            write_run(d.path(), &format!("run-{i}"), m);
        }
        let mut broken = manifest("cpu-bound", "error", "container", "6.18.0", 0.0);
        broken["checks"] = json!([]);
        broken["reason"] = json!("infrastructure: docker run failed");
        write_run(d.path(), "broken", broken);
        let r = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap();
        let counts = r.counts();
        let n = |v: &str| counts.get(v).copied().unwrap_or(0);
        let attr = |name: &str| -> usize {
            let head = r.junit.lines().find(|l| l.starts_with("<testsuites ")).unwrap();
            let re = regex::Regex::new(&format!(r#" {name}="(\d+)""#)).unwrap();
            re.captures(head).map(|c| c[1].parse().unwrap()).unwrap_or(0)
        };
        let skipped: usize = regex::Regex::new(r#"<testsuite [^>]* skipped="(\d+)""#)
            .unwrap()
            .captures_iter(&r.junit)
            .map(|c| c[1].parse::<usize>().unwrap())
            .sum();
        assert_eq!(attr("tests"), r.cells.len(), "{}", r.junit);
        assert_eq!(attr("failures"), n("fail"), "{}\n{}", r.counts_line(), r.junit);
        assert_eq!(attr("errors"), n("error"), "{}", r.junit);
        assert_eq!(skipped, n("skip") + n("inconclusive") + n(UNCHECKED), "{}", r.junit);
        assert_eq!((n("fail"), n("error"), n(UNCHECKED)), (1, 1, 1), "{}", r.counts_line());
        // The broken run is an `<error>`, every case has a time, suite names are distinct.
        assert!(r.junit.contains("<error message=\"infrastructure: docker run failed\" type=\"infrastructure\">"), "{}", r.junit);
        let cases: Vec<&str> = r.junit.lines().filter(|l| l.contains("<testcase ")).collect();
        assert_eq!(cases.len(), r.cells.len());
        assert!(cases.iter().all(|c| regex::Regex::new(r#" time="\d+\.\d{3}""#).unwrap().is_match(c)), "{}", r.junit);
        assert!(r.junit.contains("the newest of 4 runs of this cell"), "{}", r.junit);
        let suites: Vec<&str> = r.junit.lines().filter(|l| l.trim_start().starts_with("<testsuite ")).collect();
        assert_eq!(suites.len(), 2, "one suite per column: {}", r.junit);
    }

    #[test]
    fn malformed_manifest_names_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bad");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("manifest.json"), "{\n \"scenario\": ").unwrap();
        let err = format!("{:#}", merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap_err());
        assert!(err.contains("bad/manifest.json") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn empty_input_says_what_to_do() {
        let d = tempfile::tempdir().unwrap();
        let err = format!("{:#}", merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap_err());
        assert!(err.contains("cargo xtask scenario"), "{err}");
    }

    #[test]
    fn html_escapes_reasons() {
        let d = tempfile::tempdir().unwrap();
        let mut m = manifest("x", "fail", "host", "6.18", 0.5);
        m["reason"] = json!("<script>alert(1)</script>");
        m["checks"] = json!([]);
        write_run(d.path(), "a", m);
        let html = merge(&[d.path().to_path_buf()], None, Thresholds::default()).unwrap().html();
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"));
    }
}
