//! `kind = "agree_frames"`: two collectors name the same hot framework methods, and spell the
//! precompiled (ReadyToRun) ones as the runtime does — the check that the R2R resolver names
//! frames the way a perf map or EventPipe would, with no truth needed from the app.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::{Check, Evidence, Judge, NameMatch, bad_key, RankedMethod, ShareMode, known_method_keys, rank_methods};
use model::Collection;

/// The assemblies of the .NET shared framework (Microsoft.NETCore.App, Microsoft.AspNetCore.App).
pub const FRAMEWORK_ASSEMBLIES: &str = r"^(System|Microsoft)(\.|$)|^(mscorlib|netstandard)$";

fn framework_assemblies() -> String {
    FRAMEWORK_ASSEMBLIES.to_string()
}
fn leaf() -> ShareMode {
    ShareMode::Leaf
}
fn ten() -> usize {
    10
}

/// Two collectors name the same hot methods: each ranks the managed methods of assemblies
/// matching `assembly` by sample weight, and their top `top` lists share at least
/// `min_common` names. Besides, every method of the first collector's top list that was
/// named mostly from a ReadyToRun image must be known to the second under the same name —
/// among its frames or the names its symbol source listed (a perf map lists every method the
/// JIT compiled, sampled or not) — so precompiled frames are not merely ranked alike but
/// spelled as the runtime spells them.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgreeFramesCheck {
    /// Exactly two collectors.
    pub collectors: Vec<String>,
    /// Regex over a frame's assembly (`System.Private.CoreLib`, `framework` …); the default
    /// is the shared framework's assemblies.
    #[serde(default = "framework_assemblies")]
    pub assembly: String,
    /// `leaf`: a sample counts for the managed frame nearest its leaf (native helpers below it
    /// count for it, as EventPipe stacks hold managed frames only); `inclusive`: for every
    /// managed method on its stack, once.
    #[serde(default = "leaf")]
    pub mode: ShareMode,
    /// How names compare (code versions are merged either way).
    #[serde(default)]
    pub names: NameMatch,
    #[serde(default = "ten")]
    pub top: usize,
    pub min_common: usize,
    /// At least this many of the first collector's top methods must be named mostly from
    /// ReadyToRun images: a comparison meant to check precompiled frames must see some.
    #[serde(default)]
    pub min_r2r: Option<usize>,
    /// Collector → sample kind to count (e.g. `{ eventpipe = "managed" }`: SampleProfiler
    /// samples blocked threads too, which on-CPU perf never sees).
    #[serde(default)]
    pub sample_kinds: BTreeMap<String, String>,
    /// Fewer counted samples than this, in either collector, decide nothing (inconclusive);
    /// default [`AGREE_FRAMES_MIN_SAMPLES`]: a top list of a handful of samples is noise.
    #[serde(default)]
    pub min_samples: Option<u64>,
}

/// The default floor of samples counted per collector.
pub const AGREE_FRAMES_MIN_SAMPLES: u64 = 100;

impl Judge for AgreeFramesCheck {
    fn lost_caller_samples(&self, c: &model::Collection) -> u64 {
        super::with_lost_caller(c)
    }

    fn default_name(&self) -> String {
        format!("top {} methods agree across {}", self.top, self.collectors.join(", "))
    }

    fn collectors(&self) -> Option<Vec<&str>> {
        Some(self.collectors.iter().map(String::as_str).collect())
    }

    fn validate(&self) -> Result<()> {
        let AgreeFramesCheck { collectors, assembly, top, min_common, min_r2r, sample_kinds, .. } = self;
        Regex::new(assembly).map_err(|e| bad_key("assembly", format!("bad regex `{assembly}`: {e}")))?;
        if collectors.len() != 2 {
            return Err(bad_key("collectors", format!("agree_frames compares exactly two collectors, got {collectors:?}")));
        }
        if *top == 0 || *min_common > *top || min_r2r.is_some_and(|m| m > *top) {
            bail!("agree_frames needs 0 < top, min_common ≤ top and min_r2r ≤ top (top {top}, min_common {min_common}, min_r2r {min_r2r:?})");
        }
        if let Some(c) = sample_kinds.keys().find(|k| !collectors.contains(k)) {
            return Err(bad_key("sample_kinds", format!("agree_frames `sample_kinds` names `{c}`, which is not one of its collectors {collectors:?}")));
        }
        Ok(())
    }

