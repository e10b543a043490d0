//! `r2r-cost SPEC_JSON`: the process `cargo xtask bench r2r` times, built in release so the timed
//! loop is optimised whatever profile the driver was built with. The body is
//! `lab::bench::r2r::child_main`.

fn main() -> anyhow::Result<()> {
    lab::bench::r2r::child_main(&std::env::args().skip(1).collect::<Vec<_>>())
}
