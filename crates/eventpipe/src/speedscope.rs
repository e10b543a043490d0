//! Writes sampled stacks as a speedscope file (https://www.speedscope.app, "sampled" profiles,
//! one per thread) — enough to open a trace's SampleProfiler stacks in a browser.

use std::collections::HashMap;

use serde_json::json;

use crate::decode::{Decoded, frame_label};

/// The speedscope JSON document for `decoded`'s samples; `name` labels the profile.
pub fn to_speedscope(decoded: &Decoded, name: &str) -> serde_json::Value {
    let mut frames: Vec<serde_json::Value> = Vec::new();
    let mut frame_index: HashMap<String, usize> = HashMap::new();
    let mut stack_frames: HashMap<u32, Vec<usize>> = HashMap::new();
    let mut per_thread: std::collections::BTreeMap<u64, (Vec<Vec<usize>>, Vec<u64>)> = Default::default();
    let interval = u64::from(decoded.info.sampling_interval_ns.max(1));
    for s in &decoded.samples {
        let stack = match s.stack {
            Some(id) => stack_frames
                .entry(id)
                .or_insert_with(|| {
                    // speedscope wants root first.
                    decoded
                        .frames(id)
                        .iter()
                        .rev()
                        .map(|f| {
                            let label = frame_label(f);
                            *frame_index.entry(label.clone()).or_insert_with(|| {
                                let file = f.module.unwrap_or("");
                                frames.push(json!({ "name": label, "file": file }));
                                frames.len() - 1
                            })
                        })
                        .collect()
                })
                .clone(),
            None => Vec::new(),
        };
        let entry = per_thread.entry(s.thread_id).or_default();
        entry.0.push(stack);
        entry.1.push(interval);
    }
    let profiles: Vec<_> = per_thread
        .into_iter()
        .map(|(tid, (samples, weights))| {
            let total: u64 = weights.iter().sum();
            json!({
                "type": "sampled",
                "name": format!("thread {tid}"),
                "unit": "nanoseconds",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            })
        })
        .collect();
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": name,
        "exporter": concat!("eventpipe ", env!("CARGO_PKG_VERSION")),
        "shared": { "frames": frames },
        "profiles": profiles,
    })
}
