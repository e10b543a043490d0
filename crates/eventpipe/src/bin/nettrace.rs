//! `nettrace inspect FILE.nettrace [--out DIR]`: a summary of a trace (events by provider and
//! name, lost events, sampling interval, process), plus folded stacks and a speedscope file of
//! its SampleProfiler samples. `nettrace bench FILE [N]`: raw decode throughput.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use eventpipe::{DecodeOptions, NettraceReader, SampleKind, decode, speedscope};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("inspect") if args.len() >= 2 => inspect(Path::new(&args[1]), out_dir(&args[2..])),
        Some("bench") if args.len() >= 2 => bench(Path::new(&args[1]), args.get(2).and_then(|n| n.parse().ok()).unwrap_or(5)),
        _ => Err("usage: nettrace inspect FILE.nettrace [--out DIR] | nettrace bench FILE.nettrace [RUNS]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn out_dir(rest: &[String]) -> Option<PathBuf> {
    rest.iter().position(|a| a == "--out").and_then(|i| rest.get(i + 1)).map(PathBuf::from)
}

fn inspect(path: &Path, out: Option<PathBuf>) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let started = Instant::now();
    let d = decode(std::io::BufReader::new(file), &DecodeOptions { keep_events: false, keep_samples: true })
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let took = started.elapsed();
    let i = &d.info;
    println!("{}", path.display());
    println!(
        "  process {} · {} processors · pointer size {} · sampling interval {:.3} ms · format V{}",
        i.process_id,
        i.processor_count,
        i.pointer_size,
        f64::from(i.sampling_interval_ns) / 1e6,
        i.version
    );
    let [y, mo, dd, h, mi, s, ms] = i.start_time;
    println!("  session start {y:04}-{mo:02}-{dd:02} {h:02}:{mi:02}:{s:02}.{ms:03} UTC");
    println!(
        "  {} events, {} lost, {} bytes, {} stacks, {} sequence points; decoded in {:.3} s",
        d.stats.events, d.stats.lost_events, d.stats.bytes, d.stats.stacks, d.stats.sequence_points, took.as_secs_f64()
    );
    if d.payload_error_count > 0 {
        println!("  {} payloads did not match their layout; first: {:?}", d.payload_error_count, d.payload_errors.first());
    }
    let mut by_provider: BTreeMap<&str, Vec<(u32, &str, u64)>> = BTreeMap::new();
    for ((p, id), c) in &d.counts {
        by_provider.entry(p).or_default().push((*id, &c.name, c.count));
    }
    for (p, mut events) in by_provider {
        events.sort_by(|a, b| b.2.cmp(&a.2));
        println!("  {p}: {} events", events.iter().map(|e| e.2).sum::<u64>());
        for (id, name, n) in events {
            println!("    {n:>9}  {id:>5} {}", if name.is_empty() { "?" } else { name });
        }
    }
    if !d.samples.is_empty() {
        let managed = d.samples.iter().filter(|s| s.kind == SampleKind::Managed).count();
        let external = d.samples.iter().filter(|s| s.kind == SampleKind::External).count();
        println!("  SampleProfiler: {} samples ({managed} managed, {external} external), {} methods known", d.samples.len(), d.methods.len());
        let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
        for s in &d.samples {
            if let Some(id) = s.stack {
                let f = d.frames(id)[0];
                *leaves.entry(eventpipe::decode::frame_label(&f)).or_default() += 1;
            }
        }
        let mut leaves: Vec<_> = leaves.into_iter().collect();
        leaves.sort_by(|a, b| b.1.cmp(&a.1));
        println!("  top leaf frames:");
        for (name, n) in leaves.iter().take(10) {
            println!("    {n:>7}  {name}");
        }
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace");
        let folded_path = dir.join(format!("{stem}.folded"));
        let folded: String = d.folded().into_iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        std::fs::write(&folded_path, folded).map_err(|e| format!("{}: {e}", folded_path.display()))?;
        let ss_path = dir.join(format!("{stem}.speedscope.json"));
        let doc = speedscope::to_speedscope(&d, stem);
        std::fs::write(&ss_path, serde_json::to_vec(&doc).unwrap()).map_err(|e| format!("{}: {e}", ss_path.display()))?;
        println!("  wrote {} and {}", folded_path.display(), ss_path.display());
    }
    Ok(())
}

/// Framing-level decode with a no-op consumer, the counterpart of TraceDump `bench`.
fn bench(path: &Path, runs: usize) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for run in 0..runs {
        let started = Instant::now();
        let mut reader = NettraceReader::new(&bytes[..]).map_err(|e| e.to_string())?;
        let mut events = 0u64;
        let mut payload_bytes = 0u64;
        while let Some(ev) = reader.next_event().map_err(|e| e.to_string())? {
            events += 1;
            payload_bytes += ev.payload.len() as u64;
        }
        std::hint::black_box(payload_bytes);
        let s = started.elapsed().as_secs_f64();
        println!(
            "run {run}: {events} events, {:.1} MB in {s:.3} s = {:.0} ev/s, {:.1} MB/s",
            bytes.len() as f64 / 1e6,
            events as f64 / s,
            bytes.len() as f64 / 1e6 / s
        );
    }
    Ok(())
}
