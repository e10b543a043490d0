//! What naming ReadyToRun frames costs (issue 8: "R2R symbolization cost per 1 M frames"):
//! streams of (assembly, file offset) frames, and the time [`R2rResolver`] — the path the perf
//! decode names every frame in a file-mapped assembly through — takes to open the images and to
//! name the stream, first with every method name still to be decoded, then with names cached.
//!
//! Two streams: a constructed one, with a known share of offsets inside methods (each of which
//! must get the drawn method's name) and the rest in code-section bytes no method owns (which
//! must stay unnamed); and the ReadyToRun frames of a real perf recording of the `framework`
//! workload, repeated to length (made once and cached in target/bench/r2r/; `rerecord` makes it
//! again). `cargo xtask bench r2r` ([`run`]) runs both through the release build of the `r2r-cost`
//! example ([`child_main`]) and prints [`table`].
//!
//! No peer: nothing here names R2R frames (perf prints `[unknown]` for them; R2RDump is not
//! available offline), so there is no ratio. For context, `perf script`'s own time per 1 M frames
//! on bench perf's cached recording is printed beside it when that recording exists.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};

use super::{load_average, median, summary};
use harness::collect::perf::detect_perf_binary;
use stacks::DecodeContext;
use perfdata::PerfRecording;
use harness::host::dotnet::Dotnet;
use model::DsoClass;
use stacks::Symbolizer;
use stacks::R2rResolver;

/// Framework assemblies besides System.Private.CoreLib that the default stream draws from: the
/// ones the `framework` workload spends its time in.
pub const DEFAULT_IMAGES: [&str; 5] = [
    "System.Private.CoreLib.dll",
    "System.Text.Json.dll",
    "System.Text.RegularExpressions.dll",
    "System.Linq.dll",
    "System.Collections.dll",
];

/// `names` (file names such as `System.Linq.dll`) in the newest shared framework of `dotnet`.
pub fn framework_images(dotnet: &Dotnet, names: &[String]) -> Result<Vec<PathBuf>> {
    let dir = dotnet.root.join("shared/Microsoft.NETCore.App").join(dotnet.runtime_version()?);
    names
        .iter()
        .map(|n| {
            let p = dir.join(n);
            if p.is_file() { Ok(p) } else { bail!("{} does not exist", p.display()) }
        })
        .collect()
}

/// What the `r2r-cost` example is asked to measure (passed to it as JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub stream: StreamSpec,
    /// Timed runs; each opens the images afresh, so its first pass decodes names again.
    pub runs: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StreamSpec {
    /// See [`synthetic_stream`].
    Synthetic { images: Vec<PathBuf>, frames: usize, gap_fraction: f64, seed: u64 },
    /// See [`recorded_stream`].
    Recorded { perf_data: PathBuf, frames: usize },
}

impl StreamSpec {
    pub fn build(&self) -> Result<Stream> {
        match self {
            StreamSpec::Synthetic { images, frames, gap_fraction, seed } => synthetic_stream(images, *frames, *gap_fraction, *seed),
            StreamSpec::Recorded { perf_data, frames } => recorded_stream(perf_data, *frames),
        }
    }
}

/// Frames to name: (index into `images`, file offset).
pub struct Stream {
    pub description: String,
    pub images: Vec<PathBuf>,
    pub frames: Vec<(u32, u64)>,
    /// For a constructed stream, the name each frame must get.
    pub truth: Option<Truth>,
}

/// `names[of_frame[i]]` is the name frame i must get; [`Truth::GAP`] = it must stay unnamed.
pub struct Truth {
    pub names: Vec<Arc<str>>,
    pub of_frame: Vec<u32>,
}

impl Truth {
    pub const GAP: u32 = u32::MAX;

    pub fn named(&self) -> usize {
        self.of_frame.iter().filter(|&&m| m != Truth::GAP).count()
    }
}

