//! A trace file a user points at, outside any scenario (`cargo xtask trace …`): here, not in the
//! driver, so the driver links only harness and a test can call it.
//!
//! [`nettrace`]: a summary of a .nettrace (events by provider and name, lost events, sampling
//! interval, process, top leaf frames) and its SampleProfiler stacks as folded lines and a
//! speedscope file; the work is crates/eventpipe's `inspect` module.
//! [`perf_fold`]: perf.data → folded stacks (what `perf script | inferno-collapse-perf` gives, with
//! ReadyToRun frames named too), through `fold::fold_perf_file`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Prints the summary of `file` and writes FILE.folded and FILE.speedscope.json into `out`
/// (default `target/inspect/<file stem>/`). `full` decodes every payload too, streaming
/// (`eventpipe::inspect::full`): memory stays bounded whatever the file's size.
pub fn nettrace(file: &Path, out: Option<PathBuf>, full: bool) -> Result<()> {
    let opened = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string();
    let dir = out.unwrap_or_else(|| harness::project_root().join("target").join("inspect").join(&stem));
    let (folded, speedscope) = if full {
        let decoded = eventpipe::NettraceReader::from_file(opened)
            .and_then(eventpipe::inspect::full)
            .with_context(|| format!("decoding {}", file.display()))?;
        print!("{}", eventpipe::inspect::full_summary(&decoded, &file.display().to_string()));
        eventpipe::inspect::write_full_stacks(&decoded, &dir, &stem)
    } else {
        let options = eventpipe::DecodeOptions { keep_events: false, keep_samples: true };
        let decoded = eventpipe::decode(std::io::BufReader::new(opened), &options).with_context(|| format!("decoding {}", file.display()))?;
        print!("{}", eventpipe::inspect::summary(&decoded, &file.display().to_string()));
        eventpipe::inspect::write_stacks(&decoded, &dir, &stem)
    }
    .with_context(|| format!("writing into {}", dir.display()))?;
    println!("  wrote {} and {}", folded.display(), speedscope.display());
    Ok(())
}

/// Folds `file` (JIT frames from /tmp/perf-PID.map or a perf map beside the file, ReadyToRun
/// frames from the mapped assemblies, kernel from kallsyms or `symbols`) into `out`, or standard
/// output; what it found goes to standard error.
pub fn perf_fold(file: &Path, out: Option<&Path>, symbols: &[PathBuf]) -> Result<()> {
    let dir = file.parent().map(PathBuf::from).unwrap_or_default();
    // Recorded paths are this machine's: the recording is from the host (a container run's
    // recording is decoded by its scenario run, which knows the image's paths).
    let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = stacks::DecodeContext {
        artifacts: &dir,
        app_tmp_dir: Path::new("/tmp"),
        host_pid: 0,
        target_pid: 0,
        path_map: &identity,
        symbol_dirs: symbols,
    };
    let fold = stacks::fold_perf_file(file, &ctx)?;
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
        Some(path) => fold.folded.write_file(path),
        None => fold.folded.write_stdout(),
    }
}
