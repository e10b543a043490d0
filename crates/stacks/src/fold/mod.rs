//! Stacks for people: folded stacks (`root;…;leaf COUNT`, Brendan Gregg's format) with code
//! versions of a method merged, flame graphs (inferno), speedscope JSON, and the per-DSO-class
//! resolution report the assert stage and the manifest read. Also the streaming path from a
//! perf.data file straight to folded stacks ([`fold_perf_file`]), which names each distinct
//! callchain once instead of building model samples.


use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use model::{Collection, DsoClass, Frame};
use model::FrameKind;
use crate::symbolize::{DecodeContext, Symbolizer};
use perfdata::{ChainCounts, PerfRecording, chain_frames};

/// A frame's label in folded stacks and every other writer: [`model::frame_label`].
pub use model::{NO_STACK, frame_label};
use model::label as label_of;

/// Folds a collection's samples: stack (root first, `;`-joined) → summed weight.
pub fn fold(coll: &Collection) -> BTreeMap<String, u64> {
    fold_collection(coll).to_map()
}

/// As [`fold`], interned: each distinct (name, dso) frame gets an id, stacks are counted by id
/// sequence and strings are built only when written.
pub fn fold_collection(coll: &Collection) -> FoldedStacks {
    let mut ids: rustc_hash::FxHashMap<(Option<&str>, Option<&str>), u32> = Default::default();
    let mut frames: Vec<(Option<&str>, Option<&str>)> = Vec::new();
    let stacks: Vec<(Vec<u32>, u64)> = coll
        .samples
        .iter()
        .map(|s| {
            let stack = s
                .frames
                .iter()
                .map(|f| {
                    let key = (f.name.as_deref(), f.dso.as_deref());
                    *ids.entry(key).or_insert_with(|| {
                        frames.push(key);
                        (frames.len() - 1) as u32
                    })
                })
                .collect();
            (stack, s.weight)
        })
        .collect();
    fold_interned(stacks.iter().map(|(ids, weight)| (ids.as_slice(), *weight)), |id| {
        let (name, dso) = frames[id as usize];
        label_of(name, dso)
    })
}

/// Folded stacks, interned: every distinct label once, every distinct stack as a sequence of
/// label ids (root first), in the order of its folded line. Strings are made only on output, so
/// the cost follows samples and distinct frames rather than the length of whole stacks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FoldedStacks {
    labels: Vec<String>,
    /// (label ids root first, summed weight), sorted by the bytes of the folded line.
    stacks: Vec<(Box<[u32]>, u64)>,
}

impl FoldedStacks {
    /// Distinct folded stacks.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Writes `root;…;leaf WEIGHT` lines, in byte order of the lines (what [`folded_text`] writes
    /// for the same stacks).
    /// Writes the folded text into `path` whole or not at all (through a file beside it, renamed
    /// when complete), streaming: a long recording's text runs to megabytes, and building it in
    /// memory first was a fifth of the fold's peak memory.
    pub fn write_file(&self, path: &Path) -> Result<()> {
        crate::files::write_whole(path, |mut out| self.write_to(&mut out)).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Writes the folded text to standard output.
    pub fn write_stdout(&self) -> Result<()> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        self.write_to(&mut out).and_then(|()| std::io::Write::flush(&mut out)).context("cannot write to standard output")
    }

    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        for (stack, weight) in &self.stacks {
            for (i, id) in stack.iter().enumerate() {
                if i > 0 {
                    out.write_all(b";")?;
                }
                out.write_all(self.labels[*id as usize].as_bytes())?;
            }
            writeln!(out, " {weight}")?;
        }
        Ok(())
    }

    pub fn text(&self) -> String {
        let mut out = Vec::with_capacity(self.stacks.len() * 64);
        self.write_to(&mut out).expect("writing to memory");
        String::from_utf8(out).expect("labels are strings")
    }

    /// The stacks as a map from folded line to weight (for flame graphs and checks).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        self.stacks.iter().map(|(stack, weight)| (self.line(stack), *weight)).collect()
    }

    fn line(&self, stack: &[u32]) -> String {
        stack.iter().map(|id| self.labels[*id as usize].as_str()).collect::<Vec<_>>().join(";")
    }
}

/// Orders two stacks of label ids as their `;`-joined lines would order as strings, without
/// joining them: equal leading ids give equal leading bytes, so only the rest is compared.
fn cmp_lines(labels: &[String], a: &[u32], b: &[u32]) -> std::cmp::Ordering {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[common..], &b[common..]);
    let bytes = |ids: &[u32]| {
        ids.iter()
            .enumerate()
            .flat_map(|(i, id)| (i > 0).then_some(b';').into_iter().chain(labels[*id as usize].bytes()))
            .collect::<Vec<u8>>()
    };
    match (a.first(), b.first()) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        // Labels hold no `;`, so the first differing label decides unless one is a prefix of
        // the other; only then do the bytes after it matter.
        (Some(x), Some(y)) => {
            let (lx, ly) = (labels[*x as usize].as_bytes(), labels[*y as usize].as_bytes());
            let n = lx.len().min(ly.len());
            match lx[..n].cmp(&ly[..n]) {
                std::cmp::Ordering::Equal => bytes(a).cmp(&bytes(b)),
                decided => decided,
            }
        }
    }
}