/// Deterministic and dependency-free (splitmix64): the same seed gives the same stream anywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0); the modulo bias is below 2^-40 for the sizes used here.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `frames` file offsets in `images`: a share `1 - gap_fraction` inside methods' code (a method
/// drawn uniformly from all methods of all images, then a byte of its code uniformly), the rest in
/// bytes of the same code sections that no method's code covers (padding, import cells, stubs, the
/// IL and metadata crossgen leaves in .text), drawn uniformly over those bytes. Gaps are spread
/// evenly (every frame where `floor(i * gap_fraction)` steps), so their count is exactly
/// `floor(frames * gap_fraction)`.
///
/// Method ranges are the reader's own ([`r2r::R2rImage::methods`]); the file offsets come from
/// the PE section table read here with `object`, not from the reader.
pub fn synthetic_stream(images: &[PathBuf], frames: usize, gap_fraction: f64, seed: u64) -> Result<Stream> {
    if !(0.0..1.0).contains(&gap_fraction) {
        bail!("the gap fraction must be in [0, 1), not {gap_fraction}");
    }
    // Flattened over images: (image, file offset, code bytes, name index) of every method, and
    // (image, file offset, bytes) of every gap, each with the running sum for weighted draws.
    let mut methods: Vec<(u32, u64, u64)> = Vec::new();
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut gaps: Vec<(u32, u64, u64)> = Vec::new();
    let mut gap_ends: Vec<u64> = Vec::new();
    let mut gap_total = 0u64;
    let mut per_image = Vec::new();
    for (index, path) in images.iter().enumerate() {
        let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let sections = pe_sections(&data).with_context(|| format!("{}: PE section table", path.display()))?;
        let image = match r2r::R2rImage::open(path, Arc::new(r2r::ModuleCache::default())) {
            Ok(Ok(i)) => i,
            Ok(Err(e)) => bail!("{}: {e}", path.display()),
            Err(e) => bail!("cannot read {}: {e}", path.display()),
        };
        let mut code: Vec<(u64, u64)> = Vec::new();
        let mut code_sections: Vec<(u64, u64)> = Vec::new();
        for m in image.methods().filter(|m| m.len > 0) {
            let (start, end) = rva_range_to_file(&sections, m.rva, m.len)
                .with_context(|| format!("{}: {} (RVA {:#x}+{:#x}) is not in one section", path.display(), m.name, m.rva, m.len))?;
            let section = sections.iter().find(|s| start >= s.file && end <= s.file + s.bytes).map(|s| (s.file, s.bytes)).unwrap();
            if !code_sections.contains(&section) {
                code_sections.push(section);
            }
            code.push((start, end));
            methods.push((index as u32, start, end - start));
            names.push(m.name);
        }
        code.sort_unstable();
        let before = gap_total;
        for (file, bytes) in code_sections {
            let mut at = file;
            for &(start, end) in code.iter().filter(|&&(s, _)| s >= file && s < file + bytes) {
                if start > at {
                    gap_total += start - at;
                    gaps.push((index as u32, at, start - at));
                    gap_ends.push(gap_total);
                }
                at = at.max(end);
            }
            if file + bytes > at {
                gap_total += file + bytes - at;
                gaps.push((index as u32, at, file + bytes - at));
                gap_ends.push(gap_total);
            }
        }
        per_image.push(format!(
            "{} ({} methods, {:.1} MB of code, {:.1} MB not)",
            path.file_name().unwrap_or_default().to_string_lossy(),
            code.len(),
            code.iter().map(|(s, e)| e - s).sum::<u64>() as f64 / 1e6,
            (gap_total - before) as f64 / 1e6
        ));
    }
    if methods.is_empty() {
        bail!("the images hold no ReadyToRun methods");
    }
    if gap_fraction > 0.0 && gap_total == 0 {
        bail!("the images' code sections have no bytes outside methods to draw gaps from");
    }

    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(frames);
    let mut of_frame = Vec::with_capacity(frames);
    for i in 0..frames {
        let gap = ((i + 1) as f64 * gap_fraction).floor() > (i as f64 * gap_fraction).floor();
        if gap {
            let at = rng.below(gap_total);
            let g = gap_ends.partition_point(|&end| end <= at);
            let (image, start, bytes) = gaps[g];
            out.push((image, start + (at - (gap_ends[g] - bytes))));
            of_frame.push(Truth::GAP);
        } else {
            let m = rng.below(methods.len() as u64) as usize;
            let (image, start, bytes) = methods[m];
            out.push((image, start + rng.below(bytes)));
            of_frame.push(m as u32);
        }
    }
    let gaps_drawn = of_frame.iter().filter(|&&m| m == Truth::GAP).count();
    let description = format!(
        "constructed (seed {seed}): {frames} file offsets, {} in methods' code (uniform over the {} methods, then over the \
         method's bytes), {gaps_drawn} ({:.1} %) in code-section bytes no method covers; images: {}",
        frames - gaps_drawn,
        methods.len(),
        100.0 * gaps_drawn as f64 / frames.max(1) as f64,
        per_image.join(", ")
    );
    Ok(Stream { description, images: images.to_vec(), frames: out, truth: Some(Truth { names, of_frame }) })
}

