//! `cargo xtask …`: tracelab's driver. `flags` declares the whole command tree; `main` parses it
//! once and hands the chosen task its flags and a `Shell` rooted at the project root. Each
//! maintenance task (test, bench, matrix, images, codegen, ci, fuzz) is one module with a thin
//! `run`; the user's commands are the `tracelab` crate's, run exactly as the installed `tracelab`
//! runs them, with results in the checkout's `results/`. The substance lives in `harness` and
//! `lab`, which tests call without this driver.

mod bench;
mod ci;
mod codegen;
mod flags;
mod fuzz;
mod images;
mod matrix;
mod test;

use std::process::ExitCode;

use clap::Parser;
use flags::{Flags, Task};

fn main() -> ExitCode {
    // Usage errors and --help exit here, with clap's own message and code (2 and 0).
    let flags = Flags::parse();
    // The test task leaves interruption to nextest, which reports what it cancelled.
    let handle_signals = !matches!(flags.task, Task::Test(_));
    tracelab::main_with(handle_signals, || {
        let sh = xshell::Shell::new()?;
        sh.change_dir(harness::project_root());
        let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
        match flags.task {
            Task::User(command) => tracelab::run(command, &tracelab::Invocation::checkout()),
            Task::Test(f) => test::run(&sh, f),
            Task::Bench { what } => done(bench::run(&sh, what)),
            Task::Images(f) => done(images::run(&sh, f)),
            Task::Matrix(f) => done(matrix::run(&sh, f)),
            Task::Ci { what } => done(ci::run(&sh, what)),
            Task::Codegen(f) => done(codegen::run(&sh, f.check, f.record)),
            Task::Fuzz(f) => fuzz::run(f),
        }
    })
}
