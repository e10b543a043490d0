//! The report's pages beside the matrix (`index.html`): one page per run (`runs/<run>.html`:
//! verdict per collector, checks with expected and measured, share tables, resolution per DSO
//! class, findings, durations, links to every file of the run folder) and a history page
//! (`history.html`: per scenario × environment, every run over time with its verdicts, share
//! error, resolved ratio and duration, and a plot of them).
//!
//! Every link stays inside the report folder, so `report/` uploaded alone (CI's artifact) still
//! opens: the files people open of each run the matrix shows (flame graphs, viewer files,
//! summary, manifest, folded stacks, the .nettrace) are copied beside its page (`runs/<run>/…`)
//! up to [`COPY_MAX_BYTES`] each; recordings, larger files and older runs' files are listed by
//! their path in the results folder, not linked.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use super::merge::{MergedReport, Run, SCENARIO_WIDE, esc};

/// The page file name of each run (`runs/<folder name>.html`; a second folder of the same name
/// gets `-2` …).
pub(crate) fn page_names(runs: &[Run]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    for r in runs {
        let base = r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
        let base: String = base.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        let n = used.entry(base.clone()).or_default();
        *n += 1;
        let name = if *n == 1 { format!("{base}.html") } else { format!("{base}-{n}.html") };
        out.insert(r.dir.clone(), name);
    }
    out
}

const STYLE: &str = "body{font-family:'DejaVu Sans',sans-serif;margin:1.5em;color:#222;max-width:1400px}\n\
    table{border-collapse:collapse;font-size:13px;margin-bottom:1em}\n\
    th,td{border:1px solid #bbb;padding:5px 8px;vertical-align:top;text-align:left}\n\
    th{background:#eee}\n\
    td.pass,span.pass{background:#d7f5d7}td.fail,span.fail{background:#f9d2d2}td.skip,span.skip{background:#f3ecc8}\n\
    td.inconclusive,span.inconclusive{background:#e3ddf5}td.error,span.error{background:#f5c38f}td.unchecked{background:#f7f7f7;color:#999}\n\
    span.pass,span.fail,span.skip,span.inconclusive,span.error{padding:1px 6px;font-weight:bold}\n\
    .num{text-align:right;font-variant-numeric:tabular-nums}.small{font-size:11px;color:#444}\n\
    nav a{margin-right:1em}";

fn page_head(title: &str, up: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>\n{STYLE}\n</style></head><body>\n\
         <nav><a href=\"{up}index.html\">matrix</a><a href=\"{up}history.html\">history</a></nav>\n",
        esc(title)
    )
}

/// `to` as a link from a page in `from_dir`: relative where both are on one tree, else absolute.
/// Each path segment is percent-encoded where a URL needs it.
pub(crate) fn link(from_dir: &Path, to: &Path) -> String {
    let abs = |p: &Path| p.canonicalize().unwrap_or_else(|_| std::path::absolute(p).unwrap_or(p.to_path_buf()));
    let (from, to) = (abs(from_dir), abs(to));
    let f: Vec<Component> = from.components().collect();
    let t: Vec<Component> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let parts: Vec<String> = if common == 0 {
        t.iter().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect()
    } else {
        std::iter::repeat_n("..".to_string(), f.len() - common)
            .chain(t[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()))
            .collect()
    };
    let encoded: Vec<String> = parts.iter().map(|p| if p == "/" { String::new() } else { encode_segment(p) }).collect();
    encoded.join("/")
}

fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~+,=@".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Every file under a run folder (relative path, size), sorted; `latest` links skipped.
fn files_of(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let size = e.metadata().map(|m| m.len()).unwrap_or(0);
                out.push((e.path().strip_prefix(dir).unwrap_or(&e.path()).to_path_buf(), size));
            }
        }
    }
    out.sort();
    out
}

