//! `kind = "waker"`: of the blocked time spent in a waiting method, how much a given waker ended
//! — a waker method (regex over the waker's stack in the off-wake view) and/or a waker kind
//! (`thread`, `kernel` for timers and interrupts, `process`, `none`). Judged against a floor
//! (`min_share`) or the app's own split (`truth`, within `tolerance_pts`).

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::units::{percent, weight};
use super::{Check, Evidence, Judge, bad_key, fraction, frame_key, truth_f64};
use model::{nearest_managed, split_offwake};

/// Fewest blocked intervals the share's denominator needs by default.
const MIN_WAKEUPS: u64 = 5;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WakerCheck {
    /// Regex over the blocked side's frames: the waiting method.
    pub blocked: String,
    /// Regex over the waker side's frames (its stack and name): the waking method.
    #[serde(default)]
    pub waker: Option<String>,
    /// `thread`, `kernel`, `process` or `none`.
    #[serde(default)]
    pub waker_kind: Option<String>,
    /// Only intervals of the thread whose id truth.json gives at this path.
    #[serde(default)]
    pub tid_truth: Option<String>,
    #[serde(default)]
    pub min_share: Option<f64>,
    /// The share must be within `tolerance_pts` of this truth value (a fraction).
    #[serde(default)]
    pub truth: Option<String>,
    #[serde(default)]
    pub tolerance_pts: Option<f64>,
    /// Fewest blocked intervals in the denominator (default 5); below it, inconclusive.
    #[serde(default)]
    pub min_wakeups: Option<u64>,
}

const KINDS: [&str; 4] = ["thread", "kernel", "process", "none"];

