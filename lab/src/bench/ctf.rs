//! `cargo xtask bench ctf [--trace DIR] [--runs N] [--record] [--record-runs N] [--scales 1,10,50]`:
//! decodes one large LTTng trace with tracelab's CTF reader (crates/ctf's `ctfdump --count`,
//! release build: every event decoded with all its fields) and with `babeltrace2` to its dummy
//! sink (decodes every event and discards it), each a child process, in interleaved rounds after
//! a warm-up run of each; prints min/median/max wall time, peak RSS of each side, the ratio and the
//! load. Then compares the two readers event by event: our events printed as babeltrace2
//! `--clock-seconds` prints them, both streams read line by line in lockstep (memory bounded), and
//! any differing line not in lab/data/bench-known-differences.toml fails the bench. Last, the
//! peak RSS of our reader on the trace made `--scales` times longer (each stream file holding its
//! packets N times over, in .build/ctf-bench/repeated/, removed after) shows memory does not grow
//! with size: it is one packet (LTTng's sub-buffer) per stream.
//!
//! Without `--trace`, the trace is `.build/ctf-bench/recording/trace`, recorded on first use (or
//! with `--record`) in the bullseye runtime image: every DotNETRuntime tracepoint of 25
//! FixtureApp runs (≈ 51 MB, ≈ 550 k events).

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::{Difference, Side, cargo_build_release, load_average, measured, print_table, ratio, report_differences, run_measured};

#[derive(Clone, Debug)]
pub struct Options {
    /// A CTF trace folder (or a session output holding several).
    pub trace: Option<PathBuf>,
    /// Interleaved rounds.
    pub runs: usize,
    /// Record the default trace again.
    pub record: bool,
    /// FixtureApp runs in a recording.
    pub record_runs: u32,
    /// Repetitions of the trace for the memory table (1 = the trace itself).
    pub scales: Vec<u32>,
}

/// Our reader as a child: (wall ms, peak RSS KiB, events).
fn decode_ours(exe: &Path, trace: &Path) -> Result<(f64, u64, u64)> {
    let err = trace.with_extension("ctfdump.err");
    let run = run_measured(measured(Command::new(exe).arg("--count").arg(trace)).stdout(Stdio::null()).stderr(std::fs::File::create(&err)?))?;
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    if !run.status.success() {
        bail!("ctfdump failed: {stderr}");
    }
    let events = stderr.split_whitespace().next().and_then(|n| n.parse().ok()).context("ctfdump printed no event count")?;
    Ok((run.wall.as_secs_f64() * 1e3, run.max_rss_kib, events))
}

fn babeltrace_dummy(trace: &Path) -> Result<(f64, u64)> {
    let run = run_measured(
        measured(Command::new("babeltrace2").arg(trace).args(["-c", "sink.utils.dummy"])).stdout(Stdio::null()).stderr(Stdio::null()),
    )
    .context("running babeltrace2 (Debian: apt-get install babeltrace2)")?;
    if !run.status.success() {
        bail!("babeltrace2 {} -c sink.utils.dummy failed: {}", trace.display(), run.status);
    }
    Ok((run.wall.as_secs_f64() * 1e3, run.max_rss_kib))
}

/// `trace` made `n` times longer under `root`: every stream file holds its packets `n` times over
/// (packets are self-contained), beside a copy of the metadata — the same streams, as a longer
/// recording has, with `n` times the data. Our reader does not need time to grow across
/// packets; babeltrace2 does, so only ours reads these.
fn repeated(trace: &Path, root: &Path, n: u32) -> Result<PathBuf> {
    if n <= 1 {
        return Ok(trace.to_path_buf());
    }
    let out = root.join(format!("x{n}"));
    let _ = std::fs::remove_dir_all(&out);
    for dir in ctf::Trace::find(trace)? {
        let rel = dir.strip_prefix(trace).unwrap_or(Path::new(""));
        let to = out.join(rel);
        std::fs::create_dir_all(&to)?;
        std::fs::copy(dir.join("metadata"), to.join("metadata"))?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.file_type()?.is_file() || name == "metadata" || name.starts_with('.') {
                continue;
            }
            let mut w = std::io::BufWriter::new(std::fs::File::create(to.join(&name))?);
            for _ in 0..n {
                std::io::copy(&mut std::fs::File::open(entry.path())?, &mut w)?;
            }
            std::io::Write::flush(&mut w)?;
        }
    }
    Ok(out)
}

