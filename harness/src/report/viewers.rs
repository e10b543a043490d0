//! The files people open, written for each collection with samples: folded stacks and flame
//! graphs, speedscope, Firefox Profiler, pprof, and one perfcollect-style trace.zip per run for
//! PerfView; and, for summary.md and the last line a run prints, each such file with one line on
//! how to open it (a list of file names alone left a new user guessing which tool reads which).

use std::collections::BTreeMap;
use std::path::Path;

use model::Collection;

use super::ResultsDir;
// Warnings through `say`: never a panic on a closed stderr (which ends the run as a closed
// output does, its staging folder removed).
use crate::host::owner::say;
use crate::scenario::Scenario;

/// Folded stacks, flame graphs and speedscope files for every collection with samples.
/// Folded stacks, flame graphs and the files viewers open, per collection with samples; returns
/// the viewer files written, per collector (a file that could not be written is a warning: the
/// verdict does not depend on it).
pub(crate) fn write_stacks(dir: &ResultsDir, scenario: &Scenario, collections: &[Collection]) -> BTreeMap<String, Vec<String>> {
    let mut viewer_files: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in collections.iter().filter(|c| !c.samples.is_empty()) {
        if let Err(e) = stacks::write_all(c, &scenario.name, dir.path(), &dir.stacks()) {
            say(&format!("warning: could not write stacks for `{}`: {e:#}", c.collector));
        }
        let firefox = stacks::firefox::ProfileInput { collection: c, run: collections, product: &scenario.name };
        let written = [
            Ok(dir.path().join(format!("{}.speedscope.json", c.collector))),
            stacks::firefox::write(&firefox, dir.path()),
            stacks::pprof::write(c, collections, dir.path()),
        ];
        for file in written {
            match file {
                Ok(path) if path.is_file() => viewer_files
                    .entry(c.collector.clone())
                    .or_default()
                    .push(path.file_name().unwrap_or_default().to_string_lossy().into_owned()),
                Ok(_) => {}
                Err(e) => say(&format!("warning: could not write a viewer file for `{}`: {e:#}", c.collector)),
            }
        }
    }
    // One perfcollect-style trace.zip per run: perf's on-CPU samples and the LTTng CTF folder.
    let kind_of = |c: &Collection| scenario.collectors.iter().find(|s| s.name() == c.collector).map(|s| s.kind());
    let perf = collections.iter().find(|c| kind_of(c) == Some(crate::collect::CollectorKind::PerfCpu) && !c.samples.is_empty());
    let lttng = collections
        .iter()
        .filter(|c| kind_of(c) == Some(crate::collect::CollectorKind::Lttng))
        .map(|c| dir.artifacts().join(format!("lttng-{}", c.collector)))
        .find(|d| d.is_dir());
    let input = stacks::perfcollect::TraceZipInput {
        name: &scenario.name,
        perf,
        run: collections,
        lttng_dir: lttng.as_deref(),
        runtime_files: stacks::perfcollect::runtime_files(&dir.artifacts()),
    };
    match stacks::perfcollect::write(&input, dir.path()) {
        Ok(Some(path)) => {
            let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            for c in collections.iter().filter(|c| perf.is_some_and(|p| std::ptr::eq(p, *c)) || kind_of(c) == Some(crate::collect::CollectorKind::Lttng)) {
                viewer_files.entry(c.collector.clone()).or_default().push(file.clone());
            }
        }
        Ok(None) => {}
        Err(e) => say(&format!("warning: could not write the trace.zip: {e:#}")),
    }
    viewer_files
}

/// A file of a run folder that a viewer opens, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewerFile {
    /// Relative to the run folder.
    pub path: String,
    /// How to open it, in one line.
    pub how: &'static str,
}

