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
        Err(why) => harness::testing::skip("report::junit_validates", why),
        Ok(Ok(())) => {}
        Ok(Err(why)) => panic!("{} is not valid JUnit:\n{why}\n{}", file.display(), std::fs::read_to_string(&file).unwrap_or_default()),
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report-offcpu-failed")
}

/// The DOM after Chromium loaded the page (what a reader sees, not the bytes we wrote).
fn chromium_dom(page: &Path) -> Result<String, String> {
    harness::testing::require_program("chromium").map_err(|e| format!("{e}: apt-get install chromium"))?;
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
        Err(why) => return harness::testing::skip("report::merged_report_in_chromium", why),
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