/// A PE section: its RVA, file offset, and the bytes both the file and the mapping hold.
struct Section {
    rva: u64,
    file: u64,
    bytes: u64,
}

fn pe_sections(data: &[u8]) -> Result<Vec<Section>> {
    let pe = object::read::pe::PeFile64::parse(data)?;
    let base = pe.relative_address_base();
    Ok(pe
        .sections()
        .filter_map(|s| {
            let (file, raw) = s.file_range()?;
            Some(Section { rva: s.address() - base, file, bytes: raw.min(s.size()) })
        })
        .collect())
}

/// The file range of RVAs `rva..rva + len`, if one section holds all of it.
fn rva_range_to_file(sections: &[Section], rva: u32, len: u32) -> Option<(u64, u64)> {
    let (rva, len) = (rva as u64, len as u64);
    let s = sections.iter().find(|s| rva >= s.rva && rva + len <= s.rva + s.bytes)?;
    Some((s.file + rva - s.rva, s.file + rva - s.rva + len))
}

/// The frames of `perf_data` (a host recording) that fall in file-mapped assemblies, as the perf
/// decode sees them (its address spaces, its classification of mappings), in sample order and
/// repeated until there are `frames`.
pub fn recorded_stream(perf_data: &Path, frames: usize) -> Result<Stream> {
    let rec = PerfRecording::read(perf_data)?;
    let dir = perf_data.parent().unwrap_or(Path::new(".")).to_path_buf();
    let identity = |p: &Path| -> Option<PathBuf> { Some(p.to_path_buf()) };
    let ctx = DecodeContext { artifacts: &dir, app_tmp_dir: &dir, host_pid: 0, target_pid: 0, path_map: &identity, symbol_dirs: &[] };
    let symbolizer = Symbolizer::new(&ctx, &rec)?;
    let mut images: Vec<PathBuf> = Vec::new();
    let mut recorded = Vec::new();
    let mut user_frames = 0usize;
    for s in &rec.samples {
        for f in rec.frames(s).filter(|f| !f.in_kernel) {
            user_frames += 1;
            let Some(m) = symbolizer.mapping(s.pid, f.addr) else { continue };
            if m.class != DsoClass::R2r {
                continue;
            }
            let path = PathBuf::from(&m.path);
            let image = match images.iter().position(|p| *p == path) {
                Some(i) => i,
                None => {
                    images.push(path);
                    images.len() - 1
                }
            };
            recorded.push((image as u32, m.file_offset(f.addr)));
        }
    }
    if recorded.is_empty() {
        bail!("{} has no frames in file-mapped assemblies", perf_data.display());
    }
    let description = format!(
        "recorded: the {} frames in file-mapped assemblies (of {} user frames, {} samples) of {}, repeated to {frames}; images: {}",
        recorded.len(),
        user_frames,
        rec.samples.len(),
        perf_data.display(),
        images.iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy()).collect::<Vec<_>>().join(", ")
    );
    let out = recorded.iter().copied().cycle().take(frames).collect();
    Ok(Stream { description, images, frames: out, truth: None })
}

