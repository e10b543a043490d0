use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(_sh: &Shell, _args: &[String]) -> Result<()> {
    bail!("`cargo xtask bench ctf` is not built yet")
}
