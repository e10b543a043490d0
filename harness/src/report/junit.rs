//! JUnit XML that CI tools accept: valid against the strict schema (Jenkins' junit-10.xsd, copied
//! to ../shared/reference/junit-10.xsd), because GitHub, GitLab and Jenkins reporters drop or
//! misread a file that is not. One writer for a run's junit.xml and for the merged report's:
//! both start from manifest.json as JSON, so the merged report also reads folders written by
//! older versions.
//!
//! Mapping (issue 15): one testcase per check, or one `run` testcase when the run ended before its
//! checks; FAIL → `<failure>` with expected and measured; INCONCLUSIVE and SKIP → `<skipped>` (CI
//! must not count "not enough data" as a broken pipeline); infrastructure ERROR → `<error>`. The
//! classname is scenario.target[.image].kernel, so the host, container and kernel cells of one
//! scenario get distinct test ids.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// Per-suite counts, summed into `<testsuites>`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub tests: usize,
    pub failures: usize,
    pub errors: usize,
    pub skipped: usize,
    pub time_s: f64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.tests += o.tests;
        self.failures += o.failures;
        self.errors += o.errors;
        self.skipped += o.skipped;
        self.time_s += o.time_s;
    }
}

/// One run's junit.xml: a `<testsuite>` document, one testcase per check.
pub fn document(manifest: &Value) -> String {
    let (suite, _) = testsuite(manifest, &classname(manifest), &check_cases(manifest), "");
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{suite}")
}

/// One testcase before it is written.
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pub name: String,
    /// As manifest.json spells verdicts (`pass`, `fail` …), or `unchecked`.
    pub verdict: String,
    pub message: String,
    pub body: String,
}

/// One `<testsuite>` of the merged file: the run it reports (its properties, timestamp and
/// duration) and the cases it holds.
pub(crate) struct Suite<'a> {
    pub manifest: &'a Value,
    pub cases: Vec<Case>,
}

/// The merged report's junit.xml: one `<testsuites>` holding one `<testsuite>` per column
/// (scenario × environment) and one testcase per cell of the report, so its counts are the
/// report's (issue 38: four runs of one cell once made `failures="3"` beside a report saying
/// "1 fail", under four suites of one name). Suite names are made distinct where two columns
/// would share a class name.
pub(crate) fn merged(suites: &[Suite]) -> String {
    let mut total = Counts::default();
    let mut body = String::new();
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    for suite in suites {
        let base = classname(suite.manifest);
        let n = used.entry(base.clone()).or_default();
        *n += 1;
        let name = if *n == 1 { base } else { format!("{base}-{n}") };
        let (text, counts) = testsuite(suite.manifest, &name, &suite.cases, "  ");
        total.add(counts);
        body.push_str(&text);
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"tracelab\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">\n{body}</testsuites>\n",
        total.tests,
        total.failures,
        total.errors,
        time(total.time_s)
    )
}

/// `scenario.target[.image].kernel`, kernel as `major-minor` (a dot would read as a package level
/// in JUnit viewers): `cpu-bound.container.bullseye.6-18`. qemu guests are `scenario.qemu.<kernel>`.
pub(crate) fn classname(m: &Value) -> String {
    let env = &m["environment"];
    let mut parts = vec![m["scenario"].as_str().unwrap_or("scenario").to_string()];
    let kernel = match m["vm"]["kernel"].as_str() {
        Some(k) => {
            parts.push("qemu".into());
            k.to_string()
        }
        None => {
            parts.push(env["target"].as_str().filter(|t| !t.is_empty()).unwrap_or("host").to_string());
            if let Some(img) = env["image"].as_str() {
                parts.push(img.to_string());
            }
            env["kernel"].as_str().unwrap_or("unknown").to_string()
        }
    };
    let short: Vec<&str> = kernel.split(['-', '+']).next().unwrap_or(&kernel).split('.').take(2).collect();
    parts.push(short.join("-"));
    parts.iter().map(|p| p.replace('.', "-")).collect::<Vec<_>>().join(".")
}

/// Seconds the run took: the sum of its recorded phase durations.
fn duration_s(m: &Value) -> f64 {
    m["durations_s"].as_object().map(|d| d.values().filter_map(Value::as_f64).sum()).unwrap_or(0.0)
}

/// SUREFIRE_TIME: digits, an optional fraction, no exponent, no sign.
fn time(s: f64) -> String {
    format!("{:.3}", if s.is_finite() && s > 0.0 { s } else { 0.0 })
}

