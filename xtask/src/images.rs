//! `cargo xtask images [--suite bullseye,bookworm,trixie]`: builds the offline images
//! (harness::host::image); a second run with unchanged inputs only checks hashes.

use anyhow::{Context, Result};
use xshell::Shell;

use crate::flags::Images;

pub fn run(_sh: &Shell, args: Images) -> Result<()> {
    let docker = harness::host::docker::Docker::connect()?;
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().context("the runtime layer copies the local .NET")?;
    for name in &args.suite {
        let suite = harness::host::image::suite(name)?;
        let built = harness::host::image::build(&docker, suite, &dotnet.root)?;
        println!(
            "{:<9} rootfs {:<6} base {} {:<6} runtime {} {:<6} total {:.1} s",
            built.suite,
            if built.rootfs_reused { "cached" } else { "built" },
            harness::host::docker::short(built.base.id.trim_start_matches("sha256:")),
            if built.base.reused { "cached" } else { "built" },
            harness::host::docker::short(built.runtime.id.trim_start_matches("sha256:")),
            if built.runtime.reused { "cached" } else { "built" },
            built.duration.as_secs_f64()
        );
    }
    Ok(())
}
