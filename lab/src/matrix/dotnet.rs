//! The .NET axis: every chosen scenario on the host under each installed .NET runtime. A cell is
//! labelled with the runtime the app itself reported (the manifest's `dotnet_runtimes`), not only
//! the one asked for, so a cell never claims a runtime that did not run.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use harness::engine;
use harness::engine::RunOptions;
use harness::run::TargetKind;
use harness::scenario::Scenario;

#[derive(Clone, Debug, Default)]
pub struct DotnetMatrixOptions {
    /// Runtime versions or prefixes (`10.0`); empty = every installed runtime.
    pub runtimes: Vec<String>,
    /// Scenario names; empty = every scenario.
    pub scenarios: Vec<String>,
    /// Where run folders go (default `results/`).
    pub results_root: Option<PathBuf>,
}

/// One (runtime, scenario) cell.
#[derive(Clone, Debug, Serialize)]
pub struct DotnetCell {
    /// The runtime asked for (a version or prefix).
    pub wanted: String,
    /// The installed runtime it matched; None when no installed runtime matches.
    pub runtime: Option<String>,
    pub scenario: String,
    /// `pass` | `fail` | `skip`; `fail` for a runtime that is not installed.
    pub verdict: String,
    pub reason: Option<String>,
    /// What the app reported running under.
    pub runtimes_present: String,
}

impl DotnetCell {
    pub fn failed(&self) -> bool {
        self.verdict == "fail"
    }
}

/// The installed Microsoft.NETCore.App versions.
fn installed() -> Result<Vec<String>> {
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    Ok(dotnet.runtime_versions()?.into_iter().filter(|r| r.name == "Microsoft.NETCore.App").map(|r| r.version).collect())
}

fn scenarios(opts: &DotnetMatrixOptions) -> Result<Vec<String>> {
    if opts.scenarios.is_empty() { harness::scenario::list_names() } else { Ok(opts.scenarios.clone()) }
}

/// Runs each scenario under each chosen runtime; `on_cell` sees each cell as it finishes.
pub fn run(opts: &DotnetMatrixOptions, on_cell: &mut dyn FnMut(&DotnetCell)) -> Result<Vec<DotnetCell>> {
    let installed = installed()?;
    let wanted = if opts.runtimes.is_empty() { installed.clone() } else { opts.runtimes.clone() };
    let scenarios = scenarios(opts)?;
    let mut cells = Vec::new();
    for version in &wanted {
        let Some(runtime) = installed.iter().find(|v| v.starts_with(version.as_str())) else {
            // Not a skip of the scenario: the matrix cell cannot exist on this machine.
            let cell = DotnetCell {
                wanted: version.clone(),
                runtime: None,
                scenario: String::new(),
                verdict: "fail".into(),
                reason: Some(format!(
                    "not installed (installed: {}); ../shared/toolchains provides only these",
                    installed.join(", ")
                )),
                runtimes_present: String::new(),
            };
            on_cell(&cell);
            cells.push(cell);
            continue;
        };
        for name in &scenarios {
            let scenario = Scenario::find(name)?;
            let run = RunOptions {
                target: Some(TargetKind::Host),
                results_root: opts.results_root.clone(),
                ..Default::default()
            };
            let outcome = engine::run(&scenario, &run)?;
            let cell = DotnetCell {
                wanted: version.clone(),
                runtime: Some(runtime.clone()),
                scenario: name.clone(),
                verdict: outcome.verdict.as_str().into(),
                reason: outcome.reason.clone(),
                runtimes_present: outcome.manifest.environment.dotnet_runtimes.join("; "),
            };
            on_cell(&cell);
            cells.push(cell);
        }
    }
    Ok(cells)
}

pub fn markdown(cells: &[DotnetCell]) -> String {
    let mut s = String::from("# .NET matrix\n\n| runtime | scenario | verdict | reason | runtimes present |\n|---|---|---|---|---|\n");
    for c in cells {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.runtime.as_deref().unwrap_or(&c.wanted),
            c.scenario,
            c.verdict.to_uppercase(),
            c.reason.as_deref().unwrap_or("").replace('|', "\\|").replace('\n', " "),
            c.runtimes_present
        ));
    }
    s
}

/// Writes `dotnet.md` and `dotnet.json` into `results/<utc>-matrix-dotnet/`.
pub fn write(cells: &[DotnetCell], results: &Path) -> Result<PathBuf> {
    super::write_result("dotnet", results, &markdown(cells), &cells)
}

/// The cells of a default run (`installed runtime × scenario`).
pub fn cells() -> Result<Vec<String>> {
    let scenarios = scenarios(&DotnetMatrixOptions::default())?;
    Ok(installed()?.iter().flat_map(|r| scenarios.iter().map(move |s| format!(".NET {r} / {s}"))).collect())
}

/// A run with default options, written to `results/`.
pub fn run_default() -> Result<PathBuf> {
    write(&run(&DotnetMatrixOptions::default(), &mut |_| {})?, &super::results_root())
}

/// `cargo xtask matrix dotnet`: runs the cells, prints each as it ends, writes the result folder;
/// an error when a cell failed.
pub fn run_and_print(options: &DotnetMatrixOptions) -> Result<()> {
    let cells = run(options, &mut |c| match &c.runtime {
        Some(runtime) => println!(
            ".NET {runtime:<10} {:<22} {} {} (runtimes present: {})",
            c.scenario,
            c.verdict.to_uppercase(),
            c.reason.as_deref().unwrap_or(""),
            c.runtimes_present
        ),
        None => println!(".NET {}: {}", c.wanted, c.reason.as_deref().unwrap_or("")),
    })?;
    println!("written to {}", write(&cells, &super::results_root())?.display());
    if cells.iter().any(|c| c.failed()) {
        anyhow::bail!("the .NET matrix has failures");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_names_the_runtime_or_what_was_asked() {
        let cells = vec![
            DotnetCell {
                wanted: "10.0".into(),
                runtime: Some("10.0.12".into()),
                scenario: "cpu-bound".into(),
                verdict: "pass".into(),
                reason: None,
                runtimes_present: "Microsoft.NETCore.App 10.0.12".into(),
            },
            DotnetCell {
                wanted: "8.0".into(),
                runtime: None,
                scenario: String::new(),
                verdict: "fail".into(),
                reason: Some("not installed | x".into()),
                runtimes_present: String::new(),
            },
        ];
        let md = markdown(&cells);
        assert!(md.contains("| 10.0.12 | cpu-bound | PASS |"), "{md}");
        assert!(md.contains("| 8.0 |  | FAIL | not installed \\| x |"), "{md}");
        assert!(cells[1].failed() && !cells[0].failed());
    }
}
