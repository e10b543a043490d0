//! `cargo xtask doctor --json` as a user (or a CI step) meets it: the output parses, every row not
//! ok names the command that fixes it, and the exit code says whether the default scenario's
//! prerequisites are all here (0) or not (4).

use std::process::Command;

#[test]
fn doctor_json_parses_and_every_row_not_ok_names_a_fix() {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["doctor", "--json", "--symbols", "/nonexistent/tracelab-symbols"])
        .output()
        .expect("the xtask binary runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(rows.len() >= 15, "{} rows", rows.len());
    for r in &rows {
        let name = r["name"].as_str().expect("a name");
        let status = r["status"].as_str().expect("a status");
        assert!(["ok", "warn", "missing"].contains(&status), "{name}: {status}");
        if status != "ok" {
            assert!(r["fix"].as_str().is_some_and(|f| !f.is_empty()), "{name} is {status} and names no fix: {r}");
        }
    }
    // The folder given does not exist: its row must say so.
    assert!(rows.iter().any(|r| r["name"] == "--symbols /nonexistent/tracelab-symbols" && r["status"] == "missing"), "{text}");
    // The idle-CPU timer wake-up probe ran (root and perf here) or says why it could not.
    let idle = rows.iter().find(|r| r["name"] == "timer wake-ups on idle CPUs").unwrap_or_else(|| panic!("no idle wake-up row: {text}"));
    let value = idle["value"].as_str().unwrap();
    let counted = unrecorded_of(value);
    if let Some((n, m)) = counted {
        assert!(m > 0 && n <= m, "{idle}");
        let detail = idle["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("{m} timer wake-ups")), "{idle}");
    } else {
        assert!(["cannot tell", "not probed"].contains(&value) || value.starts_with("no timer sleep seen"), "{idle}");
    }
    eprintln!("idle wake-up row: {idle}");
    let default = rows.last().unwrap();
    assert_eq!(default["name"], "scenario cpu-bound (default)");
    let expected = if default["status"] == "ok" { 0 } else { 4 };
    assert_eq!(out.status.code(), Some(expected), "{default}");
}

/// The row's answer and this probe's sample → (N unrecorded, M sleeps): `some unrecorded: N of
/// M this probe (…)`, `all recorded: M of M this probe (…)`, `cannot tell: M of M recorded this
/// probe, none onto an idle CPU`.
fn unrecorded_of(value: &str) -> Option<(usize, usize)> {
    let (answer, sample) = value.split_once(": ")?;
    let words: Vec<&str> = sample.split_whitespace().collect();
    match (answer, words.as_slice()) {
        ("some unrecorded", [n, "of", m, ..]) => Some((n.parse().ok()?, m.parse().ok()?)),
        ("all recorded" | "cannot tell", [_, "of", m, ..]) => Some((0, m.parse().ok()?)),
        _ => None,
    }
}
