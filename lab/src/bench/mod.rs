//! Benchmarks: each times tracelab and the peer tool on the same input in one run and prints both
//! rates and the ratio (`cargo xtask bench WHAT` calls `bench::<what>::run`). They live here, not
//! in the driver, so what they measure is library code a test can call; the criterion benches in
//! harness/benches time the same paths in-process.
//!
//! What the benchmarks share is here: one summary of repeated timings (min / median / max), the
//! CPU time and peak RSS of finished children (getrusage through `libc`), the machine's load, and
//! the release build of the child processes they time.

pub mod ctf;
pub mod nettrace;
pub mod overhead;
pub mod perf;
pub mod r2r;
pub mod unwind;

use std::process::Command;

use anyhow::{Context, Result, bail};

/// The spread of repeated measurements of one thing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary<T> {
    pub min: T,
    pub median: T,
    pub max: T,
}

/// Min, median (the upper one of an even count, as every benchmark here has always reported)
/// and max; `None` when nothing was measured.
pub fn summary<T: Copy + PartialOrd>(values: &[T]) -> Option<Summary<T>> {
    let mut v = values.to_vec();
    // Timings are never NaN; if one were, it sorts as equal rather than panicking mid-report.
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Some(Summary { min: *v.first()?, median: v[v.len() / 2], max: *v.last()? })
}

/// The median of at least one measurement (every benchmark refuses zero runs before timing).
pub fn median<T: Copy + PartialOrd>(values: &[T]) -> T {
    summary(values).expect("at least one measurement").median
}

/// What the finished children of this process used, summed (CPU) or the largest (RSS).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChildUsage {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set of the largest child, in KiB (Linux reports `ru_maxrss` in KiB).
    pub max_rss_kib: u64,
}

/// `getrusage(RUSAGE_CHILDREN)`: the difference of two calls around one child is that child's CPU
/// time, so a child is timed the same way whatever its language (babeltrace2, TraceEvent, ours).
pub fn children_usage() -> ChildUsage {
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct getrusage fills in.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a live, writable rusage; RUSAGE_CHILDREN cannot fail on Linux.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    ChildUsage { cpu_seconds: tv(u.ru_utime) + tv(u.ru_stime), max_rss_kib: u.ru_maxrss.max(0) as u64 }
}

/// One finished child: wall time, peak RSS and exit status.
#[derive(Clone, Copy, Debug)]
pub struct ChildRun {
    pub wall: std::time::Duration,
    /// The child's own peak RSS or, for a shell pipeline, its largest process's (Linux folds
    /// reaped descendants' `maxrss` into the waited child's), in KiB.
    pub max_rss_kib: u64,
    pub status: std::process::ExitStatus,
}

/// GNU time: reports a command's own peak RSS (see [`measured`]).
const GNU_TIME: &str = "/usr/bin/time";

/// Where [`measured`] commands write their peak RSS (benchmarks run one child at a time).
fn rss_file() -> std::path::PathBuf {
    harness::project_root().join(".build").join("bench").join(format!("peak-rss-{}.txt", std::process::id()))
}

/// `cmd` (program, arguments, environment, folder; set its stdio afterwards) run under GNU time,
/// so [`run_measured`] gets the command's own peak RSS. `wait4`'s `ru_maxrss` cannot give it: a
/// child starts as a copy of this process, and Linux folds that copy's high-water mark into the
/// child's at exec, so every child of a 120 MB benchmark process "peaked" at 120 MB. GNU time's
/// child starts from a copy of GNU time (≈ 2 MB). For a shell pipeline it is its largest process.
pub fn measured(cmd: &Command) -> Command {
    let mut wrapped = Command::new(GNU_TIME);
    wrapped.args(["-f", "%M", "-o"]).arg(rss_file()).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// Runs `cmd` to its end: wall time, exit status and, for a [`measured`] command, its peak RSS
/// (else `wait4`'s, which includes this process's size: see [`measured`]). Its output goes where
/// `cmd` sends it.
pub fn run_measured(cmd: &mut Command) -> Result<ChildRun> {
    use std::os::unix::process::ExitStatusExt;
    let wrapped = cmd.get_program() == GNU_TIME;
    if wrapped {
        if let Some(dir) = rss_file().parent() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let start = std::time::Instant::now();
    let child = cmd.spawn().with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child (the `Child` is dropped without waiting); `status`
    // and `usage` are live, writable values.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    if waited != pid {
        bail!("wait4 on {cmd:?} failed: {}", std::io::Error::last_os_error());
    }
    drop(child);
    let mut max_rss_kib = usage.ru_maxrss.max(0) as u64;
    if wrapped {
        // GNU time's last line is %M (a failed command's status line comes before it).
        let text = std::fs::read_to_string(rss_file()).unwrap_or_default();
        let _ = std::fs::remove_file(rss_file());
        max_rss_kib = text.lines().filter_map(|l| l.trim().parse().ok()).next_back().context("GNU time wrote no peak RSS")?;
    }
    Ok(ChildRun { wall, max_rss_kib, status: std::process::ExitStatus::from_raw(status) })
}

/// The 1-, 5- and 15-minute load averages, printed beside results: a busy machine explains a
/// slow run.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// `cargo build --release --quiet ARGS` in the project root: the timed children are optimised
/// whatever profile the driver itself was built with. Echoed like the driver's own commands.
pub fn cargo_build_release(args: &[&str]) -> Result<()> {
    harness::host::progress::note("build", &format!("$ cargo build --release --quiet {}", args.join(" ")));
    let status = Command::new("cargo")
        .args(["build", "--release", "--quiet"])
        .args(args)
        .current_dir(harness::project_root())
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("`cargo build --release {}` failed: {status}", args.join(" "));
    }
    Ok(())
}

