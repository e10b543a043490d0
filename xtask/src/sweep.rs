use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    bail!("`cargo xtask sweep` is not built yet")
}
