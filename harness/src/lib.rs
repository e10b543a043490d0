//! One scenario of tracelab, end to end (shared/DESIGN.md §2): build the workload, run it on a
//! target, collect, decode, judge, report. `engine` sequences the stages.
//!
//! Code map, in the order the pipeline runs (arrows run one way, down this list's reverse):
//! - `host`: the machine and this process — what this run owns and who removes it (`owner`,
//!   `sweep`), processes and their namespaces (`proc`), the runtime's files in /tmp, Docker,
//!   the .NET SDK, container images, machine facts, progress output, and the two errors a run
//!   turns into a verdict other than FAIL (`errors`). Imports nothing else of the harness.
//! - `scenario`: the TOML — workload, collectors, target, expectations, checked whole at load.
//! - `workload`: the app under test, built or found.
//! - `run`: where the app runs (host, container, sidecar) and how it is made ready and stopped.
//! - `collect`: the collectors; the [`collect::Collector`] trait in `collect/mod.rs`, dispatch
//!   on the scenario's kinds in `collect/spec.rs`.
//! - `report`: results folders, manifest, summary, tables, the merged report and JUnit.
//! - `engine`: one run in phases (launch, collect, stop, decode), then judge and report.
//!
//! Below it: `model` (the data), `stacks` (symbolize, unwind, fold, export), `judge` (checks and
//! exit codes), and the format crates. Above it: `lab` (many runs, the machine) and the binaries.
//! Invariant: the harness never benches, never probes a matrix and never writes CI files; it
//! runs one scenario. `lab` and the binaries import it, never the other way.

pub mod host;

pub mod scenario;
pub mod workload;
pub mod run;
pub mod collect;
pub mod report;
pub mod engine;

/// The variable naming the tracelab checkout to use instead of the one a binary was built from.
pub const HOME_VAR: &str = "TRACELAB_HOME";

/// The tracelab checkout whose built-in scenarios and workloads a run uses and whose `.build/`
/// holds its caches: `$TRACELAB_HOME`, else the checkout this binary was built from — an installed
/// `tracelab` keeps reading the folder `cargo install --path` was given (see [`checkout`]).
pub fn project_root() -> std::path::PathBuf {
    match std::env::var_os(HOME_VAR).filter(|h| !h.is_empty()) {
        Some(home) => home.into(),
        None => built_from(),
    }
}

/// The checkout this binary was compiled in (the folder holding the workspace Cargo.toml).
pub fn built_from() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// [`project_root`] when it holds the built-in scenarios and workloads; else an error naming the
/// folder and what to set. An installed binary outlives its checkout (moved, deleted, a build
/// folder cleaned): that is said once, before anything runs, not as a missing scenario.
pub fn checkout() -> anyhow::Result<std::path::PathBuf> {
    let root = project_root();
    if root.join("scenarios").is_dir() && root.join("workloads").is_dir() {
        return Ok(root);
    }
    let whence = if std::env::var_os(HOME_VAR).is_some_and(|h| !h.is_empty()) {
        format!("${HOME_VAR}")
    } else {
        "the checkout this binary was built from".to_string()
    };
    anyhow::bail!(
        "tracelab's built-in scenarios and workloads are read from {whence}, {}, which has no scenarios/ and workloads/: \
         set {HOME_VAR} to a tracelab checkout (or reinstall: `cargo install --path tracelab` in one); \
         your own scenario files (a path to a .toml) need no checkout but for their workload's build",
        root.display()
    )
}

/// `../shared` beside the project root (read-only: fixtures, reference, toolchains), or
/// `$TRACELAB_SHARED`.
pub fn shared_dir() -> std::path::PathBuf {
    if let Ok(dir) = std::env::var("TRACELAB_SHARED") {
        return dir.into();
    }
    project_root().parent().unwrap().join("shared")
}
