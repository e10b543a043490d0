//! `kind = "share"` and `kind = "share_at_least"`: how a collector splits samples among compared
//! methods, held to the workload's truth (or to a floor). Both count samples the same way
//! ([`super::share`]), so they live together.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::units::percent;
use super::{Check, Evidence, Judge, SHARE_MIN_SAMPLES, bad_key, fraction, SHARE_TOLERANCE_PTS, ShareMode, Starvation, TruthClock, share, truth_f64};

/// Share of `method` among the methods in `among`, against a truth value (a dotted path into
/// truth.json giving a fraction 0..1) within ± `tolerance_pts` points.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShareCheck {
    pub method: String,
    pub among: Vec<String>,
    pub truth: String,
    #[serde(default)]
    pub mode: ShareMode,
    #[serde(default)]
    pub sample_kind: Option<String>,
    #[serde(default)]
    pub tolerance_pts: Option<f64>,
    #[serde(default)]
    pub min_samples: Option<u64>,
    /// The clock the app measured its truth on: `cpu` (its threads' CPU time) or `wall` (a
    /// stopwatch, the default). A sampler on the same clock is unbiased by other load; across
    /// clocks a starved run is inconclusive ([`super::sufficiency`]).
    #[serde(default)]
    pub truth_clock: Option<TruthClock>,
}

/// Share of `method` among `among` is at least `min` (fraction; "≈ only X" uses 0.9).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShareAtLeastCheck {
    pub method: String,
    pub among: Vec<String>,
    pub min: f64,
    #[serde(default)]
    pub mode: ShareMode,
    #[serde(default)]
    pub sample_kind: Option<String>,
    #[serde(default)]
    pub min_samples: Option<u64>,
}

/// The method and every compared pattern must be regexes, caught when the scenario loads.
pub(super) fn compile(method: &str, among: &[String]) -> Result<()> {
    regex::Regex::new(method).map_err(|e| bad_key("method", format!("bad regex `{method}`: {e}")))?;
    for p in among {
        regex::Regex::new(p).map_err(|e| bad_key("among", format!("bad regex `{p}`: {e}")))?;
    }
    Ok(())
}

impl Judge for ShareCheck {
    fn lost_caller_samples(&self, c: &model::Collection) -> u64 {
        super::unsettled_by_lost_caller(c, &self.among, self.mode)
    }

    fn truth_paths(&self) -> Vec<&str> {
        vec![self.truth.as_str()]
    }
    fn default_name(&self) -> String {
        format!("share of `{}`", self.method)
    }

    fn validate(&self) -> Result<()> {
        compile(&self.method, &self.among)?;
        if let Some(t) = self.tolerance_pts.filter(|t| !(0.0..=100.0).contains(t)) {
            return Err(bad_key("tolerance_pts", format!("`tolerance_pts` is percentage points, 0–100, got {t}")));
        }
        Ok(())
    }

    fn sampled(&self) -> bool {
        true
    }

    fn starvation(&self) -> Starvation {
        Starvation::AgainstTruth(self.truth_clock.unwrap_or_default())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let ShareCheck { method, among, truth, mode, sample_kind, tolerance_pts, min_samples, .. } = self;
        let c = ev.read(collector)?;
        let truth_share = truth_f64(ev.truth_for(&c.collector), truth)?;
        let (measured, samples, _) = share(c, method, among, *mode, sample_kind.as_deref())?;
        let tol = tolerance_pts.unwrap_or(SHARE_TOLERANCE_PTS);
        let min_n = min_samples.unwrap_or(SHARE_MIN_SAMPLES);
        let err_pts = (measured - truth_share).abs() * 100.0;
        let check = Check::new(
            name,
            Some(&c.collector),
            err_pts <= tol,
            format!("{} ± {tol} pts (truth `{truth}`), ≥ {min_n} samples", percent(truth_share)),
            format!("{} over {samples} samples (error {err_pts:.1} pts)", percent(measured)),
        )
        .value("share", measured)
        .value("truth", truth_share)
        .value("error_pts", err_pts)
        .value("samples", samples as f64);
        Ok(floor(check, samples, min_n, "samples"))
    }
}

