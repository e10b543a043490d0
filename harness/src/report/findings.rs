//! What the manifest says about the data beyond the verdict: resolution per DSO class, and
//! diagnoses of known pitfalls found in the data itself (stripped runtime code, W^X's unnamed
//! JIT alias).

use model::{Collection, DsoClass};

pub(crate) fn resolution_json(c: &Collection) -> serde_json::Value {
    let leaf = judge::resolution(c, true);
    let all = judge::resolution(c, false);
    let mut classes = serde_json::Map::new();
    for class in DsoClass::ALL {
        let (lt, ln) = leaf.get(&class).copied().unwrap_or_default();
        let (at, an) = all.get(&class).copied().unwrap_or_default();
        classes.insert(
            class.as_str().into(),
            serde_json::json!({
                "leaf_total": lt, "leaf_named": ln,
                "leaf_ratio": if lt > 0 { Some(ln as f64 / lt as f64) } else { None },
                "all_total": at, "all_named": an,
                "all_ratio": if at > 0 { Some(an as f64 / at as f64) } else { None },
            }),
        );
    }
    serde_json::json!({ "classes": classes })
}

/// Diagnoses of known pitfalls, from the data itself.
pub(crate) fn diagnose(collections: &[Collection]) -> Vec<String> {
    let mut out = Vec::new();
    // One run's perf map and jitdump, counted into each perf collection: said once.
    let jit_paths = collections.iter().find_map(|c| Some((c.metrics.get("jit_perf_map_entries")?, c.metrics.get("jitdump_code_loads")?)));
    if let Some((map, loads)) = jit_paths {
        let census = stacks::JitDumpCensus { code_loads: *loads as u64, ..Default::default() };
        out.extend(stacks::jit_naming_finding(*map as u64, &census));
    }
    // The run's perf map, damaged where the runtime wrote names it could not: said once.
    if let Some(c) = collections.iter().find(|c| c.metrics.contains_key("jit_perf_map_damaged_lines")) {
        let metric = |k: &str| c.metrics.get(k).copied().unwrap_or(0.0) as u64;
        let damage = stacks::PerfMapDamage {
            lines: metric("jit_perf_map_damaged_lines"),
            recovered: metric("jit_perf_map_recovered_records"),
            first_at: Some(metric("jit_perf_map_damaged_from_byte")),
            non_ascii: metric("jit_perf_map_damaged_non_ascii") > 0,
        };
        out.extend(stacks::perf_map_damage_finding(&format!("artifacts/perf-{}.map", metric("jit_perf_map_pid")), &damage));
    }
    for c in collections {
        if c.metrics.contains_key("perfcollect.fixed_settings") {
            // A peer's stacks are perf's own names: tracelab's remedies (`--symbols`, an
            // eventpipe session beside it) do not reach them; what would fix it does.
            out.extend(perfcollect_settings(c));
            out.extend(perfview_drops(c));
            continue;
        }
        out.extend(model::unnamed_dso_hints(c));
        let uninstantiated = c.metrics.get("generic_frames_uninstantiated").copied().unwrap_or(0.0);
        if uninstantiated > 0.0 && c.collector.starts_with("perf") {
            let instantiated = c.metrics.get("generic_frames_instantiated").copied().unwrap_or(0.0);
            out.push(format!(
                "`{}`: {uninstantiated} frames of generic methods are named by their definition (`Step(!!0,int32)`), not by \
                 which instantiation ran ({instantiated} were): the perf map does not say it. An `eventpipe` collector \
                 (profile thread-time) in the same run records each method's instantiation (MethodDetails) from its start \
                 onward, and perf frames take it by address; methods compiled before that session began keep the definition's name.",
                c.collector
            ));
        }
        out.extend(stub_finding(c));
        out.extend(perfview_drops(c));
        let leaves = c.samples.iter().filter_map(|s| s.frames.first());
        let (mut total, mut doublemapped) = (0u64, 0u64);
        for f in leaves {
            total += 1;
            if f.name.is_none() && f.dso.as_deref().is_some_and(|d| d.contains("doublemapper")) {
                doublemapped += 1;
            }
        }
        if total > 0 && doublemapped * 5 >= total {
            out.push(format!(
                "`{}`: {doublemapped} of {total} leaf frames ({:.1} %) are unnamed JIT code in `/memfd:doublemapper`: \
                 W^X is on, so JIT code runs from a memfd alias the perf map does not describe. \
                 Set DOTNET_EnableWriteXorExecute=0 for named JIT frames.",
                c.collector,
                doublemapped as f64 / total as f64 * 100.0
            ));
        }
    }
    out
}

/// What would make perfcollect's JIT frames resolve, when a run as its instructions say named few:
/// on .NET 10 W^X is on by default, and the JIT's code then runs from `/memfd:doublemapper`, which
/// neither the perf map nor the jitdump (`perf inject --jit`) it relies on describes.
fn perfcollect_settings(c: &Collection) -> Option<String> {
    let jit: Vec<&model::Frame> = c.samples.iter().flat_map(|s| &s.frames).filter(|f| f.class == DsoClass::Jit).collect();
    let unnamed = jit.iter().filter(|f| f.name.is_none()).count();
    if jit.is_empty() || unnamed * 5 < jit.len() {
        return None;
    }
    let fixed = c.metrics.get("perfcollect.fixed_settings").is_some_and(|v| *v > 0.0);
    let settings = crate::collect::perfcollect::FIXED_SETTINGS.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    Some(if fixed {
        format!(
            "`{}`: {unnamed} of {} JIT frames are unnamed although the app ran with {settings}: look in its log ({}.log) for perf inject's messages.",
            c.collector,
            jit.len(),
            c.collector
        )
    } else {
        format!(
            "`{}`: perfcollect as its instructions say (DOTNET_PerfMapEnabled=1) left {unnamed} of {} JIT frames ({:.1} %) unnamed: \
             W^X is on (the .NET default), so the JIT's code runs from /memfd:doublemapper, which neither its perf map nor \
             its jitdump describes. Start the app with {settings} (this collector's `settings = \"fixed\"`) and its JIT frames resolve.",
            c.collector,
            jit.len(),
            unnamed as f64 / jit.len() as f64 * 100.0
        )
    })
}

