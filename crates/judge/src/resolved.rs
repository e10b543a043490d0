//! `kind = "resolved"`: how many frames of a DSO class got a name — the symbolizer's own score,
//! counted per class because each class is named by a different source (perf map, R2R image, ELF).

use serde::{Deserialize, Serialize};

use super::sufficiency::floor;
use super::{Check, Evidence, Judge, bad_key, bounds_text, fraction, resolution, within, yes};
use model::DsoClass;

/// Resolved-frame ratio for a DSO class (`jit`, `r2r`, `stub`, `runtime_native`, `libc`, `kernel`,
/// `managed` = jit + r2r) at least `min` and/or at most `max`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedCheck {
    pub class: String,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    /// Count leaf frames only (the default) or every frame.
    #[serde(default = "yes")]
    pub leaf_only: bool,
    /// Only samples of this kind (a system call of `perf-syscalls`: `read`, `write` …).
    #[serde(default)]
    pub sample_kind: Option<String>,
    /// Fewer frames of the class than this decide nothing (inconclusive); default
    /// [`RESOLVED_MIN_FRAMES`].
    #[serde(default)]
    pub min_samples: Option<u64>,
}

/// The default floor of frames a ratio is judged on: one frame of two named is no evidence.
pub const RESOLVED_MIN_FRAMES: u64 = 50;

/// (total, named) frames of `class` (`managed` adds JIT and R2R).
fn class_ratio(res: &std::collections::BTreeMap<DsoClass, (u64, u64)>, class: &str) -> Result<(u64, u64), String> {
    let classes: Vec<DsoClass> = match class {
        "managed" => vec![DsoClass::Jit, DsoClass::R2r],
        other => vec![DsoClass::parse(other).ok_or_else(|| format!("unknown DSO class `{other}`"))?],
    };
    Ok(classes.iter().fold((0, 0), |acc, c| {
        let (t, n) = res.get(c).copied().unwrap_or_default();
        (acc.0 + t, acc.1 + n)
    }))
}

impl Judge for ResolvedCheck {
    fn default_name(&self) -> String {
        format!("resolved {} frames", self.class)
    }

