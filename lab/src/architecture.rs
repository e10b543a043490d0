//! The walls between the workspace's parts, held by a test (as rust-analyzer's tidy tests hold
//! its conventions): every arrow the code draws — a `crate::…` path, a `super::…` path that
//! climbs to another top-level module, a path through another workspace crate — must be listed
//! in `lab/data/architecture.toml`, and the arrows listed there must form no cycle.
//!
//! The scan is textual, as a reader's would be: comments, strings and char literals are left
//! out, and a path counts wherever it stands (`use`, an expression, a type, a test module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The committed list, relative to the project root.
const ALLOW_LIST: &str = "lab/data/architecture.toml";

#[derive(Deserialize)]
struct AllowList {
    /// Crates whose top-level modules are parts of their own.
    layered: Vec<String>,
    edges: BTreeMap<String, Vec<String>>,
}

/// One workspace crate: its name as code spells it and its `src/` folder.
struct Crate {
    name: String,
    src: PathBuf,
}

/// A source file to scan: where it is (for messages, relative to the root) and its text.
struct Source {
    krate: usize,
    /// Path below the crate's `src/`.
    rel: PathBuf,
    shown: String,
    text: String,
}

/// An arrow found in the code.
#[derive(Debug, PartialEq)]
struct Arrow {
    from: String,
    to: String,
    file: String,
    line: usize,
    path: String,
}

fn workspace_crates(root: &Path) -> Vec<Crate> {
    let mut dirs: Vec<PathBuf> = ["harness", "lab", "tracelab", "xtask"].iter().map(|d| root.join(d)).collect();
    let mut under: Vec<PathBuf> = std::fs::read_dir(root.join("crates")).unwrap().flatten().map(|e| e.path()).collect();
    under.sort();
    dirs.extend(under);
    dirs.into_iter()
        .filter(|d| d.join("Cargo.toml").is_file() && d.join("src").is_dir())
        .map(|d| {
            let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(d.join("Cargo.toml")).unwrap()).unwrap();
            let name = manifest["package"]["name"].as_str().unwrap().replace('-', "_");
            Crate { name, src: d.join("src") }
        })
        .collect()
}

fn sources(root: &Path, crates: &[Crate]) -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    for (i, c) in crates.iter().enumerate() {
        let mut files = Vec::new();
        walk(&c.src, &mut files);
        files.sort();
        for f in files {
            all.push(Source {
                krate: i,
                rel: f.strip_prefix(&c.src).unwrap().to_path_buf(),
                shown: f.strip_prefix(root).unwrap().display().to_string(),
                text: std::fs::read_to_string(&f).unwrap(),
            });
        }
    }
    all
}

