//! One integration-test binary (ripgrep's layout: one link, many modules). Tests here run the
//! real thing (dotnet, perf, docker, LTTng); each skips with a printed reason when a prerequisite
//! is absent locally and fails in CI (see `harness::testing`).

mod containers;
mod eventpipe;
mod lttng;
mod matrix;
mod perf;
mod progress;
mod r2r;
mod report;
mod scenarios;
mod unwind;
mod workloads;