/// What a file of a run folder is, for the file list.
fn describe_file(rel: &Path) -> &'static str {
    let name = rel.to_string_lossy();
    let file = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match () {
        _ if file.starts_with("flamegraph") && file.ends_with(".leaves.svg") => "flame graph by leaf (open in a browser)",
        _ if file.starts_with("flamegraph") && file.ends_with(".svg") => "flame graph (open in a browser)",
        _ if file.ends_with(".speedscope.json") => "speedscope profile (speedscope.app, or `speedscope FILE`)",
        _ if file.ends_with(".firefox.json") || file.ends_with(".firefox.json.gz") => "Firefox Profiler profile (profiler.firefox.com: load from file)",
        _ if file.ends_with(".pb.gz") => "pprof profile (`go tool pprof`)",
        _ if file.ends_with("trace.zip") => "perfcollect trace.zip (PerfView)",
        _ if file.ends_with(".folded") => "folded stacks (inferno, flamegraph.pl)",
        _ if file == "summary.md" => "the run's summary",
        _ if file == "manifest.json" => "the run's manifest (verdicts, metrics, environment)",
        _ if file == "junit.xml" => "JUnit XML",
        _ if file.ends_with(".data") => "perf.data recording (`perf report -i`)",
        _ if file.ends_with(".nettrace") => "EventPipe trace (PerfView, dotnet-trace convert)",
        _ if file.ends_with(".map") => "perf map (JIT symbols)",
        _ if file.ends_with(".dump") => "jitdump",
        _ if name.contains("lttng") || file.ends_with(".idx") || file == "metadata" => "LTTng trace",
        _ if file == "truth.json" => "the app's own measurement",
        _ if file.ends_with(".txt") || file.ends_with(".log") => "text output",
        _ => "",
    }
}

fn fmt_size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn verdict_span(v: &str) -> String {
    format!("<span class=\"{}\">{}</span>", esc(v), esc(&v.to_uppercase()))
}

fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.1} %", v * 100.0)).unwrap_or_else(|| "—".into())
}

