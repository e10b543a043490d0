//! tracelab's pipeline (shared/DESIGN.md §2). Each module is one stage, named after it; stages
//! talk through plain data (artifact paths and the [`model`]), so each can be tested alone on a
//! recorded fixture. `xtask` only parses arguments and calls into here.

pub mod model;

// Set-up: the .NET toolchain and the apps under test.
pub mod dotnet;
pub mod workload;

// What to run and what to expect.
pub mod scenario;

// Where the app runs: host, container, sidecar.
pub mod target;
pub mod docker;
pub mod image;
pub mod caps;
pub mod vm;
pub mod workflow;

// Observing the app, then turning raw artifacts into the model.
pub mod collect;
pub mod symbolize;
pub mod unwind;

// Judging and writing down.
pub mod fold;
pub mod assert;
pub mod report;
pub mod environment;
pub mod engine;
pub mod overhead;
pub mod r2r_cost;

pub mod progress;
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
