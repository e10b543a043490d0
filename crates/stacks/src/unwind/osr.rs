//! On-stack replacement (OSR) and frame-pointer stacks.
//!
//! A method entered once that loops hot (a `Main`, a worker loop) starts at Tier0 and is
//! recompiled mid-loop; the runtime then jumps from the Tier0 frame into the OSR version, which
//! keeps the Tier0 frame under its own. The frame-pointer walk out of the OSR frame reads a return
//! address into the Tier0 method (its patchpoint) but a saved frame pointer that is already the
//! caller's, so the next step returns into the caller's caller: the stack reads
//! `Run;Burn[OSR];Burn[Tier0]` where the truth (EventPipe's walk of the same run) is
//! `Run;Alpha;Burn`. The caller's return address is not in that frame-pointer callchain at all.
//!
//! It is in other samples of the same thread: before the method reached its patchpoint often
//! enough it ran as Tier0 code (each call runs thousands of loop iterations at Tier0 before it
//! jumps, and the method's own calls into the JIT at start-up are sampled there too), walked
//! whole, and such a stack reads `…;Burn[Tier0];Alpha;Run@R` with the very return address `R`
//! the lost stack continues at. `R` is one call site, so the frame between is the method that
//! call site called. [`complete_osr_callers`] puts that frame in place of the Tier0 twin when the
//! same thread's whole stacks name exactly one such caller (two different callers of one call site —
//! a virtual or delegate call — recover nothing); every other twin becomes [`LOST_CALLER`], so no
//! method is counted twice and no stack claims a caller it does not have. Both are metrics
//! (`osr_recovered_caller_samples`, `osr_lost_caller_samples`); the judge turns the second into an
//! inconclusive reason for checks that read callers.
//!
//! What this module must not know: how the stack was walked or who reads the metrics.

use std::collections::{HashMap, HashSet};

pub use model::LOST_CALLER;
use model::{Collection, DsoClass, Frame, merge_code_version};

/// The perf map's tag of an OSR method version.
const OSR_TAG: &str = "[OptimizedTier1OSR]";

/// What [`complete_osr_callers`] did to a collection's samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OsrRepair {
    /// Samples whose every lost caller was put back from the same thread's whole stacks.
    pub recovered: u64,
    /// Samples with a caller no whole stack names: marked [`LOST_CALLER`].
    pub lost: u64,
}

/// Whether `frames[i]` is an OSR frame directly on its own Tier0 twin `frames[i + 1]`.
fn osr_over_twin(frames: &[Frame], i: usize) -> bool {
    let (Some(osr), Some(twin)) = (frames.get(i), frames.get(i + 1)) else { return false };
    is_osr_over_twin(osr, twin)
}

/// Whether `osr` is a method's OSR version and `twin` (the frame the walk went to next) the
/// same method's Tier0 frame: the signature of a lost caller.
pub(crate) fn is_osr_over_twin(osr: &Frame, twin: &Frame) -> bool {
    let (Some(osr_name), Some(twin_name)) = (osr.name.as_deref(), twin.name.as_deref()) else { return false };
    osr.class == DsoClass::Jit
        && osr_name.ends_with(OSR_TAG)
        && !twin_name.ends_with(OSR_TAG)
        && merge_code_version(osr_name) == merge_code_version(twin_name)
}

/// Whether `f` may stand as a whole stack's method frame (JIT code, not an OSR version).
pub(crate) fn is_whole_method_frame(f: &Frame) -> bool {
    f.class == DsoClass::Jit && f.name.as_deref().is_some_and(|n| !n.ends_with(OSR_TAG))
}

/// A lost caller's key: thread, the method (code versions merged), and the return address the
/// stack continues at above the lost frame (one call site in the caller's caller).
type CallerKey = (u32, String, u64);