impl Judge for ShareAtLeastCheck {
    fn lost_caller_samples(&self, c: &model::Collection) -> u64 {
        super::unsettled_by_lost_caller(c, &self.among, self.mode)
    }

    fn default_name(&self) -> String {
        format!("share of `{}` at least", self.method)
    }

    fn validate(&self) -> Result<()> {
        compile(&self.method, &self.among)?;
        fraction("min", Some(self.min))
    }

    fn sampled(&self) -> bool {
        true
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let ShareAtLeastCheck { method, among, min, mode, sample_kind, min_samples } = self;
        let c = ev.read(collector)?;
        let (measured, samples, _) = share(c, method, among, *mode, sample_kind.as_deref())?;
        let min_n = min_samples.unwrap_or(SHARE_MIN_SAMPLES);
        let check = Check::new(
            name,
            Some(&c.collector),
            measured >= *min,
            format!("≥ {}, ≥ {min_n} samples", percent(*min)),
            format!("{} over {samples} samples", percent(measured)),
        )
        .value("share", measured)
        .value("samples", samples as f64);
        Ok(floor(check, samples, min_n, "samples"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame, sample};
    use model::{Collection, DsoClass};

    #[test]
    fn share_check_is_inconclusive_below_min_samples() {
        let mut c = Collection::new("perf-cpu");
        c.samples.push(sample(vec![frame("W::HotLoop()", DsoClass::Jit)]));
        let truth = serde_json::json!({"shares": {"cpu": {"HotLoop": 1.0}}});
        let exp = ShareCheck {
            method: "HotLoop".into(),
            among: vec!["HotLoop".into(), "ColdLoop".into()],
            truth: "shares.cpu.HotLoop".into(),
            mode: ShareMode::Leaf,
            sample_kind: None,
            tolerance_pts: None,
            min_samples: None,
            truth_clock: None,
        };
        let check = evaluate_on(&exp, &[c.clone()], truth.clone());
        assert_eq!(check.verdict, Verdict::Inconclusive, "{check:?}");
        assert_eq!(check.reason.as_deref(), Some("1 samples, below the floor of 300 (min_samples): too few to decide"));
        // Held to one sample, the same split passes, with its numbers written out.
        let check = evaluate_on(&ShareCheck { min_samples: Some(1), ..exp }, &[c], truth);
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert_eq!(check.expected, "100.0 % ± 5 pts (truth `shares.cpu.HotLoop`), ≥ 1 samples");
        assert_eq!(check.measured, "100.0 % over 1 samples (error 0.0 pts)");
    }

    #[test]
    fn share_at_least_holds_a_floor() {
        let mut c = Collection::new("perf-cpu");
        for _ in 0..9 {
            c.samples.push(sample(vec![frame("W::HotLoop()", DsoClass::Jit)]));
        }
        c.samples.push(sample(vec![frame("W::ColdLoop()", DsoClass::Jit)]));
        let exp = |min: f64| ShareAtLeastCheck {
            method: "HotLoop".into(),
            among: vec!["HotLoop".into(), "ColdLoop".into()],
            min,
            mode: ShareMode::Inclusive,
            sample_kind: None,
            min_samples: Some(10),
        };
        let check = evaluate_on(&exp(0.9), &[c.clone()], serde_json::json!({}));
        assert_eq!((check.verdict, check.name.as_str()), (Verdict::Pass, "share of `HotLoop` at least"));
        assert_eq!(check.measured, "90.0 % over 10 samples");
        assert_eq!(evaluate_on(&exp(0.95), &[c], serde_json::json!({})).verdict, Verdict::Fail);
        assert!(exp(0.9).validate().is_ok());
        assert!(ShareAtLeastCheck { among: vec!["(".into()], ..exp(0.9) }.validate().is_err());
    }

    /// SampleProfiler's tick rate follows the machine's load: a phase in which it sampled at
    /// 800 Hz and one at 500 Hz (the load changed halfway) count for their time, not their
    /// samples. The app spent 3 s in Hot and 1 s in Cold (75 %).
    #[test]
    fn wall_clock_samples_count_for_the_time_since_their_threads_previous_one() {
        let mut c = Collection::new("eventpipe");
        c.sampling = model::Sampling::WallClock;
        let mut t = 0u64;
        let mut run = |c: &mut Collection, name: &str, seconds: f64, hz: f64| {
            let n = (seconds * hz) as u64;
            for _ in 0..n {
                t += (1e9 / hz) as u64;
                let mut s = sample(vec![frame(name, DsoClass::Jit)]);
                s.time_ns = t;
                c.samples.push(s);
            }
        };
        // 1.5 s Hot at 800 Hz, then the load changes: 1.5 s Hot and 1 s Cold at 500 Hz.
        run(&mut c, "W::Hot()", 1.5, 800.0);
        run(&mut c, "W::Hot()", 1.5, 500.0);
        run(&mut c, "W::Cold()", 1.0, 500.0);
        let among = ["Hot".to_string(), "Cold".to_string()];
        let (weighted, n, _) = crate::share(&c, "Hot", &among, ShareMode::Leaf, None).unwrap();
        assert_eq!(n, 2450);
        assert!((weighted - 0.75).abs() < 0.002, "time-weighted share {weighted}");
        // Counted, the same samples say 79.6 %: the bias the weighting removes.
        let counted = c.samples.iter().filter(|s| s.frames[0].name.as_deref() == Some("W::Hot()")).count() as f64 / n as f64;
        assert!((counted - 0.796).abs() < 0.002, "{counted}");
        // A CPU-time sampler's samples count one each.
        c.sampling = model::Sampling::CpuTime;
        let (plain, _, _) = crate::share(&c, "Hot", &among, ShareMode::Leaf, None).unwrap();
        assert!((plain - counted).abs() < 1e-9);
    }

    /// A starved sampler ticks late, irregularly (1 ms, then 20–80 ms apart when four hogs took
    /// the CPUs): each sample stands for the time around its tick, so a phase keeps its time.
    /// A thread that appears halfway counts only for the ticks it was sampled at.
    #[test]
    fn a_starved_samplers_late_ticks_count_for_their_time_and_a_late_thread_for_its_own() {
        let mut c = Collection::new("eventpipe");
        c.sampling = model::Sampling::WallClock;
        let push = |c: &mut Collection, tid: u32, name: &str, t: u64| {
            let mut s = sample(vec![frame(name, DsoClass::Jit)]);
            s.tid = tid;
            s.time_ns = t;
            c.samples.push(s);
        };
        // 2 s of Parse at 1 kHz; then 1 s of Render sampled at ticks 20, 40, 60, 80 ms apart.
        let mut t = 0u64;
        while t < 2_000_000_000 {
            push(&mut c, 1, "Job::Parse()", t);
            t += 1_000_000;
        }
        let mut k = 0u64;
        while t < 3_000_000_000 {
            push(&mut c, 1, "Job::Render()", t);
            // A second thread, there from 2.5 s, sampled at the same ticks 30 µs later.
            if t >= 2_500_000_000 {
                push(&mut c, 2, "Pool::Idle()", t + 30_000);
            }
            t += 20_000_000 * (1 + k % 4);
            k += 1;
        }
        let among = ["Parse".to_string(), "Render".to_string()];
        let (weighted, n, _) = crate::share(&c, "Parse", &among, ShareMode::Leaf, None).unwrap();
        // Within 1.5 pts: the job's end lies up to one starved tick (80 ms) after its last sample.
        assert!((weighted - 2.0 / 3.0).abs() < 0.015, "time-weighted share {weighted} over {n}");
        let counted = 2000.0 / n as f64;
        assert!(counted > 0.97, "counted, the starved phase nearly vanishes: {counted}");
        let weights = crate::sample_weights(&c);
        let idle: u64 = c.samples.iter().zip(&weights).filter(|(s, _)| s.tid == 2).map(|(_, w)| *w).sum();
        assert!((idle as f64 / 1e9 - 0.5).abs() < 0.06, "the late thread stands for its own 0.5 s: {idle}");
    }
}
