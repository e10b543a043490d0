//! Integration tests: precompiled (ReadyToRun) framework frames, named by tracelab from the
//! mapped assemblies, held against ground truth — the same workload with `DOTNET_ReadyToRun=0`,
//! whose framework code the JIT compiles and the runtime's perf map names — and against EventPipe.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use judge::Verdict;
use harness::engine;
use harness::engine::{RunOptions, RunOutcome};
use model::{MethodName, merge_code_version};
use harness::scenario::{FRAMEWORK_ASSEMBLIES, Scenario};
use harness::run::TargetKind;
use tracelab_fixtures::{prerequisites, require_root};

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

fn describe(o: &RunOutcome) -> String {
    let checks: Vec<String> = o
        .manifest
        .checks
        .iter()
        .map(|c| format!("{} {}: expected {}; measured {}\n{}", c.verdict.upper(), c.name, c.expected, c.measured, c.details.join("\n")))
        .collect();
    format!("{:?} {:?}\n{}", o.verdict, o.reason, checks.join("\n"))
}

/// Framework methods by inclusive sample count from a folded-stacks file (`root;…;leaf COUNT`,
/// frames labelled by model: `Namespace.Type::Method(params)`, no assembly), heaviest
/// first: an independent reading of what the run saw. A label carries no assembly, so framework
/// code is told by its namespace (System.*, Microsoft.*), which FRAMEWORK_ASSEMBLIES also matches.
fn top_framework_methods(folded: &Path, top: usize) -> Vec<(String, u64)> {
    let assembly = regex::Regex::new(FRAMEWORK_ASSEMBLIES).unwrap();
    let text = std::fs::read_to_string(folded).unwrap_or_else(|e| panic!("{}: {e}", folded.display()));
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {line:?}"));
        let count: u64 = count.parse().unwrap();
        let mut seen = HashSet::new();
        for frame in stack.split(';') {
            let framework = MethodName::parse(frame)
                .and_then(|m| m.assembly.or_else(|| m.qualified.split_once('.').map(|(first, _)| first)))
                .is_some_and(|a| assembly.is_match(a));
            if framework && seen.insert(frame) {
                *by_name.entry(frame.to_string()).or_default() += count;
            }
        }
    }
    let mut ranked: Vec<(String, u64)> = by_name.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(top);
    ranked
}

/// Every name in the perf map(s) of a run's artifacts folder, as folded stacks label them.
fn perf_map_names(artifacts: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(artifacts).unwrap().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.starts_with("perf-") && file.ends_with(".map") {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                if let Some(name) = line.splitn(3, ' ').nth(2) {
                    names.insert(model::method_label(merge_code_version(name)).into_owned());
                }
            }
        }
    }
    names
}

/// `cargo xtask scenario framework-frames --target host`, plus the ground truth read straight from
/// the artifacts: the R2R run's ten hottest framework methods (inclusive) — all of them named by
/// tracelab's ReadyToRun resolver, the scenario's checks say — exist by exactly that name in the
/// perf map the runtime wrote in the `DOTNET_ReadyToRun=0` run.
#[test]
fn framework_frames_host_r2r_names_match_the_jit_run_perf_map() {
    if !prerequisites("r2r::framework_frames_host", &[&require_root, &perf_available]) {
        return;
    }
    let scenario = Scenario::find("framework-frames").unwrap();
    let (o, _results) = crate::until_decided("framework-frames", || {
        let results = tempfile::tempdir().unwrap();
        let opts = RunOptions { target: Some(TargetKind::Host), results_root: Some(results.path().into()), ..Default::default() };
        (engine::run(&scenario, &opts).unwrap_or_else(|e| panic!("framework-frames: {e:#}")), results)
    });
    crate::report::assert_junit_valid(&o.dir);
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));

    let check = |prefix: &str| {
        o.manifest.checks.iter().find(|c| c.name.starts_with(prefix)).unwrap_or_else(|| panic!("no check `{prefix}…`"))
    };
    let inclusive = check("R2R names = perf-map names (top 10 inclusive");
    assert!(inclusive.values["common"] >= 7.0, "{}", describe(&o));
    assert!(inclusive.values["r2r_in_top_first"] >= 8.0, "{}", describe(&o));
    assert_eq!(inclusive.values["r2r_unmatched"], 0.0, "{}", describe(&o));
    let eventpipe = check("EventPipe names perf's hot framework methods");
    assert_eq!(eventpipe.values["r2r_unmatched"], 0.0, "{}", describe(&o));
    for c in [inclusive, check("R2R names = perf-map names (top 10 by leaf"), eventpipe] {
        eprintln!("{}: {}\n{}", c.name, c.measured, c.details.join("\n"));
    }

    // The scenario's runs: 1 = R2R (perf-cpu), 2 = DOTNET_ReadyToRun=0 (perf-jit).
    let jit_map = perf_map_names(&o.dir.join("artifacts/run-2"));
    assert!(jit_map.len() > 1000, "run 2's perf map lists only {} names", jit_map.len());
    let top = top_framework_methods(&o.dir.join("stacks/perf-cpu.folded"), 10);
    assert_eq!(top.len(), 10, "{top:?}");
    let missing: Vec<&String> = top.iter().map(|(n, _)| n).filter(|n| !jit_map.contains(*n)).collect();
    assert!(missing.is_empty(), "R2R-run methods absent from the ReadyToRun=0 run's perf map: {missing:#?}");
}