/// One run's page.
pub(crate) fn run_page(run: &Run, copies: &BTreeMap<PathBuf, String>) -> String {
    let m = &run.manifest;
    let mut h = page_head(&format!("{} — {}", run.scenario, run.verdict.to_uppercase()), "../");
    let _ = writeln!(h, "<h1>{} — {}</h1>", esc(&run.scenario), verdict_span(&run.verdict));
    if let Some(r) = &run.reason {
        let _ = writeln!(h, "<p id=\"reason\"><b>Reason:</b> {}</p>", esc(r));
    }
    let _ = writeln!(
        h,
        "<p class=\"small\">{} · started {} · workload <code>{}</code> · results folder <code>{}</code></p>",
        esc(&run.environment),
        esc(&run.started),
        esc(m["workload"].as_str().unwrap_or("?")),
        esc(&run.dir.display().to_string()),
    );

    h.push_str("<h2>Verdict per collector</h2>\n<table id=\"collectors\"><thead><tr><th>collector</th><th>verdict</th><th>key figure</th><th>why</th></tr></thead><tbody>\n");
    let wide = m["checks"].as_array().into_iter().flatten().any(|c| super::merge::check_owner(c) == SCENARIO_WIDE);
    for c in run.collectors.iter().map(String::as_str).chain(wide.then_some(SCENARIO_WIDE)) {
        let cell = run.cell(c);
        let _ = writeln!(
            h,
            "<tr data-collector=\"{}\"><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td class=\"small\">{}</td></tr>",
            esc(c),
            esc(c),
            esc(&cell.verdict),
            esc(&cell.verdict.to_uppercase()),
            esc(cell.metric.as_deref().unwrap_or("")),
            esc(cell.reason.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</tbody></table>\n");

    if let Some(checks) = m["checks"].as_array().filter(|c| !c.is_empty()) {
        h.push_str("<h2>Checks</h2>\n<table id=\"checks\"><thead><tr><th>check</th><th>collector</th><th>verdict</th><th>expected</th><th>measured</th></tr></thead><tbody>\n");
        for c in checks {
            let v = c["verdict"].as_str().unwrap_or("?");
            let mut measured = esc(c["measured"].as_str().unwrap_or(""));
            if let Some(r) = c["reason"].as_str() {
                let _ = write!(measured, "<div class=\"small\">{}</div>", esc(r));
            }
            for d in c["details"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                let _ = write!(measured, "<div class=\"small\">{}</div>", esc(d));
            }
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{measured}</td></tr>",
                esc(c["name"].as_str().unwrap_or("")),
                esc(c["collector"].as_str().unwrap_or("—")),
                esc(v),
                esc(&v.to_uppercase()),
                esc(c["expected"].as_str().unwrap_or("")),
            );
        }
        h.push_str("</tbody></table>\n");
    }

    let tables: Vec<super::ShareTable> = serde_json::from_value(m["share_tables"].clone()).unwrap_or_default();
    if !tables.is_empty() {
        h.push_str("<h2>Shares by collector (on-CPU / off-CPU / thread time beside the app's truth)</h2>\n");
        for t in &tables {
            h.push_str(&super::merge::share_table_html(t, &run.scenario));
        }
    }

    if let Some(res) = m["resolution"].as_object().filter(|r| !r.is_empty()) {
        h.push_str("<h2>Frame resolution per DSO class</h2>\n<table id=\"resolution\"><thead><tr><th>collector</th><th>class</th><th>leaf frames</th><th>leaf named</th><th>all frames</th><th>all named</th></tr></thead><tbody>\n");
        for (collector, r) in res {
            // engine::resolution_json: `classes.<class>.{leaf,all}_{total,named,ratio}`.
            for (class, v) in r["classes"].as_object().into_iter().flatten() {
                let (lt, at) = (v["leaf_total"].as_u64().unwrap_or(0), v["all_total"].as_u64().unwrap_or(0));
                if lt == 0 && at == 0 {
                    continue;
                }
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td class=\"num\">{lt}</td><td class=\"num\">{} ({})</td><td class=\"num\">{at}</td><td class=\"num\">{} ({})</td></tr>",
                    esc(collector),
                    esc(class),
                    v["leaf_named"].as_u64().unwrap_or(0),
                    pct(v["leaf_ratio"].as_f64()),
                    v["all_named"].as_u64().unwrap_or(0),
                    pct(v["all_ratio"].as_f64()),
                );
            }
        }
        h.push_str("</tbody></table>\n");
    }

    let findings: Vec<&str> = m["findings"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let notes: Vec<&str> = m["notes"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if !findings.is_empty() || !notes.is_empty() {
        h.push_str("<h2>Findings</h2>\n<ul id=\"findings\">\n");
        for f in findings {
            let _ = writeln!(h, "<li>{}</li>", esc(f));
        }
        for n in notes {
            let _ = writeln!(h, "<li class=\"small\">note: {}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }

    if let Some(d) = m["durations_s"].as_object().filter(|d| !d.is_empty()) {
        h.push_str("<h2>Durations</h2>\n<table id=\"durations\"><tbody>\n");
        for (k, v) in d {
            let _ = writeln!(h, "<tr><td>{}</td><td class=\"num\">{:.1} s</td></tr>", esc(k), v.as_f64().unwrap_or(0.0));
        }
        h.push_str("</tbody></table>\n");
    }

    h.push_str("<h2>Files</h2>\n<table id=\"files\"><thead><tr><th>file</th><th>size</th><th>what</th></tr></thead><tbody>\n");
    for (rel, size) in files_of(&run.dir) {
        let shown = esc(&rel.display().to_string());
        let file = match copies.get(&rel) {
            Some(href) => format!("<a href=\"{}\">{shown}</a>", esc(href)),
            None => format!("<code>{shown}</code> <span class=\"small\">(not in the report: in the results folder)</span>"),
        };
        let _ = writeln!(
            h,
            "<tr><td>{file}</td><td class=\"num\">{}</td><td class=\"small\">{}</td></tr>",
            fmt_size(size),
            describe_file(&rel)
        );
    }
    h.push_str("</tbody></table>\n");

    if let Some(metrics) = m["metrics"].as_object().filter(|x| !x.is_empty()) {
        h.push_str("<details><summary>All metrics</summary>\n<table id=\"metrics\"><tbody>\n");
        for (k, v) in metrics {
            let _ = writeln!(h, "<tr><td>{}</td><td class=\"num\">{}</td></tr>", esc(k), esc(&v.to_string()));
        }
        h.push_str("</tbody></table></details>\n");
    }
    h.push_str("</body></html>\n");
    h
}

/// A run's figures on the history page.
struct Point<'a> {
    run: &'a Run,
    share_error: Option<f64>,
    resolved: Option<f64>,
    duration: Option<f64>,
}

fn point(run: &Run) -> Point<'_> {
    let metrics = &run.manifest["metrics"];
    let resolved = metrics["resolved_ratio_managed"].as_f64().or_else(|| metrics["resolved_ratio_jit"].as_f64());
    let durations = run.manifest["durations_s"].as_object();
    let duration = durations.and_then(|d| d.get("total").and_then(Value::as_f64).or_else(|| {
        let sum: f64 = d.values().filter_map(Value::as_f64).sum();
        (!d.is_empty()).then_some(sum)
    }));
    Point { run, share_error: metrics["share_error_pts_max"].as_f64(), resolved, duration }
}

/// The history page: per (scenario, environment), its runs oldest first.
pub(crate) fn history_page(report: &MergedReport, pages: &BTreeMap<PathBuf, String>) -> String {
    let mut h = page_head("tracelab history", "");
    h.push_str("<h1>History</h1>\n");
    let _ = writeln!(h, "<p class=\"small\">{} runs from {}</p>", report.run_list.len(), esc(&report.inputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")));
    let mut groups: BTreeMap<(&str, &str), Vec<&Run>> = BTreeMap::new();
    for r in &report.run_list {
        groups.entry((r.scenario.as_str(), r.environment.as_str())).or_default().push(r);
    }
    for ((scenario, env), runs) in groups {
        let points: Vec<Point> = runs.iter().map(|r| point(r)).collect();
        let mut collectors: Vec<&str> = Vec::new();
        for r in &runs {
            for c in &r.collectors {
                if !collectors.contains(&c.as_str()) {
                    collectors.push(c);
                }
            }
        }
        let _ = writeln!(h, "<h2 class=\"group\" data-scenario=\"{}\" data-environment=\"{}\">{} · {}</h2>", esc(scenario), esc(env), esc(scenario), esc(env));
        h.push_str(&plot(&points));
        let _ = write!(h, "<table class=\"history\" data-scenario=\"{}\"><thead><tr><th>started</th><th>verdict</th>", esc(scenario));
        for c in &collectors {
            let _ = write!(h, "<th>{}</th>", esc(c));
        }
        h.push_str("<th>share error max</th><th>managed resolved</th><th>duration</th></tr></thead><tbody>\n");
        for p in &points {
            let page = pages.get(&p.run.dir).map(|n| format!("runs/{n}")).unwrap_or_default();
            let _ = write!(
                h,
                "<tr><td><a href=\"{}\">{}</a></td><td class=\"{}\">{}</td>",
                esc(&page),
                esc(&p.run.started),
                esc(&p.run.verdict),
                esc(&p.run.verdict.to_uppercase())
            );
            for c in &collectors {
                if p.run.collectors.iter().any(|x| x == c) {
                    let v = p.run.cell(c).verdict;
                    let _ = write!(h, "<td class=\"{}\" data-collector=\"{}\">{}</td>", esc(&v), esc(c), esc(&v.to_uppercase()));
                } else {
                    h.push_str("<td>—</td>");
                }
            }
            let _ = writeln!(
                h,
                "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                p.share_error.map(|e| format!("{e:.1} pts")).unwrap_or_else(|| "—".into()),
                pct(p.resolved),
                p.duration.map(|d| format!("{d:.0} s")).unwrap_or_else(|| "—".into())
            );
        }
        h.push_str("</tbody></table>\n");
    }
    h.push_str("</body></html>\n");
    h
}

/// An SVG plot of a group's runs: share error (points, left axis) and managed resolved ratio
/// (%, right axis) per run, a verdict-coloured dot per run along the bottom.
fn plot(points: &[Point]) -> String {
    let (w, hgt, left, right, top, bottom) = (640.0, 200.0, 48.0, 48.0, 12.0, 36.0);
    let n = points.len().max(1);
    let x = |i: usize| if n == 1 { left + (w - left - right) / 2.0 } else { left + (w - left - right) * i as f64 / (n - 1) as f64 };
    let err_max = points.iter().filter_map(|p| p.share_error).fold(5.0f64, f64::max).ceil();
    let y_err = |e: f64| top + (hgt - top - bottom) * (1.0 - e / err_max);
    let y_pct = |r: f64| top + (hgt - top - bottom) * (1.0 - r);
    let mut s = format!("<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{hgt}\" viewBox=\"0 0 {w} {hgt}\" font-size=\"10\" font-family=\"DejaVu Sans,sans-serif\">\n");
    let _ = writeln!(s, "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>", w - left - right, hgt - top - bottom);
    let _ = writeln!(s, "<text x=\"4\" y=\"{}\" fill=\"#c33\">{err_max} pts</text><text x=\"4\" y=\"{}\" fill=\"#c33\">0</text>", top + 8.0, hgt - bottom);
    let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" fill=\"#36c\">100 %</text><text x=\"{}\" y=\"{}\" fill=\"#36c\">0 %</text>", w - right + 4.0, top + 8.0, w - right + 4.0, hgt - bottom);
    let series = |vals: Vec<(usize, f64)>, colour: &str, label: &str| {
        let mut out = String::new();
        if vals.is_empty() {
            return out;
        }
        let pts: Vec<String> = vals.iter().map(|(i, y)| format!("{:.1},{:.1}", x(*i), y)).collect();
        let _ = writeln!(out, "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"><title>{label}</title></polyline>", pts.join(" "));
        for (i, y) in vals {
            let _ = writeln!(out, "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/>", x(i));
        }
        out
    };
    s.push_str(&series(points.iter().enumerate().filter_map(|(i, p)| Some((i, y_err(p.share_error?)))).collect(), "#c33", "share error max (pts)"));
    s.push_str(&series(points.iter().enumerate().filter_map(|(i, p)| Some((i, y_pct(p.resolved?)))).collect(), "#36c", "managed frames resolved (%)"));
    for (i, p) in points.iter().enumerate() {
        let colour = match p.run.verdict.as_str() {
            "pass" => "#3a3",
            "fail" => "#d33",
            "skip" => "#cb3",
            "inconclusive" => "#85c",
            _ => "#e80",
        };
        let _ = writeln!(
            s,
            "<circle class=\"verdict\" cx=\"{:.1}\" cy=\"{}\" r=\"5\" fill=\"{colour}\"><title>{} {}</title></circle>",
            x(i),
            hgt - bottom + 14.0,
            esc(&p.run.started),
            esc(&p.run.verdict)
        );
    }
    let _ = writeln!(s, "<text x=\"{left}\" y=\"{}\" fill=\"#555\">red: share error (pts) · blue: managed resolved (%) · dots: verdict per run, oldest left</text>", hgt - 4.0);
    s.push_str("</svg>\n");
    s
}

/// A file larger than this stays in the results folder: a report over a CI matrix holds dozens
/// of runs, and perf.data or an LTTng trace can be hundreds of MB.
const COPY_MAX_BYTES: u64 = 16 << 20;

/// Whether a run's file is one people open from the report: anything at the top of the run
/// folder or in stacks/, and of the recordings only the .nettrace (PerfView opens it) and the
/// app's truth.
fn worth_copying(rel: &Path, size: u64) -> bool {
    if size > COPY_MAX_BYTES {
        return false;
    }
    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match rel.components().count() {
        1 => true,
        _ if rel.starts_with("stacks") => true,
        _ => name.ends_with(".nettrace") || name == "truth.json",
    }
}

/// Copies a run's files worth opening into `runs_dir/<stem>/`; returns each copied file's link
/// from a page in `runs_dir`, by its path in the run folder.
fn copy_files(run: &Run, runs_dir: &Path, stem: &str) -> Result<BTreeMap<PathBuf, String>> {
    let mut out = BTreeMap::new();
    for (rel, size) in files_of(&run.dir) {
        if !worth_copying(&rel, size) {
            continue;
        }
        let dest = runs_dir.join(stem).join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::copy(run.dir.join(&rel), &dest).with_context(|| format!("cannot copy {} to {}", run.dir.join(&rel).display(), dest.display()))?;
        out.insert(rel, link(runs_dir, &dest));
    }
    Ok(out)
}

/// Writes `runs/<run>.html` for every run (and its files worth opening beside it) and
/// `history.html` into `out`.
pub(crate) fn write(report: &MergedReport, out: &Path) -> Result<()> {
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir).with_context(|| format!("cannot create {}", runs_dir.display()))?;
    let pages = page_names(&report.run_list);
    // Only the runs the matrix shows (the newest of each cell) bring their files: a history of
    // many runs would otherwise copy every one's (about 10 MB each for on-vs-off-cpu).
    let shown: std::collections::BTreeSet<&Path> = report.cells.values().map(|c| c.run_dir.as_path()).collect();
    for run in &report.run_list {
        let page = &pages[&run.dir];
        let copies = if shown.contains(run.dir.as_path()) { copy_files(run, &runs_dir, page.trim_end_matches(".html"))? } else { BTreeMap::new() };
        let path = runs_dir.join(page);
        std::fs::write(&path, run_page(run, &copies)).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let path = out.join("history.html");
    std::fs::write(&path, history_page(report, &pages)).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_and_encoded() {
        let d = tempfile::tempdir().unwrap();
        let page = d.path().join("out/runs");
        let file = d.path().join("results/a run/flamegraph-perf-cpu.svg");
        std::fs::create_dir_all(&page).unwrap();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "x").unwrap();
        assert_eq!(link(&page, &file), "../../results/a%20run/flamegraph-perf-cpu.svg");
    }
}
