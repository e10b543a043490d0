//! Capability axis: for each collector and each container capability set, a real probe — the
//! collector's own start/stop, through the engine and the container target a scenario uses, on
//! the gc-heavy app — that records whether collection works, and the exact error when it does not.
//! The collectors of [`SIDECAR_ROWS`] are probed in a sidecar too (their tool in its own container
//! with the capability set, the app's container with none).
//!
//! A perf collector's cells run with perf's locked-memory budget of uid 0 used up, as it is beside
//! another run or a user's own `perf record -a` (a host perf holds it: [`BudgetHolder`]): the
//! least set is the one that works then, so runs started together all record.
//!
//! The least set that works per collector is committed as `harness/data/caps.toml` (regenerated
//! by `cargo xtask matrix caps`, checked for schema and coverage by a unit test): container runs
//! default to it, whatever lies in the git-ignored `results/`. A run also writes
//! `results/<utc>-matrix-caps/` (`caps.md`, `caps.json`) through [`super::write_result`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use harness::collect::CollectorKind;
use harness::collect::caps::{CAP_SETS, Matrix, Probe, SIDECAR_ROWS, TABLE_PATH, cap_list};
use harness::run::TargetKind;
use harness::scenario::{Scenario, WorkloadRef};

/// Options of a matrix run.
#[derive(Clone, Debug)]
pub struct MatrixOptions {
    pub suite: String,
    pub collectors: Vec<CollectorKind>,
    pub cap_sets: Vec<String>,
    /// `None`: every collector in a container and those of [`SIDECAR_ROWS`] in a sidecar too;
    /// `Some(target)`: every collector on that target only.
    pub target: Option<TargetKind>,
    pub timeout: Duration,
    /// Where the probes' run folders go (default: a temp folder under `.build/`).
    pub work: Option<PathBuf>,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            suite: harness::host::image::DEFAULT_SUITE.into(),
            collectors: CollectorKind::ALL.to_vec(),
            cap_sets: CAP_SETS.iter().map(|(n, _)| n.to_string()).collect(),
            target: None,
            // The probe app runs 1 s once released; a collector that cannot start leaves it
            // waiting for its go-file until this limit, so the limit is the cost of a failing cell.
            timeout: Duration::from_secs(20),
            work: None,
        }
    }
}
/// The probe of one cell: a scenario of the gc-heavy app (GC events for the event collectors,
/// JIT-compiled loops for perf; 3 s, since a 1 s run gave perf 129 samples with no JIT leaf once)
/// observed by `kind`'s own probe spec, in a container of `suite` (on `target`: the app's
/// container or a sidecar) with exactly `caps`, run by the engine as any scenario is. Its verdict is the cell: the engine
/// fails a run whose collector saw nothing, so PASS means the collector recorded data.
pub fn probe_scenario(kind: CollectorKind, target: TargetKind, caps: &str, suite: &str, timeout: Duration) -> Result<Scenario> {
    if target == TargetKind::Host {
        anyhow::bail!("the capability matrix probes containers and sidecars, not the host");
    }
    Ok(Scenario {
        description: format!("capability probe: {kind} under {caps} ({})", target.as_str()),
        args: ["--seconds", "3", "--induced", "3", "--alloc-mb-per-s", "50"].map(String::from).to_vec(),
        target: Some(target),
        image: Some(suite.to_string()),
        capabilities: Some(cap_list(caps)?.iter().map(|c| c.to_string()).collect()),
        timeout_s: timeout.as_secs(),
        collectors: vec![kind.probe_spec()],
        ..Scenario::new(
            &format!("probe-{kind}-{}{}", caps.to_lowercase().replace('+', "-"), if target == TargetKind::Sidecar { "-sidecar" } else { "" }),
            WorkloadRef::Named("gc-heavy".into()),
        )
    })
}