/// One testcase per check, or one `run` testcase when the run ended before its checks.
fn check_cases(m: &Value) -> Vec<Case> {
    let checks: Vec<&Value> = m["checks"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    if checks.is_empty() {
        // The run ended before it could be judged (a skip, an infrastructure error, a failure).
        let reason = m["reason"].as_str().unwrap_or("").to_string();
        let verdict = m["verdict"].as_str().unwrap_or("error").to_string();
        return vec![Case { name: "run".into(), verdict, message: reason.clone(), body: reason }];
    }
    checks
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap_or("check").to_string(),
            verdict: c["verdict"].as_str().unwrap_or("error").to_string(),
            message: check_message(c),
            body: check_body(c),
        })
        .collect()
}

/// `expected …; measured …`, after the reason an inconclusive check could not decide.
pub(crate) fn check_message(c: &Value) -> String {
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    let message = format!("expected {}; measured {}", s("expected"), s("measured"));
    match c["reason"].as_str() {
        Some(why) => format!("{why} ({message})"),
        None => message,
    }
}

/// A check's expected, measured, collector and details, one per line.
pub(crate) fn check_body(c: &Value) -> String {
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    let mut body = format!("expected: {}\nmeasured: {}\n", s("expected"), s("measured"));
    if let Some(col) = c["collector"].as_str() {
        let _ = writeln!(body, "collector: {col}");
    }
    for line in c["details"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        let _ = writeln!(body, "{line}");
    }
    body
}

fn testsuite(m: &Value, name: &str, cases: &[Case], indent: &str) -> (String, Counts) {
    let class = name.to_string();
    let run_verdict = m["verdict"].as_str().unwrap_or("error");
    let mut counts = Counts { time_s: duration_s(m), ..Counts::default() };
    // Every testcase has a `time` (CI tools show a case without one as 0 s or drop the suite's
    // total): the checks of a run are judged on one collection, so each carries an equal share
    // of the run's duration and the cases add up to the suite's time.
    let each_s = duration_s(m) / cases.len().max(1) as f64;
    let mut text = String::new();
    for case in cases {
        counts.tests += 1;
        let _ = write!(text, "{indent}  <testcase classname=\"{}\" name=\"{}\" time=\"{}\">", attr(&class), attr(&case.name), time(each_s));
        let (element, kind) = match case.verdict.as_str() {
            "pass" => ("system-out", ""),
            "fail" => ("failure", "fail"),
            "skip" => ("skipped", "skip"),
            "inconclusive" => ("skipped", "inconclusive"),
            "unchecked" => ("skipped", "unchecked"),
            // "error" (an infrastructure error, exit 5) and anything a newer version may add:
            // CI must look at it.
            _ => ("error", "infrastructure"),
        };
        match element {
            "failure" => counts.failures += 1,
            "error" => counts.errors += 1,
            "skipped" => counts.skipped += 1,
            _ => {}
        }
        if element == "system-out" {
            let _ = write!(text, "<system-out>{}</system-out>", self::text(&case.message));
        } else {
            let message = match kind {
                "inconclusive" | "unchecked" => format!("{kind}: {}", case.message),
                _ => case.message.clone(),
            };
            let _ = write!(text, "<{element} message=\"{}\" type=\"{kind}\">{}</{element}>", attr(&message), self::text(&case.body));
        }
        text.push_str("</testcase>\n");
    }
    let cases = text;
    let env = &m["environment"];
    let hostname = env["hostname"].as_str().filter(|h| !h.is_empty()).unwrap_or("unknown");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{indent}<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\" timestamp=\"{}\" hostname=\"{}\">",
        attr(&class),
        counts.tests,
        counts.failures,
        counts.errors,
        counts.skipped,
        time(counts.time_s),
        attr(m["started_utc"].as_str().unwrap_or("")),
        attr(hostname),
    );
    let _ = writeln!(s, "{indent}  <properties>");
    let dotnet = env["dotnet_runtimes"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "));
    for (name, value) in [
        ("verdict", Some(run_verdict.to_string())),
        ("reason", m["reason"].as_str().map(String::from)),
        ("run_id", m["run_id"].as_str().map(String::from)),
        ("kernel", env["kernel"].as_str().map(String::from)),
        ("target", env["target"].as_str().map(String::from)),
        ("image", env["image"].as_str().map(String::from)),
        ("dotnet", dotnet),
    ] {
        if let Some(v) = value {
            let _ = writeln!(s, "{indent}    <property name=\"{name}\" value=\"{}\"/>", attr(&v));
        }
    }
    let _ = writeln!(s, "{indent}  </properties>");
    s.push_str(&cases);
    let _ = writeln!(s, "{indent}</testsuite>");
    (s, counts)
}

