//! The LTTng axis of `cargo xtask matrix lttng`: the LTTng scenarios in each Debian suite's image
//! (bullseye = LTTng 2.12 / liblttng-ust.so.0, bookworm = 2.13, trixie = newer), one row per
//! (suite, scenario) with the image's LTTng versions, the verdict and its reason, written as
//! markdown and JSON. The expectation: PASS on bullseye, SKIPPED with the soname reason elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use harness::engine;
use harness::engine::RunOptions;
use harness::scenario::Scenario;
use harness::run::TargetKind;

pub const DEFAULT_SUITES: &[&str] = &["bullseye", "bookworm", "trixie"];
pub const DEFAULT_SCENARIOS: &[&str] = &["gc-heavy-lttng", "exceptions-lttng"];

#[derive(Clone, Debug)]
pub struct MatrixOptions {
    pub suites: Vec<String>,
    /// Scenario names or paths.
    pub scenarios: Vec<String>,
    /// Where run folders and the matrix files go (default `<root>/results`).
    pub results_root: Option<PathBuf>,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            suites: DEFAULT_SUITES.iter().map(|s| s.to_string()).collect(),
            scenarios: DEFAULT_SCENARIOS.iter().map(|s| s.to_string()).collect(),
            results_root: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MatrixRow {
    pub suite: String,
    pub scenario: String,
    /// Debian package versions in the suite's image (`lttng-tools`, `liblttng-ust*`).
    pub lttng_tools: Option<String>,
    pub lttng_ust: Option<String>,
    pub ust_soname: Option<String>,
    pub verdict: String,
    pub reason: Option<String>,
    pub run_dir: Option<PathBuf>,
    /// The run's LTTng and cross-collector numbers (event counts, check values).
    pub metrics: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MatrixReport {
    pub started_utc: String,
    pub rows: Vec<MatrixRow>,
}

/// Runs every (suite, scenario) in a container of that suite's image.
pub fn run(opts: &MatrixOptions) -> Result<MatrixReport> {
    let started_utc = harness::report::utc_rfc3339();
    let mut rows = Vec::new();
    for suite in &opts.suites {
        for name in &opts.scenarios {
            let scenario = Scenario::find(name)?;
            let run_opts = RunOptions {
                target: Some(TargetKind::Container),
                image: Some(suite.clone()),
                results_root: opts.results_root.clone(),
                ..RunOptions::default()
            };
            let outcome = engine::run(&scenario, &run_opts);
            // After the run: on a fresh machine the run is what builds the suite's image.
            let (tools, ust, soname) = image_versions(suite);
            let row = match outcome {
                Ok(outcome) => MatrixRow {
                    suite: suite.clone(),
                    scenario: scenario.name.clone(),
                    lttng_tools: tools.clone(),
                    lttng_ust: ust.clone(),
                    ust_soname: soname.clone(),
                    verdict: outcome.verdict.as_str().to_string(),
                    reason: outcome.reason.clone(),
                    run_dir: Some(outcome.dir.clone()),
                    metrics: outcome
                        .manifest
                        .metrics
                        .iter()
                        .filter(|(k, _)| k.contains("lttng") || k.contains("check"))
                        .map(|(k, v)| (k.clone(), *v))
                        .collect(),
                },
                Err(e) => MatrixRow {
                    suite: suite.clone(),
                    scenario: scenario.name.clone(),
                    lttng_tools: tools.clone(),
                    lttng_ust: ust.clone(),
                    ust_soname: soname.clone(),
                    verdict: "fail".into(),
                    reason: Some(format!("{e:#}")),
                    run_dir: None,
                    metrics: BTreeMap::new(),
                },
            };
            rows.push(row);
        }
    }
    Ok(MatrixReport { started_utc, rows })
}

/// Writes `lttng.md` and `lttng.json` into `results/<utc>-matrix-lttng/`.
pub fn write(report: &MatrixReport, results: &Path) -> Result<PathBuf> {
    super::write_result("lttng", results, &markdown(report), report)
}

/// The cells of a default run (`suite × scenario`).
pub fn cells() -> Result<Vec<String>> {
    let o = MatrixOptions::default();
    Ok(o.suites.iter().flat_map(|s| o.scenarios.iter().map(move |c| format!("{s} / {c}"))).collect())
}

/// A run with default options, written to `results/`.
pub fn run_default() -> Result<PathBuf> {
    write(&run(&MatrixOptions::default())?, &super::results_root())
}

pub fn markdown(report: &MatrixReport) -> String {
    let mut s = format!(
        "# LTTng matrix ({})\n\n| suite | lttng-tools | LTTng-UST | UST soname | scenario | verdict | reason |\n|---|---|---|---|---|---|---|\n",
        report.started_utc
    );
    for r in &report.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.suite,
            r.lttng_tools.as_deref().unwrap_or("?"),
            r.lttng_ust.as_deref().unwrap_or("?"),
            r.ust_soname.as_deref().unwrap_or("?"),
            r.scenario,
            r.verdict.to_uppercase(),
            r.reason.as_deref().unwrap_or("").replace('|', "\\|").replace('\n', " ")
        ));
    }
    s
}

