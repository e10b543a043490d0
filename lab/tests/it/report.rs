//! Reports as CI and people read them: junit.xml of real runs against the strict JUnit schema
//! (xmllint), and the merged HTML report as a browser renders it (headless Chromium), on a
//! fixture of real result folders where only one collector failed.

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::report::{junit, merge};

/// Validates `run_dir/junit.xml` with xmllint; skips (with the printed reason) when xmllint is
/// absent, so a real-run test that calls this still runs its own assertions.
pub fn assert_junit_valid(run_dir: &Path) {
    let file = run_dir.join("junit.xml");
    match junit::validate(&file) {
        Err(why) => tracelab_fixtures::skip("report::junit_validates", why),
        Ok(Ok(())) => {}
        Ok(Err(why)) => panic!("{} is not valid JUnit:\n{why}\n{}", file.display(), std::fs::read_to_string(&file).unwrap_or_default()),
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report-offcpu-failed")
}

/// The DOM after Chromium loaded the page (what a reader sees, not the bytes we wrote).
fn chromium_dom(page: &Path) -> Result<String, String> {
    harness::host::environment::require_program("chromium").map_err(|e| format!("{e}: apt-get install chromium"))?;
    let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .map_err(|e| format!("cannot run chromium: {e}"))?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(format!("chromium failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// (collector, verdict class, cell text without tags) of every cell of `scenario`'s rows.
fn cells(dom: &str, scenario: &str) -> Vec<(String, String, String)> {
    let re = regex::Regex::new(r#"(?s)<td class="([a-z]+)" data-scenario="([^"]*)" data-collector="([^"]*)"[^>]*>(.*?)</td>"#).unwrap();
    let tags = regex::Regex::new(r"<[^>]+>").unwrap();
    re.captures_iter(dom)
        .filter(|c| &c[2] == scenario)
        .map(|c| (c[3].to_string(), c[1].to_string(), tags.replace_all(&c[4], " ").into_owned()))
        .collect()
}

/// The fixture is a real on-vs-off-cpu run with only perf-offcpu's check edited to fail (see its
/// README): the browser must show perf-offcpu red, the other three green, and no cell may show
/// another collector's numbers.
#[test]
fn merged_report_in_chromium_shows_each_collectors_own_verdict() {
    let out = tempfile::tempdir().unwrap();
    let report = merge::merge(&[fixture()], None, merge::Thresholds::default()).unwrap();
    let (html, _) = report.write(out.path()).unwrap();
    let dom = match chromium_dom(&html) {
        Ok(d) => d,
        Err(why) => return tracelab_fixtures::skip("report::merged_report_in_chromium", why),
    };
    let cells = cells(&dom, "on-vs-off-cpu");
    let verdict = |c: &str| cells.iter().find(|x| x.0 == c).map(|x| x.1.as_str()).unwrap_or_else(|| panic!("no {c} cell in {dom}"));
    assert_eq!(verdict("perf-offcpu"), "fail", "{cells:#?}");
    for c in ["perf-cpu", "eventpipe", "dotnet-trace"] {
        assert_eq!(verdict(c), "pass", "{c}: {cells:#?}");
    }
    // The fixture's run-level figures belong to perf-cpu (the first collector); its own
    // `<collector>.` metrics and check names never show in another collector's cell.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(only_run(&fixture()).join("manifest.json")).unwrap()).unwrap();
    let names: Vec<(String, String)> = manifest["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| Some((c["collector"].as_str()?.to_string(), c["name"].as_str()?.to_string())))
        .collect();
    for (collector, _, text) in &cells {
        for (owner, name) in &names {
            if owner != collector {
                assert!(!text.contains(name.as_str()), "{collector}'s cell shows {owner}'s check `{name}`: {text}");
            }
        }
        if collector != "perf-cpu" {
            let jit = manifest["metrics"]["resolved_ratio_jit"].as_f64().unwrap();
            let own = manifest["metrics"][format!("{collector}.resolved_ratio_jit")].as_f64();
            if own.is_none_or(|o| format!("{:.1}", o * 100.0) != format!("{:.1}", jit * 100.0)) {
                assert!(!text.contains(&format!("JIT resolved {:.1} %", jit * 100.0)), "{collector} shows perf-cpu's ratio: {text}");
            }
        }
    }
    let failed = cells.iter().find(|x| x.0 == "perf-offcpu").unwrap();
    assert!(failed.2.contains("perf off-CPU ≈ blocked route only"), "the red cell says which check: {}", failed.2);
    // The merged junit.xml beside it is valid, and counts exactly the one failure.
    assert_junit_valid(out.path());
    let junit = std::fs::read_to_string(out.path().join("junit.xml")).unwrap();
    assert!(junit.contains("failures=\"1\" errors=\"0\""), "{junit}");
}

/// The fixture's one run folder.
fn only_run(root: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// The fixture's junit.xml was written by the real writer from its manifest (see its README):
/// it validates, and the writer still writes it byte for byte.
#[test]
fn fixture_junit_is_what_the_writer_writes_and_validates() {
    let run = only_run(&fixture());
    let manifest: harness::report::Manifest =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(std::fs::read_to_string(run.join("junit.xml")).unwrap(), harness::report::junit_xml(&manifest));
    assert_junit_valid(&run);
}

/// Three runs of the fixture's scenario in one environment, oldest first (the second with
/// perf-offcpu passing, so its verdict changes over time), with viewer files in the newest.
fn history_results(root: &Path) -> Vec<PathBuf> {
    let src = only_run(&fixture());
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("manifest.json")).unwrap()).unwrap();
    let mut dirs = Vec::new();
    for (i, day) in ["2026-11-22", "2026-11-23", "2026-11-24"].iter().enumerate() {
        let dir = root.join(format!("run-{i}"));
        std::fs::create_dir_all(dir.join("stacks")).unwrap();
        let mut m = manifest.clone();
        m["started_utc"] = serde_json::json!(format!("{day}T03:15:13Z"));
        if i == 1 {
            for c in m["checks"].as_array_mut().unwrap() {
                c["verdict"] = serde_json::json!("pass");
            }
            m["verdict"] = serde_json::json!("pass");
        }
        std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&m).unwrap()).unwrap();
        for f in ["summary.md", "junit.xml"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        dirs.push(dir);
    }
    let newest = &dirs[2];
    std::fs::write(newest.join("flamegraph-perf-cpu.svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\"/>").unwrap();
    std::fs::write(newest.join("perf-cpu.speedscope.json"), "{}").unwrap();
    std::fs::write(newest.join("stacks/perf-cpu.folded"), "a;b 1\n").unwrap();
    dirs
}

/// The file named `name` under `dir` (top level or stacks/).
fn walkdir_find(dir: &Path, name: &str) -> PathBuf {
    [dir.join(name), dir.join("stacks").join(name)].into_iter().find(|p| p.is_file()).unwrap_or_else(|| panic!("no {name} under {}", dir.display()))
}

/// Every `href` of a DOM, resolved against the page's folder (fragments and queries dropped).
fn hrefs(dom: &str, page: &Path) -> Vec<(String, PathBuf)> {
    let re = regex::Regex::new(r##"href="([^"#?]+)"##).unwrap();
    re.captures_iter(dom)
        .map(|c| {
            let raw = c[1].replace("&amp;", "&");
            let decoded = percent_decode(&raw);
            let target = if decoded.starts_with('/') { PathBuf::from(&decoded) } else { page.parent().unwrap().join(&decoded) };
            (raw, target)
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// `cargo xtask report`'s pages as a browser shows them: the index links every cell to its run
/// page and to the history; a run page gives each collector its own verdict and links only files
/// that exist; the history page has one row per run with the verdict per collector over time and
/// a plot.
#[test]
fn report_pages_in_chromium_show_verdicts_and_link_existing_files() {
    let results = tempfile::tempdir().unwrap();
    let dirs = history_results(results.path());
    let out = tempfile::tempdir().unwrap();
    let report = merge::merge(&[results.path().to_path_buf()], None, merge::Thresholds::default()).unwrap();
    let (index, _) = report.write(out.path()).unwrap();
    let index_dom = match chromium_dom(&index) {
        Ok(d) => d,
        Err(why) => return tracelab_fixtures::skip("report::report_pages_in_chromium", why),
    };
    for (raw, target) in hrefs(&index_dom, &index) {
        assert!(target.exists(), "index links {raw}, which does not exist ({})", target.display());
        assert!(target.canonicalize().unwrap().starts_with(out.path().canonicalize().unwrap()), "index links {raw}, outside the report folder");
    }
    let run_pages: Vec<String> = hrefs(&index_dom, &index).into_iter().filter(|(r, _)| r.starts_with("runs/")).map(|(r, _)| r).collect();
    assert!(!run_pages.is_empty() && index_dom.contains("href=\"history.html\""), "{index_dom}");

    // The newest run's page (the index shows the newest run per cell).
    let page = out.path().join(&run_pages[0]);
    let dom = chromium_dom(&page).unwrap();
    let rows = regex::Regex::new(r#"(?s)<tr data-collector="([^"]+)"><td>[^<]*</td><td class="([a-z]+)">"#).unwrap();
    let verdicts: std::collections::BTreeMap<String, String> = rows.captures_iter(&dom).map(|c| (c[1].to_string(), c[2].to_string())).collect();
    assert_eq!(verdicts.get("perf-offcpu").map(String::as_str), Some("fail"), "{verdicts:?}");
    for c in ["perf-cpu", "eventpipe", "dotnet-trace"] {
        assert_eq!(verdicts.get(c).map(String::as_str), Some("pass"), "{c}: {verdicts:?}");
    }
    assert!(dom.contains("id=\"checks\"") && dom.contains("id=\"resolution\"") && dom.contains("class=\"shares\""), "{dom}");
    let links = hrefs(&dom, &page);
    for (raw, target) in &links {
        assert!(target.exists(), "run page links {raw}, which does not exist ({})", target.display());
    }
    // Every link stays inside the report folder (CI uploads `report/` alone), and the newest
    // run's files people open are copied there byte for byte.
    let inside = out.path().canonicalize().unwrap();
    for (raw, target) in &links {
        assert!(target.canonicalize().unwrap().starts_with(&inside), "run page links {raw}, outside the report folder");
    }
    for file in ["flamegraph-perf-cpu.svg", "perf-cpu.speedscope.json", "perf-cpu.folded", "summary.md", "manifest.json", "junit.xml"] {
        let copy = links.iter().find(|(_, t)| t.ends_with(file)).unwrap_or_else(|| panic!("the run page links no {file}: {links:?}"));
        let original = walkdir_find(&dirs[2], file);
        assert_eq!(std::fs::read(&copy.1).unwrap(), std::fs::read(original).unwrap(), "{file}");
    }

    let history = out.path().join("history.html");
    let dom = chromium_dom(&history).unwrap();
    let table = dom.split("<table class=\"history\"").nth(1).unwrap_or_else(|| panic!("no history table: {dom}"));
    let offcpu = regex::Regex::new(r#"<td class="([a-z]+)" data-collector="perf-offcpu">"#).unwrap();
    let over_time: Vec<&str> = offcpu.captures_iter(table).map(|c| c.get(1).unwrap().as_str()).collect();
    assert_eq!(over_time, ["fail", "pass", "fail"], "perf-offcpu's verdicts, oldest first");
    assert_eq!(dom.matches("<circle class=\"verdict\"").count(), 3, "one verdict dot per run");
    for (raw, target) in hrefs(&dom, &history) {
        assert!(target.exists(), "history links {raw}, which does not exist");
    }
}
