use anyhow::{Result, bail};
use xshell::Shell;

pub fn run(_sh: &Shell, _args: &[String]) -> Result<()> {
    bail!("`cargo xtask bench r2r` is not built yet")
}
