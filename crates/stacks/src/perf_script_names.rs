//! Our raw symbol names (`Frame::name`, before any display shortening or code-version merging)
//! against `perf script`'s, frame by frame, on every perf.data fixture in ../shared/fixtures/perf.
//!
//! Two perf answers are compared: the one recorded beside each fixture (`NAME.script.txt`, perf
//! on the recording machine with the runtime's perf map in /tmp, so JIT frames are named) and
//! `perf script` run here and now on the same file (no perf map in /tmp: perf names no JIT
//! frame; kernel names from the fixture's kallsyms through `--kallsyms`). Each difference is
//! counted by kind — we name more, perf names more, we disagree — and printed; "we disagree"
//! must be 0. Differences that are only perf's decoration (`+0x1a` offsets, `[unknown]`) are
//! not differences.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::perf_fixtures::decode_fixture;
use model::{DsoClass, Frame};
use crate::symbolize::{AddressSpace, Mapping};
use tracelab_fixtures::prerequisites;
use tracelab_fixtures::require_program;

use super::perf_script::{ScriptFrame, ScriptSample, parse_script};

fn fixture(name: &str) -> PathBuf {
    tracelab_fixtures::fixture(&format!("perf/{name}"))
}

/// How our name and perf's compare for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Same,
    BothUnnamed,
    WeNameMore,
    PerfNamesMore,
    WeDisagree,
}

#[derive(Default)]
struct Tally {
    frames: BTreeMap<Kind, u64>,
    /// (kind, dso, ours, perf's) → frames.
    examples: BTreeMap<(Kind, String, String, String), u64>,
    /// Frames perf has beyond our callchain (its own DWARF unwinding of the user stack).
    perf_unwound_beyond: u64,
}

impl Tally {
    fn add(&mut self, kind: Kind, dso: &str, ours: Option<&str>, theirs: Option<&str>) {
        *self.frames.entry(kind).or_default() += 1;
        if !matches!(kind, Kind::Same | Kind::BothUnnamed) {
            let key = (kind, dso.to_string(), ours.unwrap_or("-").to_string(), theirs.unwrap_or("[unknown]").to_string());
            *self.examples.entry(key).or_default() += 1;
        }
    }

    fn count(&self, kind: Kind) -> u64 {
        self.frames.get(&kind).copied().unwrap_or(0)
    }

    fn report(&self, what: &str) -> String {
        let mut out = format!(
            "{what}: same {}, both unnamed {}, we name more {}, perf names more {}, we disagree {}; frames only perf's DWARF unwinding reached: {}\n",
            self.count(Kind::Same),
            self.count(Kind::BothUnnamed),
            self.count(Kind::WeNameMore),
            self.count(Kind::PerfNamesMore),
            self.count(Kind::WeDisagree),
            self.perf_unwound_beyond,
        );
        let mut rows: Vec<_> = self.examples.iter().collect();
        rows.sort_by(|a, b| a.0.0.cmp(&b.0.0).then(b.1.cmp(a.1)));
        let mut shown: BTreeMap<Kind, usize> = BTreeMap::new();
        for ((kind, dso, ours, theirs), n) in rows {
            let seen = shown.entry(*kind).or_default();
            *seen += 1;
            // Every disagreement; the 12 most frequent of the other kinds.
            if *kind != Kind::WeDisagree && *seen > 12 {
                continue;
            }
            out.push_str(&format!("  {kind:?} ×{n}: ours `{ours}`, perf `{theirs}` ({dso})\n"));
        }
        out
    }
}

/// Every `NAME.data` fixture with the pids the runtime named its perf map with: (name, host
/// pid, pid in the app's namespace).
fn perf_fixtures() -> Vec<(String, u32, u32)> {
    let dir = tracelab_fixtures::fixture("perf");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".data").map(str::to_string))
        .collect();
    names.sort();
    let files: Vec<String> = std::fs::read_dir(&dir).unwrap().flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect();
    names
        .into_iter()
        .map(|name| {
            let prefix = format!("{name}.perf-");
            let ns_pid: u32 = files
                .iter()
                .find_map(|f| f.strip_prefix(&prefix)?.strip_suffix(".map")?.parse().ok())
                .unwrap_or_else(|| panic!("fixture {name}: no {name}.perf-PID.map beside it"));
            let host_pid = std::fs::read_to_string(dir.join(format!("{name}.pids.txt")))
                .ok()
                .and_then(|t| t.split_whitespace().find_map(|w| w.strip_prefix("host_pid=")?.parse().ok()))
                .unwrap_or(ns_pid);
            (name, host_pid, ns_pid)
        })
        .collect()
}

/// A symbol folder holding the recording kernel's kallsyms (names kernel frames for us).
fn kallsyms_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("kallsyms-6.18.txt.xz"), dir.path().join("kallsyms-6.18.txt.xz")).unwrap();
    dir
}

/// Files at the recorded path on this machine, as a host run reads them; each is used only when
/// its build id is the recording's.
fn host_files(p: &Path) -> Option<PathBuf> {
    p.is_file().then(|| p.to_path_buf())
}