/// The text with comments, strings and char literals blanked (newlines kept, so lines count).
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && (i == 0 || !is_ident(b[i - 1])) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend(b[i..j.min(b.len())].iter().map(|&c| blank(c)));
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != '"' {
                j += if b[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '\'' && next == Some('\\') {
            let mut j = i + 2;
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            let end = (j + 1).min(b.len());
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '\'' && b.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The part a file belongs to: its crate, or `crate::module` in a layered crate.
fn part_of(krate: &str, rel: &Path, layered: bool) -> String {
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
    let module = first.strip_suffix(".rs").unwrap_or(&first);
    if !layered || matches!(module, "lib" | "main") { krate.to_string() } else { format!("{krate}::{module}") }
}

/// How many modules deep a file's own module is (src/a.rs and src/a/mod.rs: 1).
fn depth_of(rel: &Path) -> usize {
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    match parts.last().map(String::as_str) {
        Some("lib.rs" | "main.rs") if parts.len() == 1 => 0,
        Some("mod.rs") => parts.len() - 1,
        _ => parts.len(),
    }
}

/// Every arrow of `src` in `crates`: (target part, line, path as written).
fn arrows(src: &Source, crates: &[Crate], list: &AllowList, modules: &BTreeMap<usize, BTreeSet<String>>) -> Vec<Arrow> {
    let me = &crates[src.krate];
    let layered = list.layered.contains(&me.name);
    let from = part_of(&me.name, &src.rel, layered);
    let code = code_only(&src.text);
    let chars: Vec<char> = code.chars().collect();
    let mut line_of = Vec::with_capacity(chars.len());
    let mut line = 1;
    for &c in &chars {
        line_of.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    // An identifier at `i` and the `::`-separated segments after it.
    let word_at = |i: usize| -> (String, usize) {
        let mut j = i;
        while j < chars.len() && is_ident(chars[j]) {
            j += 1;
        }
        (chars[i..j].iter().collect(), j)
    };
    let mut found = Vec::new();
    let module_part = |m: &str| -> Option<String> {
        (layered && modules[&src.krate].contains(m)).then(|| format!("{}::{m}", me.name))
    };
    let mut i = 0;
    while i < chars.len() {
        if !is_ident(chars[i]) || (i > 0 && (is_ident(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let (word, end) = word_at(i);
        let follows_path = chars.get(end) == Some(&':') && chars.get(end + 1) == Some(&':');
        if !follows_path {
            i = end.max(i + 1);
            continue;
        }
        let line = line_of[i];
        let rest_start = end + 2;
        // The first segment(s) after the root: one name, or each item of a `{…}` group.
        let firsts = |at: usize| -> Vec<String> {
            if chars.get(at) == Some(&'{') {
                let close = (at..chars.len()).find(|&k| chars[k] == '}').unwrap_or(chars.len());
                let inner: String = chars[at + 1..close].iter().collect();
                inner.split(',').filter_map(|s| s.trim().split("::").next().map(str::trim).map(String::from)).filter(|s| !s.is_empty()).collect()
            } else {
                vec![word_at(at).0]
            }
        };
        let written: String = chars[i..].iter().take_while(|c| is_ident(**c) || **c == ':').collect();
        if word == "crate" {
            for m in firsts(rest_start) {
                if let Some(to) = module_part(&m).filter(|to| *to != from) {
                    found.push(Arrow { from: from.clone(), to, file: src.shown.clone(), line, path: written.clone() });
                }
            }
        } else if word == "super" {
            // Climb: each `super::` leaves one module; at the crate root the next name is a module.
            let mut depth = depth_of(&src.rel);
            let mut at = i;
            loop {
                let (w, e) = word_at(at);
                if w == "super" && chars.get(e) == Some(&':') && chars.get(e + 1) == Some(&':') {
                    depth = depth.saturating_sub(1);
                    at = e + 2;
                } else {
                    break;
                }
            }
            if depth == 0 {
                for m in firsts(at) {
                    if let Some(to) = module_part(&m).filter(|to| *to != from) {
                        found.push(Arrow { from: from.clone(), to, file: src.shown.clone(), line, path: written.clone() });
                    }
                }
            }
        } else if word != me.name && crates.iter().any(|c| c.name == word) {
            found.push(Arrow { from: from.clone(), to: word.clone(), file: src.shown.clone(), line, path: written.clone() });
        }
        i = end;
    }
    found
}

/// The arrows of `files` that the list does not allow, each as a message for its author.
fn violations(crates: &[Crate], files: &[Source], list: &AllowList) -> Vec<String> {
    let mut modules: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (i, c) in crates.iter().enumerate() {
        let names = std::fs::read_dir(&c.src)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_string())
            .filter(|n| !matches!(n.as_str(), "lib" | "main"));
        modules.insert(i, names.collect());
    }
    for f in files {
        let name = f.rel.components().next().unwrap().as_os_str().to_string_lossy();
        modules.entry(f.krate).or_default().insert(name.trim_end_matches(".rs").to_string());
    }
    let mut out = Vec::new();
    for f in files {
        for a in arrows(f, crates, list, &modules) {
            if !list.edges.get(&a.from).is_some_and(|to| to.contains(&a.to)) {
                out.push(format!(
                    "{}:{}: `{}` → `{}` (`{}`) is not an allowed arrow: if it belongs, add \"{}\" to `\"{}\" = [...]` in {ALLOW_LIST}; \
                     if not, move what it needs below `{}`",
                    a.file, a.line, a.from, a.to, a.path, a.to, a.from, a.from,
                ));
            }
        }
    }
    out
}

/// A cycle among the listed arrows, as the parts along it, if there is one.
fn cycle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a str,
        edges: &'a BTreeMap<String, Vec<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| *s == n).unwrap();
                return Some(stack[at..].iter().chain([&n]).map(|s| s.to_string()).collect());
            }
            _ => {}
        }
        state.insert(n, 1);
        stack.push(n);
        for t in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(t, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n, 2);
        None
    }
    let mut state = BTreeMap::new();
    edges.keys().find_map(|k| visit(k, edges, &mut state, &mut Vec::new()))
}

fn load(root: &Path) -> AllowList {
    let text = std::fs::read_to_string(root.join(ALLOW_LIST)).unwrap_or_else(|e| panic!("{ALLOW_LIST}: {e}"));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{ALLOW_LIST}: {e}"))
}

#[test]
fn every_import_is_an_allowed_edge() {
    let root = harness::project_root();
    let list = load(&root);
    let crates = workspace_crates(&root);
    let files = sources(&root, &crates);
    let bad = violations(&crates, &files, &list);
    assert!(bad.is_empty(), "{} arrow(s) the architecture does not allow:\n{}", bad.len(), bad.join("\n"));
    // Every part the code has is named in the list (an unlisted part is an unreviewed one).
    let listed: BTreeSet<&String> = list.edges.keys().collect();
    let layered: BTreeSet<&String> = list.layered.iter().collect();
    for f in &files {
        let c = &crates[f.krate];
        let part = part_of(&c.name, &f.rel, layered.contains(&c.name));
        assert!(
            listed.contains(&part) || (layered.contains(&c.name) && part == c.name) || c.name == "xtask" && listed.contains(&"xtask".to_string()),
            "{}: part `{part}` is not in {ALLOW_LIST}: add `\"{part}\" = [...]` with the arrows it may draw",
            f.shown
        );
    }
}

#[test]
fn the_allowed_edges_form_no_cycle() {
    let list = load(&harness::project_root());
    assert_eq!(cycle(&list.edges), None, "{ALLOW_LIST} lists a cycle: break it, moving the code that closes it below");
    // The check itself: a cycle is found.
    let mut looped = list.edges.clone();
    looped.get_mut("harness::host").unwrap().push("harness::engine".into());
    let found = cycle(&looped).expect("an added back-arrow closes a cycle");
    assert!(found.contains(&"harness::host".to_string()) && found.contains(&"harness::engine".to_string()), "{found:?}");
}

/// A back-arrow added to the real tree (the host layer reaching up into the engine) is refused,
/// with the file, the line, the arrow and the list to edit.
#[test]
fn a_back_edge_fails_with_the_file_the_arrow_and_the_list() {
    let root = harness::project_root();
    let list = load(&root);
    let crates = workspace_crates(&root);
    let mut files = sources(&root, &crates);
    let harness = crates.iter().position(|c| c.name == "harness").unwrap();
    files.push(Source {
        krate: harness,
        rel: PathBuf::from("host/back_edge.rs"),
        shown: "harness/src/host/back_edge.rs".into(),
        text: "//! use crate::engine in a comment is no arrow.\n\nfn f() {\n    let _ = \"crate::report\";\n    crate::engine::run;\n}\n".into(),
    });
    // A format crate reaching the harness, through `super::` at its root and a grouped use.
    let perfdata = crates.iter().position(|c| c.name == "perfdata").unwrap();
    files.push(Source {
        krate: perfdata,
        rel: PathBuf::from("back_edge.rs"),
        shown: "crates/perfdata/src/back_edge.rs".into(),
        text: "use harness::{engine, run};\n".into(),
    });
    let bad: Vec<String> = violations(&crates, &files, &list).into_iter().filter(|v| v.contains("back_edge.rs")).collect();
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].starts_with("harness/src/host/back_edge.rs:5: `harness::host` → `harness::engine` (`crate::engine::run`)"), "{}", bad[0]);
    assert!(bad[0].contains(ALLOW_LIST) && bad[0].contains("add \"harness::engine\" to `\"harness::host\" = [...]`"), "{}", bad[0]);
    assert!(bad[1].starts_with("crates/perfdata/src/back_edge.rs:1: `perfdata` → `harness`"), "{}", bad[1]);
}

