//! `cargo xtask ci …`: the nightly workflow (generate / check) and `boot`, which runs a shell
//! script in one kernel's guest (for debugging a matrix cell by hand).
use anyhow::{Result, bail};
use xshell::Shell;

use crate::flags::Ci;

pub fn run(_sh: &Shell, what: Ci) -> Result<()> {
    match what {
        Ci::Workflow { check: true } => {
            lab::ci::check()?;
            println!("{} is up to date", lab::ci::workflow_path().display());
            Ok(())
        }
        Ci::Workflow { check: false } => {
            let changed = lab::ci::write()?;
            let path = lab::ci::workflow_path();
            println!("{} {}", path.display(), if changed { "written" } else { "already up to date" });
            Ok(())
        }
        Ci::Boot { kernel, script, files, work_dir } => {
            let spec = lab::vm::kernel_spec(&kernel)?;
            let mut job = lab::vm::GuestJob::new(std::fs::read_to_string(&script)?);
            for f in files {
                let Some((h, g)) = f.split_once('=') else { bail!("--file wants HOST=GUEST, got `{f}`") };
                job = job.with(h, g);
            }
            let work = work_dir.unwrap_or_else(|| lab::vm::image::cache_dir().join(format!("boot-{}", spec.label)));
            let (k, outcome) = lab::vm::run_job(&spec, &job, &Default::default(), &work)?;
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
