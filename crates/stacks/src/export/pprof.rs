//! pprof profiles of a collection (`<collector>.pb.gz`, read by `go tool pprof`, Pyroscope,
//! Grafana), through the `pprof-profile` crate. Each sample keeps two values: how many samples,
//! and the time they stand for in the collector's own unit (CPU time for perf cpu-clock, blocked
//! time for off-CPU, thread time for SampleProfiler), labelled with its thread. Frame labels are
//! [`frame_label`]'s, the folded stacks' own, so the profile's functions are the folded frames.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pprof_profile::{Builder, FrameName, Label};

use crate::fold::{NO_STACK, frame_label};
use model::Collection;

/// The file a collection's profile goes to, beside its speedscope file.
pub fn file_name(collector: &str) -> String {
    format!("{collector}.pb.gz")
}

/// The second value's (type, unit) and the nanoseconds one weight-1 sample stands for, by what the
/// collector measures.
fn time_value(coll: &Collection) -> (&'static str, Option<i64>) {
    if coll.weight_ns {
        return ("off_cpu", None);
    }
    if let Some(hz) = coll.metrics.get("frequency_hz").filter(|hz| **hz > 0.0) {
        return ("cpu", Some((1e9 / hz).round() as i64));
    }
    let interval = coll.metrics.get("sampling_interval_ms").filter(|ms| **ms > 0.0).copied().unwrap_or(1.0);
    ("thread_time", Some((interval * 1e6).round() as i64))
}

/// Builds the pprof profile of one collection; `run` is every collection of its run (thread
/// names another collector saw).
pub fn profile(coll: &Collection, run: &[Collection]) -> Result<pprof_profile::Profile> {
    let (kind, per_sample_ns) = time_value(coll);
    let count = if coll.weight_ns { "switches" } else { "samples" };
    let mut b = Builder::new(&[(count, "count"), (kind, "nanoseconds")]);
    if let Some(ns) = per_sample_ns {
        b.period((kind, "nanoseconds"), ns);
    }
    b.default_sample_type(kind);
    let first = coll.samples.iter().map(|s| s.time_ns).min().unwrap_or(0);
    let last = coll.samples.iter().map(|s| s.time_ns).max().unwrap_or(0);
    b.time(crate::export::firefox::unix_ns_of_monotonic(first), (last - first) as i64);
    b.comment(&format!("tracelab collector {}", coll.collector));
    let thread_name = |tid: u32| -> String {
        crate::export::firefox::thread_name(coll, run, tid).map(String::from).unwrap_or_else(|| format!("thread {tid}"))
    };
    let mut names: std::collections::HashMap<u32, String> = Default::default();
    let no_stack = [FrameName { name: NO_STACK, file: "" }];
    for s in &coll.samples {
        let labels: Vec<(String, String)> = s.frames.iter().map(|f| (frame_label(f), f.dso.clone().unwrap_or_else(|| f.class.as_str().to_string()))).collect();
        let frames: Vec<FrameName> = labels.iter().map(|(name, file)| FrameName { name, file }).collect();
        let frames = if frames.is_empty() { no_stack.to_vec() } else { frames };
        let time_ns = match per_sample_ns {
            Some(ns) => ns.saturating_mul(s.weight as i64),
            None => s.weight as i64,
        };
        let thread = names.entry(s.tid).or_insert_with(|| thread_name(s.tid)).clone();
        let mut sample_labels = vec![Label::text("thread", &thread), Label::number("tid", i64::from(s.tid), "")];
        if let Some(state) = &s.kind {
            sample_labels.push(Label::text("state", state));
        }
        let count = if coll.weight_ns { 1 } else { s.weight as i64 };
        b.add_sample(frames, &[count, time_ns], &sample_labels).context("building the pprof profile")?;
    }
    Ok(b.build())
}