/// How to open a viewer file, by its name.
fn how_to_open(file: &str) -> Option<&'static str> {
    Some(match () {
        _ if file.ends_with(".svg") => "a flame graph: open it in a browser (click a frame to zoom, Ctrl-F to search)",
        _ if file.ends_with(".firefox.json.gz") => {
            "Firefox Profiler: `cargo xtask open <this folder>/FILE` serves it to profiler.firefox.com (or load it there from file)"
        }
        _ if file.ends_with(".speedscope.json") => "speedscope: drag it onto https://www.speedscope.app (it stays in the browser), or `speedscope FILE`",
        _ if file.ends_with(".pb.gz") => "pprof: `go tool pprof -top -symbolize=none FILE` (or `-http=:8080` for its web view)",
        // The perfcollect collector keeps the real script's zip among the raw files.
        _ if file.starts_with("artifacts/") && file.ends_with(".trace.zip") => {
            "PerfView (Windows): File → Open; perfcollect's own recording of this run, as the script wrote it"
        }
        _ if file.ends_with(".trace.zip") => "PerfView (Windows): File → Open; perf's on-CPU samples (and LTTng's events, when the run had LTTng) as perfcollect writes them",
        _ if file.ends_with(".nettrace") => "EventPipe trace: PerfView, or `cargo xtask trace inspect FILE` (summary, folded stacks, speedscope)",
        _ => return None,
    })
}

/// Every file of the run folder `dir` a viewer opens, with how: the flame graphs, the files
/// listed in `viewer_files` (per collector, once each), the EventPipe traces in artifacts/ (an
/// event-only scenario's only viewer file) and perfcollect's own trace.zip there.
pub fn viewer_list(dir: &Path, viewer_files: &BTreeMap<String, Vec<String>>) -> Vec<ViewerFile> {
    let names_in = |sub: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(sub))
            .map(|rd| rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_file())).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    let mut paths: Vec<String> = names_in("").into_iter().filter(|n| n.starts_with("flamegraph") && n.ends_with(".svg")).collect();
    // A collector's flame graph before its by-leaf view.
    paths.sort_by_key(|n| (n.replace(".leaves.svg", ".svg"), n.ends_with(".leaves.svg")));
    for file in viewer_files.values().flatten() {
        if !paths.contains(file) && dir.join(file).is_file() {
            paths.push(file.clone());
        }
    }
    // A scenario of several launches keeps each launch's recordings in artifacts/run-N/.
    let mut launches: Vec<String> = std::fs::read_dir(dir.join("artifacts"))
        .map(|rd| rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| format!("artifacts/{}", e.file_name().to_string_lossy())).collect())
        .unwrap_or_default();
    launches.sort();
    for sub in std::iter::once("artifacts".to_string()).chain(launches) {
        paths.extend(names_in(&sub).into_iter().filter(|n| n.ends_with(".nettrace") || n.ends_with(".trace.zip")).map(|n| format!("{sub}/{n}")));
    }
    paths.into_iter().filter_map(|path| Some(ViewerFile { how: how_to_open(&path)?, path })).collect()
}