#[test]
fn climbing_paths_and_groups_are_arrows() {
    let root = harness::project_root();
    let list = load(&root);
    let crates = workspace_crates(&root);
    let harness = crates.iter().position(|c| c.name == "harness").unwrap();
    let src = |rel: &str, text: &str| Source { krate: harness, rel: rel.into(), shown: rel.into(), text: text.into() };
    let modules: BTreeMap<usize, BTreeSet<String>> =
        [(harness, ["host", "run", "engine", "report"].iter().map(|s| s.to_string()).collect())].into();
    let to = |s: &Source| arrows(s, &crates, &list, &modules).into_iter().map(|a| a.to).collect::<Vec<_>>();
    // src/host/a.rs: `super::` is host itself, `super::super::` the crate root.
    assert_eq!(to(&src("host/a.rs", "use super::proc::x;\nuse super::super::run::y;\n")), ["harness::run"]);
    assert_eq!(to(&src("host/mod.rs", "use super::engine;\n")), ["harness::engine"]);
    assert_eq!(to(&src("host/mod.rs", "use crate::{run::Target, report};\nlet c = '\"'; // crate::engine\n")), ["harness::run", "harness::report"]);
    assert_eq!(to(&src("host/mod.rs", "let s = r#\"crate::engine\"#; let l: &'static str = x;\n")), Vec::<String>::new());
}