    fn judge(&self, name: String, _collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let AgreeFramesCheck { collectors, assembly, mode, names, top, min_common, min_r2r, sample_kinds, min_samples } = self;
        let re = Regex::new(assembly).map_err(|e| e.to_string())?;
        let [a, b] = collectors.as_slice() else {
            return Err(format!("agree_frames compares exactly two collectors, got {collectors:?}"));
        };
        let (ca, cb) = (ev.read(Some(a))?, ev.read(Some(b))?);
        let rank = |c: &Collection| {
            let (ranked, counted) = rank_methods(c, &re, *mode, *names, sample_kinds.get(&c.collector).map(String::as_str));
            (ranked.into_iter().take(*top).collect::<Vec<_>>(), counted)
        };
        let ((ta, na), (tb, nb)) = (rank(ca), rank(cb));
        let keys = |t: &[RankedMethod]| t.iter().map(|m| m.key.clone()).collect::<BTreeSet<_>>();
        let (ka, kb) = (keys(&ta), keys(&tb));
        let common = ka.intersection(&kb).count();
        // An app with fewer hot methods than `min_common` (a web API whose code is two routes, one
        // of them blocked, so SampleProfiler's managed samples see one): every method of the
        // shorter list in common is all the agreement its data can show.
        let shorter = ka.len().min(kb.len());
        let needed = (*min_common).min(shorter.max(1));
        // The first collector's precompiled methods must be named the way the second names
        // them, wherever they rank there (a top list alone would forgive a misspelt name
        // that ranks low). One way only: the second may hold frames the first cannot see
        // (perf's frame-pointer walk skips the caller of a method that keeps no frame
        // pointer; EventPipe's unwinder does not), which is no naming fault of either.
        let known_b = known_method_keys(cb, *names);
        let unmatched_r2r: Vec<String> = ta
            .iter()
            .filter(|m| m.is_r2r() && !known_b.contains(&m.key))
            .map(|m| format!("`{}`", m.key))
            .collect();
        let r2r_in_a = ta.iter().filter(|m| m.is_r2r()).count();
        let r2r_in_b = tb.iter().filter(|m| m.is_r2r()).count();
        let pass = na > 0
            && nb > 0
            && common >= needed
            && unmatched_r2r.is_empty()
            && min_r2r.is_none_or(|m| r2r_in_a >= m);
        let mode_text = match mode {
            ShareMode::Leaf => "nearest-leaf managed frame",
            ShareMode::Inclusive => "inclusive",
        };
        let names_text = match names {
            NameMatch::Exact => "exact names",
            NameMatch::MethodAndArity => "Type::Method/arity",
        };
        let mut expected = format!(
            "≥ {min_common} of each top {top} in common ({mode_text}, {names_text}, assemblies `{assembly}`); \
             every R2R-named method of {a}'s top {top} known to {b} by that name"
        );
        if let Some(m) = min_r2r {
            expected.push_str(&format!("; ≥ {m} of {a}'s top {top} R2R-named"));
        }
        let only = |x: &BTreeSet<String>, y: &BTreeSet<String>| {
            x.difference(y).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        };
        if needed < *min_common {
            expected.push_str(&format!("; a top list shorter than {min_common} (here {shorter}) wholly in common"));
        }
        let mut measured = format!(
            "{common} of top {top} in common; R2R-named in top: {a} {r2r_in_a}, {b} {r2r_in_b}; samples counted: {a} {na}, {b} {nb}"
        );
        if common < ka.len().max(kb.len()) {
            measured.push_str(&format!("; only {a}: {}; only {b}: {}", only(&ka, &kb), only(&kb, &ka)));
        }
        if !unmatched_r2r.is_empty() {
            measured.push_str(&format!("; R2R-named but unknown to {b}: {}", unmatched_r2r.join(", ")));
        }
        let mut check = Check::new(name, None, pass, expected, measured)
            .value("common", common as f64)
            .value("top", *top as f64)
            .value("r2r_in_top_first", r2r_in_a as f64)
            .value("r2r_in_top_second", r2r_in_b as f64)
            .value("r2r_unmatched", unmatched_r2r.len() as f64);
        for (cname, list, total) in [(a, &ta, na), (b, &tb, nb)] {
            check.details.push(format!("{cname} top {top} ({mode_text}, of {total} samples counted):"));
            for (i, m) in list.iter().enumerate() {
                let marks = match (m.is_r2r(), kb.contains(&m.key) && ka.contains(&m.key)) {
                    (true, true) => " [R2R, common]",
                    (true, false) => " [R2R]",
                    (false, true) => " [common]",
                    (false, false) => "",
                };
                check.details.push(format!("  {:>2}. {:>6}  {}{marks}", i + 1, m.weight, m.key));
            }
        }
        let floor_n = min_samples.unwrap_or(AGREE_FRAMES_MIN_SAMPLES);
        Ok(floor(check, na.min(nb), floor_n, "samples counted in the fewer collector"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, framed, push, sample};
    use model::DsoClass;

    const CORELIB: &str = "/d/System.Private.CoreLib.dll";

    fn perf_name(method: &str) -> String {
        format!("void [System.Private.CoreLib] System.Demo::{method}(int32)")
    }

    fn agree(min_common: usize, min_r2r: Option<usize>, names: NameMatch) -> AgreeFramesCheck {
        AgreeFramesCheck {
            collectors: vec!["a".into(), "b".into()],
            assembly: FRAMEWORK_ASSEMBLIES.into(),
            mode: ShareMode::Leaf,
            names,
            top: 3,
            min_common,
            min_r2r,
            sample_kinds: [("b".to_string(), "managed".to_string())].into(),
            min_samples: Some(1),
        }
    }

    fn judge_agree(exp: &AgreeFramesCheck, a: Collection, b: Collection) -> Check {
        evaluate_on(exp, &[a, b], serde_json::json!({}))
    }

    #[test]
    fn agree_frames_compares_top_lists_and_checks_r2r_names_against_the_other() {
        // a: precompiled frames named by the R2R resolver; b: the same methods from a perf map.
        let mut a = Collection::new("a");
        for (i, m) in ["One", "Two", "Three", "Four"].iter().enumerate() {
            push(&mut a, 10 - i, vec![framed(&perf_name(m), DsoClass::R2r, CORELIB)]);
        }
        let mut b = Collection::new("b");
        for (i, m) in ["Two", "One", "Four", "Three"].iter().enumerate() {
            let mut s = sample(vec![framed(&format!("{}[OptimizedTier1]", perf_name(m)), DsoClass::Jit, "//anon")]);
            s.kind = Some("managed".into());
            for _ in 0..(10 - i) {
                b.samples.push(s.clone());
            }
        }
        // Blocked samples are not counted for b: they would put `Wait` on top.
        let mut blocked = sample(vec![framed(&perf_name("Wait"), DsoClass::Jit, "//anon")]);
        blocked.kind = Some("external".into());
        b.samples.extend(std::iter::repeat_n(blocked, 50));
        let check = judge_agree(&agree(2, Some(3), NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert_eq!(check.values["common"], 2.0);
        assert_eq!(check.values["r2r_in_top_first"], 3.0);
        assert!(check.details.iter().any(|d| d.contains("System.Demo::One") && d.contains("[R2R, common]")), "{:?}", check.details);
        // Fewer in common than asked: FAIL, naming what differs.
        let check = judge_agree(&agree(3, None, NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail);
        // … unless the lists rest on too few samples (34 counted in each: below the default
        // floor of 100), which decide nothing either way.
        let thin = judge_agree(&AgreeFramesCheck { min_samples: None, ..agree(3, None, NameMatch::Exact) }, a.clone(), b.clone());
        assert_eq!(thin.verdict, Verdict::Inconclusive, "{thin:?}");
        assert!(thin.reason.as_deref().unwrap().starts_with("34 samples counted in the fewer collector, below the floor of 100"), "{thin:?}");
        assert!(check.measured.contains("only a: `") && check.measured.contains("Three"), "{}", check.measured);
        // Too few precompiled methods in a's top list.
        let check = judge_agree(&agree(2, Some(4), NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail);
        // An R2R name b does not know (a misspelling) fails even though it ranks alike …
        let mut misspelt = a.clone();
        push(&mut misspelt, 20, vec![framed("void [System.Private.CoreLib] System.Demo::Five(int)", DsoClass::R2r, CORELIB)]);
        let check = judge_agree(&agree(1, None, NameMatch::Exact), misspelt.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Fail, "{check:?}");
        assert!(check.measured.contains("unknown to b: `void [System.Private.CoreLib] System.Demo::Five(int)`"), "{}", check.measured);
        // … and passes once b's perf map lists that exact name, sampled or not.
        let mut b_map = b.clone();
        b_map.method_names.insert("void [System.Private.CoreLib] System.Demo::Five(int)".into());
        assert_eq!(judge_agree(&agree(1, None, NameMatch::Exact), misspelt, b_map).verdict, Verdict::Pass);
        // Never a PASS on zero samples, nor a FAIL: no data decides nothing.
        let check = judge_agree(&agree(0, None, NameMatch::Exact), a, Collection::new("b"));
        assert_eq!(check.verdict, Verdict::Inconclusive);
    }

    /// A web API whose own code is two routes, one blocked: SampleProfiler's managed samples rank
    /// one method of the app, perf's on-CPU samples two. All the shorter list holds in common is
    /// agreement; a method of it the other does not rank is not.
    #[test]
    fn agree_frames_holds_a_top_list_shorter_than_min_common_to_all_of_it() {
        let mut a = Collection::new("a");
        push(&mut a, 30, vec![framed(&perf_name("CpuRoute"), DsoClass::Jit, CORELIB)]);
        push(&mut a, 5, vec![framed(&perf_name("BlockedRoute"), DsoClass::Jit, CORELIB)]);
        let mut b = Collection::new("b");
        let mut s = sample(vec![framed(&perf_name("CpuRoute"), DsoClass::Jit, CORELIB)]);
        s.kind = Some("managed".into());
        b.samples.extend(std::iter::repeat_n(s, 40));
        let check = judge_agree(&agree(2, None, NameMatch::Exact), a.clone(), b.clone());
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert!(check.expected.contains("a top list shorter than 2 (here 1) wholly in common"), "{}", check.expected);
        let mut other = Collection::new("b");
        let mut s = sample(vec![framed(&perf_name("Elsewhere"), DsoClass::Jit, CORELIB)]);
        s.kind = Some("managed".into());
        other.samples.extend(std::iter::repeat_n(s, 40));
        assert_eq!(judge_agree(&agree(2, None, NameMatch::Exact), a, other).verdict, Verdict::Fail);
    }

    #[test]
    fn agree_frames_across_spellings_by_method_and_arity() {
        let mut perf = Collection::new("a");
        push(&mut perf, 5, vec![framed(
            "instance bool [System.Text.RegularExpressions] System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(valuetype [System.Runtime]System.ReadOnlySpan`1<char>)",
            DsoClass::R2r,
            "/d/System.Text.RegularExpressions.dll",
        )]);
        let mut ep = Collection::new("b");
        let mut s = sample(vec![framed(
            "System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(value class System.ReadOnlySpan`1<wchar>)",
            DsoClass::R2r,
            "System.Text.RegularExpressions",
        )]);
        s.kind = Some("managed".into());
        ep.samples.extend(std::iter::repeat_n(s, 4));
        assert_eq!(judge_agree(&agree(1, Some(1), NameMatch::Exact), perf.clone(), ep.clone()).verdict, Verdict::Fail);
        let check = judge_agree(&agree(1, Some(1), NameMatch::MethodAndArity), perf, ep);
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    }
}
