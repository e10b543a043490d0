//! The "Data quality" block at the top of summary.md: lost events, starved sampling and machine
//! load, read back from the manifest's metrics (`<collector>.lost_ratio`, `.rate_ratio_min`,
//! `.thread.<tid>.phase<n>_hz`, `load.*`). Shown only when one of them matters, so a quiet
//! run's summary starts with its verdict and a noisy one says first why its numbers may wobble.
//! Each line says what it did to the verdicts (issue 38: "sampled at 8.9 % of the asked 499 Hz"
//! on a PASS read as a warning about that PASS): the checks it made inconclusive, the checks that
//! agreed although, or that no check's verdict turned on it.

use std::collections::BTreeMap;

use super::Manifest;
use judge::{Verdict, hertz, percent};

/// Lost events above this fraction of the samples are worth a line.
const SHOW_LOST_RATIO: f64 = 0.001;
/// A sampling rate below this fraction of the asked frequency is worth a line.
const SHOW_RATE_RATIO: f64 = 0.8;

/// What a data-quality line did to the verdicts of the checks that read `collector` (every check
/// for a run-wide line): the judge makes a check inconclusive where the flaw biases what it
/// compares, and writes `agrees although: …` in a check that held despite it.
fn effect(m: &Manifest, collector: Option<&str>) -> String {
    let reads = |c: &judge::Check| match collector {
        None => true,
        Some(name) => c.collector.as_deref().is_some_and(|cs| cs.split(',').any(|x| x.trim() == name)),
    };
    let relevant: Vec<&judge::Check> = m.checks.iter().filter(|c| reads(c)).collect();
    if relevant.is_empty() {
        return "no check reads it".into();
    }
    let names = |cs: Vec<&judge::Check>| cs.iter().map(|c| format!("`{}`", c.name)).collect::<Vec<_>>().join(", ");
    let undecided: Vec<&judge::Check> = relevant.iter().copied().filter(|c| c.verdict == Verdict::Inconclusive).collect();
    if !undecided.is_empty() {
        return format!("made {} INCONCLUSIVE", names(undecided));
    }
    let although: Vec<&judge::Check> =
        relevant.iter().copied().filter(|c| c.details.iter().any(|d| d.starts_with("agrees although"))).collect();
    if !although.is_empty() {
        return format!("{} held although (their details say so)", names(although));
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &relevant {
        *counts.entry(c.verdict.upper()).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(v, n)| format!("{n} {v}")).collect();
    format!("no verdict turned on it ({} decided: {})", if collector.is_some() { "its checks" } else { "the checks" }, counts.join(", "))
}

/// The block's lines, empty when nothing matters; each ends with what it did to the verdicts.
pub(crate) fn lines_with_effect(m: &Manifest) -> Vec<String> {
    flaws(m).into_iter().map(|(collector, line)| format!("{line} — {}", effect(m, collector.as_deref()))).collect()
}

/// The block's lines, empty when nothing matters.
#[cfg(test)]
pub(crate) fn lines(m: &Manifest) -> Vec<String> {
    flaws(m).into_iter().map(|(_, line)| line).collect()
}

/// Each flaw worth a line, with the collector it is about (None: the whole run).
fn flaws(m: &Manifest) -> Vec<(Option<String>, String)> {
    let metrics = &m.metrics;
    let mut out = Vec::new();
    for c in &m.collectors {
        let get = |k: &str| metrics.get(&format!("{c}.{k}")).copied();
        if let Some(lost) = get("lost_ratio").filter(|r| *r > SHOW_LOST_RATIO) {
            out.push((Some(c.clone()), format!(
                "`{c}` lost {} events, {} of its {} samples",
                get("lost_events").unwrap_or(0.0),
                percent(lost),
                get("samples_total").unwrap_or(0.0)
            )));
        }
        if let (Some(ratio), Some(asked)) = (get("rate_ratio_min").filter(|r| *r < SHOW_RATE_RATIO), get("asked_hz")) {
            out.push((Some(c.clone()), format!(
                "`{c}` sampled its measured threads at as little as {} of the asked {} ({})",
                percent(ratio),
                hertz(asked),
                thread_phases(metrics, c).join("; ")
            )));
        }
    }
    let cores = metrics.get("load.cores").copied().unwrap_or(f64::INFINITY);
    let load = ["load.loadavg1_start", "load.loadavg1_end"].iter().filter_map(|k| metrics.get(*k)).fold(f64::NAN, |a, b| a.max(*b));
    if load > cores {
        let other = metrics.get("load.other_busy_share").map(|o| format!("; other processes kept {} of all CPUs busy", percent(*o)));
        out.push((None, format!("machine load {load:.2} on {cores} cores during the run{}", other.unwrap_or_default())));
    }
    out
}

/// `thread 12: 264 Hz then 131 Hz` for each measured thread of collector `c`.
fn thread_phases(metrics: &BTreeMap<String, f64>, c: &str) -> Vec<String> {
    let prefix = format!("{c}.thread.");
    let mut out = Vec::new();
    for (k, v1) in metrics.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
        let Some(tid) = k[prefix.len()..].strip_suffix(".phase1_hz") else { continue };
        if let Some(v2) = metrics.get(&format!("{prefix}{tid}.phase2_hz")) {
            out.push(format!("thread {tid}: {} then {}", hertz(*v1), hertz(*v2)));
        }
    }
    out
}