/// Writes `<run_dir>/<collector>.pb.gz`; returns its path.
pub fn write(coll: &Collection, run: &[Collection], run_dir: &Path) -> Result<PathBuf> {
    let path = run_dir.join(file_name(&coll.collector));
    let bytes = pprof_profile::encode_gzip(&profile(coll, run)?);
    std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn perf_cpu() -> Collection {
        let d = crate::perf_fixtures::decode_fixture("perf-cpu", 16459, 16459, &[], &|_| None);
        let mut coll = d.collection;
        coll.metrics.insert("frequency_hz".into(), 999.0);
        coll
    }

    /// Self (leaf) weight per frame label, from folded stacks.
    fn folded_leaves(coll: &Collection) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for (stack, weight) in crate::fold::fold(coll) {
            let leaf = stack.rsplit(';').next().unwrap().to_string();
            *out.entry(leaf).or_default() += weight as i64;
        }
        out
    }

    /// Self weight per function name of value `index`, read back through the published schema.
    fn profile_leaves(p: &pprof_profile::Profile, index: usize) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for s in &p.sample {
            let loc = p.location.iter().find(|l| l.id == s.location_id[0]).unwrap();
            let func = p.function.iter().find(|f| f.id == loc.line[0].function_id).unwrap();
            *out.entry(p.string(func.name).to_string()).or_default() += s.value[index];
        }
        out
    }

    #[test]
    fn decoded_profile_has_the_folded_stacks_leaves_and_cpu_time() {
        let coll = perf_cpu();
        let bytes = pprof_profile::encode_gzip(&profile(&coll, &[]).unwrap());
        let p = pprof_profile::decode(&bytes).unwrap();
        let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (p.string(t.r#type), p.string(t.unit))).collect();
        assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
        assert_eq!(p.period, 1_001_001);
        assert_eq!(profile_leaves(&p, 0), folded_leaves(&coll), "every leaf, with the folded stacks' labels and counts");
        let cpu: i64 = p.sample.iter().map(|s| s.value[1]).sum();
        assert_eq!(cpu, coll.samples.len() as i64 * 1_001_001);
        // Thread labels carry perf's thread names.
        let thread = p.string_table.iter().position(|s| s == "thread").unwrap() as i64;
        assert!(p.sample.iter().all(|s| s.label.iter().any(|l| l.key == thread && !p.string(l.str).starts_with("thread "))));
    }

    #[test]
    fn offcpu_profile_weighs_blocked_nanoseconds() {
        let mut coll = Collection::new("perf-offcpu");
        coll.weight_ns = true;
        let frame = model::Frame { name: Some("W::Wait()".into()), dso: None, class: model::DsoClass::Jit, addr: 0 };
        for t in 0..3u64 {
            coll.samples.push(model::Sample { weight: 400_000, kind: Some("blocked".into()), ..model::Sample::new(1, 2, t, vec![frame.clone()]) });
        }
        let p = profile(&coll, &[]).unwrap();
        assert_eq!(p.string(p.sample_type[1].r#type), "off_cpu");
        assert_eq!(p.sample[0].value, vec![3, 1_200_000]);
    }

    /// `go tool pprof -top` (Go's reader of the published schema) on the written file lists the
    /// folded stacks' top functions with their sample counts.
    #[test]
    fn go_tool_pprof_top_matches_the_folded_stacks() {
        let test = "fold::pprof::tests::go_tool_pprof_top_matches_the_folded_stacks";
        if let Err(why) = tracelab_fixtures::require_program("go") {
            return tracelab_fixtures::skip(test, format!("{why} (Debian golang-go; cargo xtask setup --tests installs it)"));
        }
        let coll = perf_cpu();
        let dir = tempfile::tempdir().unwrap();
        let path = write(&coll, &[], dir.path()).unwrap();
        let out = std::process::Command::new("go")
            // `-symbolize=none`: the names are in the file; pprof's symbolizer would otherwise
            // strip `(…)` from names with `::` as if they were demangled C++. `-nodefraction=0`:
            // by default -top hides functions under 0.5 % of the total even among the top 5.
            .args(["tool", "pprof", "-top", "-nodecount=5", "-nodefraction=0", "-sample_index=samples", "-symbolize=none"])
            .arg(&path)
            .env("HOME", dir.path())
            .env("PPROF_TMPDIR", dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}\n{text}", String::from_utf8_lossy(&out.stderr));
        // Rows: `flat flat% sum% cum cum% NAME`.
        let rows: Vec<(i64, String)> = text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .skip(1)
            .filter_map(|l| {
                let mut cols = l.split_whitespace();
                let flat = cols.next()?.parse().ok()?;
                let name = l.split_whitespace().skip(5).collect::<Vec<_>>().join(" ");
                Some((flat, name))
            })
            .collect();
        let mut want: Vec<(i64, String)> = folded_leaves(&coll).into_iter().map(|(n, w)| (w, n)).collect();
        want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        assert_eq!(rows.len(), 5, "{text}");
        for (row, top) in rows.iter().zip(&want) {
            assert_eq!(row.0, top.0, "{text}");
        }
        let names: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        for (w, n) in want.iter().take(5) {
            // Ties may list in either order; names must all be there, as the folded stacks spell them.
            if want.iter().filter(|(x, _)| x == w).count() == 1 {
                assert!(names.contains(&n.as_str()), "{n} ({w}) missing from\n{text}");
            }
        }
    }
}
