//! `kind = "stack_depth"`: are a recursion's stacks whole? The app recurses through one method to
//! a depth it knows (truth) and works at the bottom, so a whole stack through the method holds
//! that many of its frames. The check counts the stacks that hold fewer — cut short — and reports
//! the deepest stack the collector gave; a cut at the collector's declared limit
//! ([`model::DepthLimit`]: EventPipe's 100 frames, `kernel.perf_event_max_stack`, a DWARF stack
//! dump's bytes) is named with what sets it, any other cut is called a walk that stopped early.
//!
//! A cut stack FAILs the check: its inclusive shares and callers are wrong beyond the cut, which is
//! what a user of that collector would read.

use anyhow::Result;
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{Check, Evidence, Judge, bad_key, fraction, frame_key, percent, truth_f64};

/// Cut stacks allowed by default: the few samples the descent itself takes (microseconds of a
/// multi-second run) are the only whole stacks that hold fewer frames.
const DEFAULT_MAX_CUT: f64 = 0.01;

/// The deepest stack may fall this many frames short of a frame-count limit and still be cut by
/// it: a collector's own frames (a thread's root, a context marker) count against some limits.
const LIMIT_SLACK_FRAMES: usize = 3;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StackDepthCheck {
    /// Regex over resolved frame names (code versions merged): the recursing method.
    pub pattern: String,
    /// Its frames on a whole stack, from truth.json (`depth.DescendDeep`) …
    #[serde(default)]
    pub depth_truth: Option<String>,
    /// … or as a number.
    #[serde(default)]
    pub depth: Option<u64>,
    /// The share of stacks through the method that may be cut short (default 0.01).
    #[serde(default)]
    pub max_cut: Option<f64>,
}

impl Judge for StackDepthCheck {
    fn truth_paths(&self) -> Vec<&str> {
        self.depth_truth.iter().map(String::as_str).collect()
    }

    fn default_name(&self) -> String {
        format!("stacks through `{}` whole", self.pattern)
    }

    fn validate(&self) -> Result<()> {
        Regex::new(&self.pattern).map_err(|e| bad_key("pattern", format!("bad regex `{}`: {e}", self.pattern)))?;
        match (&self.depth_truth, self.depth) {
            (None, None) => return Err(bad_key("depth", "a stack_depth check needs `depth_truth` (a truth path) or `depth` (a number)")),
            (Some(_), Some(_)) => return Err(bad_key("depth", "give `depth_truth` or `depth`, not both")),
            (None, Some(0)) => return Err(bad_key("depth", "`depth` must be at least 1")),
            _ => {}
        }
        fraction("max_cut", self.max_cut)
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let c = ev.read(collector)?;
        let re = Regex::new(&self.pattern).map_err(|e| e.to_string())?;
        let (depth, from) = match (&self.depth_truth, self.depth) {
            (Some(path), _) => (truth_f64(ev.truth_for(&c.collector), path)?.round() as usize, format!(" (truth `{path}`)")),
            (None, Some(d)) => (d as usize, String::new()),
            (None, None) => return Err("no depth to hold the stacks to".into()),
        };
        let max_cut = self.max_cut.unwrap_or(DEFAULT_MAX_CUT);
        let (mut through, mut cut) = (0u64, 0u64);
        let (mut deepest_method, mut deepest_stack, mut deepest_cut_stack) = (0usize, 0usize, 0usize);
        for s in &c.samples {
            let method_frames = s.frames.iter().filter(|f| re.is_match(&frame_key(f))).count();
            if method_frames == 0 {
                continue;
            }
            through += 1;
            deepest_method = deepest_method.max(method_frames);
            deepest_stack = deepest_stack.max(s.frames.len());
            if method_frames < depth {
                cut += 1;
                deepest_cut_stack = deepest_cut_stack.max(s.frames.len());
            }
        }
        if through == 0 {
            return Err(format!("no `{}` sample has a frame matching `{}`: nothing to measure the depth of", c.collector, self.pattern));
        }
        let cut_share = cut as f64 / through as f64;
        let pass = cut_share <= max_cut;
        let measured = format!(
            "{cut} of {through} stacks through `{}` cut short ({}); at most {deepest_method} of its frames, the deepest stack {deepest_stack} frames",
            self.pattern,
            percent(cut_share)
        );
        let expected = format!("{depth} frames of `{}`{from} on ≥ {} of its stacks", self.pattern, percent(1.0 - max_cut));
        let mut check = Check::new(name, Some(&c.collector), pass, expected, measured)
            .value("depth", depth as f64)
            .value("max_method_frames", deepest_method as f64)
            .value("max_stack_frames", deepest_stack as f64)
            .value("cut_share", cut_share)
            .value("stacks", through as f64);
        if let Some(limit) = &c.depth_limit {
            check = check.value("limit_frames", limit.frames.map_or(0.0, f64::from));
        }
        if cut > 0 {
            let cause = match &c.depth_limit {
                Some(limit) if limit.frames.is_none_or(|l| deepest_cut_stack + LIMIT_SLACK_FRAMES >= l as usize) => {
                    format!("cut by `{}`'s limit: {}", c.collector, limit.cause)
                }
                Some(limit) => format!(
                    "cut at {deepest_cut_stack} frames, below `{}`'s limit of {} frames: the walk stopped early (a frame \
                     without a frame pointer or unwind information)",
                    c.collector,
                    limit.frames.unwrap_or(0)
                ),
                None => format!(
                    "cut at {deepest_cut_stack} frames; `{}` declares no depth limit, so the walk stopped early (a frame \
                     without a frame pointer or unwind information)",
                    c.collector
                ),
            };
            check.details.push(cause);
        }
        Ok(check)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame, push};
    use model::{Collection, DepthLimit, DsoClass, Frame};

