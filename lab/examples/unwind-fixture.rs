//! `unwind-fixture [OUT]`: the process `cargo xtask bench unwind` times, built in release so the
//! unwinder is optimised whatever profile the driver was built with. The body is
//! `lab::bench::unwind::unwind_main`.

fn main() -> anyhow::Result<()> {
    lab::bench::unwind::unwind_main(&std::env::args().skip(1).collect::<Vec<_>>())
}
