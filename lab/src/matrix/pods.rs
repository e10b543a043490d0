//! The pods axis of `cargo xtask matrix pods`: pod shapes × collectors, each cell one scenario run
//! as a real pod, with the outcome expected of that shape and the one got, the tools container's
//! capabilities, and the reason of anything but PASS. Expectations are the shapes' promises:
//! a debug container does not share /tmp, so dotnet-trace SKIPs there (dotnet/diagnostics#3480);
//! an app with its diagnostics off SKIPs the IPC collectors naming the variable; a CPU limit may
//! leave a share inconclusive, never FAIL.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use harness::engine::{self, RunOptions};
use harness::run::TargetKind;
use harness::run::pod::PodShape;
use harness::scenario::Scenario;

/// One collector's scenario: the built-in one that judges it on cpu-bound (dotnet-trace: the
/// EventPipe scenario with dotnet-trace's thread-time profile instead of our client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collector {
    PerfCpu,
    EventPipe,
    DotnetTrace,
    PerfOffcpu,
}

impl Collector {
    pub const ALL: [Collector; 4] = [Collector::PerfCpu, Collector::EventPipe, Collector::DotnetTrace, Collector::PerfOffcpu];

    pub fn name(self) -> &'static str {
        match self {
            Collector::PerfCpu => "perf-cpu",
            Collector::EventPipe => "eventpipe",
            Collector::DotnetTrace => "dotnet-trace",
            Collector::PerfOffcpu => "perf-offcpu",
        }
    }

    fn uses_ipc(self) -> bool {
        matches!(self, Collector::EventPipe | Collector::DotnetTrace)
    }

    /// The scenario, with `env` added to the app's.
    fn scenario(self, env: &[(&str, &str)]) -> Result<Scenario> {
        let mut scenario = match self {
            Collector::PerfCpu => Scenario::find("cpu-bound")?,
            Collector::EventPipe => Scenario::find("cpu-bound-eventpipe")?,
            Collector::PerfOffcpu => Scenario::find("off-cpu")?,
            Collector::DotnetTrace => {
                let path = harness::project_root().join("scenarios/cpu-bound-eventpipe.toml");
                let text = std::fs::read_to_string(&path)?
                    .replace("name = \"cpu-bound-eventpipe\"", "name = \"cpu-bound-dotnet-trace\"")
                    .replace("kind = \"eventpipe\"\nprofile = \"thread-time\"", "kind = \"dotnet-trace\"\nprofile = \"dotnet-sampled-thread-time\"");
                let dir = tempfile::tempdir()?;
                let copy = dir.path().join("cpu-bound-dotnet-trace.toml");
                std::fs::write(&copy, text)?;
                Scenario::load(&copy)?
            }
        };
        for (k, v) in env {
            scenario.env.insert(k.to_string(), v.to_string());
        }
        Ok(scenario)
    }
}

/// A cell: a shape, a collector, the app's extra environment, what is expected.
#[derive(Clone, Debug)]
pub struct Cell {
    pub shape: PodShape,
    pub collector: Collector,
    pub env: Vec<(&'static str, &'static str)>,
    /// `pod_resources.cpu` of the app (the limited shape's default: 1).
    pub cpu: Option<&'static str>,
    /// Verdicts that keep the shape's promise (`pass`, `skip`, `inconclusive`).
    pub expected: Vec<&'static str>,
    /// A phrase the reason of a non-PASS outcome must hold.
    pub reason_names: Option<&'static str>,
}

impl Cell {
    pub fn name(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let env = if env.is_empty() { String::new() } else { format!(" [{}]", env.join(" ")) };
        let cpu = self.cpu.map(|c| format!(" (cpu {c})")).unwrap_or_default();
        format!("{}{cpu} / {}{env}", self.shape.as_str(), self.collector.name())
    }
}

/// Every cell of a default run.
pub fn default_cells() -> Vec<Cell> {
    let mut cells = Vec::new();
    for shape in PodShape::ALL {
        for collector in Collector::ALL {
            let (expected, reason_names) = match (shape, collector) {
                (PodShape::Debug, Collector::DotnetTrace) => (vec!["skip"], Some("dotnet/diagnostics#3480")),
                (PodShape::Limited, _) => (vec!["pass", "inconclusive"], None),
                _ => (vec!["pass"], None),
            };
            cells.push(Cell { shape, collector, env: Vec::new(), cpu: None, expected, reason_names });
        }
    }
    // The hardened app with its diagnostics off (a common production setting): the IPC
    // collectors SKIP naming the variable; perf still names JIT frames from the perf map.
    for collector in [Collector::PerfCpu, Collector::EventPipe, Collector::DotnetTrace] {
        let (expected, reason_names) =
            if collector.uses_ipc() { (vec!["skip"], Some("DOTNET_EnableDiagnostics")) } else { (vec!["pass"], None) };
        cells.push(Cell { shape: PodShape::Hardened, collector, env: vec![("DOTNET_EnableDiagnostics", "0")], cpu: None, expected, reason_names });
    }
    // Half a core and two: the CPU-time share holds or is inconclusive naming the starved
    // sampler (cpu-bound's two threads get half a core between them), never FAIL.
    for cpu in ["0.5", "2"] {
        for collector in [Collector::PerfCpu, Collector::EventPipe] {
            cells.push(Cell { shape: PodShape::Limited, collector, env: Vec::new(), cpu: Some(cpu), expected: vec!["pass", "inconclusive"], reason_names: None });
        }
    }
    cells
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub shape: String,
    pub collector: String,
    pub env: String,
    /// `pod_resources.cpu`, when the cell sets it.
    pub cpu: Option<String>,
    pub expected: String,
    pub got: String,
    /// Whether `got` keeps the shape's promise.
    pub as_expected: bool,
    /// The tools container's capabilities (securityContext.capabilities.add).
    pub tool_caps: Vec<String>,
    pub reason: Option<String>,
    pub run_dir: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub started_utc: String,
    pub rows: Vec<Row>,
}

