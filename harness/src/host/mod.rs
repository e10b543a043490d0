//! The machine and this process, below every stage: what this run owns and who removes it, the
//! processes it starts, the runtime's files in /tmp, Docker, the .NET SDK, the images apps run
//! in, machine facts and progress output.
//!
//! Invariant: nothing here imports `run`, `collect` or anything above them. A stage may ask the
//! host for a process, a container or a fact; the host never asks a stage.

/// What this process owns (staging folders, children, /tmp files) and who removes it: the signal
/// handler, the guardian, the next run's sweep.
pub mod owner;
pub mod sweep;
pub mod proc;
pub mod runtime_files;
/// Failures around the pipeline (`Infrastructure`, exit 5) and environments that cannot work
/// (`Unsupported`, exit 4).
pub mod errors;
pub mod docker;
/// Pods through `podman kube play`: images moved from Docker, labels, sweeps.
pub mod podman;
pub mod dotnet;
pub mod image;
pub mod environment;
pub mod progress;
