//! `cargo xtask sweep`: removes what runs that are gone (killed with SIGKILL, crashed) left —
//! exactly the list in its `--help` (xtask/src/flags.rs), done by `harness::host::sweep::sweep_dead`,
//! which every run also calls when it starts. Anything of a run that is still alive is kept.

use anyhow::Result;
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    let root = harness::project_root().join("results");
    let swept = harness::host::sweep::sweep_dead(&root, true)?;
    for line in swept.lines() {
        println!("removed {line}");
    }
    println!(
        "sweep: {} staging folders, {} /tmp files, {} temporary folders, {} containers, {} volumes, {} pods removed; {} containers and pods of live runs kept",
        swept.staging.len(),
        swept.files.len(),
        swept.scratch.len(),
        swept.containers.len(),
        swept.volumes.len(),
        swept.pods.len(),
        swept.kept_alive
    );
    Ok(())
}