/// The markdown block (with its heading), or nothing.
pub(crate) fn block(m: &Manifest) -> String {
    let mut lines = lines_with_effect(m);
    for (i, a) in m.earlier_attempts.iter().enumerate() {
        lines.insert(i, format!("attempt {} of this run was inconclusive and ran again: {} (its results: `{}`)", i + 1, a.reason, a.run_id));
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from("## Data quality\n\n");
    for l in lines {
        s.push_str(&format!("- {l}\n"));
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use judge::Verdict;

    fn manifest(metrics: &[(&str, f64)]) -> Manifest {
        Manifest {
            scenario: "s".into(),
            verdict: Verdict::Pass,
            reason: None,
            checks: vec![],
            metrics: metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            environment: Default::default(),
            commands: vec![],
            durations_s: Default::default(),
            default_tolerances: Default::default(),
            workload: None,
            collectors: vec!["perf-cpu".into()],
            started_utc: String::new(),
            run_id: String::new(),
            resolution: Default::default(),
            completeness: Default::default(),
            findings: vec![],
            notes: vec![],
            share_tables: vec![],
            load: None,
            earlier_attempts: Vec::new(),
            swept_at_start: Vec::new(),
            viewer_files: Default::default(),
            windows: Vec::new(),
        }
    }

    #[test]
    fn shown_only_when_it_matters() {
        let quiet = manifest(&[("perf-cpu.lost_ratio", 0.0005), ("perf-cpu.rate_ratio_min", 0.9), ("perf-cpu.asked_hz", 999.0), ("load.cores", 2.0), ("load.loadavg1_end", 1.5)]);
        assert_eq!(block(&quiet), "");
        let noisy = manifest(&[
            ("perf-cpu.lost_ratio", 0.0125),
            ("perf-cpu.lost_events", 307.0),
            ("perf-cpu.samples_total", 24560.0),
            ("perf-cpu.rate_ratio_min", 0.131),
            ("perf-cpu.asked_hz", 999.0),
            ("perf-cpu.thread.12.phase1_hz", 264.0),
            ("perf-cpu.thread.12.phase2_hz", 131.0),
            ("load.cores", 2.0),
            ("load.loadavg1_start", 3.5),
            ("load.other_busy_share", 0.62),
        ]);
        assert_eq!(lines(&noisy), vec![
            "`perf-cpu` lost 307 events, 1.2 % of its 24560 samples".to_string(),
            "`perf-cpu` sampled its measured threads at as little as 13.1 % of the asked 999 Hz (thread 12: 264 Hz then 131 Hz)".into(),
            "machine load 3.50 on 2 cores during the run; other processes kept 62.0 % of all CPUs busy".into(),
        ]);
        assert!(block(&noisy).starts_with("## Data quality\n\n- `perf-cpu` lost"));
    }

    fn check(name: &str, collector: &str, verdict: Verdict, details: &[&str]) -> judge::Check {
        judge::Check {
            name: name.into(),
            verdict,
            expected: String::new(),
            measured: String::new(),
            collector: Some(collector.into()),
            values: Default::default(),
            details: details.iter().map(|d| d.to_string()).collect(),
            reason: None,
        }
    }

    /// Each line says what it did to the verdicts: nothing (on a PASS), the checks it made
    /// inconclusive, or the checks that held although.
    #[test]
    fn each_line_says_whether_it_affected_a_verdict() {
        let mut m = manifest(&[("perf-cpu.rate_ratio_min", 0.089), ("perf-cpu.asked_hz", 499.0), ("load.cores", 2.0), ("load.loadavg1_end", 3.0)]);
        m.checks = vec![check("share", "perf-cpu", Verdict::Pass, &[]), check("agree", "perf-cpu, eventpipe", Verdict::Pass, &[])];
        let text = block(&m);
        assert!(text.contains("of the asked 499 Hz () — no verdict turned on it (its checks decided: 2 PASS)"), "{text}");
        assert!(text.contains("during the run — no verdict turned on it (the checks decided: 2 PASS)"), "{text}");
        m.checks[0].verdict = Verdict::Inconclusive;
        assert!(block(&m).contains("499 Hz () — made `share` INCONCLUSIVE"), "{}", block(&m));
        m.checks[0] = check("share", "perf-cpu", Verdict::Pass, &["agrees although: `perf-cpu` sampled thread 1 at 8.9 %"]);
        assert!(block(&m).contains("— `share` held although (their details say so)"), "{}", block(&m));
        m.checks.clear();
        assert!(block(&m).contains("— no check reads it"), "{}", block(&m));
    }
}