/// Compares one fixture's decode with one perf answer; panics on a sample or frame that does
/// not line up (different sample count, time or address: the comparison would be meaningless).
fn compare(name: &str, host_pid: u32, ns_pid: u32, script: &[ScriptSample], source: &str, tally: &mut Tally) {
    let kallsyms = kallsyms_dir();
    let decoded = decode_fixture(name, host_pid, ns_pid, &[kallsyms.path().to_path_buf()], &host_files);
    let ours = &decoded.collection.samples;
    assert_eq!(ours.len(), script.len(), "{name}: tracelab decodes {} samples, {source} {}", ours.len(), script.len());
    let mut spaces: BTreeMap<u32, AddressSpace> = BTreeMap::new();
    for m in decoded.recording.mmaps.iter().filter(|m| !m.in_kernel) {
        spaces.entry(m.pid).or_default().insert(Mapping {
            start: m.start,
            end: m.start.saturating_add(m.len),
            pgoff: m.pgoff,
            path: m.path.clone(),
            build_id: None,
            class: DsoClass::of_mapping(&m.path),
        });
    }
    for (i, (sample, theirs)) in ours.iter().zip(script).enumerate() {
        assert_eq!(sample.time_ns / 1000, theirs.time_us, "{name} sample {i}: times differ ({source})");
        for (j, frame) in sample.frames.iter().enumerate() {
            let Some(perf) = theirs.frames.get(j) else {
                panic!("{name} sample {i}: we have {} frames, {source} {}", sample.frames.len(), theirs.frames.len());
            };
            // perf prints a file-backed frame's address relative to the file, the rest as is.
            let relative = spaces.get(&sample.pid).and_then(|s| s.lookup(frame.addr)).map(|m| m.file_offset(frame.addr));
            assert!(
                perf.addr == frame.addr || Some(perf.addr) == relative,
                "{name} sample {i} frame {j}: ours at {:#x} ({relative:x?} in its file), {source} at {:#x}",
                frame.addr,
                perf.addr
            );
            let kind = classify(frame, perf);
            tally.add(kind, &perf.dso, frame.name.as_deref(), perf.symbol.as_deref());
        }
        tally.perf_unwound_beyond += theirs.frames.len().saturating_sub(sample.frames.len()) as u64;
    }
}

fn classify(ours: &Frame, perf: &ScriptFrame) -> Kind {
    match (ours.name.as_deref(), perf.symbol.as_deref()) {
        (None, None) => Kind::BothUnnamed,
        (Some(_), None) => Kind::WeNameMore,
        (None, Some(_)) => Kind::PerfNamesMore,
        (Some(a), Some(b)) if a == b => Kind::Same,
        // A module's kernel symbol: we keep kallsyms' `name [module]`, perf prints the module as
        // the dso.
        (Some(a), Some(b)) if a.strip_suffix(&format!(" {}", perf.dso)) == Some(b) => Kind::Same,
        (Some(_), Some(_)) => Kind::WeDisagree,
    }
}

/// perf's answer recorded beside each fixture (`NAME.script.txt`).
#[test]
fn raw_names_match_the_recorded_perf_script_of_every_fixture() {
    let mut report = String::new();
    let mut disagree = 0;
    for (name, host_pid, ns_pid) in perf_fixtures() {
        let source = format!("{name}.script.txt");
        let script = parse_script(&std::fs::read_to_string(fixture(&source)).unwrap(), &source).unwrap();
        let mut tally = Tally::default();
        compare(&name, host_pid, ns_pid, &script, &source, &mut tally);
        disagree += tally.count(Kind::WeDisagree);
        report.push_str(&tally.report(&format!("{name} vs {source}")));
    }
    println!("{report}");
    assert_eq!(disagree, 0, "we disagree with perf script:\n{report}");
}

/// `perf script` run here on each fixture, kernel names from the fixture's kallsyms.
#[test]
fn raw_names_match_perf_script_run_here_on_every_fixture() {
    let test = "collect::perf_script_names::raw_names_match_perf_script_run_here_on_every_fixture";
    if !prerequisites(test, &[&|| require_program("perf")]) {
        return;
    }
    let perf = std::path::PathBuf::from("perf");
    let dir = tempfile::tempdir().unwrap();
    let kallsyms = dir.path().join("kallsyms");
    let mut text = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(std::fs::File::open(fixture("kallsyms-6.18.txt.xz")).unwrap()), &mut text).unwrap();
    std::fs::write(&kallsyms, text).unwrap();
    let mut report = String::new();
    let mut disagree = 0;
    for (name, host_pid, ns_pid) in perf_fixtures() {
        // perf refuses a perf.data it does not own unless forced; read a copy.
        let data = dir.path().join(format!("{name}.data"));
        std::fs::copy(fixture(&format!("{name}.data")), &data).unwrap();
        let out = Command::new(&perf)
            .args(["script", "-F", "comm,pid,tid,time,ip,sym,dso", "--kallsyms"])
            .arg(&kallsyms)
            .arg("-i")
            .arg(&data)
            .output()
            .unwrap();
        if !out.status.success() {
            let why = format!("`perf script` cannot read {name}.data here: {}", String::from_utf8_lossy(&out.stderr).trim());
            return tracelab_fixtures::skip(test, why);
        }
        let source = format!("perf script here on {name}.data");
        let script = parse_script(&String::from_utf8_lossy(&out.stdout), &source).unwrap();
        let mut tally = Tally::default();
        compare(&name, host_pid, ns_pid, &script, &source, &mut tally);
        disagree += tally.count(Kind::WeDisagree);
        report.push_str(&tally.report(&source));
    }
    println!("{report}");
    assert_eq!(disagree, 0, "we disagree with perf script:\n{report}");
}