/// One side of a benchmark: what each interleaved round measured and the peak RSS of its
/// processes, for the common table.
#[derive(Clone, Debug)]
pub struct Side {
    pub label: String,
    pub values: Vec<f64>,
    pub rss_kib: Vec<u64>,
}

impl Side {
    pub fn new(label: impl Into<String>) -> Side {
        Side { label: label.into(), values: Vec::new(), rss_kib: Vec::new() }
    }
    pub fn push(&mut self, value: f64, rss_kib: u64) {
        self.values.push(value);
        self.rss_kib.push(rss_kib);
    }
    pub fn summary(&self) -> Summary<f64> {
        summary(&self.values).unwrap_or(Summary { min: 0.0, median: 0.0, max: 0.0 })
    }
    /// The largest peak RSS of any round, MB.
    pub fn peak_rss_mb(&self) -> f64 {
        self.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0
    }
}

/// Prints sides as rows: min / median / max of `unit` and peak RSS.
pub fn print_table(sides: &[&Side], unit: &str) {
    let width = sides.iter().map(|s| s.label.chars().count()).max().unwrap_or(10).max(10);
    println!("  {:<width$} {:>12} {:>12} {:>12} {:>10}", "", format!("min {unit}"), "median", "max", "peak RSS");
    for s in sides {
        let m = s.summary();
        println!("  {:<width$} {:>12.1} {:>12.1} {:>12.1} {:>7.0} MB", s.label, m.min, m.median, m.max, s.peak_rss_mb());
    }
}

/// The ratio of two sides as "median N× (range A×–B×)", `faster` the one with the larger value
/// when `higher_is_better` (rates), the smaller otherwise (times).
pub fn ratio(ours: &Side, peer: &Side, higher_is_better: bool) -> (f64, String) {
    let (o, p) = (ours.summary(), peer.summary());
    let (median, low, high) = if higher_is_better {
        (o.median / p.median, o.min / p.max, o.max / p.min)
    } else {
        (p.median / o.median, p.min / o.max, p.max / o.min)
    };
    (median, format!("median {median:.1}x (range {low:.1}x to {high:.1}x)"))
}

/// A difference between our output and the peer's that is expected, with its reason: the
/// committed list is `lab/data/bench-known-differences.toml`.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct KnownDifference {
    /// The benchmark (`perf`, `nettrace`, `ctf`, `unwind`).
    pub bench: String,
    /// The difference's kind, as the benchmark's comparison names it.
    pub kind: String,
    /// A substring of the difference's key (a stack, an event key); empty matches every key.
    #[serde(default)]
    pub key: String,
    pub reason: String,
}

pub const KNOWN_DIFFERENCES_PATH: &str = "lab/data/bench-known-differences.toml";
const KNOWN_DIFFERENCES: &str = include_str!("../../data/bench-known-differences.toml");

/// The committed known differences of one benchmark.
pub fn known_differences(bench: &str) -> Vec<KnownDifference> {
    #[derive(serde::Deserialize)]
    struct File {
        difference: Vec<KnownDifference>,
    }
    let file: File = toml::from_str(KNOWN_DIFFERENCES).expect("lab/data/bench-known-differences.toml parses (a unit test checks it)");
    file.difference.into_iter().filter(|d| d.bench == bench).collect()
}

/// One way our output and the peer's differ: its kind, its key and what each side has.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    pub kind: String,
    pub key: String,
    pub ours: String,
    pub peer: String,
    /// Both sides give an answer and the answers differ (a count, a name for the same frame);
    /// else one side has what the other lacks — a name, a deeper stack, a sample — or spells it
    /// its own way.
    pub disagreement: bool,
}

impl Difference {
    /// A disagreement: fails the bench unless the committed list knows it.
    pub fn new(kind: &str, key: impl Into<String>, ours: impl ToString, peer: impl ToString) -> Difference {
        Difference { kind: kind.into(), key: key.into(), ours: ours.to_string(), peer: peer.to_string(), disagreement: true }
    }

    /// One side has what the other lacks, or spells it its own way: listed, never fatal. A
    /// recording the committed list was not written for (another app, another machine's
    /// libraries) has such differences of its own.
    pub fn coverage(kind: &str, key: impl Into<String>, ours: impl ToString, peer: impl ToString) -> Difference {
        Difference { disagreement: false, ..Difference::new(kind, key, ours, peer) }
    }
}

