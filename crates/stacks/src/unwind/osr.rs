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

/// A lost caller's key: thread (or process), the method (code versions merged), and the return
/// address the stack continues at above the lost frame (one call site in the caller's caller).
type CallerKey = (u32, String, u64);

/// Repairs every sample of `c` whose stack shows an OSR frame directly on top of its own Tier0
/// frame (frames leaf first): the twin becomes the caller the same thread's whole stacks show at
/// that call site, or [`LOST_CALLER`] where they show none or several. Records
/// `osr_recovered_caller_samples`, `osr_lost_caller_samples` and `osr_lost_caller_ratio` in
/// `c.metrics`.
pub fn complete_osr_callers(c: &mut Collection) -> OsrRepair {
    let lost_frame = Frame { name: Some(LOST_CALLER.to_string()), dso: None, class: DsoClass::Unknown, addr: 0 };
    // Every frame of every sample by one flat id, the marker last; the completion runs on ids
    // and the frames it moved are cloned into place afterwards.
    let mut flat: Vec<&Frame> = c.samples.iter().flat_map(|s| s.frames.iter()).collect();
    flat.push(&lost_frame);
    let lost_id = (flat.len() - 1) as u32;
    let mut ids: Vec<u32> = (0..lost_id).collect();
    let mut view: Vec<(u32, &mut [u32], u64)> = Vec::with_capacity(c.samples.len());
    let mut rest: &mut [u32] = &mut ids;
    for s in &c.samples {
        let (stack, tail) = rest.split_at_mut(s.frames.len());
        view.push((s.tid, stack, 1));
        rest = tail;
    }
    let frame = |id: u32| flat[id as usize];
    let repair = complete_ids(&mut view, &frame, lost_id);
    let mut moved: Vec<(usize, usize, Frame)> = Vec::new();
    if repair.recovered + repair.lost > 0 {
        let mut at = 0usize;
        for (i, s) in c.samples.iter().enumerate() {
            for k in 0..s.frames.len() {
                if ids[at + k] as usize != at + k {
                    moved.push((i, k, flat[ids[at + k] as usize].clone()));
                }
            }
            at += s.frames.len();
        }
    }
    for (i, k, f) in moved {
        c.samples[i].frames[k] = f;
    }
    c.metrics.insert("osr_recovered_caller_samples".into(), repair.recovered as f64);
    c.metrics.insert("osr_lost_caller_samples".into(), repair.lost as f64);
    let total = c.samples.len().max(1) as f64;
    c.metrics.insert("osr_lost_caller_ratio".into(), repair.lost as f64 / total);
    repair
}

/// The completion itself, on stacks of frame ids (key: the thread, or the process when the
/// stacks keep no thread; the ids leaf first; the samples a stack stands for), `frame` naming
/// each id and `lost_id` the [`LOST_CALLER`] marker's. What [`complete_osr_callers`] and
/// `trace fold`'s interned stacks share.
pub(crate) fn complete_ids<'f>(stacks: &mut [(u32, &mut [u32], u64)], frame: &dyn Fn(u32) -> &'f Frame, lost_id: u32) -> OsrRepair {
    let merged = |id: u32| merge_code_version(frame(id).name.as_deref().unwrap_or("")).to_string();
    // The keys lost stacks need, found first: most stacks have none and pay one scan.
    let mut wanted: HashSet<CallerKey> = HashSet::new();
    for (key, ids, _) in stacks.iter() {
        for j in 0..ids.len().saturating_sub(2) {
            if is_osr_over_twin(frame(ids[j]), frame(ids[j + 1])) {
                wanted.insert((*key, merged(ids[j]), frame(ids[j + 2]).addr));
            }
        }
    }
    if wanted.is_empty() {
        return OsrRepair::default();
    }
    let addrs: HashSet<u64> = wanted.iter().map(|w| w.2).collect();
    // Whole stacks at those call sites: `…;METHOD (not OSR, not a twin);CALLER;@ADDR…`.
    let mut callers: HashMap<CallerKey, Vec<u32>> = HashMap::new();
    for (key, ids, _) in stacks.iter() {
        for j in 0..ids.len().saturating_sub(2) {
            let (method, caller, above) = (frame(ids[j]), frame(ids[j + 1]), frame(ids[j + 2]));
            if !addrs.contains(&above.addr) || !is_whole_method_frame(method) || caller.name.is_none() {
                continue;
            }
            if caller.name.as_deref() == Some(LOST_CALLER) || (j > 0 && is_osr_over_twin(frame(ids[j - 1]), method)) {
                continue;
            }
            let at = (*key, merged(ids[j]), above.addr);
            if !wanted.contains(&at) {
                continue;
            }
            // One method whatever its code version: Alpha[QuickJitted] and Alpha[InstrumentedTier]
            // at one call site are one caller that tiered up between the samples.
            let seen = callers.entry(at).or_default();
            let caller_method = merged(ids[j + 1]);
            if !seen.iter().any(|&c| merged(c) == caller_method) {
                seen.push(ids[j + 1]);
            }
        }
    }
    let mut repair = OsrRepair::default();
    for (key, ids, count) in stacks.iter_mut() {
        let (mut put_back, mut marked) = (false, false);
        for j in 0..ids.len().saturating_sub(2) {
            if !is_osr_over_twin(frame(ids[j]), frame(ids[j + 1])) {
                continue;
            }
            match callers.get(&(*key, merged(ids[j]), frame(ids[j + 2]).addr)).map(Vec::as_slice) {
                Some([caller]) => {
                    ids[j + 1] = *caller;
                    put_back = true;
                }
                _ => {
                    ids[j + 1] = lost_id;
                    marked = true;
                }
            }
        }
        repair.lost += if marked { *count } else { 0 };
        repair.recovered += if put_back && !marked { *count } else { 0 };
    }
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
        Sample::new(1, tid, 0, frames)
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
