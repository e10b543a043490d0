//! What collection costs the app: the same workload run with no collector and with each
//! collector, repeated and interleaved (so drift of the machine spreads over all configurations),
//! throughput taken from the app's own truth.json, and the change against the baseline reported
//! with a 95 % confidence interval. `cargo xtask bench overhead` is [`run`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};

use harness::engine;
use harness::engine::RunOptions;
use harness::scenario::{CollectorSpec, Scenario, WorkloadRef};
use harness::run::TargetKind;

/// One configuration of the benchmark: a name and the collectors it runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    pub collectors: Vec<CollectorSpec>,
}

pub fn collector(kind: &str, options: &[(&str, toml::Value)]) -> CollectorSpec {
    let mut table = toml::Table::new();
    table.insert("kind".into(), kind.into());
    for (k, v) in options {
        table.insert(k.to_string(), v.clone());
    }
    CollectorSpec::from_table(table).unwrap_or_else(|e| panic!("benchmark collector `{kind}`: {e}"))
}

/// The default configurations: baseline plus every collector that runs on the host.
pub fn default_configs() -> Vec<Config> {
    vec![
        Config { name: "none".into(), collectors: vec![] },
        Config { name: "perf-cpu".into(), collectors: vec![collector("perf-cpu", &[("frequency", 999.into())])] },
        Config { name: "perf-offcpu".into(), collectors: vec![collector("perf-offcpu", &[])] },
        Config { name: "perf-offwake".into(), collectors: vec![collector("perf-offwake", &[])] },
        Config { name: "perf-syscalls".into(), collectors: vec![collector("perf-syscalls", &[])] },
        Config {
            name: "eventpipe".into(),
            collectors: vec![collector("eventpipe", &[("profile", "thread-time".into())])],
        },
        Config {
            name: "dotnet-trace".into(),
            collectors: vec![collector("dotnet-trace", &[("profile", "dotnet-sampled-thread-time".into())])],
        },
    ]
}

/// What `cargo xtask bench overhead` asks for: every default configuration.
#[derive(Clone, Debug)]
pub struct Options {
    /// Rounds over all configurations.
    pub repeats: usize,
    /// Seconds of workload per run (gc-heavy, unpaced allocation).
    pub seconds: f64,
}

/// Measures [`default_configs`] interleaved and prints the table.
pub fn run(opts: &Options) -> Result<()> {
    let configs = default_configs();
    let measure_opts = MeasureOptions {
        repeats: opts.repeats,
        seconds: opts.seconds,
        configs: configs.clone(),
        results_root: harness::project_root().join("target/bench/overhead-runs"),
    };
    let measured = measure(&measure_opts, |msg| harness::host::progress::note("bench", msg))?;
    println!("\nCollector overhead on gc-heavy (unpaced allocation, {} s per run, {} rounds, interleaved):\n", opts.seconds, opts.repeats);
    println!("{}", table(&measured, &configs)?);
    Ok(())
}

#[derive(Clone, Debug)]
pub struct MeasureOptions {
    pub repeats: usize,
    pub seconds: f64,
    pub configs: Vec<Config>,
    pub results_root: PathBuf,
}

/// Per configuration: throughput samples (MB/s allocated by gc-heavy, unpaced).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub throughput: BTreeMap<String, Vec<f64>>,
    /// Records the configuration's collectors wrote per second of the measured phase.
    pub events_per_s: BTreeMap<String, Vec<f64>>,
    pub errors: BTreeMap<String, Vec<String>>,
}

/// Records a run's collectors wrote: each collector's `events_recorded` metric where it gives
/// one (the tracepoint collectors count every record, stacks or not), else its samples + events.
fn events_recorded(metrics: &BTreeMap<String, f64>, collectors: &[CollectorSpec]) -> f64 {
    collectors
        .iter()
        .map(|c| {
            let get = |k: &str| metrics.get(&format!("{}.{k}", c.name())).copied();
            get("events_recorded").unwrap_or_else(|| get("samples_total").unwrap_or(0.0) + get("events_total").unwrap_or(0.0))
        })
        .sum()
}

/// The workload's throughput from its truth.json: allocated MB per second of the measured phase.
fn throughput(truth: &serde_json::Value) -> Option<f64> {
    let bytes = judge::truth_value(truth, "gc.allocated_bytes")?.as_f64()?;
    let wall_ms = judge::truth_value(truth, "wall_ms")?.as_f64()?;
    (wall_ms > 0.0).then(|| bytes / 1e6 / (wall_ms / 1e3))
}