/// Runs one probe to its end.
fn run_probe(kind: CollectorKind, target: TargetKind, caps: &str, options: &MatrixOptions, work: &Path) -> Result<Probe> {
    let started = Instant::now();
    let scenario = probe_scenario(kind, target, caps, &options.suite, options.timeout)?;
    let run = harness::engine::RunOptions { results_root: Some(work.to_path_buf()), ..Default::default() };
    let mut probe = Probe {
        collector: kind.as_str().into(),
        target: target.as_str().into(),
        caps: caps.into(),
        works: false,
        detail: String::new(),
        error: None,
        seconds: 0.0,
    };
    match harness::engine::run(&scenario, &run) {
        Err(e) => probe.error = Some(format!("{e:#}")),
        Ok(outcome) => {
            let m = &outcome.manifest.metrics;
            let name = kind.as_str();
            let count = |k: &str| m.get(&format!("{name}.{k}")).copied().unwrap_or(0.0);
            probe.detail = format!("samples={} events={}", count("samples_total"), count("events_total"));
            if let Some(jit) = m.get(&format!("{name}.resolved_ratio_jit")) {
                probe.detail.push_str(&format!(" jit_resolved={jit:.2}"));
            }
            if outcome.verdict == judge::Verdict::Pass {
                probe.works = true;
            } else {
                probe.error = Some(format!("{}: {}", outcome.verdict.upper(), outcome.reason.unwrap_or_default()));
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

/// Runs the capability matrix. `on_probe` sees each cell as it finishes (progress).
pub fn run_matrix(options: &MatrixOptions, on_probe: &mut dyn FnMut(&Probe)) -> Result<Matrix> {
    harness::host::owner::install();
    // The budget is held on purpose: a probe's perf that needs it fails at once.
    harness::collect::set_budget_wait(Duration::ZERO);
    let docker = harness::host::docker::Docker::connect()?;
    let suite = harness::host::image::suite(&options.suite)?;
    for caps in &options.cap_sets {
        cap_list(caps)?;
    }
    let temp;
    let work = match &options.work {
        Some(w) => w.clone(),
        None => {
            let build = harness::project_root().join(".build");
            std::fs::create_dir_all(&build)?;
            temp = tempfile::Builder::new()
                .prefix("matrix-caps-")
                .tempdir_in(build)
                .context("cannot create a work folder under .build/")?;
            temp.path().to_path_buf()
        }
    };
    let mut probes = Vec::new();
    for (kind, target) in probed_rows(options) {
        // Held for the row's cells: what another perf session would hold.
        let _budget = if kind.as_str().starts_with("perf-") { Some(BudgetHolder::start(&work)?) } else { None };
        for caps in &options.cap_sets {
            let probe = run_probe(kind, target, caps, options, &work)?;
            on_probe(&probe);
            probes.push(probe);
        }
    }
    Ok(Matrix {
        axis: "caps".into(),
        created_utc: harness::report::utc_rfc3339(),
        suite: suite.name.into(),
        image: format!("tracelab/runtime:{}", suite.name),
        docker_version: docker.server_version().unwrap_or_default(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into(),
        least: BTreeMap::new(),
        least_sidecar: BTreeMap::new(),
        probes,
    }
    .with_least())
}

/// A host `perf record -a` whose ring buffers take the whole locked-memory budget of uid 0 (as root
/// on the host it holds CAP_IPC_LOCK: the budget is charged, the rest goes past it), so a probed
/// container perf meets the budget another session would have left it. Stopped when dropped.
struct BudgetHolder {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl BudgetHolder {
    fn start(work: &Path) -> Result<BudgetHolder> {
        let perf = harness::collect::perf::detect_perf_binary().context("no `perf` on PATH to hold the budget")?;
        let dir = tempfile::tempdir_in(work)?;
        // 256 pages (1 MiB) per CPU is past the default budget of 516 KiB per CPU.
        let mut cmd = std::process::Command::new(perf);
        cmd.args(["record", "--no-buildid-cache", "-a", "-e", "cpu-clock", "-F", "1", "-m", "256", "-o"])
            .arg(dir.path().join("hold.data"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // It holds the budget for every perf session of uid 0: it must not outlive the matrix.
        harness::host::proc::die_with_owner(&mut cmd);
        let child = cmd.spawn().context("cannot start the perf that holds the budget")?;
        // Its buffers are mapped within a second.
        std::thread::sleep(Duration::from_secs(2));
        Ok(BudgetHolder { child, _dir: dir })
    }
}

impl Drop for BudgetHolder {
    fn drop(&mut self) {
        let _ = harness::host::proc::signal(self.child.id(), 2);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The rows a run probes: (collector, target), containers first.
pub fn probed_rows(options: &MatrixOptions) -> Vec<(CollectorKind, TargetKind)> {
    match options.target {
        Some(target) => options.collectors.iter().map(|k| (*k, target)).collect(),
        None => {
            let mut rows: Vec<_> = options.collectors.iter().map(|k| (*k, TargetKind::Container)).collect();
            rows.extend(options.collectors.iter().filter(|k| SIDECAR_ROWS.contains(k)).map(|k| (*k, TargetKind::Sidecar)));
            rows
        }
    }
}

/// Writes `caps.md` and `caps.json` into `results/<utc>-matrix-caps/`.
pub fn write(matrix: &Matrix, results: &Path) -> Result<PathBuf> {
    super::write_result("caps", results, &matrix.markdown(), matrix)
}

/// Writes the committed table (`harness/data/caps.toml`) from a full run.
pub fn write_table(matrix: &Matrix) -> Result<PathBuf> {
    let path = harness::project_root().join(TABLE_PATH);
    std::fs::write(&path, matrix.to_toml()?).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The cells of a default run (`collector × capability set`).
pub fn cells() -> Result<Vec<String>> {
    Ok(cell_names(&MatrixOptions::default()))
}

/// `collector / caps` (container) and `collector (sidecar) / caps` for every cell a run probes.
pub fn cell_names(options: &MatrixOptions) -> Vec<String> {
    probed_rows(options)
        .into_iter()
        .flat_map(|(k, target)| {
            let on = if target == TargetKind::Container { String::new() } else { format!(" ({})", target.as_str()) };
            options.cap_sets.iter().map(move |caps| format!("{k}{on} / {caps}"))
        })
        .collect()
}

/// A full run: result folder plus the committed table.
pub fn run_default() -> Result<PathBuf> {
    let matrix = run_matrix(&MatrixOptions::default(), &mut |_| {})?;
    write_table(&matrix)?;
    write(&matrix, &super::results_root())
}

/// How a run changes the committed table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableUpdate {
    /// Leave it (another suite, or some capability sets only).
    Keep,
    /// Replace the rows of the probed collectors (every capability set of the default suite).
    Rows,
    /// Rewrite it whole (every cell of the default suite).
    Whole,
}

/// `cargo xtask matrix caps`: probes, prints each cell as it ends and the table, writes the result
/// folder, and updates the committed table as `update` says.
pub fn run_and_print(options: &MatrixOptions, update: TableUpdate) -> Result<()> {
    let table = run_matrix(options, &mut |p| {
        let what = if p.works { p.detail.clone() } else { p.error.clone().unwrap_or_default() };
        println!("{:<13} {:<9} {:<21} {} {what}", p.collector, p.target, p.caps, if p.works { "works" } else { "FAILS" });
    })?;
    let dir = write(&table, &super::results_root())?;
    println!("\n{}", table.markdown());
    println!("written to {}", dir.display());
    match update {
        TableUpdate::Keep => {}
        TableUpdate::Whole => println!("committed table rewritten: {}", write_table(&table)?.display()),
        TableUpdate::Rows => {
            let merged = Matrix::committed().with_rows_of(&table);
            println!("committed table: rows of the probed collectors replaced: {}", write_table(&merged)?.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(collector: &str, caps: &str, works: bool) -> Probe {
        Probe {
            collector: collector.into(),
            target: "container".into(),
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
            least: Default::default(),
            least_sidecar: Default::default(),
            probes,
        }
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let m = matrix(vec![probe("lttng", "none", true)]);
        let out = write(&m, dir.path()).unwrap();
        assert!(out.join("caps.md").is_file());
        let back: Matrix = serde_json::from_str(&std::fs::read_to_string(out.join("caps.json")).unwrap()).unwrap();
        assert_eq!(back.probes[0].collector, "lttng");
        // No half-written folder is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn default_run_probes_the_sidecar_rows_too() {
        let names = cell_names(&MatrixOptions::default());
        assert_eq!(names.len(), (CollectorKind::ALL.len() + SIDECAR_ROWS.len()) * CAP_SETS.len());
        assert!(names.contains(&"perf-offwake (sidecar) / SYS_ADMIN".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("lttng (sidecar)")), "{names:?}");
        let only = MatrixOptions { target: Some(TargetKind::Sidecar), collectors: vec![CollectorKind::PerfSyscalls], ..Default::default() };
        assert_eq!(probed_rows(&only), [(CollectorKind::PerfSyscalls, TargetKind::Sidecar)]);
        let s = probe_scenario(CollectorKind::PerfSyscalls, TargetKind::Sidecar, "SYS_ADMIN", "bullseye", Duration::from_secs(20)).unwrap();
        assert_eq!(s.target, Some(TargetKind::Sidecar));
        assert_eq!(s.capabilities.as_deref(), Some(&["SYS_ADMIN".to_string()][..]));
        assert!(probe_scenario(CollectorKind::PerfCpu, TargetKind::Host, "none", "bullseye", Duration::from_secs(20)).is_err());
    }

    #[test]
    fn container_ids_are_masked_in_errors() {
        assert_eq!(
            without_ids("cannot start container 3cdcd46f685d: unable to apply caps"),
            "cannot start container <id>: unable to apply caps"
        );
        assert_eq!(without_ids("exit 32: mount: permission denied."), "exit 32: mount: permission denied.");
    }
}
