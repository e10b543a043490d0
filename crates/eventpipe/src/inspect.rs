//! A human-readable summary of a decoded trace, and its stacks as folded lines and speedscope.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::decode::{Decoded, SampleKind, frame_label};

/// Events by provider and name, lost events, sampling interval, process, top leaf frames.
pub fn summary(d: &Decoded, title: &str) -> String {
    let mut out = String::new();
    let i = &d.info;
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "  process {} · {} processors · pointer size {} · sampling interval {:.3} ms · Trace object V{}",
        i.process_id,
        i.processor_count,
        i.pointer_size,
        f64::from(i.sampling_interval_ns) / 1e6,
        i.version
    );
    let [y, mo, dd, h, mi, s, ms] = i.start_time;
    let _ = writeln!(out, "  session start {y:04}-{mo:02}-{dd:02} {h:02}:{mi:02}:{s:02}.{ms:03} UTC");
    let _ = writeln!(
        out,
        "  {} events, {} lost, {} bytes, {} stacks, {} sequence points",
        d.stats.events, d.stats.lost_events, d.stats.bytes, d.stats.stacks, d.stats.sequence_points
    );
    if d.payload_error_count > 0 {
        let _ = writeln!(out, "  {} payloads did not match their layout; first: {:?}", d.payload_error_count, d.payload_errors.first());
    }
    let mut by_provider: BTreeMap<&str, Vec<(u32, &str, u64)>> = BTreeMap::new();
    for ((p, id), c) in &d.counts {
        by_provider.entry(p).or_default().push((*id, &c.name, c.count));
    }
    for (p, mut events) in by_provider {
        events.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let _ = writeln!(out, "  {p}: {} events", events.iter().map(|e| e.2).sum::<u64>());
        for (id, name, n) in events {
            let _ = writeln!(out, "    {n:>9}  {id:>5} {}", if name.is_empty() { "?" } else { name });
        }
    }
    if !d.samples.is_empty() {
        let managed = d.samples.iter().filter(|s| s.kind == SampleKind::Managed).count();
        let external = d.samples.iter().filter(|s| s.kind == SampleKind::External).count();
        let _ = writeln!(
            out,
            "  SampleProfiler: {} samples ({managed} managed, {external} external), {} method ranges known",
            d.samples.len(),
            d.methods.len()
        );
        let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
        for s in &d.samples {
            if let Some(id) = s.stack {
                *leaves.entry(frame_label(&d.frames(id)[0])).or_default() += 1;
            }
        }
        let mut leaves: Vec<_> = leaves.into_iter().collect();
        leaves.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let _ = writeln!(out, "  top leaf frames:");
        for (name, n) in leaves.iter().take(10) {
            let _ = writeln!(out, "    {n:>7}  {name}");
        }
    }
    out
}

/// Writes `DIR/STEM.folded` and `DIR/STEM.speedscope.json`; returns both paths.
pub fn write_stacks(d: &Decoded, dir: &Path, stem: &str) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let folded_path = dir.join(format!("{stem}.folded"));
    let folded: String = d.folded().into_iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    std::fs::write(&folded_path, folded)?;
    let ss_path = dir.join(format!("{stem}.speedscope.json"));
    let doc = crate::speedscope::to_speedscope(d, stem);
    std::fs::write(&ss_path, serde_json::to_vec(&doc).map_err(std::io::Error::other)?)?;
    Ok((folded_path, ss_path))
}