/// Folds samples given as interned frame ids (leaf first), labelling each distinct id once.
/// Equal stacks are counted on frame ids, then on label ids (frames with one label, such as two
/// code versions of a method, fold together); strings are joined only on output.
pub fn fold_interned<'s>(samples: impl Iterator<Item = (&'s [u32], u64)>, mut label: impl FnMut(u32) -> String) -> FoldedStacks {
    let mut by_frames: rustc_hash::FxHashMap<&'s [u32], u64> = Default::default();
    for (ids, weight) in samples {
        *by_frames.entry(ids).or_default() += weight;
    }
    let mut labels: Vec<String> = Vec::new();
    let mut label_ids: rustc_hash::FxHashMap<String, u32> = Default::default();
    let mut intern = |text: String, labels: &mut Vec<String>| -> u32 {
        *label_ids.entry(text).or_insert_with_key(|text| {
            labels.push(text.clone());
            (labels.len() - 1) as u32
        })
    };
    let mut label_of_frame: rustc_hash::FxHashMap<u32, u32> = Default::default();
    let mut by_labels: rustc_hash::FxHashMap<Box<[u32]>, u64> = Default::default();
    let mut stack: Vec<u32> = Vec::new();
    for (ids, weight) in by_frames {
        stack.clear();
        for id in ids.iter().rev() {
            let l = match label_of_frame.get(id) {
                Some(l) => *l,
                None => {
                    let l = intern(label(*id), &mut labels);
                    label_of_frame.insert(*id, l);
                    l
                }
            };
            stack.push(l);
        }
        if ids.is_empty() {
            stack.push(intern(NO_STACK.to_string(), &mut labels));
        }
        match by_labels.get_mut(stack.as_slice()) {
            Some(w) => *w += weight,
            None => {
                by_labels.insert(stack.as_slice().into(), weight);
            }
        }
    }
    let mut stacks: Vec<(Box<[u32]>, u64)> = by_labels.into_iter().collect();
    stacks.sort_unstable_by(|(a, _), (b, _)| cmp_lines(&labels, a, b));
    FoldedStacks { labels, stacks }
}

/// The folded text, one `stack count` line per distinct stack, sorted.
pub fn folded_text(folded: &BTreeMap<String, u64>) -> String {
    let mut text = String::with_capacity(folded.len() * 64);
    for (stack, count) in folded {
        text.push_str(stack);
        text.push(' ');
        text.push_str(&count.to_string());
        text.push('\n');
    }
    text
}

/// Writes `<run_dir>/stacks/<collector>.folded`; returns its path.
pub fn write_folded(coll: &Collection, run_dir: &Path) -> Result<PathBuf> {
    write_folded_into(coll, &run_dir.join("stacks"))
}

/// Writes `<stacks_dir>/<collector>.folded`; returns its path.
pub fn write_folded_into(coll: &Collection, stacks_dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(stacks_dir).with_context(|| format!("cannot create {}", stacks_dir.display()))?;
    let path = stacks_dir.join(format!("{}.folded", coll.collector));
    std::fs::write(&path, fold_collection(coll).text()).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Everything a results folder shows of a collection's stacks: `<stacks_dir>/<collector>.folded`,
/// `<run_dir>/flamegraph-<collector>.svg` (and, for deep stacks, `flamegraph-<collector>.leaves.svg`)
/// and `<run_dir>/<collector>.speedscope.json`. `scenario` titles the flame graphs.
pub fn write_all(coll: &Collection, scenario: &str, run_dir: &Path, stacks_dir: &Path) -> Result<()> {
    write_folded_into(coll, stacks_dir)?;
    write_collection_flamegraphs(coll, scenario, run_dir)?;
    write_speedscope(coll, run_dir)?;
    Ok(())
}

/// Stacks deeper than this are drawn with their middle folded into one [`ELIDED`] box (the root
/// frames and the leaf end are what people read; a 1600-pixel-tall graph is not read at all).
pub const MAX_DRAWN_DEPTH: usize = 40;
/// Root-most frames kept above the fold of a deep stack.
const KEPT_ROOT_FRAMES: usize = 8;
/// The box standing for the frames folded out of a deep stack.
pub const ELIDED: &str = "[… deeper frames folded …]";

/// How one flame graph is drawn.
pub struct FlameGraph<'a> {
    pub title: String,
    pub subtitle: Option<String>,
    /// What the widths count: `samples`, or `ns` for off-CPU time.
    pub count_name: &'a str,
    /// Frame kind per full label (colours); labels not in it are grey.
    pub kinds: &'a HashMap<String, FrameKind>,
    /// Leaves at the top, merged however deep they were called (inferno's reversed stack
    /// order, drawn as an icicle): where the time ends up.
    pub by_leaf: bool,
}

/// Draws folded stacks (full labels) as a flame graph SVG: boxes show [`model::short_labels`],
/// tooltips the full label, colours the frame kind; stacks deeper than [`MAX_DRAWN_DEPTH`] have
/// their middle folded (not in the `by_leaf` view, whose top rows are the leaves). Returns false
/// (and writes nothing) when there is no stack to draw.
pub fn write_flamegraph(folded: &BTreeMap<String, u64>, path: &Path, g: &FlameGraph) -> Result<bool> {
    if folded.is_empty() {
        return Ok(false);
    }
    let labels: std::collections::BTreeSet<&str> = folded.keys().flat_map(|k| k.split(';')).collect();
    let short = model::short_labels(labels.iter().copied());
    let mut palette = inferno::flamegraph::color::PaletteMap::default();
    for full in &labels {
        let kind = g.kinds.get(*full).copied().unwrap_or(FrameKind::Unknown);
        palette.insert(&short[full], kind_colour(kind, &short[full]));
    }
    palette.insert(ELIDED, kind_colour(FrameKind::Unknown, ELIDED));
    // The root box (`all`) has an empty name.
    palette.insert("", kind_colour(FrameKind::Unknown, ""));
    let mut drawn: BTreeMap<String, u64> = BTreeMap::new();
    for (line, weight) in folded {
        let mut frames: Vec<&str> = line.split(';').map(|l| short[l].as_str()).collect();
        if !g.by_leaf && frames.len() > MAX_DRAWN_DEPTH {
            let leaf_end = MAX_DRAWN_DEPTH - KEPT_ROOT_FRAMES - 1;
            let tail = frames.split_off(frames.len() - leaf_end);
            frames.truncate(KEPT_ROOT_FRAMES);
            frames.push(ELIDED);
            frames.extend(tail);
        }
        *drawn.entry(frames.join(";")).or_default() += weight;
    }
    let text = folded_text(&drawn);
    let mut options = inferno::flamegraph::Options::default();
    options.title = g.title.clone();
    options.subtitle = g.subtitle.clone();
    options.count_name = g.count_name.to_string();
    options.palette_map = Some(&mut palette);
    options.frame_height = 15;
    // Keep the start of a label (namespace initials, type, method) when a box is narrow.
    options.text_truncate_direction = inferno::flamegraph::TextTruncateDirection::Right;
    if g.by_leaf {
        options.reverse_stack_order = true;
        options.direction = inferno::flamegraph::Direction::Inverted;
    }
    let mut svg = Vec::with_capacity(text.len() * 2);
    inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg)
        .with_context(|| format!("cannot draw the flame graph {}", path.display()))?;
    let full_of: HashMap<&str, &str> = short.iter().map(|(full, s)| (s.as_str(), *full)).collect();
    let svg = full_names_in_tooltips(&String::from_utf8(svg).context("inferno wrote non-UTF-8")?, &full_of);
    // inferno's script re-fits each box's text from its tooltip on load and on zoom: make it
    // take the short text kept in the frame's `data-short` instead.
    let svg = svg.replace(SCRIPT_TEXT_FROM_TITLE, SCRIPT_TEXT_FROM_SHORT);
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

