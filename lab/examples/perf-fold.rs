//! `perf-fold PERF.DATA PID [OUT]`: the process `cargo xtask bench perf` times, built in release so
//! the fold is optimised whatever profile the driver was built with. The body is
//! `lab::bench::perf::fold_main`.

fn main() -> anyhow::Result<()> {
    lab::bench::perf::fold_main(&std::env::args().skip(1).collect::<Vec<_>>())
}