/// Package versions from the suite image's dpkg database (the rootfs the image was built from).
pub fn image_versions(suite: &str) -> (Option<String>, Option<String>, Option<String>) {
    let Ok(s) = harness::host::image::suite(suite) else { return (None, None, None) };
    let root = harness::host::image::rootfs_dir(s);
    let mut status = std::fs::read_to_string(root.join("var/lib/dpkg/status")).unwrap_or_default();
    if status.is_empty() {
        // The image can come from the daemon's cache with no rootfs in this checkout: ask it.
        status = dpkg_status_from_image(&harness::host::image::runtime_tag(s)).unwrap_or_default();
    }
    let versions = dpkg_versions(&status);
    let tools = versions.get("lttng-tools").cloned();
    let ust = versions
        .iter()
        .find(|(k, _)| k.starts_with("liblttng-ust") && !k.contains("ctl") && !k.contains("common") && !k.contains("python") && !k.contains("dev"))
        .map(|(k, v)| format!("{k} {v}"));
    let soname = harness::collect::lttng::preflight::ust_sonames(&root).join(", ");
    (tools, ust, (!soname.is_empty()).then_some(soname).or(Some(s.lttng_ust.to_string())))
}

/// /var/lib/dpkg/status of an image, read by a short-lived labelled container (no network).
fn dpkg_status_from_image(image: &str) -> Result<String> {
    let docker = harness::host::docker::Docker::connect()?;
    let spec = harness::host::docker::ContainerSpec::new(image, "dpkg-status", vec!["cat".into(), "/var/lib/dpkg/status".into()]);
    let id = docker.create(&spec)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let result = docker
        .forward_output(&id, tx)
        .and_then(|()| docker.start(&id))
        .and_then(|()| docker.wait(&id, std::time::Duration::from_secs(60)));
    let lines: Vec<String> = rx.iter().collect();
    let _ = docker.remove(&id);
    result?;
    Ok(lines.join("\n"))
}

/// Installed package → version, from a dpkg `status` file.
pub fn dpkg_versions(status: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for para in status.split("\n\n") {
        let field = |name: &str| para.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string());
        if let (Some(p), Some(v)) = (field("Package:"), field("Version:"))
            && field("Status:").is_some_and(|s| s.ends_with("installed"))
        {
            out.insert(p, v);
        }
    }
    out
}

/// `cargo xtask matrix lttng`: runs the suites, prints the table, writes the result folder.
pub fn run_and_print(options: &MatrixOptions) -> Result<()> {
    let report = run(options)?;
    let dir = write(&report, &super::results_root())?;
    print!("{}", markdown(&report));
    println!("written to {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_status_parses() {
        let status = "Package: lttng-tools\nStatus: install ok installed\nVersion: 2.12.3-1\n\nPackage: liblttng-ust0\nStatus: install ok installed\nVersion: 2.12.1-1\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n";
        let v = dpkg_versions(status);
        assert_eq!(v["lttng-tools"], "2.12.3-1");
        assert_eq!(v["liblttng-ust0"], "2.12.1-1");
        assert!(!v.contains_key("gone"));
    }

    #[test]
    fn markdown_has_a_row_per_run() {
        let report = MatrixReport {
            started_utc: "t".into(),
            rows: vec![MatrixRow {
                suite: "bookworm".into(),
                scenario: "exceptions-lttng".into(),
                lttng_tools: Some("2.13.9".into()),
                lttng_ust: Some("liblttng-ust1 2.13.5".into()),
                ust_soname: Some("liblttng-ust.so.1".into()),
                verdict: "skip".into(),
                reason: Some("needs liblttng-ust.so.0 | x".into()),
                run_dir: None,
                metrics: BTreeMap::new(),
            }],
        };
        let md = markdown(&report);
        assert!(md.contains("| bookworm | 2.13.9 |") && md.contains("SKIP") && md.contains("so.0 \\| x"), "{md}");
    }
}