/// The kind's colour, a little lighter or darker per name so neighbouring boxes stay apart.
fn kind_colour(kind: FrameKind, name: &str) -> inferno::flamegraph::color::Color {
    let (r, g, b) = kind.rgb();
    let h = name.bytes().fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let shift = (h % 31) as i16 - 15;
    let c = |v: u8| (v as i16 + shift).clamp(0, 255) as u8;
    inferno::flamegraph::color::Color { r: c(r), g: c(g), b: c(b) }
}

/// How inferno's script (0.12) takes a box's text: its tooltip without the counts.
const SCRIPT_TEXT_FROM_TITLE: &str = r#"find_child(e, "title").textContent.replace(/\([^(]*\)$/,"")"#;
const SCRIPT_TEXT_FROM_SHORT: &str =
    r#"(e.getAttribute("data-short") || find_child(e, "title").textContent.replace(/\([^(]*\)$/,""))"#;

/// Puts each box's full label into its tooltip (`<title>SHORT (N samples, P%)</title>`) and keeps
/// the short one in the frame's `data-short`.
fn full_names_in_tooltips(svg: &str, full_of: &HashMap<&str, &str>) -> String {
    static TITLE: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"<g><title>([^<]*?)( \([^()]*\))</title>").unwrap());
    TITLE
        .replace_all(svg, |c: &regex::Captures| {
            let shown = unescape_xml(&c[1]);
            match full_of.get(shown.as_str()) {
                Some(full) if *full != shown => {
                    format!("<g data-short=\"{}\"><title>{}{}</title>", &c[1], escape_xml(full), &c[2])
                }
                _ => c[0].to_string(),
            }
        })
        .into_owned()
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

fn unescape_xml(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&#39;", "'").replace("&amp;", "&")
}

/// Writes `flamegraph-<collector>.svg` into `run_dir` from the collection's samples and, when
/// some stack is deeper than [`MAX_DRAWN_DEPTH`], `flamegraph-<collector>.leaves.svg` (see
/// [`FlameGraph::by_leaf`]). Returns the files written.
pub fn write_collection_flamegraphs(coll: &Collection, scenario: &str, run_dir: &Path) -> Result<Vec<PathBuf>> {
    let folded = fold(coll);
    let kinds = model::label_kinds(coll);
    let off_cpu = weight_unit(coll) == "nanoseconds";
    let total: u64 = coll.samples.iter().map(|s| s.weight).sum();
    let weight = if off_cpu {
        format!("{:.3} s off-CPU (widths in ns blocked)", total as f64 / 1e9)
    } else {
        "widths in samples".to_string()
    };
    let deepest = coll.samples.iter().map(|s| s.frames.len()).max().unwrap_or(0);
    let legend = [FrameKind::Jit, FrameKind::ReadyToRun, FrameKind::Runtime, FrameKind::Native, FrameKind::Kernel]
        .map(|k| format!("{} {}", colour_word(k), k.short_name()))
        .join(" · ");
    let title = format!("{scenario} · {} · {} samples · {weight}", coll.collector, coll.samples.len());
    let mut written = Vec::new();
    let count_name = if off_cpu { "ns" } else { "samples" };
    let fold_note = if deepest > MAX_DRAWN_DEPTH {
        format!(" · stacks up to {deepest} deep: middles folded (full depth: .leaves.svg, speedscope)")
    } else {
        String::new()
    };
    let path = run_dir.join(format!("flamegraph-{}.svg", coll.collector));
    let g = FlameGraph { title: title.clone(), subtitle: Some(format!("{legend}{fold_note}")), count_name, kinds: &kinds, by_leaf: false };
    if write_flamegraph(&folded, &path, &g)? {
        written.push(path);
    }
    if deepest > MAX_DRAWN_DEPTH {
        let path = run_dir.join(format!("flamegraph-{}.leaves.svg", coll.collector));
        let g = FlameGraph {
            title: format!("{title} · by leaf"),
            subtitle: Some(format!("{legend} · leaves on top, merged at any depth; callers below")),
            count_name,
            kinds: &kinds,
            by_leaf: true,
        };
        if write_flamegraph(&folded, &path, &g)? {
            written.push(path);
        }
    }
    Ok(written)
}

fn colour_word(kind: FrameKind) -> &'static str {
    kind.colour()
}

fn weight_unit(coll: &Collection) -> &'static str {
    if coll.samples.iter().all(|s| s.weight == 1) { "none" } else { "nanoseconds" }
}

/// The unit of a speedscope profile's weights and what one counted sample is worth in it:
/// blocked nanoseconds as they are; a counted sample as the time it stands for, the sampling
/// period (perf's `frequency_hz`, EventPipe's `sampling_interval_ms`), in microseconds, so
/// speedscope shows times rather than bare counts (`unit: "none"` before issue 38). Only a
/// collection with no known period keeps counts.
fn speedscope_unit(coll: &Collection) -> (&'static str, u64) {
    if weight_unit(coll) == "nanoseconds" {
        return ("nanoseconds", 1);
    }
    let period_us = match (coll.metrics.get("frequency_hz"), coll.metrics.get("sampling_interval_ms")) {
        (Some(hz), _) if *hz > 0.0 => 1e6 / hz,
        (_, Some(ms)) if *ms > 0.0 => ms * 1e3,
        _ => return ("none", 1),
    };
    ("microseconds", (period_us.round() as u64).max(1))
}