    /// A stack of `depth` recursion frames under a leaf, cut to `keep` frames leaf first.
    fn stack(depth: usize, keep: usize) -> Vec<Frame> {
        let mut frames = vec![frame("Deep::Bottom()", DsoClass::Jit)];
        frames.extend((0..depth).map(|_| frame("Deep::DescendMiddle(int32)", DsoClass::Jit)));
        frames.extend([frame("Deep::Run()", DsoClass::Jit), frame("start_thread", DsoClass::Libc)]);
        frames.truncate(keep);
        frames
    }

    fn check() -> StackDepthCheck {
        StackDepthCheck { pattern: "::DescendMiddle\\b".into(), depth_truth: Some("depth.DescendMiddle".into()), depth: None, max_cut: None }
    }

    #[test]
    fn whole_stacks_pass_and_report_their_depth() {
        let mut c = Collection::new("perf-cpu");
        push(&mut c, 200, stack(150, usize::MAX));
        let ok = evaluate_on(&check(), &[c], serde_json::json!({"depth": {"DescendMiddle": 150}}));
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
        assert_eq!((ok.values["max_method_frames"], ok.values["max_stack_frames"]), (150.0, 153.0));
    }

    #[test]
    fn a_cut_at_the_collectors_limit_fails_naming_it() {
        let mut c = Collection::new("eventpipe");
        c.depth_limit = Some(DepthLimit { frames: Some(100), cause: "EventPipe stops at 100 frames".into() });
        push(&mut c, 200, stack(150, 100));
        let cut = evaluate_on(&check(), &[c.clone()], serde_json::json!({"depth": {"DescendMiddle": 150}}));
        assert_eq!(cut.verdict, Verdict::Fail, "{cut:?}");
        assert_eq!((cut.values["max_stack_frames"], cut.values["cut_share"]), (100.0, 1.0));
        assert!(cut.details[0].contains("EventPipe stops at 100 frames"), "{:?}", cut.details);
        // Shallower than the limit: not the limit's doing.
        c.samples.clear();
        push(&mut c, 200, stack(150, 60));
        let early = evaluate_on(&check(), &[c], serde_json::json!({"depth": {"DescendMiddle": 150}}));
        assert!(early.details[0].contains("stopped early"), "{:?}", early.details);
    }

    #[test]
    fn the_descent_s_few_samples_are_allowed() {
        let mut c = Collection::new("perf-cpu");
        push(&mut c, 995, stack(50, usize::MAX));
        push(&mut c, 5, stack(20, usize::MAX));
        let ok = evaluate_on(&StackDepthCheck { depth_truth: None, depth: Some(50), ..check() }, &[c], serde_json::json!({}));
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
    }

    #[test]
    fn settings_are_checked_when_loaded() {
        let none = StackDepthCheck { depth_truth: None, ..check() };
        assert!(none.validate().unwrap_err().to_string().contains("depth_truth"));
        assert!(StackDepthCheck { depth: Some(5), ..check() }.validate().is_err());
        assert!(StackDepthCheck { max_cut: Some(5.0), ..check() }.validate().is_err());
    }
}
