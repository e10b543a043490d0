//! The files people open, written for each collection with samples: folded stacks and flame
//! graphs, speedscope, Firefox Profiler, pprof, and one perfcollect-style trace.zip per run for
//! PerfView.

use std::collections::BTreeMap;

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
            c.samples.push(Sample { pid: 1, tid: 1, time_ns: i * 10_000_000, weight: 1, frames: vec![frame], kind: None });
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
}
