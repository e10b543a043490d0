//! `nettrace inspect FILE.nettrace [--out DIR] [--full]`: a summary of a trace (events by
//! provider and name, lost events, sampling interval, process), plus folded stacks and a
//! speedscope file of its SampleProfiler samples when `--out` is given; `--full` decodes every
//! payload too, streaming.
//! `nettrace bench FILE.nettrace [RUNS] [frames|full]`: decode throughput, printed like TraceDump
//! `bench`, reading the file as a stream (memory stays bounded at any size): `frames` reads every
//! event (headers, metadata, stacks) with a no-op consumer, as TraceEvent's bench does (a callback
//! per event: `for_each_event`, the file mapped: `NettraceReader::from_file`); `full`
//! also decodes every payload and resolves the sampled stacks (`inspect::full`). Both by default.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use eventpipe::{DecodeOptions, NettraceReader, decode, inspect};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("inspect") if args.len() >= 2 => run_inspect(Path::new(&args[1]), out_dir(&args[2..]), args[2..].iter().any(|a| a == "--full")),
        Some("bench") if args.len() >= 2 => bench(
            Path::new(&args[1]),
            args.get(2).and_then(|n| n.parse().ok()).unwrap_or(5),
            args.get(3).map_or("both", String::as_str),
        ),
        _ => Err("usage: nettrace inspect FILE.nettrace [--out DIR] [--full] | nettrace bench FILE.nettrace [RUNS] [frames|full]".to_string()),
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

fn run_inspect(path: &Path, out: Option<PathBuf>, full: bool) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("trace");
    if full {
        let f = NettraceReader::from_file(file).and_then(inspect::full).map_err(|e| format!("{}: {e}", path.display()))?;
        print!("{}", inspect::full_summary(&f, &path.display().to_string()));
        if let Some(dir) = out {
            let (folded, ss) = inspect::write_full_stacks(&f, &dir, stem).map_err(|e| format!("{}: {e}", dir.display()))?;
            println!("  wrote {} and {}", folded.display(), ss.display());
        }
        return Ok(());
    }
    let d = decode(std::io::BufReader::new(file), &DecodeOptions { keep_events: false, keep_samples: true })
        .map_err(|e| format!("{}: {e}", path.display()))?;
    print!("{}", inspect::summary(&d, &path.display().to_string()));
    if let Some(dir) = out {
        let (folded, ss) = inspect::write_stacks(&d, &dir, stem).map_err(|e| format!("{}: {e}", dir.display()))?;
        println!("  wrote {} and {}", folded.display(), ss.display());
    }
    Ok(())
}

fn open(path: &Path) -> Result<std::fs::File, String> {
    std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn bench(path: &Path, runs: usize, mode: &str) -> Result<(), String> {
    let size = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mb = size as f64 / 1e6;
    let (frames, full) = match mode {
        "frames" => (true, false),
        "full" => (false, true),
        "both" => (true, true),
        other => return Err(format!("unknown bench mode `{other}` (frames, full)")),
    };
    for run in 0..runs {
        if !frames {
            break;
        }
        // A pass over a few MB takes milliseconds: repeat it for ≥ 0.1 s so a run is measurable.
        let started = Instant::now();
        let (mut events, mut passes, mut payload_bytes) = (0u64, 0u32, 0u64);
        while passes == 0 || started.elapsed().as_secs_f64() < 0.1 {
            let mut reader = NettraceReader::from_file(open(path)?).map_err(|e| e.to_string())?;
            reader
                .for_each_event(|ev| {
                    events += 1;
                    payload_bytes += ev.payload.len() as u64;
                })
                .map_err(|e| e.to_string())?;
            passes += 1;
        }
        std::hint::black_box(payload_bytes);
        report("frames", run, events, passes, mb, started.elapsed().as_secs_f64());
    }
    for run in 0..runs {
        if !full {
            break;
        }
        let started = Instant::now();
        let (mut events, mut passes, mut resolved) = (0u64, 0u32, 0usize);
        while passes == 0 || started.elapsed().as_secs_f64() < 0.1 {
            let f = inspect::full(NettraceReader::from_file(open(path)?).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            // Resolving every distinct sampled stack is part of a full decode.
            resolved += f.samples.by_stack.keys().filter_map(|(_, s)| *s).map(|id| f.decoded.frames(id).len()).sum::<usize>();
            events += f.decoded.stats.events;
            passes += 1;
        }
        std::hint::black_box(resolved);
        report("full", run, events, passes, mb, started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// One run's line, as TraceDump `bench` prints it: events per pass, time per pass, rates.
fn report(mode: &str, run: usize, events: u64, passes: u32, mb: f64, s: f64) {
    println!(
        "{mode} run {run}: {} events, {mb:.1} MB in {:.4} s = {:.0} ev/s, {:.1} MB/s ({passes} passes)",
        events / u64::from(passes),
        s / f64::from(passes),
        events as f64 / s,
        mb * f64::from(passes) / s
    );
}
