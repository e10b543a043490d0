//! The "Data quality" block at the top of summary.md: lost events, starved sampling and machine
//! load, read back from the manifest's metrics (`<collector>.lost_ratio`, `.rate_ratio_min`,
//! `.thread.<tid>.phase<n>_hz`, `load.*`). Shown only when one of them matters, so a quiet
//! run's summary starts with its verdict and a noisy one says first why its numbers may wobble.

use std::collections::BTreeMap;

use super::Manifest;
use judge::{hertz, percent};

/// Lost events above this fraction of the samples are worth a line.
const SHOW_LOST_RATIO: f64 = 0.001;
/// A sampling rate below this fraction of the asked frequency is worth a line.
const SHOW_RATE_RATIO: f64 = 0.8;

/// The block's lines, empty when nothing matters.
pub(crate) fn lines(m: &Manifest) -> Vec<String> {
    let metrics = &m.metrics;
    let mut out = Vec::new();
    for c in &m.collectors {
        let get = |k: &str| metrics.get(&format!("{c}.{k}")).copied();
        if let Some(lost) = get("lost_ratio").filter(|r| *r > SHOW_LOST_RATIO) {
            out.push(format!(
                "`{c}` lost {} events, {} of its {} samples",
                get("lost_events").unwrap_or(0.0),
                percent(lost),
                get("samples_total").unwrap_or(0.0)
            ));
        }
        if let (Some(ratio), Some(asked)) = (get("rate_ratio_min").filter(|r| *r < SHOW_RATE_RATIO), get("asked_hz")) {
            out.push(format!(
                "`{c}` sampled its measured threads at as little as {} of the asked {} ({})",
                percent(ratio),
                hertz(asked),
                thread_phases(metrics, c).join("; ")
            ));
        }
    }
    let cores = metrics.get("load.cores").copied().unwrap_or(f64::INFINITY);
    let load = ["load.loadavg1_start", "load.loadavg1_end"].iter().filter_map(|k| metrics.get(*k)).fold(f64::NAN, |a, b| a.max(*b));
    if load > cores {
        let other = metrics.get("load.other_busy_share").map(|o| format!("; other processes kept {} of all CPUs busy", percent(*o)));
        out.push(format!("machine load {load:.2} on {cores} cores during the run{}", other.unwrap_or_default()));
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
    let mut lines = lines(m);
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
}