/// Times of one stream, per run, and what the naming gave.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub description: String,
    pub images: usize,
    pub frames: usize,
    /// Frames the stream was built to have named (a constructed stream only).
    pub expected_named: Option<usize>,
    pub named: usize,
    /// Named frames whose name is not the drawn method's (a constructed stream only).
    pub wrong_names: Option<usize>,
    /// Frames that should have stayed unnamed but got a name (a constructed stream only).
    pub named_gaps: Option<usize>,
    pub distinct_names: usize,
    /// Images the resolver could not use, with the reason.
    pub failures: Vec<String>,
    /// Milliseconds per run: opening and parsing the images (as the decode preloads them), the
    /// first pass over the stream (names decoded on first use), the second (names cached).
    pub open_ms: Vec<f64>,
    pub first_ms: Vec<f64>,
    pub cached_ms: Vec<f64>,
}

/// Names every frame of `stream` through a fresh [`R2rResolver`], `runs` times: open + parse
/// (`preload`, as the perf decode does), a pass with every name still to decode, a second pass.
/// Names are produced as the decode produces them (an owned `String` per frame). Then, untimed,
/// checks the names against the stream's truth.
pub fn measure(stream: &Stream, runs: usize) -> Result<Measurement> {
    let mut m = Measurement {
        description: stream.description.clone(),
        images: stream.images.len(),
        frames: stream.frames.len(),
        expected_named: stream.truth.as_ref().map(Truth::named),
        named: 0,
        wrong_names: None,
        named_gaps: None,
        distinct_names: 0,
        failures: Vec::new(),
        open_ms: Vec::new(),
        first_ms: Vec::new(),
        cached_ms: Vec::new(),
    };
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let pass = |r: &mut R2rResolver| -> usize {
        let mut named = 0;
        for &(image, offset) in &stream.frames {
            if let Some(name) = r.name(&stream.images[image as usize], offset) {
                std::hint::black_box(&name);
                named += 1;
            }
        }
        named
    };
    let mut last = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let mut resolver = R2rResolver::new();
        resolver.preload(&stream.images);
        m.open_ms.push(ms(t));
        let t = Instant::now();
        let named = pass(&mut resolver);
        m.first_ms.push(ms(t));
        let t = Instant::now();
        let again = pass(&mut resolver);
        m.cached_ms.push(ms(t));
        if named != again {
            bail!("the first pass named {named} frames, the second {again}");
        }
        m.named = named;
        last = Some(resolver);
    }
    let mut resolver = last.unwrap();
    m.failures = resolver.failures();
    let mut distinct = std::collections::HashSet::new();
    let (mut wrong, mut named_gaps) = (0, 0);
    for (i, &(image, offset)) in stream.frames.iter().enumerate() {
        let name = resolver.name(&stream.images[image as usize], offset);
        if let Some(truth) = &stream.truth {
            match (truth.of_frame[i], &name) {
                (Truth::GAP, Some(_)) => named_gaps += 1,
                (Truth::GAP, None) => {}
                (want, Some(got)) if *truth.names[want as usize] != **got => wrong += 1,
                _ => {}
            }
        }
        if let Some(name) = name {
            distinct.insert(name);
        }
    }
    m.distinct_names = distinct.len();
    if stream.truth.is_some() {
        m.wrong_names = Some(wrong);
        m.named_gaps = Some(named_gaps);
    }
    Ok(m)
}

/// Runs [`measure`] for `spec` in `exe` (the `r2r-cost` example, built in release) and reads
/// back its [`Measurement`]; the child's stderr goes to ours.
pub fn measure_in(exe: &Path, spec: &Spec) -> Result<Measurement> {
    let out = Command::new(exe)
        .arg(serde_json::to_string(spec)?)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", exe.display(), out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{} printed no measurement", exe.display()))
}

