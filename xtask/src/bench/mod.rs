//! `cargo xtask bench WHAT`: each benchmark times tracelab and the peer tool on the same input in
//! one run and prints both rates and the ratio.

mod ctf;
mod nettrace;
mod overhead;
mod perf;
mod r2r;
mod unwind;

use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(sh: &Shell, what: &str, args: &[String]) -> Result<()> {
    match what {
        "perf" => perf::run(sh, args),
        "nettrace" => nettrace::run(sh, args),
        "ctf" => ctf::run(sh, args),
        "r2r" => r2r::run(sh, args),
        "unwind" => unwind::run(sh, args),
        "overhead" => overhead::run(sh, args),
        other => bail!("unknown benchmark `{other}`: expected perf, nettrace, ctf, r2r, unwind or overhead"),
    }
}
