//! `cargo xtask images [--suite bullseye,bookworm,trixie]`: builds the offline images
//! (harness::image); a second run with unchanged inputs only checks hashes.

use anyhow::{Context, Result};
use clap::Parser;
use xshell::Shell;

#[derive(Parser)]
#[command(name = "cargo xtask images", about = "Build the offline container images (debootstrap rootfs + .NET runtime)")]
struct Args {
    /// Comma-separated Debian suites, built in this order (bullseye first: LTTng and the
    /// perf-in-container cases need it).
    #[arg(long, value_delimiter = ',', default_value = "bullseye,bookworm,trixie")]
    suite: Vec<String>,
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let args = Args::try_parse_from(std::iter::once("images".to_string()).chain(args.iter().cloned()))?;
    let docker = harness::docker::Docker::connect()?;
    let dotnet = harness::dotnet::Dotnet::locate_or_install().context("the runtime layer copies the local .NET")?;
    for name in &args.suite {
        let suite = harness::image::suite(name)?;
        let built = harness::image::build(&docker, suite, &dotnet.root)?;
        println!(
            "{:<9} rootfs {:<6} base {} {:<6} runtime {} {:<6} total {:.1} s",
            built.suite,
            if built.rootfs_reused { "cached" } else { "built" },
            harness::docker::short(built.base.id.trim_start_matches("sha256:")),
            if built.base.reused { "cached" } else { "built" },
            harness::docker::short(built.runtime.id.trim_start_matches("sha256:")),
            if built.runtime.reused { "cached" } else { "built" },
            built.duration.as_secs_f64()
        );
    }
    Ok(())
}