pub fn run(opts: &Options) -> Result<()> {
    super::check_runs(opts.runs)?;
    let default = harness::project_root().join(".build/ctf-bench/recording");
    let trace = match &opts.trace {
        Some(t) => t.clone(),
        None => {
            let dir = default.join("trace");
            if opts.record || !dir.join("ust").exists() {
                harness::host::progress::note("bench", &format!("recording the bench trace ({} FixtureApp runs, bullseye image)", opts.record_runs));
                record_bench_trace(&default, opts.record_runs)?
            } else {
                dir
            }
        }
    };
    let bytes: u64 = ctf::Trace::find(&trace)?
        .iter()
        .map(|d| ctf::Trace::open(d).map(|t| t.stream_bytes()))
        .sum::<Result<u64, _>>()?;
    cargo_build_release(&["-p", "ctf", "--example", "ctfdump"])?;
    let exe = harness::project_root().join("target/release/examples/ctfdump");
    let load_before = load_average();
    // Warm-up: page cache and both binaries once.
    let (_, _, events) = decode_ours(&exe, &trace)?;
    babeltrace_dummy(&trace)?;
    let mut ours = Side::new("tracelab ctfdump --count");
    let mut peer = Side::new("babeltrace2 -c sink.utils.dummy");
    for _ in 0..opts.runs {
        let (ms, rss, _) = decode_ours(&exe, &trace)?;
        ours.push(ms, rss);
        let (ms, rss) = babeltrace_dummy(&trace)?;
        peer.push(ms, rss);
    }
    let load_after = load_average();
    println!("trace: {} ({:.1} MB of streams, {events} events)", trace.display(), bytes as f64 / 1e6);
    println!("{} interleaved rounds after a warm-up run of each:", opts.runs);
    print_table(&[&ours, &peer], "ms");
    let (r, text) = ratio(&ours, &peer, false);
    println!("ratio babeltrace2 dummy sink / tracelab: {text} (goal >= 5x){}", if r < 5.0 { "  BELOW GOAL" } else { "" });
    println!("load average: {load_before} before, {load_after} after");
    let compared = compare(&exe, &trace);
    if !opts.scales.is_empty() {
        let root = harness::project_root().join(".build/ctf-bench/repeated");
        std::fs::create_dir_all(&root)?;
        println!("peak RSS of tracelab's reader by input size (the trace's streams repeated N times):");
        println!("  {:>6} {:>12} {:>12} {:>10} {:>10}", "N", "stream MB", "events", "wall s", "peak RSS");
        for &n in &opts.scales {
            let t = repeated(&trace, &root, n)?;
            let measured = decode_ours(&exe, &t);
            // Up to GBs of copies: made again when needed, never kept.
            if n > 1 {
                let _ = std::fs::remove_dir_all(&t);
            }
            let (ms, rss, ev) = measured?;
            println!("  {n:>5}x {:>12.0} {ev:>12} {:>10.1} {:>7.0} MB", bytes as f64 * f64::from(n.max(1)) / 1e6, ms / 1e3, rss as f64 / 1024.0);
        }
    }
    compared
}

/// Event by event: `ctfdump` (our events printed as babeltrace2 `--clock-seconds` prints them)
/// against `babeltrace2 --clock-seconds`, both read line by line.
fn compare(exe: &Path, trace: &Path) -> Result<()> {
    let mut ours = Command::new(exe).arg(trace).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let mut peer = Command::new("babeltrace2").arg("--clock-seconds").arg(trace).stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let mut a = std::io::BufReader::new(ours.stdout.take().unwrap()).lines();
    let mut b = std::io::BufReader::new(peer.stdout.take().unwrap()).lines();
    let mut diffs = Vec::new();
    let mut n = 0u64;
    loop {
        let (x, y) = (a.next().transpose()?, b.next().transpose()?);
        match (&x, &y) {
            (None, None) => break,
            _ => n += 1,
        }
        if x != y {
            // The delta from the previous event differs after any difference: compare without it.
            let strip = |l: &Option<String>| l.as_deref().map(|l| l.split_once(") ").map_or(l.to_string(), |(ts, rest)| format!("{} {rest}", &ts[..ts.find(" (").unwrap_or(ts.len())]))).unwrap_or_default();
            if diffs.len() < 10_000 {
                let kind = match (&x, &y) {
                    (Some(a), Some(b)) if only_empty_strings_differ(a, b) => "string empty in ours, non-empty in babeltrace2",
                    (Some(_), Some(_)) => "event line",
                    _ => "event missing",
                };
                let name = strip(&x).split(' ').nth(2).unwrap_or("").to_string();
                diffs.push(Difference::new(kind, format!("event {n}: {name}"), strip(&x), strip(&y)));
            }
        }
    }
    let _ = ours.wait();
    let _ = peer.wait();
    report_differences("ctf", &format!("{n} events, line by line against babeltrace2 --clock-seconds"), &diffs)
}

