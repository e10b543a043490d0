//! `tracelab sweep`: removes what runs that are gone (killed with SIGKILL, crashed) left —
//! exactly the list in its `--help` (flags.rs), done by `harness::host::sweep::sweep_dead`,
//! which every run also calls when it starts. Anything of a run that is still alive is kept.

use anyhow::Result;

use crate::Invocation;

pub fn run(at: &Invocation) -> Result<()> {
    let swept = harness::host::sweep::sweep_dead(&at.results, true)?;
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
