//! A perf.data recording's samples into the model: every frame symbolized, leaf first.

use anyhow::Result;

use model::{Collection, Sample};
use perfdata::{PerfRecording, PerfSample, chain_frames};

use crate::symbolize::{DecodeContext, Symbolizer};

/// Reads the symbol sources every sampled frame of `rec` needs, in parallel, once per distinct
/// callchain ([`Symbolizer::preload`]).
pub fn preload_samples(rec: &PerfRecording, symbolizer: &mut Symbolizer) {
    let chains: rustc_hash::FxHashSet<(u32, bool, &[u64])> =
        rec.samples.iter().map(|s| (s.pid, s.in_kernel, rec.callchain(s))).collect();
    symbolizer.preload(chains.iter().flat_map(|&(pid, in_kernel, callchain)| {
        chain_frames(callchain, in_kernel).map(move |f| (pid, f.addr, f.in_kernel))
    }));
}

/// Turns the samples of a recording into model samples (frames symbolized, leaf first).
pub fn samples_to_model(rec: &PerfRecording, symbolizer: &mut Symbolizer, weight_of: impl Fn(&PerfSample) -> u64) -> Vec<Sample> {
    preload_samples(rec, symbolizer);
    rec.samples
        .iter()
        .map(|s| Sample {
            pid: s.pid,
            tid: s.tid,
            time_ns: s.time_ns,
            weight: weight_of(s),
            frames: rec.frames(s).map(|f| symbolizer.frame(s.pid, f.addr, f.in_kernel)).collect(),
            kind: None,
            cpu: s.cpu,
        })
        .collect()
}

/// Decodes an on-CPU recording into a collection (every sample weight 1).
pub fn decode_recording(rec: &PerfRecording, ctx: &DecodeContext, collector: &str, name_doublemapped: bool) -> Result<Collection> {
    let mut symbolizer = Symbolizer::new(ctx, rec)?;
    symbolizer.set_name_doublemapped(name_doublemapped);
    let mut coll = Collection::new(collector);
    coll.samples = samples_to_model(rec, &mut symbolizer, |_| 1);
    coll.sampling = model::Sampling::CpuTime;
    coll.lost_events = rec.lost;
    // In time order, so a thread's last name wins (the runtime names its threads after start).
    coll.thread_names = rec.comms.iter().map(|c| (c.tid, c.name.clone())).collect();
    coll.metrics.insert("samples_total".into(), coll.samples.len() as f64);
    coll.metrics.insert("lost_events".into(), rec.lost as f64);
    coll.metrics.insert("mmaps".into(), rec.mmaps.len() as f64);
    for (k, v) in symbolizer.metrics() {
        coll.metrics.insert(k, v);
    }
    Ok(coll)
}

