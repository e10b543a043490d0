//! `cargo xtask bench ctf [--trace DIR] [--runs N] [--record] [--record-runs N]`: decodes one
//! large LTTng trace with tracelab's CTF reader and with `babeltrace2` (to its dummy sink, which
//! decodes every event and discards it, and as text), in one run, and prints both rates and the
//! ratio. Without `--trace`, the trace is `.build/ctf-bench/trace`, recorded on first use (or with
//! `--record`) in the bullseye runtime image: every DotNETRuntime tracepoint of 25 FixtureApp runs
//! (≈ 51 MB, ≈ 550 k events). "Warm" = the median of the runs after the first.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{cargo_build_release, children_usage, median};

#[derive(Clone, Debug)]
pub struct Options {
    /// A CTF trace folder (or a session output holding several).
    pub trace: Option<PathBuf>,
    /// Timed runs of each reader.
    pub runs: usize,
    /// Record the default trace again.
    pub record: bool,
    /// FixtureApp runs in a recording.
    pub record_runs: u32,
}

struct Timing {
    wall: Duration,
    cpu: f64,
}

/// Runs the release build of crates/ctf's `ctfdump --count` (decodes every event with all its
/// fields, prints nothing per event) as a child, like babeltrace2, so both are timed the same way
/// and our reader is optimised whatever profile xtask itself was built with.
fn decode_ours(exe: &std::path::Path, trace: &std::path::Path) -> Result<(Timing, u64)> {
    let c0 = children_usage().cpu_seconds;
    let t0 = Instant::now();
    let out = Command::new(exe).arg("--count").arg(trace).output().with_context(|| format!("running {}", exe.display()))?;
    let wall = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("ctfdump failed: {stderr}");
    }
    let events = stderr.split_whitespace().next().and_then(|n| n.parse().ok()).context("ctfdump printed no event count")?;
    Ok((Timing { wall, cpu: children_usage().cpu_seconds - c0 }, events))
}

fn babeltrace(trace: &std::path::Path, extra: &[&str]) -> Result<(Timing, String)> {
    let c0 = children_usage().cpu_seconds;
    let t0 = Instant::now();
    let out = Command::new("babeltrace2")
        .arg(trace)
        .args(extra)
        .stdout(if extra.is_empty() { Stdio::null() } else { Stdio::piped() })
        .stderr(Stdio::piped())
        .output()
        .context("running babeltrace2 (Debian: apt-get install babeltrace2)")?;
    let wall = t0.elapsed();
    if !out.status.success() {
        bail!("babeltrace2 failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((Timing { wall, cpu: children_usage().cpu_seconds - c0 }, String::from_utf8_lossy(&out.stdout).into_owned()))
}

pub fn run(opts: &Options) -> Result<()> {
    let default = crate::project_root().join(".build/ctf-bench/recording");
    let trace = match &opts.trace {
        Some(t) => t.clone(),
        None => {
            let dir = default.join("trace");
            if opts.record || !dir.join("ust").exists() {
                crate::progress::note("bench", &format!("recording the bench trace ({} FixtureApp runs, bullseye image)", opts.record_runs));
                crate::collect::lttng::record_bench_trace(&default, opts.record_runs)?
            } else {
                dir
            }
        }
    };
    let bytes: u64 = ctf::Trace::find(&trace)?
        .iter()
        .map(|d| ctf::Trace::open(d).map(|t| t.stream_bytes()))
        .sum::<Result<u64, _>>()?;
    // The events babeltrace2 sees, to prove both readers decode the same trace.
    let (_, counted) = babeltrace(&trace, &["-c", "sink.utils.counter"])?;
    // The counter sink prints running totals every 10 000 events, then the final one.
    let bt_events: u64 = counted
        .lines()
        .filter_map(|l| l.trim().strip_suffix(" Event messages").and_then(|n| n.trim().parse().ok()))
        .next_back()
        .unwrap_or(0);

    cargo_build_release(&["-p", "ctf", "--example", "ctfdump"])?;
    let exe = crate::project_root().join("target/release/examples/ctfdump");
    let runs = opts.runs.max(2);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut events = 0;
    for _ in 0..runs {
        // Interleaved, so both readers see the same machine load.
        let (t, n) = decode_ours(&exe, &trace)?;
        events = n;
        ours.push(t);
        theirs.push(babeltrace(&trace, &["-c", "sink.utils.dummy"])?.0);
    }
    let (text, _) = babeltrace(&trace, &[])?;
    if bt_events != 0 && bt_events != events {
        bail!("tracelab decoded {events} events, babeltrace2 counted {bt_events}: the readers disagree");
    }

    let warm = |v: &[Timing], f: fn(&Timing) -> f64| median(&v[1..].iter().map(f).collect::<Vec<_>>());
    let rate = |secs: f64| events as f64 / secs;
    let (ow, oc) = (warm(&ours, |t| t.wall.as_secs_f64()), warm(&ours, |t| t.cpu));
    let (tw, tc) = (warm(&theirs, |t| t.wall.as_secs_f64()), warm(&theirs, |t| t.cpu));
    println!("trace: {} ({:.1} MB of streams, {events} events; babeltrace2 counted {bt_events})", trace.display(), bytes as f64 / 1e6);
    println!("warm medians of {} runs after the first:", runs - 1);
    println!("{:<34} {:>10} {:>14} {:>14}", "reader", "wall s", "events/s wall", "events/s CPU");
    println!("{:<34} {:>10.3} {:>14.0} {:>14.0}", "tracelab ctfdump --count", ow, rate(ow), rate(oc));
    println!("{:<34} {:>10.3} {:>14.0} {:>14.0}", "babeltrace2 -c sink.utils.dummy", tw, rate(tw), rate(tc));
    println!(
        "{:<34} {:>10.3} {:>14.0} {:>14.0}",
        "babeltrace2 text (pretty sink)",
        text.wall.as_secs_f64(),
        rate(text.wall.as_secs_f64()),
        rate(text.cpu)
    );
    println!("ratio tracelab / babeltrace2 dummy sink: {:.2}x wall, {:.2}x CPU (goal ≥ 2x)", tw / ow, tc / oc);
    Ok(())
}
