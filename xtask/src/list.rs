use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    bail!("`cargo xtask list` is not built yet")
}