/// Whether two lines differ only in string fields that are empty in ours, every other field
/// (names and values, in order) being equal: then both readers consumed the same bytes, and an
/// empty string on the wire is its NUL alone.
fn only_empty_strings_differ(ours: &str, peer: &str) -> bool {
    static FIELD: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let field = FIELD.get_or_init(|| regex::Regex::new(r#"(\w+) = ("(?:[^"\\]|\\.)*"|[^,}]+)"#).expect("valid regex"));
    let fields = |l: &str| field.captures_iter(l).map(|c| (c[1].to_string(), c[2].to_string())).collect::<Vec<_>>();
    let (a, b) = (fields(ours), fields(peer));
    a.len() == b.len() && a.iter().zip(&b).all(|((k, v), (k2, w))| k == k2 && (v == w || v == "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_string_differences_are_told_apart() {
        let ours = r#"[1.0] h E: { cpu_id = 1 }, { A = "", B = 2 }"#;
        assert!(super::only_empty_strings_differ(ours, r#"[1.0] h E: { cpu_id = 1 }, { A = "x", B = 2 }"#));
        assert!(!super::only_empty_strings_differ(ours, r#"[1.0] h E: { cpu_id = 1 }, { A = "x", B = 3 }"#));
        assert!(!super::only_empty_strings_differ(r#"[1.0] h E: { A = "y" }"#, r#"[1.0] h E: { A = "x" }"#));
    }
}
/// Records a large CTF trace for `cargo xtask bench ctf`: every `DotNETRuntime` tracepoint of
/// `runs` FixtureApp runs (`gc,exceptions 1`, ≈ 2 MB and 22 k events each) in a container of the
/// bullseye runtime image, into `out` (host path; replaced). The image must exist (`cargo xtask
/// images`). Returns the trace folder.
pub fn record_bench_trace(out: &Path, runs: u32) -> Result<PathBuf> {
    let build = out.parent().context("the output folder has no parent")?.join("fixture-app");
    let src = build.join("src");
    std::fs::create_dir_all(&src)?;
    // ../shared is read-only; the build writes obj/ beside the project.
    for f in ["FixtureApp.csproj", "Program.cs"] {
        std::fs::copy(harness::shared_dir().join("fixtures/FixtureApp").join(f), src.join(f))
            .with_context(|| format!("copying FixtureApp/{f} from ../shared/fixtures"))?;
    }
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    let app = build.join("app");
    let status = dotnet
        .command()
        .args(["build", "-c", "Release", "-v", "q", "-o"])
        .arg(&app)
        .arg(src.join("FixtureApp.csproj"))
        .status()
        .context("running dotnet build")?;
    if !status.success() {
        bail!("dotnet build of FixtureApp failed ({status})");
    }
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    std::fs::create_dir_all(out)?;
    let image = harness::host::image::runtime_tag(harness::host::image::suite("bullseye")?);
    // Per-CPU buffers of 8 × 2 MiB keep up with every tracepoint; docker's default 64 MiB
    // /dev/shm is too small for them (the session then records nothing), hence --shm-size.
    let script = format!(
        "set -e; lttng-sessiond --daemonize --no-kernel; lttng create bench --output=/out/trace >/dev/null; \
         lttng enable-channel -u bench --subbuf-size=2M --num-subbuf=8 >/dev/null; \
         lttng enable-event -u -c bench 'DotNETRuntime:*' >/dev/null; \
         lttng add-context -u -c bench -t vpid -t vtid -t procname >/dev/null; lttng start >/dev/null; \
         for i in $(seq {runs}); do DOTNET_EnableEventLog=1 dotnet /app/FixtureApp.dll gc,exceptions 1 >/dev/null; done; \
         lttng stop >/dev/null; lttng destroy >/dev/null"
    );
    let status = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--shm-size=256m", "-v"])
        .arg(format!("{}:/app:ro", app.display()))
        .arg("-v")
        .arg(format!("{}:/out", out.display()))
        .args([&image, "sh", "-c", &script])
        .status()
        .context("running docker")?;
    if !status.success() {
        bail!("recording the bench trace in {image} failed ({status})");
    }
    Ok(out.join("trace"))
}