pub fn measure(opts: &MeasureOptions, mut progress: impl FnMut(&str)) -> Result<Measured> {
    let mut measured = Measured::default();
    for rep in 0..opts.repeats {
        // Rotate the order each round so no configuration always runs first (cold caches) or last.
        let n = opts.configs.len();
        for k in 0..n {
            let config = &opts.configs[(k + rep) % n];
            progress(&format!("round {}/{}: {}", rep + 1, opts.repeats, config.name));
            let scenario = Scenario {
                args: vec![
                    "--seconds".into(),
                    opts.seconds.to_string(),
                    "--alloc-mb-per-s".into(),
                    "0".into(),
                    "--induced".into(),
                    "0".into(),
                ],
                target: Some(TargetKind::Host),
                collectors: config.collectors.clone(),
                ..Scenario::new(&format!("overhead-{}", config.name), WorkloadRef::Named("gc-heavy".into()))
            };
            let ro = RunOptions {
                target: Some(TargetKind::Host),
                results_root: Some(opts.results_root.clone()),
                ..Default::default()
            };
            let outcome = engine::run(&scenario, &ro)?;
            let truth_path = outcome.dir.join("artifacts/truth.json");
            let value = std::fs::read_to_string(&truth_path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|t| throughput(&t));
            let wall_s = std::fs::read_to_string(&truth_path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|t| judge::truth_value(&t, "wall_ms").and_then(|v| v.as_f64()))
                .map(|ms| ms / 1e3);
            if let Some(w) = wall_s.filter(|w| *w > 0.0 && !config.collectors.is_empty()) {
                let n = events_recorded(&outcome.manifest.metrics, &config.collectors);
                measured.events_per_s.entry(config.name.clone()).or_default().push(n / w);
            }
            match value {
                Some(v) => measured.throughput.entry(config.name.clone()).or_default().push(v),
                None => measured.errors.entry(config.name.clone()).or_default().push(
                    outcome.reason.clone().unwrap_or_else(|| format!("no throughput in {}", truth_path.display())),
                ),
            }
            let _ = std::fs::remove_dir_all(&outcome.dir);
        }
    }
    Ok(measured)
}

/// Mean and half-width of its 95 % confidence interval (Student's t).
pub fn mean_ci(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, t95(xs.len() - 1) * (var / n).sqrt())
}

/// Two-sided 95 % quantile of Student's t for `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    if df == 0 { f64::NAN } else { *TABLE.get(df - 1).unwrap_or(&1.96) }
}

/// Relative change of `xs` against `base` in percent, with the half-width of a 95 % interval
/// (Welch's standard error, delta method on the ratio of means).
pub fn change_ci(base: &[f64], xs: &[f64]) -> (f64, f64) {
    let (mb, _) = mean_ci(base);
    let (mx, _) = mean_ci(xs);
    let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0).max(1.0);
    let se = (var(base, mb) / base.len() as f64 + var(xs, mx) / xs.len() as f64).sqrt();
    let df = (base.len() + xs.len()).saturating_sub(2).max(1);
    ((mx / mb - 1.0) * 100.0, t95(df) * se / mb * 100.0)
}

/// A markdown table of the measurements.
pub fn table(m: &Measured, configs: &[Config]) -> Result<String> {
    let base = m.throughput.get("none").context("the baseline (no collector) produced no measurement")?;
    let mut out = String::from(
        "| collector | runs | records/s (mean) | alloc MB/s (mean ± 95 % CI) | change vs none (95 % CI) |\n|---|---|---|---|---|\n",
    );
    for c in configs {
        match m.throughput.get(&c.name) {
            Some(xs) => {
                let (mean, ci) = mean_ci(xs);
                let change = if c.name == "none" {
                    "—".to_string()
                } else {
                    let (d, dci) = change_ci(base, xs);
                    format!("{d:+.1} % ± {dci:.1}")
                };
                let rate = m.events_per_s.get(&c.name).map_or("—".to_string(), |r| format!("{:.0}", mean_ci(r).0));
                out.push_str(&format!("| {} | {} | {rate} | {mean:.0} ± {ci:.0} | {change} |\n", c.name, xs.len()));
            }
            None => out.push_str(&format!(
                "| {} | 0 | — | failed: {} | — |\n",
                c.name,
                m.errors.get(&c.name).and_then(|e| e.first()).map(String::as_str).unwrap_or("?")
            )),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_intervals() {
        let (m, ci) = mean_ci(&[10.0, 12.0, 11.0, 9.0, 13.0]);
        assert!((m - 11.0).abs() < 1e-9);
        // s = 1.5811, n = 5, t(4) = 2.776 → 1.963
        assert!((ci - 1.963).abs() < 0.01, "{ci}");
        let (d, _) = change_ci(&[100.0, 100.0, 100.0], &[90.0, 90.0, 90.0]);
        assert!((d + 10.0).abs() < 1e-9);
    }

    #[test]
    fn records_per_run_prefer_the_collectors_own_count() {
        let metrics: BTreeMap<String, f64> = [
            ("perf-offwake.events_recorded".to_string(), 900.0),
            ("perf-offwake.samples_total".to_string(), 40.0),
            ("perf-cpu.samples_total".to_string(), 100.0),
            ("perf-cpu.events_total".to_string(), 0.0),
        ]
        .into_iter()
        .collect();
        let configs = [collector("perf-offwake", &[]), collector("perf-cpu", &[])];
        assert_eq!(events_recorded(&metrics, &configs), 1000.0);
        let mut m = Measured::default();
        m.throughput.insert("none".into(), vec![100.0, 101.0]);
        m.throughput.insert("perf-offwake".into(), vec![90.0, 92.0]);
        m.events_per_s.insert("perf-offwake".into(), vec![450.0, 550.0]);
        let t = table(&m, &default_configs()).unwrap();
        assert!(t.contains("| perf-offwake | 2 | 500 | 91 ±"), "{t}");
        assert!(t.contains("| perf-syscalls | 0 | — | failed"), "{t}");
    }
}