impl Report {
    /// Rows that broke their shape's promise.
    pub fn unexpected(&self) -> usize {
        self.rows.iter().filter(|r| !r.as_expected).count()
    }
}

/// Runs `cells` as pods, one after the other.
pub fn run(cells: &[Cell], results_root: Option<&Path>) -> Result<Report> {
    let started_utc = harness::report::utc_rfc3339();
    let mut rows = Vec::new();
    for cell in cells {
        harness::host::progress::note("matrix", &format!("pods: {}", cell.name()));
        let opts = RunOptions {
            target: Some(TargetKind::Pod),
            shape: Some(cell.shape),
            results_root: results_root.map(Path::to_path_buf),
            ..Default::default()
        };
        let outcome = cell.collector.scenario(&cell.env).and_then(|mut s| {
            if let Some(cpu) = cell.cpu {
                s.pod_resources = Some(harness::scenario::PodResources { cpu: Some(cpu.into()), memory: Some("1Gi".into()) });
            }
            engine::run(&s, &opts)
        });
        let (got, reason, run_dir, tool_caps) = match outcome {
            Ok(o) => (o.verdict.as_str().to_string(), o.reason.clone(), Some(o.dir.clone()), o.manifest.environment.target_capabilities.clone()),
            Err(e) => ("error".to_string(), Some(format!("{e:#}")), None, Vec::new()),
        };
        let named = match (cell.reason_names, got.as_str()) {
            (Some(phrase), v) if v != "pass" => reason.as_deref().is_some_and(|r| r.contains(phrase)),
            _ => true,
        };
        rows.push(Row {
            shape: cell.shape.as_str().into(),
            collector: cell.collector.name().into(),
            env: cell.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
            cpu: cell.cpu.map(str::to_string),
            expected: cell.expected.join(" or "),
            as_expected: cell.expected.contains(&got.as_str()) && named,
            got,
            tool_caps,
            reason,
            run_dir,
        });
    }
    Ok(Report { started_utc, rows })
}

pub fn markdown(report: &Report) -> String {
    let mut s = format!(
        "# Pods matrix ({})\n\n| shape | collector | app env / limits | expected | got | tools' capabilities | reason |\n|---|---|---|---|---|---|---|\n",
        report.started_utc
    );
    for r in &report.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {}{} | {} | {} |\n",
            r.shape,
            r.collector,
            [r.env.clone(), r.cpu.as_ref().map(|c| format!("cpu {c}")).unwrap_or_default()].iter().filter(|x| !x.is_empty()).cloned().collect::<Vec<_>>().join(", "),
            r.expected.to_uppercase(),
            r.got.to_uppercase(),
            if r.as_expected { "" } else { " ✗" },
            if r.tool_caps.is_empty() { "none".to_string() } else { r.tool_caps.join(", ") },
            r.reason.as_deref().unwrap_or("").replace('|', "\\|").replace('\n', " ")
        ));
    }
    s
}

/// Writes `pods.md` and `pods.json` into `results/<utc>-matrix-pods/`.
pub fn write(report: &Report, results: &Path) -> Result<PathBuf> {
    super::write_result("pods", results, &markdown(report), report)
}

/// The cells of a default run.
pub fn cells() -> Result<Vec<String>> {
    Ok(default_cells().iter().map(Cell::name).collect())
}

/// A run with default options, written to `results/`.
pub fn run_default() -> Result<PathBuf> {
    write(&run(&default_cells(), None)?, &super::results_root())
}

/// `cargo xtask matrix pods`: runs the cells (of `shapes`, default all), prints the table,
/// writes the result folder; an error when a cell broke its promise.
pub fn run_and_print(shapes: &[PodShape], list: bool) -> Result<()> {
    let cells: Vec<Cell> = default_cells().into_iter().filter(|c| shapes.is_empty() || shapes.contains(&c.shape)).collect();
    if list {
        cells.iter().for_each(|c| println!("{}", c.name()));
        return Ok(());
    }
    let report = run(&cells, None)?;
    let dir = write(&report, &super::results_root())?;
    println!("{}", markdown(&report));
    println!("matrix pods: {}", dir.display());
    anyhow::ensure!(report.unexpected() == 0, "{} of {} cells broke their shape's promise (marked ✗)", report.unexpected(), report.rows.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_meets_every_collector_and_the_debug_shape_expects_dotnet_trace_to_skip() {
        let cells = default_cells();
        for shape in PodShape::ALL {
            for c in Collector::ALL {
                assert!(cells.iter().any(|x| x.shape == shape && x.collector == c && x.env.is_empty()), "{shape:?} {c:?}");
            }
        }
        let debug = cells.iter().find(|c| c.shape == PodShape::Debug && c.collector == Collector::DotnetTrace).unwrap();
        assert_eq!(debug.expected, ["skip"]);
        assert!(cells.iter().all(|c| !c.expected.contains(&"fail")), "no cell expects a FAIL");
    }

    #[test]
    fn the_dotnet_trace_scenario_is_the_eventpipe_one_with_dotnet_trace() {
        let s = Collector::DotnetTrace.scenario(&[("DOTNET_EnableDiagnostics", "0")]).unwrap();
        assert_eq!(s.name, "cpu-bound-dotnet-trace");
        assert_eq!(s.collectors.iter().map(|c| c.kind().as_str()).collect::<Vec<_>>(), ["dotnet-trace"]);
        assert_eq!(s.env.get("DOTNET_EnableDiagnostics").map(String::as_str), Some("0"));
    }
}
