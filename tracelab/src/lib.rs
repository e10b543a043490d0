//! tracelab's user commands — scenario, list, init, setup, doctor, check-image, trace, open,
//! report, sweep, soak — as one library both binaries call: `tracelab` (what users install,
//! `src/main.rs`) and `cargo xtask` (the checkout's maintenance driver, which flattens
//! [`Command`] into its own tree). One declaration of the flags (`flags`), one thin module per
//! command with a `run`; the substance stays in `harness` (one run) and `lab` (many runs, the
//! machine). [`main_with`] is the process around a command both binaries share: signals, a
//! closed output, the exit-code table.
//!
//! Where a command finds things is the [`Invocation`]'s decision, not the command's: result
//! folders go to `results/` of the working folder for `tracelab`, of the checkout for `cargo
//! xtask` (as they always have); built-in scenarios and workloads come from the checkout
//! (`harness::checkout`, `$TRACELAB_HOME`); `../shared` from `$TRACELAB_SHARED`.
//!
//! Invariant: only the two binaries import this crate; it imports `harness`, `lab` and `judge`.

mod check_image;
mod doctor;
mod exit;
mod flags;
mod init;
mod list;
mod open;
mod report;
mod scenario;
mod setup;
mod soak;
mod sweep;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

pub use exit::main_with;
pub use flags::Command;
pub use setup::prepare;

/// Which program runs a command, and so where its output goes when no flag says.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// The program as the user types it (`tracelab`, `cargo xtask`), for hints that name a command.
    pub program: &'static str,
    /// Where result folders go without `--results`.
    pub results: PathBuf,
}

impl Invocation {
    /// The installed `tracelab`: `results/` in the working folder, as a user's tool writes where it
    /// is run.
    pub fn installed() -> anyhow::Result<Invocation> {
        Ok(Invocation { program: "tracelab", results: std::env::current_dir()?.join("results") })
    }

    /// `cargo xtask`: the checkout's `results/`, wherever cargo was started.
    pub fn checkout() -> Invocation {
        Invocation { program: "cargo xtask", results: harness::project_root().join("results") }
    }
}

/// Runs one user command to its exit code (`judge::exit`); an error is the caller's to report
/// ([`main_with`] does).
pub fn run(command: Command, at: &Invocation) -> anyhow::Result<ExitCode> {
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Scenario(f) => scenario::run(f, at),
        Command::List => done(list::run()),
        Command::Doctor(f) => doctor::run(f),
        Command::Setup(f) => setup::run(f),
        Command::Sweep => done(sweep::run(at)),
        Command::Trace { what } => done(trace::run(what)),
        Command::Report(f) => done(report::run(f, at)),
        Command::Open(f) => done(open::run(f, at)),
        Command::Soak(f) => soak::run(f, at),
        Command::Init(f) => done(init::run(f, at)),
        Command::CheckImage(f) => done(check_image::run(f, at)),
    }
}
