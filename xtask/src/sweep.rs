//! `cargo xtask sweep`: removes tracelab containers and volumes left by runs that are gone
//! (killed with SIGKILL, crashed). Containers of a run that is still alive are left alone.

use anyhow::Result;
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    let docker = harness::docker::Docker::connect()?;
    let swept = docker.sweep(false)?;
    for id in &swept.containers {
        println!("removed container {}", harness::docker::short(id));
    }
    for v in &swept.volumes {
        println!("removed volume {v}");
    }
    println!(
        "sweep: {} containers, {} volumes removed; {} containers of live runs kept",
        swept.containers.len(),
        swept.volumes.len(),
        swept.kept_alive.len()
    );
    Ok(())
}