/// The line a finished run prints last: the first thing to open (a flame graph, else the first
/// viewer file), where the rest are listed, in the run folder `dir`.
pub fn open_next(dir: &Path, viewer_files: &BTreeMap<String, Vec<String>>) -> String {
    let list = viewer_list(dir, viewer_files);
    let summary = dir.join("summary.md");
    let first = list.iter().find(|v| v.path.ends_with(".svg") && !v.path.ends_with(".leaves.svg")).or(list.first());
    match first {
        Some(v) => format!(
            "open next: {} ({}); all {} viewer files and how to open each: {}",
            dir.join(&v.path).display(),
            v.how.split(':').next().unwrap_or(v.how),
            list.len(),
            summary.display()
        ),
        None => format!("open next: {} (no viewer files: no collector recorded samples or a trace)", summary.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use model::{DsoClass, Frame, Sample};

    /// One perf-cpu collection: thread 1 sampled at 100 Hz for 4 s, all in `W::Hot()`.
    fn collection() -> Collection {
        let mut c = Collection::new("perf-cpu");
        for i in 0..400u64 {
            let frame = Frame { name: Some("W::Hot()".into()), dso: None, class: DsoClass::Jit, addr: 0 };
            c.samples.push(Sample::new(1, 1, i * 10_000_000, vec![frame]));
        }
        c
    }

    fn scenario(expect: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\nworkload = \"cpu-bound\"\n[[collector]]\nkind = \"perf-cpu\"\nfrequency = 100\n{expect}"
        );
        Scenario::from_toml(&text, Path::new("s.toml")).unwrap()
    }

    /// A run with samples writes the viewer files beside its speedscope file and lists them.
    #[test]
    fn viewer_files_are_written_and_listed_per_collector() {
        let root = tempfile::tempdir().unwrap();
        let dir = ResultsDir::create(root.path(), "s").unwrap();
        let mut c = collection();
        c.metrics.insert("frequency_hz".into(), 100.0);
        let files = write_stacks(&dir, &scenario(""), &[c]);
        let listed = &files["perf-cpu"];
        for f in ["perf-cpu.speedscope.json", "perf-cpu.firefox.json.gz", "perf-cpu.pb.gz", "s.trace.zip"] {
            assert!(listed.iter().any(|l| l == f), "{f} not listed: {listed:?}");
            assert!(dir.path().join(f).is_file(), "{f} not written");
        }
        assert!(!dir.path().join(".s.trace.zip.partial").exists());
    }

    /// Each viewer file is listed once with how to open it, the .nettrace of an event-only
    /// scenario too; the last line names a flame graph and the summary.
    #[test]
    fn viewer_list_says_how_to_open_each_file() {
        let root = tempfile::tempdir().unwrap();
        let dir = ResultsDir::create(root.path(), "s").unwrap();
        let mut c = collection();
        c.metrics.insert("frequency_hz".into(), 100.0);
        let files = write_stacks(&dir, &scenario(""), &[c]);
        std::fs::write(dir.artifacts().join("eventpipe.nettrace"), "Nettrace").unwrap();
        std::fs::create_dir_all(dir.artifacts().join("run-2")).unwrap();
        std::fs::write(dir.artifacts().join("run-2/dotnet-trace.nettrace"), "Nettrace").unwrap();
        std::fs::write(dir.artifacts().join("perfcollect.trace.zip"), "PK").unwrap();
        let list = viewer_list(dir.path(), &files);
        let paths: Vec<&str> = list.iter().map(|v| v.path.as_str()).collect();
        for f in ["flamegraph-perf-cpu.svg", "perf-cpu.speedscope.json", "perf-cpu.firefox.json.gz", "perf-cpu.pb.gz", "s.trace.zip", "artifacts/eventpipe.nettrace", "artifacts/run-2/dotnet-trace.nettrace"] {
            assert_eq!(paths.iter().filter(|p| **p == f).count(), 1, "{f}: {paths:?}");
        }
        let how = |f: &str| list.iter().find(|v| v.path == f).unwrap().how;
        assert!(how("perf-cpu.speedscope.json").contains("speedscope.app"));
        assert!(how("perf-cpu.firefox.json.gz").contains("cargo xtask open"));
        assert!(how("perf-cpu.pb.gz").contains("go tool pprof"));
        assert!(how("s.trace.zip").contains("PerfView"));
        assert!(how("artifacts/perfcollect.trace.zip").contains("perfcollect's own recording"));
        assert!(how("artifacts/eventpipe.nettrace").contains("PerfView") && how("artifacts/eventpipe.nettrace").contains("trace inspect"));
        assert!(how("flamegraph-perf-cpu.svg").contains("browser"));
        let line = open_next(dir.path(), &files);
        assert!(line.starts_with(&format!("open next: {} (a flame graph)", dir.path().join("flamegraph-perf-cpu.svg").display())), "{line}");
        assert!(line.ends_with("summary.md"), "{line}");
    }
}