/// Whether a measurement's named count is what its stream was built to have, with every name
/// the drawn method's; `None` for a recorded stream (nothing to hold it against).
pub fn verdict(m: &Measurement) -> Option<Result<(), String>> {
    let expected = m.expected_named?;
    let mut problems = Vec::new();
    if m.named != expected {
        problems.push(format!("named {} frames, the stream was built with {expected} in methods' code", m.named));
    }
    if let Some(w) = m.wrong_names.filter(|&w| w > 0) {
        problems.push(format!("{w} frames got a name other than the drawn method's"));
    }
    if let Some(g) = m.named_gaps.filter(|&g| g > 0) {
        problems.push(format!("{g} frames outside any method got a name"));
    }
    if !m.failures.is_empty() {
        problems.push(format!("images not used: {}", m.failures.join("; ")));
    }
    Some(if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) })
}

/// The printed table of one measurement: median ms, ms per 1 M frames and frames/s of each stage.
pub fn table(m: &Measurement) -> String {
    let per_m = |ms: f64| ms * 1e6 / m.frames.max(1) as f64;
    let rate = |ms: f64| m.frames as f64 / (ms / 1e3);
    let median = |v: &[f64]| summary(v).map_or(f64::NAN, |s| s.median);
    let (open, first, cached) = (median(&m.open_ms), median(&m.first_ms), median(&m.cached_ms));
    let mut out = String::new();
    out.push_str(&format!("stream: {}\n", m.description));
    let spread = |v: &[f64]| summary(v).map_or_else(String::new, |s| format!("{:.1}-{:.1}", s.min, s.max));
    out.push_str(&format!(
        "{:<52} {:>10} {:>14} {:>18} {:>14}\n",
        format!("medians of {} runs", m.open_ms.len()),
        "ms",
        "range ms",
        "ms per 1 M frames",
        "frames/s"
    ));
    out.push_str(&format!(
        "{:<52} {:>10.1} {:>14} {:>18} {:>14}\n",
        format!("cold: open + parse {} image(s) (R2rResolver::preload)", m.images),
        open,
        spread(&m.open_ms),
        "(once)",
        "-"
    ));
    let row = |what: &str, ms: f64, range: String| format!("{what:<52} {ms:>10.1} {range:>14} {:>18.1} {:>14.0}\n", per_m(ms), rate(ms));
    out.push_str(&row(&format!("resolve {} frames, names decoded on first use", m.frames), first, spread(&m.first_ms)));
    out.push_str(&row(&format!("resolve {} frames, method names cached", m.frames), cached, spread(&m.cached_ms)));
    out.push_str(&row("cold open + first pass, end to end", open + first, String::new()));
    let unnamed = m.frames - m.named;
    out.push_str(&format!(
        "frames named {} ({:.2} %), not named {unnamed}; {} distinct names",
        m.named,
        100.0 * m.named as f64 / m.frames.max(1) as f64,
        m.distinct_names
    ));
    match verdict(m) {
        Some(Ok(())) => out.push_str(&format!(
            "; as constructed ({} in code, {} gaps), every name the drawn method's: OK\n",
            m.expected_named.unwrap_or(0),
            m.frames - m.expected_named.unwrap_or(0)
        )),
        Some(Err(e)) => out.push_str(&format!("; NOT as constructed: {e}\n")),
        None => out.push_str(" (a recording: no truth to hold the count against)\n"),
    }
    out
}


/// Which stream(s) [`run`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Constructed,
    Recorded,
    Both,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub stream: StreamKind,
    /// Frames per stream.
    pub frames: usize,
    /// Share of the constructed stream's offsets placed outside any method's code.
    pub gap_fraction: f64,
    /// Seed of the constructed stream.
    pub seed: u64,
    /// Framework assemblies the constructed stream draws from; empty: [`DEFAULT_IMAGES`].
    pub images: Vec<String>,
    /// Timed runs per stream (the median is reported); each opens the images afresh.
    pub runs: usize,
    /// Record the framework workload again even if a cached recording exists.
    pub rerecord: bool,
    /// Seconds the framework workload runs while recorded.
    pub seconds: u32,
    /// Sampling frequency of the recording.
    pub frequency: u32,
}

impl Options {
    /// Refuses values no stream can be built with, before anything is recorded or built.
    pub fn check(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.gap_fraction) {
            bail!("--gap-fraction must be in [0, 1)");
        }
        if self.frames == 0 || self.runs == 0 {
            bail!("--frames and --runs must be at least 1");
        }
        Ok(())
    }
}

