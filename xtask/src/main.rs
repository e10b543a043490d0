//! `cargo xtask …`: tracelab's driver. `flags` declares the whole command tree; `main` parses it
//! once and hands the chosen task its flags and a `Shell` rooted at the project root. Each task is
//! one module with a thin `run`; the substance lives in `harness`, which tests call without this
//! driver.

mod bench;
mod check_image;
mod ci;
mod codegen;
mod doctor;
mod flags;
mod fuzz;
mod images;
mod init;
mod list;
mod matrix;
mod open;
mod report;
mod scenario;
mod soak;
mod setup;
mod sweep;
mod test;
mod trace;

use std::process::ExitCode;

use clap::Parser;
use flags::{Flags, Task};

fn main() -> ExitCode {
    // Usage errors and --help exit here, with clap's own message and code (2 and 0).
    let flags = Flags::parse();
    // Before anything starts (builds included): Ctrl-C / SIGTERM stop this run's processes and
    // remove its containers, /tmp files and staging folder, then exit 130 / 143. The test task
    // leaves interruption to nextest, which reports what it cancelled.
    if !matches!(flags.task, Task::Test(_)) {
        harness::host::owner::install();
    }
    quiet_on_closed_stdout();
    let run = || xshell::Shell::new().map_err(anyhow::Error::from).and_then(|sh| {
        sh.change_dir(harness::project_root());
        let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
        match flags.task {
            Task::Scenario(f) => scenario::run(&sh, f),
            Task::List => done(list::run(&sh)),
            Task::Doctor(f) => doctor::run(&sh, f),
            Task::Setup(f) => setup::run(&sh, f),
            Task::Test(f) => test::run(&sh, f),
            Task::Bench { what } => done(bench::run(&sh, what)),
            Task::Images(f) => done(images::run(&sh, f)),
            Task::Sweep => done(sweep::run(&sh)),
            Task::Matrix(f) => done(matrix::run(&sh, f)),
            Task::Trace { what } => done(trace::run(&sh, what)),
            Task::Report(f) => done(report::run(&sh, f)),
            Task::Open(f) => done(open::run(&sh, f)),
            Task::Ci { what } => done(ci::run(&sh, what)),
            Task::Codegen(f) => done(codegen::run(&sh, f.check, f.record)),
            Task::Soak(f) => soak::run(&sh, f),
            Task::Fuzz(f) => fuzz::run(f),
            Task::Init(f) => done(init::run(f)),
            Task::CheckImage(f) => done(check_image::run(f)),
        }
    });
    // A panic unwinds (running the guards that stop processes and remove files) to here.
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(result) => result,
        Err(panic) if is_closed_stdout(panic_text(&*panic)) => {
            // The signal thread may be cleaning up already (a progress line found stderr
            // closed): returning now would end the process under it. It finishes, exits 141.
            harness::host::owner::output_closed();
            harness::host::owner::await_signal_exit();
            return ExitCode::from(judge::exit::CLOSED_STDOUT);
        }
        Err(panic) => std::panic::resume_unwind(panic),
    };
    // Interrupted: the handler ends the process with 130 / 143 once it has cleaned up.
    harness::host::owner::await_signal_exit();
    result.unwrap_or_else(|e| {
        // A task that wrote to our own closed output (`trace fold … | head`) and returned the
        // error instead of panicking: 141 as well. (A broken pipe to a child process is an error.)
        if broke_own_pipe(&e) {
            harness::host::owner::output_closed();
            harness::host::owner::await_signal_exit();
            return ExitCode::from(judge::exit::CLOSED_STDOUT);
        }
        // One `error:` prefix even when a message (a tool's stderr) already carries its own.
        let msg = format!("{e:#}");
        harness::host::owner::say(&format!("error: {}", msg.strip_prefix("error: ").unwrap_or(&msg)));
        // Around the pipeline (a results folder on a full disk, Docker): 5. Anything else that
        // ends a command before it ran is a usage or scenario-file error: 2.
        ExitCode::from(if harness::host::errors::is_infrastructure(&e) { judge::exit::ERROR } else { judge::exit::USAGE })
    })
}

/// Rust ignores SIGPIPE, so a print to a closed pipe panics: that panic stops the task quietly
/// (no message, no backtrace), its guards run as it unwinds, and the exit status is 141, what a
/// shell shows for a program ended by SIGPIPE (as `cat` would be) — for stdout and stderr alike
/// (`… 2>&1 | head -2`). Any other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_closed_stdout(panic_text(info.payload())) {
            report(info);
        }
    }));
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied()).unwrap_or("")
}

/// std's message for a failed `print!` or `eprint!`, when the reason is a closed pipe.
fn is_closed_stdout(text: &str) -> bool {
    (text.starts_with("failed printing to stdout") || text.starts_with("failed printing to stderr")) && text.contains("Broken pipe")
}

/// `err` is a broken pipe and our own stdout or stderr is the pipe that broke.
fn broke_own_pipe(err: &anyhow::Error) -> bool {
    let broken_pipe = err.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe));
    broken_pipe && harness::host::owner::output_is_closed()
}
