//! The process around one command, the same for both binaries: Ctrl-C and SIGTERM stop what the
//! command started (exit 130 / 143), a closed stdout or stderr ends it quietly with 141 (as `cat`
//! would be), and an error becomes its exit code — 5 around the pipeline (Docker, a full disk), 2
//! for anything that stopped a command before it ran — under one `error:` prefix.

use std::process::ExitCode;

/// Runs `task` as the whole process and returns the exit code to end it with. With
/// `handle_signals` false the task leaves interruption to a child that reports what it cancelled
/// (xtask's `test` and nextest).
pub fn main_with(handle_signals: bool, task: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    // Before anything starts (builds included): Ctrl-C / SIGTERM stop this run's processes and
    // remove its containers, /tmp files and staging folder, then exit 130 / 143.
    if handle_signals {
        harness::host::owner::install();
    }
    quiet_on_closed_stdout();
    // A panic unwinds (running the guards that stop processes and remove files) to here.
    let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)) {
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