#[derive(Serialize)]
struct SpeedscopeFile<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    name: &'a str,
    exporter: &'static str,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: SpeedscopeShared,
    profiles: Vec<SpeedscopeProfile>,
}

#[derive(Serialize)]
struct SpeedscopeShared {
    frames: Vec<SpeedscopeFrame>,
}

#[derive(Serialize)]
struct SpeedscopeFrame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
}

#[derive(Serialize)]
struct SpeedscopeProfile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// A speedscope document (https://www.speedscope.app/file-format-schema.json), one sampled
/// profile per thread, frames root first.
pub fn speedscope_json(coll: &Collection) -> Result<String> {
    let mut frames: Vec<SpeedscopeFrame> = Vec::new();
    let mut index: HashMap<(String, Option<String>), usize> = HashMap::new();
    let mut threads: BTreeMap<(u32, u32), SpeedscopeProfile> = BTreeMap::new();
    let (unit, each) = speedscope_unit(coll);
    for s in &coll.samples {
        let mut stack = Vec::with_capacity(s.frames.len());
        for f in s.frames.iter().rev() {
            let key = (frame_label(f), f.dso.clone());
            let next = frames.len();
            let i = *index.entry(key.clone()).or_insert_with(|| {
                frames.push(SpeedscopeFrame { name: key.0, file: key.1 });
                next
            });
            stack.push(i);
        }
        let p = threads.entry((s.pid, s.tid)).or_insert_with(|| SpeedscopeProfile {
            kind: "sampled",
            // The thread's own name first (perf's COMM records), as the profile list shows it.
            name: match coll.thread_names.get(&s.tid) {
                Some(thread) => format!("{thread} (tid {}) · {} pid {}", s.tid, coll.collector, s.pid),
                None => format!("{} pid {} tid {}", coll.collector, s.pid, s.tid),
            },
            unit,
            start_value: 0,
            end_value: 0,
            samples: Vec::new(),
            weights: Vec::new(),
        });
        let weight = s.weight.saturating_mul(each);
        p.samples.push(stack);
        p.weights.push(weight);
        p.end_value += weight;
    }
    let profiles: Vec<SpeedscopeProfile> = threads.into_values().collect();
    // speedscope opens this profile: the busiest thread, not the first by id (a main thread of
    // 42 samples beside the worker that did the work).
    let busiest = profiles.iter().enumerate().max_by_key(|(i, p)| (p.end_value, std::cmp::Reverse(*i))).map_or(0, |(i, _)| i);
    let doc = SpeedscopeFile {
        schema: "https://www.speedscope.app/file-format-schema.json",
        name: &coll.collector,
        exporter: "tracelab",
        active_profile_index: busiest,
        shared: SpeedscopeShared { frames },
        profiles,
    };
    Ok(serde_json::to_string(&doc)?)
}

/// Writes `<collector>.speedscope.json` into `run_dir`.
pub fn write_speedscope(coll: &Collection, run_dir: &Path) -> Result<PathBuf> {
    let path = run_dir.join(format!("{}.speedscope.json", coll.collector));
    std::fs::write(&path, speedscope_json(coll)?).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Named / total frames of one kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resolution {
    pub leaf_total: u64,
    pub leaf_resolved: u64,
    /// `None` when there is no such leaf at all.
    pub leaf_ratio: Option<f64>,
    pub all_total: u64,
    pub all_resolved: u64,
    pub all_ratio: Option<f64>,
}

impl Resolution {
    fn add(&mut self, frame: &Frame, leaf: bool) {
        let named = model::has_symbol(frame) as u64;
        self.all_total += 1;
        self.all_resolved += named;
        if leaf {
            self.leaf_total += 1;
            self.leaf_resolved += named;
        }
    }

    fn merge(&mut self, other: &Resolution) {
        self.leaf_total += other.leaf_total;
        self.leaf_resolved += other.leaf_resolved;
        self.all_total += other.all_total;
        self.all_resolved += other.all_resolved;
    }

    fn finish(&mut self) {
        let ratio = |n: u64, d: u64| (d > 0).then(|| n as f64 / d as f64);
        self.leaf_ratio = ratio(self.leaf_resolved, self.leaf_total);
        self.all_ratio = ratio(self.all_resolved, self.all_total);
    }

    /// The ratio an expectation asks for: leaf frames only, or every frame.
    pub fn ratio(&self, leaf_only: bool) -> Option<f64> {
        if leaf_only { self.leaf_ratio } else { self.all_ratio }
    }
}

/// Resolution per DSO class (frames counted once per sample they appear in, unweighted).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolutionReport {
    pub samples: u64,
    /// By [`DsoClass::as_str`]; every class is present.
    pub by_class: BTreeMap<String, Resolution>,
    /// JIT and ReadyToRun together.
    pub managed: Resolution,
    pub all: Resolution,
}

impl ResolutionReport {
    /// A class by name: a [`DsoClass`] name, `managed` (jit + r2r) or `all`.
    pub fn get(&self, class: &str) -> Option<&Resolution> {
        match class {
            "managed" => Some(&self.managed),
            "all" => Some(&self.all),
            other => self.by_class.get(other),
        }
    }

    /// Flat metrics for the manifest: `resolved_ratio_<class>` (leaf) and
    /// `resolved_ratio_all_frames_<class>`, only where the class occurs.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        let classes = self.by_class.iter().map(|(k, v)| (k.as_str(), v)).chain([("managed", &self.managed), ("all", &self.all)]);
        for (name, r) in classes {
            if let Some(x) = r.leaf_ratio {
                m.insert(format!("resolved_ratio_{name}"), x);
            }
            if let Some(x) = r.all_ratio {
                m.insert(format!("resolved_ratio_all_frames_{name}"), x);
            }
        }
        m
    }
}

