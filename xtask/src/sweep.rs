//! `cargo xtask sweep`: removes what runs that are gone (killed with SIGKILL, crashed) left:
//! staging folders under results/ whose owner process is dead, the /tmp files (perf maps,
//! jitdumps, diagnostics sockets, debugger pipes) of the apps those runs started, and tracelab's
//! containers and volumes whose owner is dead. Anything of a run that is still alive is kept.
//! Every run does the same when it starts.

use anyhow::Result;
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    let root = harness::project_root().join("results");
    let swept = harness::owner::sweep_dead(&root, true)?;
    for line in swept.lines() {
        println!("removed {line}");
    }
    println!(
        "sweep: {} staging folders, {} /tmp files, {} containers, {} volumes removed; {} containers of live runs kept",
        swept.staging.len(),
        swept.files.len(),
        swept.containers.len(),
        swept.volumes.len(),
        swept.kept_alive
    );
    Ok(())
}
