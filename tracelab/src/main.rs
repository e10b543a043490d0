//! `tracelab`: the user's commands as an installed binary (`cargo install --path tracelab`). It
//! parses the tree once and runs the command through the library; results go to `results/` in
//! the working folder, built-in scenarios come from the checkout it was installed from (or
//! `$TRACELAB_HOME`).

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "tracelab", version, about = "tracelab: prove the Linux diagnostics pipeline for .NET with real runs", after_help = judge::exit::TABLE)]
struct Flags {
    #[command(subcommand)]
    command: tracelab::Command,
}

fn main() -> ExitCode {
    // Usage errors and --help exit here, with clap's own message and code (2 and 0).
    let flags = Flags::parse();
    tracelab::main_with(true, || tracelab::run(flags.command, &tracelab::Invocation::installed()?))
}
