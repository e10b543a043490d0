//! `cargo xtask bench WHAT`: each benchmark times tracelab and the peer tool on the same input in
//! one run and prints both rates and the ratio. The benchmarks are `lab::bench`; this only
//! turns flags into their options.

use anyhow::Result;
use lab::bench;
use xshell::Shell;

use crate::flags::{Bench, R2r, R2rStream};

pub fn run(_sh: &Shell, what: Bench) -> Result<()> {
    match what {
        Bench::Perf { inputs, binary, frequency, runs, record } => {
            bench::perf::run(&bench::perf::Options { inputs, frequency, runs, rerecord: record, binary })
        }
        Bench::Nettrace { trace, sizes, runs, record } => bench::nettrace::run(&bench::nettrace::Options { trace, sizes, runs, record }),
        Bench::Ctf { trace, runs, record, record_runs, scales } => bench::ctf::run(&bench::ctf::Options { trace, runs, record, record_runs, scales }),
        Bench::Unwind { runs } => bench::unwind::run(&bench::unwind::Options { runs }),
        Bench::Overhead { repeats, seconds } => bench::overhead::run(&bench::overhead::Options { repeats, seconds }),
        Bench::R2r(f) => bench::r2r::run(&r2r_options(f)),
    }
}

fn r2r_options(flags: R2r) -> bench::r2r::Options {
    let R2r { stream, frames, gap_fraction, seed, images, runs, rerecord, seconds, frequency } = flags;
    let stream = match stream {
        R2rStream::Constructed => bench::r2r::StreamKind::Constructed,
        R2rStream::Recorded => bench::r2r::StreamKind::Recorded,
        R2rStream::Both => bench::r2r::StreamKind::Both,
    };
    bench::r2r::Options { stream, frames, gap_fraction, seed, images, runs, rerecord, seconds, frequency }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::flags::{Flags, Task};

    fn args(v: &[&str]) -> Result<bench::r2r::Options> {
        let flags = Flags::try_parse_from(["xtask", "bench", "r2r"].iter().chain(v))?;
        let Task::Bench { what: Bench::R2r(f) } = flags.task else { unreachable!("parsed as bench r2r") };
        let o = r2r_options(f);
        o.check()?;
        Ok(o)
    }

    #[test]
    fn defaults_are_one_million_frames_both_streams() {
        let a = args(&[]).unwrap();
        assert_eq!(a.frames, 1_000_000);
        assert_eq!(a.stream, bench::r2r::StreamKind::Both);
        assert_eq!(a.gap_fraction, 0.1);
        assert!(a.images.is_empty());
    }

    #[test]
    fn options_parse() {
        let a = args(&["--stream", "constructed", "--frames", "1000", "--gap-fraction", "0.25", "--image", "System.Linq.dll", "--image", "System.Private.CoreLib.dll", "--runs", "2"]).unwrap();
        assert_eq!(a.stream, bench::r2r::StreamKind::Constructed);
        assert_eq!((a.frames, a.gap_fraction, a.runs), (1000, 0.25, 2));
        assert_eq!(a.images, ["System.Linq.dll", "System.Private.CoreLib.dll"]);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(args(&["--gap-fraction", "1"]).is_err());
        assert!(args(&["--runs", "0"]).is_err());
        assert!(args(&["--stream", "other"]).is_err());
    }
}