pub fn resolution_report(coll: &Collection) -> ResolutionReport {
    let mut by: BTreeMap<DsoClass, Resolution> = DsoClass::ALL.into_iter().map(|c| (c, Resolution::default())).collect();
    for s in &coll.samples {
        for (i, f) in s.frames.iter().enumerate() {
            by.get_mut(&f.class).unwrap().add(f, i == 0);
        }
    }
    let mut report = ResolutionReport { samples: coll.samples.len() as u64, ..Default::default() };
    for (class, mut r) in by {
        report.all.merge(&r);
        if matches!(class, DsoClass::Jit | DsoClass::R2r) {
            report.managed.merge(&r);
        }
        r.finish();
        report.by_class.insert(class.as_str().to_string(), r);
    }
    report.all.finish();
    report.managed.finish();
    report
}

/// Folded stacks of a perf.data file, with what named them.
pub struct PerfFold {
    pub folded: FoldedStacks,
    pub samples: u64,
    pub distinct_callchains: usize,
    pub sources: Vec<String>,
    pub warnings: Vec<String>,
}

/// perf.data → folded stacks, streaming: samples are counted by raw callchain straight from the
/// mapped file (two threads, one per half of the data section), the slow symbol sources are read
/// meanwhile on a third ([`crate::symbolize::prefetch_job`]), and each distinct chain is named
/// once. No per-sample structure is built: for folding, that was most of the cost. What
/// `cargo xtask trace fold` and `cargo xtask bench perf` run.
pub fn fold_perf_file(path: &Path, ctx: &DecodeContext) -> Result<PerfFold> {
    let mut counts = ChainCounts::read_with(path, |mmaps, os| crate::symbolize::prefetch_job(ctx, mmaps, os))?;
    let prefetch = counts.prefetch.take();
    let fold = fold_counts(path, ctx, counts);
    // The prefetch may still be writing its cache when no frame needed what it read.
    if let Some(job) = prefetch {
        let _ = job.join();
    }
    fold
}