    fn validate(&self) -> anyhow::Result<()> {
        fraction("min", self.min)?;
        fraction("max", self.max)?;
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(bad_key("max", format!("`max` ({max}) is below `min` ({min}): no ratio passes")));
        }
        if self.class != "managed" && DsoClass::parse(&self.class).is_none() {
            let known: Vec<&str> = DsoClass::ALL.iter().map(|c| c.as_str()).collect();
            return Err(bad_key("class", format!("unknown DSO class `{}`: one of managed (jit + r2r), {}", self.class, known.join(", "))));
        }
        Ok(())
    }

    fn judge(&self, name: String, collector: Option<&str>, ev: &Evidence) -> Result<Check, String> {
        let ResolvedCheck { class, min, max, leaf_only, sample_kind, min_samples } = self;
        let mut c = ev.read(collector)?;
        let of_kind;
        if let Some(kind) = sample_kind {
            let mut only = model::Collection::new(c.collector.clone());
            only.samples = c.samples.iter().filter(|s| s.kind.as_deref() == Some(kind.as_str())).cloned().collect();
            of_kind = only;
            c = &of_kind;
        }
        let res = resolution(c, *leaf_only);
        let (total, named) = class_ratio(&res, class)?;
        let ratio = if total > 0 { named as f64 / total as f64 } else { 0.0 };
        let floor_n = min_samples.unwrap_or(RESOLVED_MIN_FRAMES);
        let pass = total > 0 && within(ratio, *min, *max);
        let check = Check::new(
            name,
            Some(&c.collector),
            pass,
            format!(
                "ratio {} over > 0 {} frames{}",
                bounds_text(*min, *max),
                if *leaf_only { "leaf" } else { "all" },
                sample_kind.as_deref().map(|k| format!(" of `{k}` samples")).unwrap_or_default()
            ),
            format!("{named} of {total} named ({:.1} %)", ratio * 100.0),
        )
        .value("ratio", ratio)
        .value("frames", total as f64);
        // Too few frames of the class (none at all, or one of two named) prove nothing.
        Ok(floor(check, total, floor_n, &format!("{} frames of class `{class}`", if *leaf_only { "leaf" } else { "all" })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;
    use crate::testing::{evaluate_on, frame, sample};
    use model::{Collection, Frame};

    #[test]
    fn managed_ratio_needs_frames_and_names_unknown_classes() {
        let mut c = Collection::new("perf-cpu");
        c.samples.push(sample(vec![frame("W::Hot()", DsoClass::Jit)]));
        c.samples.push(sample(vec![frame("S::M()", DsoClass::R2r)]));
        c.samples.push(sample(vec![Frame { name: None, dso: None, class: DsoClass::Jit, addr: 1 }]));
        c.samples.push(sample(vec![Frame { name: None, dso: None, class: DsoClass::Kernel, addr: 2 }]));
        let check = |class: &str, min| ResolvedCheck { class: class.into(), min, max: None, leaf_only: true, sample_kind: None, min_samples: Some(1) };
        let judged = evaluate_on(&check("managed", Some(0.6)), &[c.clone()], serde_json::json!({}));
        assert_eq!(judged.verdict, Verdict::Pass, "{judged:?}");
        assert_eq!((judged.name.as_str(), judged.measured.as_str()), ("resolved managed frames", "2 of 3 named (66.7 %)"));
        assert_eq!(judged.expected, "ratio ≥ 0.6 over > 0 leaf frames");
        assert_eq!(evaluate_on(&check("kernel", None), &[c.clone()], serde_json::json!({})).verdict, Verdict::Pass);
        // No libc frame at all: nothing proven, nothing decided.
        let none = evaluate_on(&check("libc", None), &[c.clone()], serde_json::json!({}));
        assert_eq!(none.verdict, Verdict::Inconclusive, "{none:?}");
        assert_eq!(none.reason.as_deref(), Some("0 leaf frames of class `libc`, below the floor of 1 (min_samples): too few to decide"));
        // The default floor: 3 managed frames, 2 named, decide nothing.
        let thin = evaluate_on(&ResolvedCheck { min_samples: None, ..check("managed", Some(0.9)) }, &[c.clone()], serde_json::json!({}));
        assert_eq!(thin.verdict, Verdict::Inconclusive, "{thin:?}");
        let judged = evaluate_on(&check("elsewhere", None), &[c], serde_json::json!({}));
        assert_eq!((judged.verdict, judged.measured.as_str()), (Verdict::Fail, "unknown DSO class `elsewhere`"));
    }

    #[test]
    fn a_ratio_out_of_0_to_1_or_an_unknown_class_is_refused_at_load_naming_its_key() {
        let check = |class: &str, min, max| ResolvedCheck { class: class.into(), min, max, leaf_only: true, sample_kind: None, min_samples: None };
        let refused = |c: ResolvedCheck| {
            let e = c.validate().unwrap_err().downcast::<crate::BadKey>().unwrap();
            (e.key, e.message)
        };
        check("managed", Some(0.95), Some(1.0)).validate().unwrap();
        check("jit", Some(0.0), None).validate().unwrap();
        assert_eq!(refused(check("managed", Some(95.0), None)), ("min", "`min` is a ratio between 0 and 1 (0.95 for 95 %), got 95".into()));
        assert_eq!(refused(check("managed", None, Some(-0.1))).0, "max");
        assert_eq!(refused(check("managed", Some(0.9), Some(0.5))).0, "max");
        let (key, why) = refused(check("elsewhere", None, None));
        assert!(key == "class" && why.contains("one of managed (jit + r2r), jit"), "{why}");
    }
}
