//! `perf-fold PERF.DATA PID [OUT]`: perf.data → folded stacks through
//! [`harness::collect::perf::fold_perf_file`] (perf map of PID beside PERF.DATA or in /tmp).
//! Built in release by `cargo xtask bench perf` to time it against
//! `perf script | inferno-collapse-perf`; prints what it did on stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::collect::DecodeContext;
use harness::collect::perf::fold_perf_file;

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
    let fold = fold_perf_file(&data, &ctx)?;
    let t1 = Instant::now();
    let text = harness::fold::folded_text(&fold.folded);
    match args.get(2) {
        Some(out) => std::fs::write(out, text)?,
        None => print!("{text}"),
    }
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    eprintln!(
        "{} samples, {} distinct callchains, {} stacks: read+symbolize+fold {:.1} ms, total {:.1} ms",
        fold.samples,
        fold.distinct_callchains,
        fold.folded.len(),
        ms(t0, t1),
        ms(t0, Instant::now())
    );
    Ok(())
}