fn fold_counts(path: &Path, ctx: &DecodeContext, counts: ChainCounts) -> Result<PerfFold> {
    let (rec, chains) = (&counts.recording, &counts.chains);
    let mut pids: Vec<u32> = chains.iter().map(|c| c.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    // `--call-graph dwarf`: the kernel recorded user registers and stack bytes instead of a user
    // callchain (the chains hold kernel frames only), so the user stacks are ours to unwind.
    if rec.sample_regs_user != 0 {
        drop(counts);
        return fold_dwarf_file(path, ctx, &pids);
    }
    let kernel_frames = chains.iter().any(|c| chain_frames(counts.chain(c), c.in_kernel).any(|f| f.in_kernel));
    let mut symbolizer = Symbolizer::for_mappings(ctx, &rec.mmaps, &pids, kernel_frames, rec.os_release.as_deref())?;
    // A user's recording runs .NET's default, W^X on: its JIT code executes from a memfd alias
    // whose addresses the perf map lists, so it is named by address (a scenario run keeps the
    // drop visible on purpose: cpu-bound-wx).
    symbolizer.set_name_doublemapped(true);
    let samples = chains.iter().map(|c| c.count).sum();
    let distinct_callchains = chains.len();
    let mut stacks = name_chains(chains.iter().map(|c| (c.pid, c.in_kernel, counts.chain(c), c.count)), &mut symbolizer);
    let (recovered, lost) = stacks.complete_osr_callers(&mut symbolizer);
    if lost > 0 {
        symbolizer.warnings.push(format!(
            "{lost} samples lost a caller to on-stack replacement that no whole stack at the same call site names: their \
             stacks read `{}` where the caller was (perf's frame-pointer walk out of an OSR frame skips it; \
             DOTNET_TC_OnStackReplacement=0 keeps loops out of OSR)",
            crate::unwind::LOST_CALLER
        ));
    }
    if recovered + lost > 0 {
        symbolizer.sources.push(format!(
            "on-stack replacement: {} samples lost a caller to a frame-pointer walk out of an OSR frame; {recovered} put back from \
             the process's whole stacks at the same call site, {lost} marked `{}`",
            recovered + lost,
            crate::unwind::LOST_CALLER
        ));
    }
    if let Some(w) = unnamed_jit_warning(&stacks, &symbolizer) {
        symbolizer.warnings.push(w);
    }
    // The raw chains are not needed once named: their memory goes before the fold's.
    drop(counts);
    let folded = stacks.fold(&symbolizer);
    Ok(PerfFold { folded, samples, distinct_callchains, sources: symbolizer.sources.clone(), warnings: symbolizer.warnings.clone() })
}

/// A `--call-graph dwarf` recording, folded through our unwinder (DWARF CFI for ELF objects,
/// ReadyToRun unwind info, frame pointers for JIT code named by each process's perf map in
/// /tmp or beside the recording).
fn fold_dwarf_file(path: &Path, ctx: &DecodeContext, pids: &[u32]) -> Result<PerfFold> {
    let mut sources = Vec::new();
    let mut perf_maps = std::collections::BTreeMap::new();
    for &pid in pids.iter().filter(|p| **p != 0 && **p != u32::MAX) {
        let ns = crate::symbolize::jit::ns_pid(pid).ok().flatten().unwrap_or(pid);
        let dirs = crate::symbolize::jit::candidate_dirs(ctx.artifacts, ctx.app_tmp_dir, pid);
        if let Some(map) = dirs.iter().map(|d| d.join(format!("perf-{ns}.map"))).find(|m| m.is_file()) {
            sources.push(format!("pid {pid}: JIT names from {}", map.display()));
            perf_maps.insert(pid, map);
        }
    }
    let r2r = std::cell::RefCell::new(crate::symbolize::r2r::R2rResolver::new());
    let r2r_namer = |image: &Path, file_offset: u64| r2r.borrow_mut().name(image, file_offset);
    let mut search_dirs = ctx.symbol_dirs.to_vec();
    search_dirs.push(ctx.artifacts.to_path_buf());
    let opts = crate::unwind::UnwindOptions {
        pids: None,
        perf_maps,
        search_dirs,
        path_map: ctx.path_map,
        kallsyms: crate::unwind::names::Kallsyms::live(),
        max_user_frames: crate::unwind::MAX_USER_FRAMES,
        r2r_namer: Some(&r2r_namer),
    };
    let unwound = crate::unwind::unwind_perf_data(path, opts)?;
    sources.push(format!("user stacks unwound from the {} recorded stack bytes (DWARF CFI, ReadyToRun unwind info, frame pointers)", unwound.samples.len()));
    let warnings = unwound.missing_images.iter().map(|(file, why)| format!("{file}: {why} (its frames stay unnamed)")).collect();
    let mut c = Collection::new("perf");
    c.samples = unwound
        .samples
        .into_iter()
        .map(|s| model::Sample { cpu: s.cpu, ..model::Sample::new(s.pid, s.tid, s.time_ns, s.frames) })
        .collect();
    let samples = c.samples.len() as u64;
    let distinct_callchains = c.samples.iter().map(|s| s.frames.iter().map(|f| f.addr).collect::<Vec<_>>()).collect::<std::collections::HashSet<_>>().len();
    Ok(PerfFold { folded: fold_collection(&c), samples, distinct_callchains, sources, warnings })
}

/// What could not be named of the JIT code the samples ran, and why, when it is more than 1 % of
/// the JIT frames (weighted by samples).
fn unnamed_jit_warning(stacks: &NamedStacks, symbolizer: &Symbolizer) -> Option<String> {
    let (mut jit, mut unnamed) = (0u64, 0u64);
    let mut dsos = std::collections::BTreeSet::new();
    for (range, count) in &stacks.stacks {
        for id in &stacks.ids[range.start as usize..range.end as usize] {
            let f = symbolizer.frame_by_id(*id);
            if f.class == model::DsoClass::Jit {
                jit += count;
                if f.name.is_none() {
                    unnamed += count;
                    dsos.extend(f.dso.clone());
                }
            }
        }
    }
    if jit == 0 || unnamed * 100 <= jit {
        return None;
    }
    let why = if symbolizer.sources.iter().any(|s| s.contains("JIT symbols")) {
        "the perf map found does not list their addresses (code compiled before the map was switched on, or the map of another run)"
    } else {
        "no perf-PID.map was found in /tmp or beside the recording: start the app with DOTNET_PerfMapEnabled=1, or switch its map \
         on while it runs (`cargo xtask scenario FILE --attach PID` does, over the diagnostics IPC), and keep the map with the recording"
    };
    Some(format!(
        "{unnamed} of {jit} JIT frames ({:.1} %) are unnamed ({}): {why}",
        unnamed as f64 * 100.0 / jit as f64,
        dsos.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// perf.data → folded stacks without building model samples: frames are interned per address
/// and equal stacks counted before any label is built (what `cargo xtask bench perf` times).
/// Folding only counts, so `rec` may be in either [`SampleOrder`].
pub fn fold_recording(rec: &PerfRecording, symbolizer: &mut Symbolizer) -> FoldedStacks {
    // Samples of a busy loop repeat the same raw callchain: count them before naming anything,
    // so each distinct chain's addresses are looked up once.
    let mut chains: rustc_hash::FxHashMap<(u32, bool, &[u64]), u64> = Default::default();
    for s in &rec.samples {
        *chains.entry((s.pid, s.in_kernel, rec.callchain(s))).or_default() += 1;
    }
    name_chains(chains.into_iter().map(|((pid, in_kernel, chain), n)| (pid, in_kernel, chain, n)), symbolizer).fold(symbolizer)
}

/// Distinct stacks as frame ids (leaf first), one after the other, with their counts.
struct NamedStacks {
    ids: Vec<u32>,
    stacks: Vec<(std::ops::Range<u32>, u64)>,
    /// The process of each of `stacks`.
    pids: Vec<u32>,
    /// Labels made ahead, by frame id (the user frames', made while the kernel's symbols were
    /// still being read); each is taken by the fold, which labels a frame once.
    labels: Vec<String>,
}

impl NamedStacks {
    /// [`complete_osr_callers_interned`] on these stacks.
    fn complete_osr_callers(&mut self, symbolizer: &mut Symbolizer) -> (u64, u64) {
        let mut view: Vec<(u32, &mut [u32], u64)> = Vec::with_capacity(self.stacks.len());
        let mut rest: &mut [u32] = &mut self.ids;
        for ((range, count), pid) in self.stacks.iter().zip(&self.pids) {
            let (stack, tail) = rest.split_at_mut((range.end - range.start) as usize);
            view.push((*pid, stack, *count));
            rest = tail;
        }
        complete_osr_callers_interned(&mut view, symbolizer)
    }
    /// Labels each distinct frame once and folds.
    fn fold(&mut self, symbolizer: &Symbolizer) -> FoldedStacks {
        let mut labels = std::mem::take(&mut self.labels);
        let stacks = self.stacks.iter().map(|(range, count)| (&self.ids[range.start as usize..range.end as usize], *count));
        fold_interned(stacks, |id| match labels.get_mut(id as usize) {
            Some(made) if !made.is_empty() => std::mem::take(made),
            _ => frame_label(symbolizer.frame_by_id(id)),
        })
    }
}

/// As the model's `complete_osr_callers` (crate::unwind::osr), on interned stacks (process, frame
/// ids leaf first, samples): a lost caller is put back from a whole stack of the same process (a
/// recording's distinct stacks keep no thread) whose walk passed the same call site, when exactly
/// one method stood there; else the Tier0 twin becomes [`crate::unwind::LOST_CALLER`]. Returns
/// (samples put back, samples marked).
pub fn complete_osr_callers_interned(stacks: &mut [(u32, &mut [u32], u64)], symbolizer: &mut Symbolizer) -> (u64, u64) {
    let lost_id = symbolizer.intern_frame(Frame { name: Some(crate::unwind::LOST_CALLER.to_string()), dso: None, class: DsoClass::Unknown, addr: 0 });
    let frame = |id: u32| symbolizer.frame_by_id(id);
    let repair = crate::unwind::osr::complete_ids(stacks, &frame, lost_id);
    (repair.recovered, repair.lost)
}

/// Names distinct (pid, sampled in the kernel, raw callchain, count): every address once, the
/// symbol sources read in parallel first.
fn name_chains<'c>(chains: impl Iterator<Item = (u32, bool, &'c [u64], u64)>, symbolizer: &mut Symbolizer) -> NamedStacks {
    let chains: Vec<(u32, bool, &[u64], u64)> = chains.collect();
    symbolizer.preload(
        chains.iter().flat_map(|&(pid, in_kernel, chain, _)| chain_frames(chain, in_kernel).map(move |f| (pid, f.addr, f.in_kernel))),
    );
    let mut named = NamedStacks {
        ids: Vec::with_capacity(chains.iter().map(|c| c.2.len()).sum()),
        stacks: Vec::with_capacity(chains.len()),
        pids: Vec::with_capacity(chains.len()),
        labels: Vec::new(),
    };
    // Kernel frames last: the kernel's symbols may still be being read by the prefetch, and
    // naming every user frame first overlaps that read (on a cold page cache, the slowest one).
    let mut kernel_frames: Vec<(u32, u64)> = Vec::new();
    for &(pid, in_kernel, chain, count) in &chains {
        let start = named.ids.len() as u32;
        for f in chain_frames(chain, in_kernel) {
            if f.in_kernel {
                kernel_frames.push((named.ids.len() as u32, f.addr));
                named.ids.push(u32::MAX);
            } else {
                named.ids.push(symbolizer.frame_id(pid, f.addr, false));
            }
        }
        named.stacks.push((start..named.ids.len() as u32, count));
        named.pids.push(pid);
    }
    // While the kernel's symbols are still on their way, the user frames' labels (the fold's
    // costliest step after naming) are made; the fold takes them.
    if kernel_frames.first().is_some_and(|_| !symbolizer.kernel_ready()) {
        named.labels = (0..symbolizer.frame_count() as u32).map(|id| frame_label(symbolizer.frame_by_id(id))).collect();
    }
    for (at, addr) in kernel_frames {
        named.ids[at as usize] = symbolizer.frame_id(perfdata::KERNEL_PID, addr, true);
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Sample;

    fn frame(name: Option<&str>, class: DsoClass) -> Frame {
        Frame { name: name.map(String::from), dso: Some("x.so".into()), class, addr: 1 }
    }

    fn sample(frames: Vec<Frame>) -> Sample {
        Sample::new(1, 2, 0, frames)
    }

    fn collection() -> Collection {
        let mut c = Collection::new("perf-cpu");
        let hot = |v: &str| frame(Some(&format!("Fixture.Phases::CpuHot(int64)[{v}]")), DsoClass::Jit);
        let main = frame(Some("Fixture.Phases::CpuMain()"), DsoClass::Jit);
        c.samples.push(sample(vec![hot("QuickJitted"), main.clone()]));
        c.samples.push(sample(vec![hot("OptimizedTier1"), main.clone()]));
        c.samples.push(sample(vec![frame(None, DsoClass::RuntimeNative), main]));
        c
    }

    #[test]
    fn code_versions_fold_together() {
        let folded = fold(&collection());
        assert_eq!(folded.get("Fixture.Phases::CpuMain();Fixture.Phases::CpuHot(int64)"), Some(&2));
        assert_eq!(folded.get("Fixture.Phases::CpuMain();[unknown] (x.so)"), Some(&1));
        assert_eq!(folded_text(&folded).lines().count(), 2);
    }

    #[test]
    fn interned_folding_agrees_with_plain_folding() {
        let c = collection();
        let mut frames: Vec<Frame> = Vec::new();
        let stacks: Vec<Vec<u32>> = c
            .samples
            .iter()
            .map(|s| {
                s.frames
                    .iter()
                    .map(|f| {
                        frames.push(f.clone());
                        (frames.len() - 1) as u32
                    })
                    .collect()
            })
            .collect();
        let interned = fold_interned(stacks.iter().map(|s| (s.as_slice(), 1)), |id| frame_label(&frames[id as usize]));
        assert_eq!(interned.to_map(), fold(&c));
        assert_eq!(interned.text(), folded_text(&fold(&c)));
    }

    #[test]
    fn resolution_counts_leaves_and_all_frames() {
        let r = resolution_report(&collection());
        let jit = r.get("jit").unwrap();
        assert_eq!((jit.leaf_total, jit.leaf_resolved, jit.all_total, jit.all_resolved), (2, 2, 5, 5));
        let native = r.get("runtime_native").unwrap();
        assert_eq!((native.leaf_total, native.leaf_ratio), (1, Some(0.0)));
        assert_eq!(r.get("kernel").unwrap().leaf_ratio, None);
        assert_eq!(r.all.leaf_total, 3);
        assert!(r.metrics().contains_key("resolved_ratio_jit"));
    }

    #[test]
    fn speedscope_and_flamegraph_are_written() {
        let c = collection();
        let dir = tempfile::tempdir().unwrap();
        let json: serde_json::Value = serde_json::from_str(&speedscope_json(&c).unwrap()).unwrap();
        assert_eq!(json["profiles"][0]["samples"].as_array().unwrap().len(), 3);
        assert_eq!(json["activeProfileIndex"], 0);
        // Two threads, the second busier and named: it opens, under its name.
        let mut two = c.clone();
        for s in two.samples.clone() {
            for _ in 0..2 {
                two.samples.push(model::Sample { tid: 99, ..s.clone() });
            }
        }
        two.thread_names.insert(99, "worker".into());
        let json: serde_json::Value = serde_json::from_str(&speedscope_json(&two).unwrap()).unwrap();
        let active = json["activeProfileIndex"].as_u64().unwrap() as usize;
        assert!(json["profiles"][active]["name"].as_str().unwrap().starts_with("worker (tid 99) · perf-cpu pid"), "{}", json["profiles"]);
        assert_eq!(json["shared"]["frames"][0]["name"], "Fixture.Phases::CpuMain()");
        let svgs = write_collection_flamegraphs(&c, "fixture", dir.path()).unwrap();
        assert_eq!(svgs.len(), 1, "shallow stacks need no by-leaf view");
        let text = std::fs::read_to_string(&svgs[0]).unwrap();
        assert!(text.contains("CpuHot"), "flame graph lacks the hot method");
        assert!(text.contains("fixture · perf-cpu · 3 samples"), "title names scenario, collector, samples");
        // Boxes show (and the script keeps) the short label; the tooltip has the full one.
        assert!(text.contains("<g data-short=\"F.Phases::CpuMain()\"><title>Fixture.Phases::CpuMain() (3 samples"), "{text}");
        assert!(text.contains(SCRIPT_TEXT_FROM_SHORT) && !text.contains(&format!("= {SCRIPT_TEXT_FROM_TITLE}")), "inferno's script changed");
        assert!(write_folded(&c, dir.path()).unwrap().ends_with("stacks/perf-cpu.folded"));
        write_all(&c, "fixture", dir.path(), &dir.path().join("stacks")).unwrap();
        assert!(dir.path().join("perf-cpu.speedscope.json").is_file());
    }
    /// A user's `perf record -g` of a .NET app with W^X on (fixtures/wx, README there): every
    /// JIT frame runs from the doublemapper alias, and the perf map beside it names them.
    #[test]
    fn a_users_wx_recording_folds_with_its_jit_frames_named_by_the_map_beside_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wx");
        let identity = |p: &Path| -> Option<std::path::PathBuf> { Some(p.to_path_buf()) };
        let fold_in = |artifacts: &Path| {
            let ctx = DecodeContext {
                artifacts,
                app_tmp_dir: Path::new("/nonexistent"),
                host_pid: 0,
                target_pid: 0,
                path_map: &identity,
                symbol_dirs: &[],
            };
            fold_perf_file(&artifacts.join("wx.data"), &ctx).unwrap()
        };
        let leaf_counts = |fold: &PerfFold| {
            let (mut managed, mut unnamed_jit) = (0u64, 0u64);
            for line in fold.folded.text().lines() {
                let (stack, n) = line.rsplit_once(' ').unwrap();
                let leaf = stack.rsplit(';').next().unwrap();
                let n: u64 = n.parse().unwrap();
                if leaf.contains("doublemapper") {
                    unnamed_jit += n;
                } else if leaf.contains("Spin::") {
                    managed += n;
                }
            }
            (managed, unnamed_jit)
        };
        let fold = fold_in(&dir);
        assert_eq!(fold.samples, 418);
        let (managed, unnamed) = leaf_counts(&fold);
        assert_eq!(unnamed, 0, "JIT leaves left unnamed: {}", fold.folded.text());
        assert!(managed as f64 >= 0.99 * 400.0, "{managed} of 418 leaves in the app's methods");
        assert!(fold.warnings.iter().all(|w| !w.contains("JIT frames")), "{:?}", fold.warnings);
        // Without its map: the frames stay unnamed, and the fold says what and why.
        let bare = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join("wx.data"), bare.path().join("wx.data")).unwrap();
        let fold = fold_in(bare.path());
        let w = fold.warnings.iter().find(|w| w.contains("JIT frames")).unwrap_or_else(|| panic!("{:?}", fold.warnings));
        assert!(w.contains("/memfd:doublemapper") && w.contains("no perf-PID.map was found") && w.contains("DOTNET_PerfMapEnabled=1"), "{w}");
    }


    /// A user's `--call-graph dwarf` recording (fixtures/dwarf, README there) holds no user
    /// callchain: the fold unwinds the stack bytes itself and keeps user frames on ≥ 90 % of the
    /// samples, the app's methods named by the map beside it.
    #[test]
    fn a_users_dwarf_recording_folds_with_its_user_stacks_unwound() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dwarf");
        let identity = |p: &Path| -> Option<std::path::PathBuf> { Some(p.to_path_buf()) };
        let ctx = DecodeContext { artifacts: &dir, app_tmp_dir: Path::new("/nonexistent"), host_pid: 0, target_pid: 0, path_map: &identity, symbol_dirs: &[] };
        let fold = fold_perf_file(&dir.join("dwarf.data"), &ctx).unwrap();
        assert_eq!(fold.samples, 105);
        let (mut with_user, mut in_app) = (0u64, 0u64);
        for line in fold.folded.text().lines() {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            if stack != NO_STACK && stack.split(';').any(|f| !f.ends_with("_[k]")) {
                with_user += n;
            }
            if stack.contains("Spin::Run(System.TimeSpan)") {
                in_app += n;
            }
        }
        assert!(with_user * 10 >= 105 * 9, "{with_user} of 105 samples keep user frames:\n{}", fold.folded.text());
        assert!(in_app * 10 >= 105 * 9, "{in_app} of 105 samples reach the app's Spin::Run:\n{}", fold.folded.text());
    }
}