pub fn run(opts: &Options) -> Result<()> {
    opts.check()?;
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    let mut specs = Vec::new();
    if opts.stream != StreamKind::Recorded {
        let names: Vec<String> =
            if opts.images.is_empty() { DEFAULT_IMAGES.iter().map(|s| s.to_string()).collect() } else { opts.images.clone() };
        let images = framework_images(&dotnet, &names)?;
        specs.push(StreamSpec::Synthetic { images, frames: opts.frames, gap_fraction: opts.gap_fraction, seed: opts.seed });
    }
    let perf = detect_perf_binary();
    if opts.stream != StreamKind::Constructed {
        let perf = perf.as_ref().context("no `perf` on PATH for the recorded stream: install linux-perf, or pass --stream constructed")?;
        let dir = harness::project_root().join("target/bench/r2r");
        let data = dir.join("perf.data");
        if opts.rerecord || !data.is_file() {
            harness::host::progress::note("bench", &format!("recording the framework workload ({} s at {} Hz) into {} …", opts.seconds, opts.frequency, data.display()));
            record_framework(&dotnet, perf, &dir, opts.seconds, opts.frequency)?;
        }
        specs.push(StreamSpec::Recorded { perf_data: data, frames: opts.frames });
    }

    super::cargo_build_release(&["-p", "lab", "--example", "r2r-cost"])?;
    let exe = harness::project_root().join("target/release/examples/r2r-cost");
    let mut failed = Vec::new();
    println!("R2R symbolization cost: stacks::R2rResolver, release build, one process per stream\n");
    for stream in specs {
        let m = measure_in(&exe, &Spec { stream, runs: opts.runs })?;
        println!("{}", table(&m));
        if let Some(Err(e)) = verdict(&m) {
            failed.push(e);
        }
    }

    println!("peer: none. No tool here names ReadyToRun frames (perf script prints [unknown] for them; R2RDump is not");
    println!("available offline), so there is no ratio.");
    match perf_script_context(perf.as_deref(), opts.runs) {
        Ok(line) => println!("{line}"),
        Err(e) => println!("for context, perf script's own rate: not measured ({e:#})"),
    }
    println!("load average while measuring: {}", load_average());
    if !failed.is_empty() {
        bail!("the constructed stream was not named as built: {}", failed.join("; "));
    }
    Ok(())
}

/// `perf script` (every frame of every sample, symbolized by perf) on bench perf's cached
/// recording: its median time scaled to 1 M frames.
fn perf_script_context(perf: Option<&Path>, runs: usize) -> Result<String> {
    let perf = perf.context("no `perf` on PATH")?;
    let data = harness::project_root().join("target/bench/perf/perf.data");
    if !data.is_file() {
        bail!("{} does not exist; `cargo xtask bench perf` records it", data.display());
    }
    let rec = PerfRecording::read(&data)?;
    let frames: usize = rec.samples.iter().map(|s| rec.frames(s).count()).sum();
    let mut times = Vec::new();
    for _ in 0..runs.clamp(1, 3) {
        let t = Instant::now();
        let status = Command::new(perf).args(["script", "-i"]).arg(&data).stdout(Stdio::null()).stderr(Stdio::null()).status()?;
        if !status.success() {
            bail!("perf script failed: {status}");
        }
        times.push(t.elapsed());
    }
    let d: Duration = median(&times);
    Ok(format!(
        "for context, perf script on {} ({frames} frames, all kinds): {:.1} ms = {:.1} ms per 1 M frames, {:.0} frames/s",
        data.display(),
        d.as_secs_f64() * 1e3,
        d.as_secs_f64() * 1e3 * 1e6 / frames.max(1) as f64,
        frames as f64 / d.as_secs_f64()
    ))
}