/// Prints how the outputs compare (`compared` items; the differences by kind, known or not) and
/// fails when a disagreement is in no entry of the committed list. Unknown differences of
/// coverage are listed with their kind and the first examples, and leave the comparison "not
/// clean" without failing it.
pub fn report_differences(bench: &str, compared: &str, differences: &[Difference]) -> Result<()> {
    let known = known_differences(bench);
    let mut unknown = Vec::new();
    // Counted by kind and by the entry that knows them (one kind may have several, each with
    // its own reason).
    let mut by_kind: std::collections::BTreeMap<(&str, Option<usize>), usize> = Default::default();
    for d in differences {
        let k = known.iter().position(|k| k.kind == d.kind && d.key.contains(&k.key));
        *by_kind.entry((&d.kind, k)).or_default() += 1;
        if k.is_none() {
            unknown.push(d);
        }
    }
    println!("output comparison: {compared}; {} differences", differences.len());
    for ((kind, k), n) in &by_kind {
        match k {
            Some(k) => println!("  {n:>7}  {kind} (known: {})", known[*k].reason),
            None => println!("  {n:>7}  {kind}"),
        }
    }
    if unknown.is_empty() {
        println!("output comparison clean: every difference is known ({KNOWN_DIFFERENCES_PATH})");
        return Ok(());
    }
    let (disagreements, coverage): (Vec<&Difference>, Vec<&Difference>) = unknown.into_iter().partition(|d| d.disagreement);
    for d in coverage.iter().take(10) {
        println!("  not known (one side lacks it, not fatal) {}: {}\n      ours: {}\n      peer: {}", d.kind, d.key, d.ours, d.peer);
    }
    for d in disagreements.iter().take(20) {
        println!("  NOT KNOWN {}: {}\n      ours: {}\n      peer: {}", d.kind, d.key, d.ours, d.peer);
    }
    if disagreements.is_empty() {
        println!(
            "output comparison not clean: {} differences of coverage are not in {KNOWN_DIFFERENCES_PATH} (first ones above); no disagreement",
            coverage.len()
        );
        return Ok(());
    }
    bail!(
        "{} disagreements with the peer's output are not in {KNOWN_DIFFERENCES_PATH} (first ones above): \
         fix the decoder, or add the difference there with its reason",
        disagreements.len()
    )
}

/// Refuses zero timed runs up front: every benchmark reports a median.
pub fn check_runs(runs: usize) -> Result<()> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn summary_is_min_upper_median_max() {
        assert_eq!(summary(&[3.0, 1.0, 2.0, 5.0]), Some(Summary { min: 1.0, median: 3.0, max: 5.0 }));
        let d = |ms| Duration::from_millis(ms);
        assert_eq!(median(&[d(9), d(1), d(4)]), d(4));
        assert_eq!(summary::<f64>(&[]), None);
    }

    #[test]
    fn children_usage_grows_after_a_child() {
        let before = children_usage();
        let _ = Command::new("true").status();
        let after = children_usage();
        assert!(after.cpu_seconds >= before.cpu_seconds);
        assert!(after.max_rss_kib > 0, "a finished child has a peak RSS");
    }

    #[test]
    fn known_differences_parse_and_have_reasons() {
        for bench in ["perf", "nettrace", "ctf", "unwind"] {
            for d in known_differences(bench) {
                assert!(!d.reason.trim().is_empty() && !d.kind.is_empty(), "{d:?}");
            }
        }
        let diffs = [Difference::new("no such kind", "k", 1, 2)];
        assert!(report_differences("perf", "test", &diffs).is_err(), "an unlisted disagreement fails");
        assert!(report_differences("perf", "test", &[]).is_ok());
        // What one side lacks on a recording the list was not written for is listed, not fatal.
        let coverage = [Difference::coverage("perf names more", "some_libc_fn", "[unknown]", "some_libc_fn")];
        assert!(report_differences("perf", "test", &coverage).is_ok());
    }

    #[test]
    fn measured_children_report_their_own_peak_rss() {
        if !std::path::Path::new(GNU_TIME).is_file() {
            return tracelab_fixtures::skip("bench::tests::measured_children_report_their_own_peak_rss", "no /usr/bin/time (Debian: time)");
        }
        // 64 MB held by this process must not show up in a small child's peak.
        let ballast = vec![1u8; 64 << 20];
        let run = run_measured(measured(Command::new("true").env("X", "1")).stdout(std::process::Stdio::null())).unwrap();
        std::hint::black_box(&ballast);
        assert!(run.status.success());
        assert!(run.max_rss_kib > 0 && run.max_rss_kib < 32 << 10, "peak RSS of `true`: {} KiB", run.max_rss_kib);
    }

    #[test]
    fn zero_runs_are_refused() {
        assert!(check_runs(0).is_err());
        assert!(check_runs(1).is_ok());
    }
}
