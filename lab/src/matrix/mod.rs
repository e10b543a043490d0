//! Compatibility matrices: one axis varies one thing of the environment (container capability
//! set, Debian suite, kernel, .NET runtime) and records per cell whether tracelab works there and
//! the exact reason when it does not. Every axis has the same shape ([`Axis`]: name, description,
//! its cells, a run with default options) and writes through one writer ([`write_result`]), so
//! `cargo xtask matrix` is a thin dispatcher and results look alike.
//!
//! Matrices sit above the engine: they run scenarios (or collectors) as a user would. Collectors
//! never run the engine themselves.

pub mod caps;
pub mod dotnet;
pub mod kernels;
pub mod lttng;
pub mod pods;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

/// One axis of the matrix.
pub struct Axis {
    /// The name users type (`cargo xtask matrix caps`).
    pub name: &'static str,
    /// One line on what varies and what a cell records.
    pub description: &'static str,
    /// The cells a run with default options would probe, without running anything.
    pub cells: fn() -> Result<Vec<String>>,
    /// Runs the axis with default options and writes its result folder; returns the folder.
    pub run: fn() -> Result<PathBuf>,
}

/// Every axis, in the order `--all` runs them.
pub const AXES: &[Axis] = &[
    Axis {
        name: "caps",
        description: "container capability sets × collectors: which least set works, with the exact error of each failure",
        cells: caps::cells,
        run: caps::run_default,
    },
    Axis {
        name: "kernels",
        description: "Debian kernels (qemu guests) × scenarios: each scenario's verdict per kernel",
        cells: kernels::cells,
        run: kernels::run_default,
    },
    Axis {
        name: "dotnet",
        description: ".NET runtimes × scenarios on the host: each scenario's verdict per installed runtime",
        cells: dotnet::cells,
        run: dotnet::run_default,
    },
    Axis {
        name: "lttng",
        description: "Debian suites (LTTng 2.12 / 2.13 / newer) × the LTTng scenarios: PASS, or SKIPPED with the soname reason",
        cells: lttng::cells,
        run: lttng::run_default,
    },
    Axis {
        name: "pods",
        description: "pod shapes (podman kube play) × collectors: expected vs got per cell, the tools' capabilities, the reason of each SKIP",
        cells: pods::cells,
        run: pods::run_default,
    },
];

/// The axis named `name`.
pub fn axis(name: &str) -> Result<&'static Axis> {
    AXES.iter().find(|a| a.name == name).with_context(|| {
        format!(
            "unknown matrix axis `{name}`: expected one of {} (or --list, --all)",
            AXES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Writes `<axis>.md` and `<axis>.json` into `results/<utc>-matrix-<axis>/`: a temp folder
/// renamed at the end, so a reader never sees half a result.
pub fn write_result(axis: &str, results: &Path, markdown: &str, json: &impl Serialize) -> Result<PathBuf> {
    std::fs::create_dir_all(results).with_context(|| format!("cannot create {}", results.display()))?;
    let final_dir = results.join(format!("{}-matrix-{axis}", harness::report::utc_stamp()));
    let tmp = tempfile::Builder::new().prefix(&format!(".matrix-{axis}-")).tempdir_in(results)?;
    std::fs::write(tmp.path().join(format!("{axis}.json")), serde_json::to_string_pretty(json)?)?;
    std::fs::write(tmp.path().join(format!("{axis}.md")), markdown)?;
    let tmp = tmp.keep();
    std::fs::rename(&tmp, &final_dir).with_context(|| format!("cannot rename into {}", final_dir.display()))?;
    Ok(final_dir)
}

/// `results/` of the project, where matrix folders go unless a caller says otherwise.
pub fn results_root() -> PathBuf {
    harness::project_root().join("results")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_leaves_one_complete_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = write_result("caps", dir.path(), "# t\n", &serde_json::json!({"a": 1})).unwrap();
        assert!(out.file_name().unwrap().to_string_lossy().ends_with("-matrix-caps"));
        assert!(out.join("caps.md").is_file() && out.join("caps.json").is_file());
        // No half-written folder is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn axes_are_named_once_and_found() {
        let mut names: Vec<&str> = AXES.iter().map(|a| a.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), AXES.len());
        assert_eq!(axis("lttng").unwrap().name, "lttng");
        assert!(axis("gpu").err().unwrap().to_string().contains("caps, kernels, dotnet, lttng, pods"));
    }
}