impl Judge for WakerCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.tid_truth.iter().chain(&self.truth).map(String::as_str).collect()
    }

    fn default_name(&self) -> String {
        let by = match (&self.waker, &self.waker_kind) {
            (Some(w), _) => format!("`{w}`"),
            (None, Some(k)) => format!("the {k}"),
            (None, None) => "?".into(),
        };
        format!("blocked time of `{}` woken by {by}", self.blocked)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.blocked).map_err(|e| bad_key("blocked", format!("bad regex `{}`: {e}", self.blocked)))?;
        if let Some(w) = &self.waker {
            Regex::new(w).map_err(|e| bad_key("waker", format!("bad regex `{w}`: {e}")))?;
        }
        if let Some(k) = &self.waker_kind
            && !KINDS.contains(&k.as_str())
        {
            return Err(bad_key("waker_kind", format!("waker_kind `{k}`: expected one of {}", KINDS.join(", "))));
        }
        if self.waker.is_none() && self.waker_kind.is_none() {
            bail!("a waker check needs `waker` (a regex over the waker's stack) or `waker_kind`");
        }
        if self.min_share.is_none() && self.truth.is_none() {
            bail!("a waker check needs `min_share` or `truth`");
        }
        if self.tolerance_pts.is_some() && self.truth.is_none() {
            return Err(bad_key("tolerance_pts", "`tolerance_pts` is the tolerance of `truth`: set `truth` too"));
        }
        fraction("min_share", self.min_share)?;
        if let Some(t) = self.tolerance_pts.filter(|t| !(0.0..=100.0).contains(t)) {
            return Err(bad_key("tolerance_pts", format!("`tolerance_pts` is percentage points, 0–100, got {t}")));
        }
        Ok(())
    }

    fn sampled(&self) -> bool {
        true
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let c = ev.read(collector)?;
        let blocked_re = Regex::new(&self.blocked).map_err(|e| e.to_string())?;
        let waker_re = self.waker.as_deref().map(Regex::new).transpose().map_err(|e| e.to_string())?;
        let tid = self.tid_truth.as_deref().map(|p| truth_f64(ev.truth_for(&c.collector), p)).transpose()?.map(|t| t as u32);
        let (mut hit, mut total, mut intervals) = (0u64, 0u64, 0u64);
        let (mut unrecorded_ns, mut unrecorded) = (0u64, 0u64);
        let asks_for_none = self.waker_kind.as_deref() == Some("none");
        let mut by_waker: BTreeMap<String, u64> = BTreeMap::new();
        for s in c.samples.iter().filter(|s| tid.is_none_or(|t| s.tid == t)) {
            let Some((blocked, waker)) = split_offwake(s) else { continue };
            if !blocked.iter().any(|f| blocked_re.is_match(&frame_key(f))) {
                continue;
            }
            // An interval whose waking neither recording holds says nothing about who woke it:
            // it is left out of the share (and counted), not held against the waker. Seen on a
            // VM kernel (6.18, haltpoll): a timer waking a thread while the CPU idled emitted no
            // sched_waking and no sched_switch from the idle task, though perf lost nothing.
            if s.kind.as_deref() == Some("none") && !asks_for_none {
                unrecorded_ns += s.weight;
                unrecorded += 1;
                continue;
            }
            total += s.weight;
            intervals += 1;
            let kind_ok = self.waker_kind.as_deref().is_none_or(|k| s.kind.as_deref() == Some(k));
            let method_ok = waker_re.as_ref().is_none_or(|re| waker.iter().any(|f| re.is_match(&frame_key(f))));
            if kind_ok && method_ok {
                hit += s.weight;
            }
            // The waker as people name it: the frame the check asks about, else its method
            // nearest the waking, else its name.
            let asked = waker_re.as_ref().and_then(|re| waker.iter().rev().map(frame_key).find(|k| re.is_match(k)));
            let label = asked
                .or_else(|| nearest_managed(waker.iter().rev()).map(|m| model::merge_code_version(m).to_string()))
                .or_else(|| waker.first().map(frame_key))
                .unwrap_or_else(|| "?".into());
            *by_waker.entry(label).or_default() += s.weight;
        }
        if c.samples.iter().all(|s| split_offwake(s).is_none()) {
            return Err(format!("collector `{}` has no off-wake samples: a waker check reads a perf-offwake collector", c.collector));
        }
        let share = if total > 0 { hit as f64 / total as f64 } else { 0.0 };
        let mut pass = hit > 0;
        let mut expected = Vec::new();
        if let Some(m) = self.min_share {
            pass &= share >= m;
            expected.push(format!("≥ {} of the blocked time", percent(m)));
        }
        let mut check_values = vec![("share", share), ("blocked_ns", total as f64), ("intervals", intervals as f64)];
        if let Some(path) = &self.truth {
            let t = truth_f64(ev.truth_for(&c.collector), path)?;
            let tol = self.tolerance_pts.unwrap_or(super::SHARE_TOLERANCE_PTS);
            let err = (share - t).abs() * 100.0;
            pass &= err <= tol;
            expected.push(format!("{} ± {tol} pts (truth `{path}`)", percent(t)));
            check_values.push(("share_error_pts", err));
        }
        if let Some(t) = tid {
            expected.push(format!("thread {t} only"));
        }
        let mut top: Vec<(String, u64)> = by_waker.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1));
        let wakers: Vec<String> = top
            .iter()
            .take(4)
            .map(|(w, ns)| format!("{w} {}", percent(if total > 0 { *ns as f64 / total as f64 } else { 0.0 })))
            .collect();
        let mut measured = format!(
            "{} of {} ({}) in {intervals} blocked intervals; wakers: {}",
            weight(hit, true),
            weight(total, true),
            percent(share),
            if wakers.is_empty() { "none".into() } else { wakers.join(", ") }
        );
        if unrecorded > 0 {
            let all = (total + unrecorded_ns).max(1);
            measured.push_str(&format!(
                "; left out: {unrecorded} intervals ({}, {} of the blocked time) whose waking neither recording holds (no sched_waking for them: the kernel emitted none, perf lost none)",
                weight(unrecorded_ns, true),
                percent(unrecorded_ns as f64 / all as f64)
            ));
        }
        check_values.push(("unrecorded_intervals", unrecorded as f64));
        check_values.push(("unrecorded_blocked_ns", unrecorded_ns as f64));
        let mut check = Check::new(name, Some(&c.collector), pass, expected.join(", "), measured);
        for (k, v) in check_values {
            check = check.value(k, v);
        }
        Ok(floor(check, intervals, self.min_wakeups.unwrap_or(MIN_WAKEUPS), "blocked intervals in the share's denominator"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::evaluate_on;
    use model::{Wakeup, WakerKind, offwake_sample};
    use model::{Collection, DsoClass, Frame};

    fn jit(name: &str) -> Frame {
        Frame { name: Some(name.into()), dso: Some("[jit]".into()), class: DsoClass::Jit, addr: 1 }
    }

    fn wakeup(blocked: &str, kind: WakerKind, waker: &str, ns: u64) -> Wakeup {
        Wakeup {
            pid: 1,
            tid: 7,
            thread: "blocked-0".into(),
            from_ns: 0,
            blocked_ns: ns,
            blocked_frames: vec![jit(blocked)],
            waker_kind: kind,
            waker: if kind == WakerKind::Thread { "feeder".into() } else { "[kernel: hardirq]".into() },
            waker_tid: None,
            waker_frames: if waker.is_empty() { vec![] } else { vec![jit(waker)] },
            latency_ns: None,
        }
    }

    fn check(blocked: &str, waker: Option<&str>, kind: Option<&str>, min_share: Option<f64>, truth: Option<&str>) -> WakerCheck {
        WakerCheck {
            blocked: blocked.into(),
            waker: waker.map(String::from),
            waker_kind: kind.map(String::from),
            tid_truth: None,
            min_share,
            truth: truth.map(String::from),
            tolerance_pts: None,
            min_wakeups: Some(2),
        }
    }

    #[test]
    fn shares_of_blocked_time_by_waker() {
        let mut c = Collection::new("perf-offwake");
        c.weight_ns = true;
        for w in [
            wakeup("W::Read()", WakerKind::Thread, "W::Feed()", 90),
            wakeup("W::Read()", WakerKind::Thread, "W::Other()", 10),
            wakeup("W::Sleep()", WakerKind::Kernel, "", 50),
            wakeup("W::Sleep()", WakerKind::Kernel, "", 50),
        ] {
            c.samples.push(offwake_sample(&w));
        }
        let ok = evaluate_on(&check("::Read\\(", Some("::Feed\\("), None, Some(0.9), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
        assert!(ok.measured.contains("W::Feed() 90.0 %") && ok.measured.contains("W::Other() 10.0 %"), "{}", ok.measured);
        let strict = evaluate_on(&check("::Read\\(", Some("::Feed\\("), None, Some(0.95), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(strict.verdict, Verdict::Fail);
        let timer = evaluate_on(&check("::Sleep\\(", None, Some("kernel"), Some(0.9), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(timer.verdict, Verdict::Pass, "{timer:?}");
        let truth = evaluate_on(&check("::Read\\(", Some("::Other\\("), None, None, Some("t")), &[c.clone()], serde_json::json!({"t": 0.12}));
        assert_eq!(truth.verdict, Verdict::Pass, "{truth:?}");
        let few = WakerCheck { min_wakeups: Some(3), ..check("::Read\\(", Some("::Feed\\("), None, Some(0.5), None) };
        assert_eq!(evaluate_on(&few, &[c], serde_json::json!({})).verdict, Verdict::Inconclusive);
    }

    #[test]
    fn settings_are_checked_when_loaded() {
        assert!(check("(", Some("x"), None, Some(0.9), None).validate().is_err());
        assert!(check("x", None, None, Some(0.9), None).validate().unwrap_err().to_string().contains("`waker`"));
        assert!(check("x", None, Some("timer"), Some(0.9), None).validate().unwrap_err().to_string().contains("thread, kernel"));
        assert!(check("x", Some("y"), None, None, None).validate().unwrap_err().to_string().contains("min_share"));
    }

    #[test]
    fn a_collection_without_the_view_says_so() {
        let mut c = Collection::new("perf-offcpu");
        c.samples.push(crate::testing::sample(vec![jit("W::Read()")]));
        let judged = evaluate_on(&check("Read", Some("Feed"), None, Some(0.9), None), &[c], serde_json::json!({}));
        assert!(judged.measured.contains("no off-wake samples"), "{judged:?}");
    }

    #[test]
    fn intervals_without_a_recorded_waking_are_left_out_and_counted() {
        let mut c = Collection::new("perf-offwake");
        c.weight_ns = true;
        for w in [
            wakeup("W::Sleep()", WakerKind::Kernel, "", 30),
            wakeup("W::Sleep()", WakerKind::Kernel, "", 30),
            wakeup("W::Sleep()", WakerKind::None, "", 30),
            wakeup("W::Sleep()", WakerKind::Thread, "W::Poke()", 3),
        ] {
            c.samples.push(offwake_sample(&w));
        }
        let timer = evaluate_on(&check("::Sleep\\(", None, Some("kernel"), Some(0.9), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(timer.verdict, Verdict::Pass, "{timer:?}");
        assert!(timer.measured.contains("60 ns of 63 ns") || timer.measured.contains("in 3 blocked intervals"), "{}", timer.measured);
        assert!(timer.measured.contains("left out: 1 intervals"), "{}", timer.measured);
        // A thread waker is still held against the share.
        let strict = evaluate_on(&check("::Sleep\\(", None, Some("kernel"), Some(0.99), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(strict.verdict, Verdict::Fail, "{strict:?}");
        // Asking for `none` counts them.
        let none = evaluate_on(&check("::Sleep\\(", None, Some("none"), Some(0.3), None), &[c.clone()], serde_json::json!({}));
        assert_eq!(none.verdict, Verdict::Pass, "{none:?}");
        // Only unrecorded intervals: below the floor, inconclusive.
        let mut only = Collection::new("perf-offwake");
        only.weight_ns = true;
        for _ in 0..4 {
            only.samples.push(offwake_sample(&wakeup("W::Sleep()", WakerKind::None, "", 30)));
        }
        let judged = evaluate_on(&check("::Sleep\\(", None, Some("kernel"), Some(0.9), None), &[only], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Inconclusive, "{judged:?}");
    }
}