/// Characters XML 1.0 cannot carry at all (control characters from a tool's output) are dropped.
fn xml_chars(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().filter(|&c| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}'))
}

fn text(s: &str) -> String {
    escape(s, false)
}

fn attr(s: &str) -> String {
    escape(s, true)
}

/// In attribute values, quotes and whitespace other than spaces become character references (a
/// parser folds a raw newline in an attribute to a space).
fn escape(s: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in xml_chars(s) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if attribute => out.push_str("&quot;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\r' if attribute => out.push_str("&#13;"),
            '\t' if attribute => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
    out
}

/// `Err(reason)` when `xmllint` cannot be run; else whether `file` validates against the strict
/// schema, with xmllint's words when it does not. Tests use it; so can anyone checking a report.
pub fn validate(file: &std::path::Path) -> Result<Result<(), String>, String> {
    let xsd = crate::shared_dir().join("reference/junit-10.xsd");
    if !xsd.is_file() {
        return Err(format!("{} is missing", xsd.display()));
    }
    crate::host::environment::require_program("xmllint").map_err(|e| format!("{e}: apt-get install libxml2-utils"))?;
    let out = std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run xmllint: {e}"))?;
    if out.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use judge::{Check, Verdict};
    use crate::report::Manifest;

    fn check(name: &str, verdict: Verdict, collector: Option<&str>) -> Check {
        Check {
            name: name.into(),
            verdict,
            expected: "≥ 90.0 %, ≥ 50 samples".into(),
            measured: "99.9 % over 49 samples <& \"quoted\"\n\u{1b}[31m".into(),
            collector: collector.map(String::from),
            values: Default::default(),
            details: vec!["top: A::B 12".into()],
            reason: (verdict == Verdict::Inconclusive).then(|| "49 samples, below the floor of 50".into()),
        }
    }

    fn manifest(verdict: Verdict, checks: Vec<Check>) -> Manifest {
        let mut environment = crate::host::environment::Environment {
            kernel: "6.18.1+deb13-amd64".into(),
            target: "container".into(),
            image: Some("bullseye".into()),
            dotnet_runtimes: vec!["Microsoft.NETCore.App 10.0.12".into()],
            ..Default::default()
        };
        environment.hostname = "ci-runner-1".into();
        Manifest {
            scenario: "cpu-bound".into(),
            verdict,
            reason: (verdict != Verdict::Pass).then(|| format!("the run ended {}", verdict.as_str())),
            checks,
            metrics: Default::default(),
            environment,
            commands: vec![],
            durations_s: [("run".to_string(), 10.5), ("decode".to_string(), 1.25)].into(),
            default_tolerances: Default::default(),
            workload: Some("cpu-bound".into()),
            collectors: vec!["perf-cpu".into()],
            started_utc: "2026-11-24T03:00:00Z".into(),
            run_id: "20261124T030000Z-cpu-bound-container-bullseye".into(),
            resolution: Default::default(),
            completeness: Default::default(),
            findings: vec![],
            notes: vec![],
            share_tables: vec![],
            load: None,
            earlier_attempts: Vec::new(),
            swept_at_start: Vec::new(),
            viewer_files: Default::default(),
            windows: Vec::new(),
        }
    }

    /// One manifest per verdict kind, with checks and (for the run-level kinds) without.
    pub(crate) fn every_verdict() -> Vec<(String, Manifest)> {
        let all = [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::Inconclusive, Verdict::Error];
        let mut out = Vec::new();
        for v in all {
            out.push((format!("{}-checks", v.as_str()), manifest(v, vec![check("share", v, Some("perf-cpu")), check("agree", Verdict::Pass, None)])));
            if v != Verdict::Pass {
                out.push((format!("{}-run", v.as_str()), manifest(v, vec![])));
            }
        }
        out.push((
            "mixed".into(),
            manifest(Verdict::Fail, all.iter().map(|v| check(&format!("c-{}", v.as_str()), *v, Some("perf-cpu"))).collect()),
        ));
        out
    }

    fn value(m: &Manifest) -> Value {
        serde_json::to_value(m).unwrap()
    }

    #[test]
    fn classname_names_scenario_target_image_and_kernel() {
        let m = value(&manifest(Verdict::Pass, vec![]));
        assert_eq!(classname(&m), "cpu-bound.container.bullseye.6-18");
        let mut host = m.clone();
        host["environment"]["target"] = "host".into();
        host["environment"]["image"] = Value::Null;
        assert_eq!(classname(&host), "cpu-bound.host.6-18");
        let mut vm = m.clone();
        vm["vm"] = serde_json::json!({"kernel": "5.10"});
        assert_eq!(classname(&vm), "cpu-bound.qemu.5-10");
    }

    #[test]
    fn every_verdict_kind_maps_to_its_element_and_counts() {
        let mixed = every_verdict().into_iter().find(|(n, _)| n == "mixed").unwrap().1;
        let x = crate::report::junit_xml(&mixed);
        assert!(x.contains("tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"2\" time=\"11.750\""), "{x}");
        assert!(x.contains("timestamp=\"2026-11-24T03:00:00Z\" hostname=\"ci-runner-1\""), "{x}");
        assert!(x.contains("<failure message=\"expected ≥ 90.0 %, ≥ 50 samples; measured 99.9 % over 49 samples &lt;&amp; &quot;quoted&quot;&#10;[31m\" type=\"fail\">"), "{x}");
        assert!(x.contains("<skipped message=\"inconclusive: 49 samples, below the floor of 50 (expected"), "{x}");
        assert!(x.contains("<error message=\"expected") && x.contains("type=\"infrastructure\""), "{x}");
        assert!(!x.contains('\u{1b}'), "control characters are not XML");
        let run = every_verdict().into_iter().find(|(n, _)| n == "error-run").unwrap().1;
        let x = crate::report::junit_xml(&run);
        assert!(x.contains("name=\"run\" time=\"11.750\"><error message=\"the run ended error\""), "{x}");
    }

    fn suites(ms: &[Value]) -> Vec<Suite<'_>> {
        ms.iter().map(|m| Suite { manifest: m, cases: check_cases(m) }).collect()
    }

    /// Every suite is summed, and suites of one class name (four runs of one cell) get distinct
    /// names.
    #[test]
    fn merged_sums_every_suite_under_distinct_names() {
        let ms: Vec<Value> = every_verdict().iter().map(|(_, m)| value(m)).collect();
        let x = merged(&suites(&ms));
        assert_eq!(x.matches("<testsuite ").count(), ms.len());
        assert!(x.starts_with("<?xml") && x.contains("<testsuites name=\"tracelab\" tests=\"19\" failures=\"3\" errors=\"3\""), "{x}");
        let names: std::collections::BTreeSet<&str> =
            x.lines().filter_map(|l| l.trim_start().strip_prefix("<testsuite name=\"")).map(|l| &l[..l.find('"').unwrap()]).collect();
        assert_eq!(names.len(), ms.len(), "{names:?}");
    }

    /// Every testcase says how long it took, and a run's cases add up to its suite's time.
    #[test]
    fn every_testcase_has_a_time() {
        let mixed = every_verdict().into_iter().find(|(n, _)| n == "mixed").unwrap().1;
        let x = crate::report::junit_xml(&mixed);
        let cases: Vec<&str> = x.lines().filter(|l| l.contains("<testcase ")).collect();
        assert_eq!(cases.len(), 5);
        assert!(cases.iter().all(|l| l.contains(" time=\"2.350\"")), "{x}");
    }

    /// The real writer's output for every verdict kind, and the merged file, against the strict
    /// schema with xmllint.
    #[test]
    fn every_verdict_kind_validates_against_the_strict_schema() {
        let d = tempfile::tempdir().unwrap();
        let probe = d.path().join("probe.xml");
        std::fs::write(&probe, "<testsuites/>").unwrap();
        if let Err(why) = validate(&probe) {
            tracelab_fixtures::skip("junit::every_verdict_kind_validates_against_the_strict_schema", why);
            return;
        }
        let kinds = every_verdict();
        let mut files = Vec::new();
        for (name, m) in &kinds {
            let f = d.path().join(format!("{name}.xml"));
            std::fs::write(&f, crate::report::junit_xml(m)).unwrap();
            files.push(f);
        }
        let f = d.path().join("merged.xml");
        std::fs::write(&f, merged(&suites(&kinds.iter().map(|(_, m)| value(m)).collect::<Vec<_>>()))).unwrap();
        files.push(f);
        for f in files {
            if let Err(why) = validate(&f).unwrap() {
                panic!("{} does not validate:\n{why}\n{}", f.display(), std::fs::read_to_string(&f).unwrap());
            }
        }
        // And the schema really is strict: the old writer's shape (no `errors`) is refused.
        let old = d.path().join("old.xml");
        std::fs::write(&old, "<testsuite name=\"x\" tests=\"1\" failures=\"0\"><testcase name=\"a\"/></testsuite>").unwrap();
        assert!(validate(&old).unwrap().unwrap_err().contains("errors"));
    }
}
