//! `perf-fold PERF.DATA PID [OUT]`: perf.data → folded stacks, the way tracelab decodes a
//! perf-cpu run (perf map of PID beside PERF.DATA). Built in release by `cargo xtask bench perf`
//! to time it against `perf script | inferno-collapse-perf`; prints a stage breakdown on stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::collect::DecodeContext;
use harness::collect::perf::{PerfRecording, fold_recording};
use harness::symbolize::Symbolizer;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(data), Some(pid)) = (args.first(), args.get(1)) else {
        anyhow::bail!("usage: perf-fold PERF.DATA PID [OUT]");
    };
    let data = PathBuf::from(data);
    let pid: u32 = pid.parse()?;
    let dir = data.parent().unwrap_or(Path::new(".")).to_path_buf();
    // A host run: recorded paths are host paths.
    let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = DecodeContext {
        artifacts: &dir,
        app_tmp_dir: &dir,
        host_pid: pid,
        target_pid: pid,
        path_map: &identity,
        symbol_dirs: &[],
    };
    let t0 = Instant::now();
    let rec = PerfRecording::read(&data)?;
    let t1 = Instant::now();
    let mut symbolizer = Symbolizer::new(&ctx, &rec)?;
    let t2 = Instant::now();
    let folded = fold_recording(&rec, &mut symbolizer);
    let t3 = Instant::now();
    let text = harness::fold::folded_text(&folded);
    match args.get(2) {
        Some(out) => std::fs::write(out, text)?,
        None => print!("{text}"),
    }
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    eprintln!(
        "{} samples: read {:.1} ms, symbol sources {:.1} ms, symbolize+fold {:.1} ms, total {:.1} ms",
        rec.samples.len(),
        ms(t0, t1),
        ms(t1, t2),
        ms(t2, t3),
        ms(t0, Instant::now())
    );
    Ok(())
}
