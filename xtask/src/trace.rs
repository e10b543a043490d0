//! `cargo xtask trace inspect FILE.nettrace [--out DIR]`: prints a summary of a trace (events by
//! provider and name, lost events, sampling interval, process, top leaf frames) and writes its
//! SampleProfiler stacks as folded lines and a speedscope file into DIR (default
//! `target/inspect/<file stem>/`). The work is crates/eventpipe's `inspect` module.
//!
//! `cargo xtask trace fold PERF.DATA [--out FILE] [--symbols DIR]`: perf.data → folded stacks
//! (what `perf script | inferno-collapse-perf` gives, with ReadyToRun frames named too), through
//! harness's `collect::perf::fold_perf_file`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use eventpipe as nettrace;
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
    /// Fold a perf.data recording into stacks (JIT frames from /tmp/perf-PID.map or a perf map
    /// beside the file, ReadyToRun frames from the mapped assemblies, kernel from kallsyms).
    Fold {
        file: PathBuf,
        /// Write the folded stacks here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Symbol folders (.dbg files, kallsyms copies).
        #[arg(long)]
        symbols: Vec<PathBuf>,
    },
}

pub fn run(_sh: &Shell, args: &[String]) -> Result<()> {
    let args = Args::try_parse_from(std::iter::once("trace".to_string()).chain(args.iter().cloned()))?;
    let (file, out) = match args.command {
        TraceCommand::Inspect { file, out } => (file, out),
        TraceCommand::Fold { file, out, symbols } => return fold(user_path(file)?, out.map(user_path).transpose()?, &symbols),
    };
    let file = user_path(file)?;
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

/// Relative paths are the user's, not the project root xtask runs in.
fn user_path(path: PathBuf) -> Result<PathBuf> {
    Ok(if path.is_relative() { std::env::current_dir()?.join(path) } else { path })
}

fn fold(file: PathBuf, out: Option<PathBuf>, symbols: &[PathBuf]) -> Result<()> {
    let dir = file.parent().map(PathBuf::from).unwrap_or_default();
    // Recorded paths are this machine's: the recording is from the host (a container run's
    // recording is decoded by its scenario run, which knows the image's paths).
    let identity = |p: &std::path::Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = harness::collect::DecodeContext {
        artifacts: &dir,
        app_tmp_dir: std::path::Path::new("/tmp"),
        host_pid: 0,
        target_pid: 0,
        path_map: &identity,
        symbol_dirs: symbols,
    };
    let fold = harness::collect::perf::fold_perf_file(&file, &ctx)?;
    let text = harness::fold::folded_text(&fold.folded);
    for w in &fold.warnings {
        eprintln!("warning: {w}");
    }
    eprintln!(
        "{}: {} samples, {} distinct callchains, {} folded stacks; names from: {}",
        file.display(),
        fold.samples,
        fold.distinct_callchains,
        fold.folded.len(),
        if fold.sources.is_empty() { "nothing (no perf map, no kernel symbols)".to_string() } else { fold.sources.join("; ") }
    );
    match out {
        Some(path) => std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}