/// LTTng events TraceEvent 4.0.0 (what PerfView reads a trace.zip with) leaves out of a CTF
/// trace without a word, as (name, version; `None`: any): found reading one of our zips back,
/// 2,115 of 30,683 events gone.
const PERFVIEW_DROPS: &[(&str, Option<u32>)] = &[("GCHeapStats", Some(2)), ("GCGlobalHeapHistory", Some(4)), ("MethodJitMemoryAllocatedForCode", None)];

/// What PerfView will not show of an LTTng collection when it opens the run's trace.zip.
fn perfview_drops(c: &Collection) -> Option<String> {
    if !c.metrics.contains_key("lttng.events") {
        return None;
    }
    let mut dropped: Vec<(String, u64)> = Vec::new();
    for &(name, version) in PERFVIEW_DROPS {
        let n = c.events.iter().filter(|e| e.name == name && version.is_none_or(|v| e.version == Some(v))).count() as u64;
        if n > 0 {
            dropped.push((version.map_or(name.to_string(), |v| format!("{name}_V{v}")), n));
        }
    }
    let total: u64 = dropped.iter().map(|d| d.1).sum();
    (total > 0).then(|| {
        format!(
            "`{}`: PerfView (TraceEvent 4.0.0) leaves {total} of its {} events out when it opens the trace.zip, without a word: {}. \
             They are in this run's own decode (the checks, manifest.json).",
            c.collector,
            c.events.len(),
            dropped.iter().map(|(n, k)| format!("{n} ×{k}")).collect::<Vec<_>>().join(", ")
        )
    })
}

/// How much of a collection ran in, or passed through, the runtime's stubs, by kind: code that is
/// no method (virtual stub dispatch, precode, delegate thunks, write barriers) and that users
/// otherwise see as unresolvable frames.
fn stub_finding(c: &Collection) -> Option<String> {
    let mut kinds: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for s in &c.samples {
        for (i, f) in s.frames.iter().enumerate().filter(|(_, f)| f.class == DsoClass::Stub) {
            let kind = f.name.as_deref().and_then(model::stub_kind).unwrap_or("?");
            let k = kinds.entry(kind).or_default();
            k.0 += 1;
            k.1 += u64::from(i == 0);
        }
    }
    if kinds.is_empty() {
        return None;
    }
    let (frames, leaves) = kinds.values().fold((0, 0), |a, k| (a.0 + k.0, a.1 + k.1));
    let mut by_kind: Vec<_> = kinds.into_iter().collect();
    by_kind.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
    let list: Vec<String> = by_kind.iter().map(|(k, (n, leaf))| format!("{k} {n} ({leaf} as leaf)")).collect();
    Some(format!(
        "`{}`: {frames} frames in {} samples are runtime stubs, named by their kind (class `stub`; {leaves} samples ran in one): {}.",
        c.collector,
        c.samples.len(),
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_documented_perfcollect_run_that_names_no_jit_frame_is_told_the_settings_that_fix_it() {
        let mut c = Collection::new("perfcollect");
        c.metrics.insert("perfcollect.fixed_settings".into(), 0.0);
        let doublemapped = model::Frame { name: None, dso: Some("/memfd:doublemapper (deleted)".into()), class: DsoClass::Jit, addr: 1 };
        for _ in 0..10 {
            c.samples.push(model::Sample::new(7, 7, 1, vec![doublemapped.clone()]));
        }
        let found = diagnose(std::slice::from_ref(&c));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("left 10 of 10 JIT frames") && found[0].contains("DOTNET_EnableWriteXorExecute=0"), "{}", found[0]);
        c.metrics.insert("perfcollect.fixed_settings".into(), 1.0);
        assert!(diagnose(std::slice::from_ref(&c))[0].contains("although the app ran with"));
        // Named JIT frames: nothing to say.
        for s in &mut c.samples {
            s.frames[0].name = Some("P::Hot()".into());
        }
        assert!(diagnose(&[c]).is_empty());
    }

    #[test]
    fn an_lttng_collection_says_what_perfview_will_not_show() {
        let event = |name: &str, version: u32| model::Event {
            provider: "DotNETRuntime".into(),
            name: name.into(),
            id: None,
            version: Some(version),
            time_ns: 0,
            pid: 1,
            tid: 1,
            fields: Default::default(),
            frames: Vec::new(),
        };
        let mut c = Collection::new("lttng");
        c.events = vec![event("GCHeapStats", 2), event("GCHeapStats", 2), event("GCStart", 2), event("MethodJitMemoryAllocatedForCode", 0)];
        assert_eq!(perfview_drops(&c), None, "not an LTTng collection");
        c.metrics.insert("lttng.events".into(), 4.0);
        let said = perfview_drops(&c).unwrap();
        assert!(said.contains("leaves 3 of its 4 events out") && said.contains("GCHeapStats_V2 ×2, MethodJitMemoryAllocatedForCode ×1"), "{said}");
        c.events.truncate(0);
        assert_eq!(perfview_drops(&c), None);
    }
}