/// Repairs every sample of `c` whose stack shows an OSR frame directly on top of its own Tier0
/// frame (frames leaf first): the twin becomes the caller the same thread's whole stacks show at
/// that call site, or [`LOST_CALLER`] where they show none or several. Records
/// `osr_recovered_caller_samples`, `osr_lost_caller_samples` and `osr_lost_caller_ratio` in
/// `c.metrics`.
pub fn complete_osr_callers(c: &mut Collection) -> OsrRepair {
    // The keys lost stacks need, found first: most collections have none and pay one scan.
    let mut wanted: HashSet<CallerKey> = HashSet::new();
    for s in &c.samples {
        for i in 0..s.frames.len() {
            if osr_over_twin(&s.frames, i) {
                if let (Some(name), Some(above)) = (s.frames[i].name.as_deref(), s.frames.get(i + 2)) {
                    wanted.insert((s.tid, merge_code_version(name).to_string(), above.addr));
                }
            }
        }
    }
    let wanted_addrs: HashSet<u64> = wanted.iter().map(|k| k.2).collect();
    // Whole stacks at those call sites: `…;METHOD (not OSR, not a twin);CALLER;@ADDR…`.
    let mut callers: HashMap<CallerKey, Vec<Frame>> = HashMap::new();
    if !wanted.is_empty() {
        for s in &c.samples {
            for j in 0..s.frames.len().saturating_sub(2) {
                let (method, caller, above) = (&s.frames[j], &s.frames[j + 1], &s.frames[j + 2]);
                if !wanted_addrs.contains(&above.addr) || method.class != DsoClass::Jit {
                    continue;
                }
                let (Some(name), Some(caller_name)) = (method.name.as_deref(), caller.name.as_deref()) else { continue };
                if name.ends_with(OSR_TAG) || caller_name == LOST_CALLER || (j > 0 && osr_over_twin(&s.frames, j - 1)) {
                    continue;
                }
                let key = (s.tid, merge_code_version(name).to_string(), above.addr);
                if !wanted.contains(&key) {
                    continue;
                }
                // One method whatever its code version: Alpha[QuickJitted] and Alpha[InstrumentedTier]
                // at one call site are one caller that tiered up between the samples.
                let seen = callers.entry(key).or_default();
                if !seen.iter().any(|f| f.name.as_deref().map(merge_code_version) == Some(merge_code_version(caller_name))) {
                    seen.push(caller.clone());
                }
            }
        }
    }
    let mut repair = OsrRepair::default();
    for s in &mut c.samples {
        let (mut put_back, mut marked) = (false, false);
        for i in 0..s.frames.len() {
            if !osr_over_twin(&s.frames, i) {
                continue;
            }
            let found = match (s.frames[i].name.as_deref(), s.frames.get(i + 2)) {
                (Some(name), Some(above)) => callers.get(&(s.tid, merge_code_version(name).to_string(), above.addr)),
                _ => None,
            };
            match found.map(Vec::as_slice) {
                Some([caller]) => {
                    s.frames[i + 1] = caller.clone();
                    put_back = true;
                }
                _ => {
                    let twin = &s.frames[i + 1];
                    s.frames[i + 1] = Frame { name: Some(LOST_CALLER.to_string()), dso: None, class: DsoClass::Unknown, addr: twin.addr };
                    marked = true;
                }
            }
        }
        repair.lost += u64::from(marked);
        repair.recovered += u64::from(put_back && !marked);
    }
    c.metrics.insert("osr_recovered_caller_samples".into(), repair.recovered as f64);
    c.metrics.insert("osr_lost_caller_samples".into(), repair.lost as f64);
    let total = c.samples.len().max(1) as f64;
    c.metrics.insert("osr_lost_caller_ratio".into(), repair.lost as f64 / total);
    repair
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Sample;

    fn jit(name: &str, addr: u64) -> Frame {
        Frame { name: Some(name.into()), dso: None, class: DsoClass::Jit, addr }
    }

    fn sample(tid: u32, frames: Vec<Frame>) -> Sample {
        Sample { pid: 1, tid, time_ns: 0, weight: 1, frames, kind: None }
    }

    // As perf-cpu recorded spin-two (corpus): Burn's OSR version over its Tier0 frame, Alpha gone,
    // the stack going on at Run's call site of Alpha (return address 0x500).
    const BURN: &str = "valuetype [System.Runtime]System.TimeSpan [spin-two] Spin::Burn(valuetype [System.Runtime]System.TimeSpan,float64)";
    const RUN: &str = "[spin-two] Spin::Run(valuetype [System.Runtime]System.TimeSpan)[OptimizedTier1OSR]";
    const ALPHA: &str = "[spin-two] Spin::Alpha(valuetype [System.Runtime]System.TimeSpan)[Tier0]";

    fn lost_stack(tid: u32) -> Sample {
        sample(tid, vec![jit(&format!("{BURN}[OptimizedTier1OSR]"), 0x100), jit(&format!("{BURN}[QuickJitted]"), 0x200), jit(RUN, 0x500)])
    }

    fn names(s: &Sample) -> Vec<&str> {
        s.frames.iter().map(|f| f.name.as_deref().unwrap()).collect()
    }

    #[test]
    fn the_caller_a_whole_stack_of_the_thread_shows_at_that_call_site_is_put_back() {
        let mut c = Collection::new("perf-cpu");
        c.samples.push(lost_stack(7));
        // Burn at Tier0 before it jumped: walked whole, Alpha between it and the same call site.
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(ALPHA, 0x320), jit(RUN, 0x500)]));
        // Recursion through two versions of one method is not OSR's signature.
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[OptimizedTier1]"), 0x100), jit(&format!("{BURN}[QuickJitted]"), 0x200)]));
        assert_eq!(complete_osr_callers(&mut c), OsrRepair { recovered: 1, lost: 0 });
        assert_eq!(names(&c.samples[0]), [&format!("{BURN}[OptimizedTier1OSR]"), ALPHA, RUN]);
        assert!(names(&c.samples[2])[1].ends_with("[QuickJitted]"));
        assert_eq!(c.metrics["osr_recovered_caller_samples"], 1.0);
        assert_eq!(c.metrics["osr_lost_caller_samples"], 0.0);
    }

    #[test]
    fn a_caller_seen_in_two_code_versions_is_one_caller() {
        // As perf-cpu recorded spin-two in a container: Alpha tiered up between the whole stacks.
        let mut c = Collection::new("perf-cpu");
        c.samples.push(lost_stack(7));
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(ALPHA, 0x320), jit(RUN, 0x500)]));
        let instrumented = ALPHA.replace("[Tier0]", "[InstrumentedTier]");
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[InstrumentedTier]"), 0x410), jit(&instrumented, 0x720), jit(RUN, 0x500)]));
        assert_eq!(complete_osr_callers(&mut c), OsrRepair { recovered: 1, lost: 0 });
        assert_eq!(merge_code_version(names(&c.samples[0])[1]), merge_code_version(ALPHA));
    }

    #[test]
    fn a_twin_no_whole_stack_explains_is_marked_and_counted() {
        let mut c = Collection::new("perf-cpu");
        c.samples.push(lost_stack(7));
        // Another thread's whole stack proves nothing about thread 7's caller.
        c.samples.push(sample(8, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(ALPHA, 0x320), jit(RUN, 0x500)]));
        // Another call site (0x600) neither.
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(ALPHA, 0x320), jit(RUN, 0x600)]));
        assert_eq!(complete_osr_callers(&mut c), OsrRepair { recovered: 0, lost: 1 });
        assert_eq!(names(&c.samples[0])[1], LOST_CALLER);
        assert!((c.metrics["osr_lost_caller_ratio"] - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_call_site_with_two_callers_recovers_nothing() {
        // A virtual or delegate call: one return address, two methods called through it.
        let beta = "[spin-two] Spin::Beta(valuetype [System.Runtime]System.TimeSpan)[Tier0]";
        let mut c = Collection::new("perf-cpu");
        c.samples.push(lost_stack(7));
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(ALPHA, 0x320), jit(RUN, 0x500)]));
        c.samples.push(sample(7, vec![jit(&format!("{BURN}[QuickJitted]"), 0x210), jit(beta, 0x330), jit(RUN, 0x500)]));
        assert_eq!(complete_osr_callers(&mut c), OsrRepair { recovered: 0, lost: 1 });
        assert_eq!(names(&c.samples[0])[1], LOST_CALLER);
    }
}
