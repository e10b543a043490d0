//! `cargo xtask trace inspect FILE.nettrace [--out DIR]`: prints a summary of a trace (events by
//! provider and name, lost events, sampling interval, process, top leaf frames) and writes its
//! SampleProfiler stacks as folded lines and a speedscope file into DIR (default
//! `target/inspect/<file stem>/`). The work is crates/eventpipe's `inspect` module.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use harness::collect::eventpipe::nettrace;
use xshell::Shell;

#[derive(Parser, Debug)]
#[command(name = "trace")]
struct Args {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Summarise a .nettrace file and write its stacks (folded, speedscope).
    Inspect {
        file: PathBuf,
        /// Where to write FILE.folded and FILE.speedscope.json.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let args = Args::try_parse_from(std::iter::once("trace".to_string()).chain(args.iter().cloned()))?;
    let TraceCommand::Inspect { file, out } = args.command;
    // Relative paths are the user's, not the project root xtask runs in.
    let file = if file.is_relative() { std::env::current_dir()?.join(&file) } else { file };
    let reader = std::io::BufReader::new(std::fs::File::open(&file).with_context(|| format!("cannot open {}", file.display()))?);
    let options = nettrace::DecodeOptions { keep_events: false, keep_samples: true };
    let decoded = nettrace::decode(reader, &options).with_context(|| format!("decoding {}", file.display()))?;
    print!("{}", nettrace::inspect::summary(&decoded, &file.display().to_string()));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string();
    let dir = out.unwrap_or_else(|| harness::project_root().join("target").join("inspect").join(&stem));
    let (folded, speedscope) =
        nettrace::inspect::write_stacks(&decoded, &dir, &stem).with_context(|| format!("writing into {}", dir.display()))?;
    println!("  wrote {} and {}", folded.display(), speedscope.display());
    Ok(())
}