/// Damaged perf.data through the streaming fold (the decoder's own answers are the perfdata
/// crate's tests).
#[cfg(test)]
mod malformed {
    use std::path::Path;

    use proptest::prelude::*;

    fn fixture_bytes() -> &'static [u8] {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BYTES.get_or_init(|| std::fs::read(tracelab_fixtures::fixture("perf/perf-offcpu.data")).unwrap())
    }

    /// The data section's (offset, size), from the header.
    fn data_section(bytes: &[u8]) -> (usize, usize) {
        let at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap()) as usize;
        (at(40), at(48))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The streaming fold walks records and reads sample fields on its own: the same damage
        /// must give it an error naming the file and offset, or stacks, never a panic.
        #[test]
        fn corrupted_perf_data_folds_or_errs_never_panics(
            flips in proptest::collection::vec((0.0f64..1.0, any::<u8>()), 1..16),
            cut in 0.5f64..1.0,
        ) {
            let bytes = fixture_bytes();
            let (offset, size) = data_section(bytes);
            let mut corrupt = bytes.to_vec();
            for (at, value) in flips {
                corrupt[(offset + (at * size as f64) as usize).min(bytes.len() - 1)] = value;
            }
            corrupt.truncate((corrupt.len() as f64 * cut) as usize);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("bad.data");
            std::fs::write(&path, &corrupt).unwrap();
            let no_files = |_: &Path| -> Option<std::path::PathBuf> { None };
            let ctx = crate::symbolize::DecodeContext {
                artifacts: dir.path(),
                app_tmp_dir: dir.path(),
                host_pid: 0,
                target_pid: 0,
                path_map: &no_files,
                symbol_dirs: &[],
            };
            if let Err(e) = super::fold_perf_file(&path, &ctx) {
                let msg = format!("{e:#}");
                prop_assert!(msg.contains("bad.data") && msg.contains("byte offset"), "error lacks file or offset: {}", msg);
            }
        }
    }

}
