use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(_sh: &Shell, _args: &[String]) -> Result<()> {
    bail!("`cargo xtask ci` is not built yet")
}
