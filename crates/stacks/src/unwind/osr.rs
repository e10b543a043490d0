//! On-stack replacement (OSR) and frame-pointer stacks.
//!
//! A method entered once that loops hot (a `Main`, a worker loop) starts at Tier0 and is
//! recompiled mid-loop; the runtime then jumps from the Tier0 frame into the OSR version, which
//! keeps the Tier0 frame under its own. The frame-pointer walk out of the OSR frame reads a return
//! address into the Tier0 method (its patchpoint) but a saved frame pointer that is already the
//! caller's, so the next step returns into the caller's caller: the stack reads
//! `Run;Burn[OSR];Burn[Tier0]` where the truth (EventPipe's walk of the same run) is
//! `Run;Alpha;Burn`. The caller's return address is not in a frame-pointer callchain at all, so
//! it cannot be recovered from one; what can be done here is to see it: the Tier0 twin is
//! replaced by [`LOST_CALLER`], so no method is counted twice and no stack claims a caller it
//! does not have, and the share of samples marked is a metric (`osr_lost_caller_samples`) the
//! judge turns into an inconclusive reason for checks that read callers.
//!
//! What this module must not know: how the stack was walked or who reads the metric.

pub use model::LOST_CALLER;
use model::{Collection, DsoClass, Frame, merge_code_version};

/// The perf map's tag of an OSR method version.
const OSR_TAG: &str = "[OptimizedTier1OSR]";

/// Marks every sample of `c` whose stack shows an OSR frame directly on top of its own Tier0
/// frame (frames leaf first): the twin becomes [`LOST_CALLER`]. Returns the samples marked and
/// records them in `c.metrics` (`osr_lost_caller_samples`, `osr_lost_caller_ratio`).
pub fn mark_osr_lost_callers(c: &mut Collection) -> u64 {
    let mut marked = 0u64;
    for s in &mut c.samples {
        let mut hit = false;
        for i in 0..s.frames.len().saturating_sub(1) {
            let (osr, twin) = (&s.frames[i], &s.frames[i + 1]);
            let (Some(osr_name), Some(twin_name)) = (osr.name.as_deref(), twin.name.as_deref()) else { continue };
            if osr.class == DsoClass::Jit
                && osr_name.ends_with(OSR_TAG)
                && !twin_name.ends_with(OSR_TAG)
                && merge_code_version(osr_name) == merge_code_version(twin_name)
            {
                s.frames[i + 1] = Frame { name: Some(LOST_CALLER.to_string()), dso: None, class: DsoClass::Unknown, addr: twin.addr };
                hit = true;
            }
        }
        marked += u64::from(hit);
    }
    c.metrics.insert("osr_lost_caller_samples".into(), marked as f64);
    let total = c.samples.len().max(1) as f64;
    c.metrics.insert("osr_lost_caller_ratio".into(), marked as f64 / total);
    marked
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Sample;

    fn jit(name: &str) -> Frame {
        Frame { name: Some(name.into()), dso: None, class: DsoClass::Jit, addr: 1 }
    }

    fn sample(frames: Vec<Frame>) -> Sample {
        Sample { pid: 1, tid: 1, time_ns: 0, weight: 1, frames, kind: None }
    }

    #[test]
    fn an_osr_frame_on_its_tier0_twin_marks_the_lost_caller() {
        // As perf-cpu recorded spin-two (corpus): Burn's OSR version over its Tier0 frame, Alpha gone.
        let burn = "valuetype [System.Runtime]System.TimeSpan [spin-two] Spin::Burn(valuetype [System.Runtime]System.TimeSpan,float64)";
        let run = "[spin-two] Spin::Run(valuetype [System.Runtime]System.TimeSpan)[OptimizedTier1OSR]";
        let mut c = Collection::new("perf-cpu");
        c.samples.push(sample(vec![jit(&format!("{burn}[OptimizedTier1OSR]")), jit(&format!("{burn}[QuickJitted]")), jit(run)]));
        // A whole stack: Alpha calls the optimized Burn.
        c.samples.push(sample(vec![jit(&format!("{burn}[OptimizedTier1]")), jit("[spin-two] Spin::Alpha(valuetype [System.Runtime]System.TimeSpan)[Tier0]"), jit(run)]));
        // Recursion through two versions of one method is not OSR's signature.
        c.samples.push(sample(vec![jit(&format!("{burn}[OptimizedTier1]")), jit(&format!("{burn}[QuickJitted]"))]));
        assert_eq!(mark_osr_lost_callers(&mut c), 1);
        let names: Vec<&str> = c.samples[0].frames.iter().map(|f| f.name.as_deref().unwrap()).collect();
        assert_eq!(names[1], LOST_CALLER);
        assert!(names[0].ends_with("[OptimizedTier1OSR]") && names[2] == run);
        assert_eq!(c.samples[1].frames[1].name.as_deref().unwrap().contains("Alpha"), true);
        assert_eq!(c.metrics["osr_lost_caller_samples"], 1.0);
        assert!((c.metrics["osr_lost_caller_ratio"] - 1.0 / 3.0).abs() < 1e-9);
    }
}