/// `r2r-cost SPEC_JSON`: times naming one stream (a [`Spec`] as JSON) and prints the
/// [`Measurement`] as JSON. The `r2r-cost` example is this function, built in release by [`run`], so
/// the timed loop is optimised whatever profile the driver itself was built with.
pub fn child_main(args: &[String]) -> Result<()> {
    let Some(spec) = args.first() else {
        bail!("usage: r2r-cost SPEC_JSON");
    };
    let spec: Spec = serde_json::from_str(spec)?;
    let stream = spec.stream.build()?;
    let measured = measure(&stream, spec.runs)?;
    println!("{}", serde_json::to_string(&measured)?);
    Ok(())
}

/// Records the `framework` workload under `perf record -g` (cpu-clock at `frequency` Hz) into
/// `dir/perf.data`, with tiered compilation off so hot framework methods stay in their
/// precompiled code (as the framework-frames scenario runs it).
pub fn record_framework(dotnet: &Dotnet, perf: &Path, dir: &Path, seconds: u32, frequency: u32) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let built = harness::workload::build_named(dotnet, "framework", false)?;
    let data = dir.join("perf.data");
    let out = Command::new(perf)
        .args(["record", "--no-buildid-cache", "-g", "-e", "cpu-clock", "-F"])
        .arg(frequency.to_string())
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(&dotnet.dotnet)
        .arg(&built.dll)
        .args(["--seconds", &seconds.to_string()])
        .env("DOTNET_ROOT", &dotnet.root)
        .env("DOTNET_TieredCompilation", "0")
        .output()
        .context("cannot run perf record")?;
    if !out.status.success() {
        bail!("perf record failed ({}): {}", out.status, harness::collect::perf::explain_perf_failure(&String::from_utf8_lossy(&out.stderr)));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corelib() -> PathBuf {
        let dotnet = Dotnet::locate_or_install().expect("the .NET SDK");
        framework_images(&dotnet, &["System.Private.CoreLib.dll".to_string()]).unwrap().remove(0)
    }

    #[test]
    fn constructed_stream_is_named_as_claimed() {
        let images = vec![corelib()];
        let stream = synthetic_stream(&images, 20_000, 0.25, 7).unwrap();
        let truth = stream.truth.as_ref().unwrap();
        assert_eq!(stream.frames.len(), 20_000);
        assert_eq!(truth.named(), 15_000, "exactly floor(20 000 × 0.25) gaps");
        // Same seed, same stream.
        assert_eq!(synthetic_stream(&images, 20_000, 0.25, 7).unwrap().frames, stream.frames);
        let m = measure(&stream, 1).unwrap();
        assert_eq!(m.named, 15_000);
        assert_eq!(m.wrong_names, Some(0));
        assert_eq!(m.named_gaps, Some(0));
        assert_eq!(verdict(&m), Some(Ok(())));
        assert!(table(&m).contains(": OK"), "{}", table(&m));
    }

    #[test]
    fn gap_fraction_out_of_range_is_refused() {
        assert!(synthetic_stream(&[], 10, 1.0, 1).is_err());
        assert!(synthetic_stream(&[], 10, -0.1, 1).is_err());
    }

    #[test]
    fn verdict_reports_a_wrong_count() {
        let m = Measurement {
            description: String::new(),
            images: 1,
            frames: 10,
            expected_named: Some(9),
            named: 8,
            wrong_names: Some(0),
            named_gaps: Some(0),
            distinct_names: 8,
            failures: vec![],
            open_ms: vec![1.0],
            first_ms: vec![1.0],
            cached_ms: vec![1.0],
        };
        assert!(verdict(&m).unwrap().unwrap_err().contains("named 8 frames"));
        assert!(table(&m).contains("NOT as constructed"));
    }

    fn options() -> Options {
        Options {
            stream: StreamKind::Both,
            frames: 1_000_000,
            gap_fraction: 0.1,
            seed: 1,
            images: vec![],
            runs: 5,
            rerecord: false,
            seconds: 10,
            frequency: 999,
        }
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(options().check().is_ok());
        assert!(Options { gap_fraction: 1.0, ..options() }.check().is_err());
        assert!(Options { runs: 0, ..options() }.check().is_err());
        assert!(Options { frames: 0, ..options() }.check().is_err());
    }
}
