//! `cargo xtask ci …`: the nightly workflow (generate / check) and `boot`, which runs a shell
//! script in one kernel's guest (for debugging a matrix cell by hand).
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use xshell::Shell;

#[derive(Parser)]
#[command(name = "cargo xtask ci")]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Write ci/nightly.yml from the scenarios and the matrix axes (`--check`: only compare).
    Workflow {
        #[arg(long)]
        check: bool,
    },
    /// Boot one kernel of the matrix and run a shell script in it; prints the job's output.
    Boot {
        /// 5.10 | 6.1 | 6.12 (or the suite name)
        #[arg(long, default_value = "6.1")]
        kernel: String,
        /// The script to run in the guest (its output is in out/job.log).
        script: PathBuf,
        /// Files to place in the guest: HOST=GUEST (absolute guest path).
        #[arg(long = "file")]
        files: Vec<String>,
        /// Where to keep the console log and the results (default: .build/vm/boot-KERNEL).
        #[arg(long)]
        work_dir: Option<PathBuf>,
    },
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let cli = Cli::try_parse_from(std::iter::once("ci".to_string()).chain(args.iter().cloned()))?;
    match cli.what {
        What::Workflow { check: true } => {
            harness::workflow::check()?;
            println!("{} is up to date", harness::workflow::workflow_path().display());
            Ok(())
        }
        What::Workflow { check: false } => {
            let changed = harness::workflow::write()?;
            let path = harness::workflow::workflow_path();
            println!("{} {}", path.display(), if changed { "written" } else { "already up to date" });
            Ok(())
        }
        What::Boot { kernel, script, files, work_dir } => {
            let spec = harness::vm::kernel_spec(&kernel)?;
            let mut job = harness::vm::GuestJob::new(std::fs::read_to_string(&script)?);
            for f in files {
                let Some((h, g)) = f.split_once('=') else { bail!("--file wants HOST=GUEST, got `{f}`") };
                job = job.with(h, g);
            }
            let work = work_dir.unwrap_or_else(|| harness::vm::image::cache_dir().join(format!("boot-{}", spec.label)));
            let (k, outcome) = harness::vm::run_job(&spec, &job, &Default::default(), &work)?;
            println!("{}", outcome.job_log());
            println!(
                "kernel {} ({}) exit {:?} in {:.1} s; results in {}, console {}",
                k.release,
                k.package,
                outcome.exit_code,
                outcome.wall.as_secs_f64(),
                outcome.out_dir.display(),
                outcome.console_log.display()
            );
            if outcome.exit_code != Some(0) {
                bail!("the guest job failed; console tail:\n{}", outcome.console_tail(30));
            }
            Ok(())
        }
    }
}
