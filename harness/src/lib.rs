//! tracelab's pipeline (shared/DESIGN.md §2). Each module is one stage, named after it; stages
//! talk through plain data (artifact paths and the [`model`]), so each can be tested alone on a
//! recorded fixture. Arrows run one way along the pipeline: workload → image → run → collect →
//! symbolize / unwind → fold → assert → report; `engine` sequences them. `xtask` only parses
//! arguments and calls into here.

pub mod model;
/// Failures around the pipeline (Docker, image builds, crashed tools): the `error` verdict.
pub mod infra;
/// What this process owns (staging folders, children, /tmp files, containers) and who removes
/// it: the signal handler, the guardian, the next run's sweep.
pub mod owner;

// What to run and what to expect: the scenario file.
pub mod scenario;

// Building the app under test and the images it runs in.
pub mod dotnet;
pub mod workload;
pub mod image;

// Where the app runs: host, container (through `docker`), sidecar, or a qemu guest (`vm`).
pub mod run;
pub mod docker;
pub mod vm;

// Observing the app, then turning raw artifacts into the model.
pub mod collect;
pub mod symbolize;
pub mod unwind;
/// What a frame's label shows (one naming scheme for every writer of stacks).
pub mod naming;

// Judging and writing down.
pub mod fold;
pub mod assert;
pub mod report;

// Sequencing one scenario through every stage.
pub mod engine;

// Around the pipeline: the machine's facts (doctor), compatibility matrices, benchmarks, the
// nightly workflow generator, one-off looks at trace files (inspect), progress output and test helpers.
pub mod environment;
pub mod doctor;
pub mod matrix;
pub mod bench;
pub mod inspect;
pub mod viewer;
pub mod workflow;
/// The tables generated from the runtime's event manifest (`cargo xtask codegen`).
pub mod codegen;
pub mod progress;
/// Repeating scenarios (optionally beside a CPU hog) and counting verdicts: `cargo xtask soak`.
pub mod soak;
pub mod check_image;
/// What a scenario or the tests need from the machine, and the one installer (`cargo xtask setup`).
pub mod prereq;
pub mod testing;

/// The project root (the folder holding the workspace Cargo.toml).
pub fn project_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `../shared` beside the project root (read-only: fixtures, reference, toolchains).
pub fn shared_dir() -> std::path::PathBuf {
    if let Ok(dir) = std::env::var("TRACELAB_SHARED") {
        return dir.into();
    }
    project_root().parent().unwrap().join("shared")
}
