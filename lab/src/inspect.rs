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
/// (default: beside `file`, see [`default_out`]). `full` decodes every payload too, streaming
/// (`eventpipe::inspect::full`): memory stays bounded whatever the file's size.
pub fn nettrace(file: &Path, out: Option<PathBuf>, full: bool) -> Result<()> {
    let opened = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("trace").to_string();
    let dir = match out {
        Some(dir) => dir,
        None => {
            let (dir, why) = default_out(file, &stem, &harness::project_root().join("target").join("inspect"))?;
            if let Some(why) = why {
                eprintln!("note: {why}; writing into {} instead (`--out DIR` to choose)", dir.display());
            }
            dir
        }
    };
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

/// Where `trace inspect` writes without `--out`: beside the trace, so two traces named alike in
/// two folders keep their own stacks (a shared `target/inspect/STEM/` once let one user's run
/// overwrite another's folded file within minutes). Where that folder cannot be written, a
/// folder of this run alone under `fallback` (`STEM-XXXXXX`), with why.
pub fn default_out(file: &Path, stem: &str, fallback: &Path) -> Result<(PathBuf, Option<String>)> {
    let beside = file.parent().map(Path::to_path_buf).unwrap_or_default();
    // Trying is the only answer that holds for root, ACLs and read-only mounts alike.
    match tempfile::NamedTempFile::new_in(&beside) {
        Ok(_) => Ok((beside, None)),
        Err(e) => {
            std::fs::create_dir_all(fallback).with_context(|| format!("cannot create {}", fallback.display()))?;
            let unique = tempfile::Builder::new()
                .prefix(&format!("{stem}-"))
                .tempdir_in(fallback)
                .with_context(|| format!("cannot create a folder in {}", fallback.display()))?
                .keep();
            Ok((unique, Some(format!("cannot write beside the trace in {} ({e})", beside.display()))))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_traces_named_alike_keep_their_own_stacks() {
        let trace = tracelab_fixtures::fixture("nettrace/fixture-dotnet-common.nettrace");
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for dir in [&a, &b] {
            std::fs::copy(&trace, dir.path().join("trace.nettrace")).unwrap();
            nettrace(&dir.path().join("trace.nettrace"), None, false).unwrap();
        }
        for dir in [&a, &b] {
            assert!(dir.path().join("trace.folded").metadata().unwrap().len() > 0);
            assert!(dir.path().join("trace.speedscope.json").is_file());
        }
    }

    #[test]
    fn an_unwritable_folder_falls_back_to_a_folder_of_its_own() {
        let fallback = tempfile::tempdir().unwrap();
        // A trace "in" a folder that cannot hold a file: its parent is a regular file.
        let not_a_dir = fallback.path().join("plain");
        std::fs::write(&not_a_dir, b"").unwrap();
        let (one, why) = default_out(&not_a_dir.join("t.nettrace"), "t", &fallback.path().join("inspect")).unwrap();
        let (two, _) = default_out(&not_a_dir.join("t.nettrace"), "t", &fallback.path().join("inspect")).unwrap();
        assert!(one != two && one.is_dir() && two.is_dir(), "{one:?} {two:?}");
        assert!(one.file_name().unwrap().to_str().unwrap().starts_with("t-"));
        assert!(why.unwrap().contains("cannot write beside the trace in"));
        let beside = tempfile::tempdir().unwrap();
        assert_eq!(default_out(&beside.path().join("t.nettrace"), "t", fallback.path()).unwrap(), (beside.path().to_path_buf(), None));
    }
}
