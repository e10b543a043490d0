use std::process::ExitCode;

use xshell::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario name (scenarios/NAME.toml) or path to a TOML file.
    pub name: String,
}

pub fn run(_sh: &Shell, _args: Args) -> ExitCode {
    eprintln!("not built yet");
    ExitCode::from(2)
}
