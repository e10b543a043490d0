//! How a scenario's app is found, started, awaited and stopped: the workload forms (`dll`,
//! `project`, `command`, `image`), the protocol (tracelab's own, or none: the app as it is),
//! readiness, stop and an optional truth file in the app's own format. Each form is parsed from
//! a plain TOML table by hand so a mistake names the key and what to write instead (serde's
//! untagged enums only say "did not match any variant").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// What the scenario runs.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawWorkload", into = "RawWorkload")]
pub enum WorkloadRef {
    /// A workload of this repository: `workloads/<name>` (speaks tracelab's protocol).
    Named(String),
    /// A project (folder or .csproj) built with `dotnet build` (or `publish` for ReadyToRun).
    Project { project: PathBuf, ready_to_run: bool },
    /// A built app, started as `dotnet <dll>`.
    Dll { dll: PathBuf },
    /// Any command line (a self-contained app, a script): argv, never a shell string.
    Command { command: Vec<String> },
    /// The user's own Docker image, started with its own entrypoint and cmd.
    Image { image: String },
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum RawWorkload {
    Name(String),
    Table(toml::Table),
}

const FORMS: &str = "`\"<name of workloads/…>\"`, `{ dll = \"app.dll\" }`, `{ project = \"DIR\" }`, `{ command = [\"./app\", \"--flag\"] }` or `{ image = \"repo:tag\" }`";

impl TryFrom<RawWorkload> for WorkloadRef {
    type Error = String;
    fn try_from(raw: RawWorkload) -> Result<Self, String> {
        let table = match raw {
            RawWorkload::Name(name) => return Ok(WorkloadRef::Named(name)),
            RawWorkload::Table(t) => t,
        };
        let forms: Vec<&str> =
            table.keys().map(String::as_str).filter(|k| ["dll", "project", "command", "image"].contains(k)).collect();
        if let Some(unknown) = table.keys().find(|k| !["dll", "project", "command", "image", "ready_to_run"].contains(&k.as_str())) {
            return Err(format!("unknown workload form `{unknown}`: give one of {FORMS}"));
        }
        let ready_to_run = match table.get("ready_to_run") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(other) => return Err(format!("workload `ready_to_run` must be true or false, not {other}")),
        };
        let text = |key: &str| -> Result<String, String> {
            match &table[key] {
                toml::Value::String(s) if !s.is_empty() => Ok(s.clone()),
                other => Err(format!("workload `{key}` must be a non-empty string, not {other}")),
            }
        };
        let form = match forms.as_slice() {
            [one] => *one,
            [] => return Err(format!("the workload table names no form: give one of {FORMS}")),
            many => return Err(format!("the workload names {}: give exactly one", many.join(" and "))),
        };
        if ready_to_run && form != "project" {
            return Err("`ready_to_run` applies to `project` workloads only (tracelab publishes them)".into());
        }
        Ok(match form {
            "dll" => WorkloadRef::Dll { dll: text("dll")?.into() },
            "project" => WorkloadRef::Project { project: text("project")?.into(), ready_to_run },
            "image" => WorkloadRef::Image { image: text("image")? },
            _ => {
                let command = match &table["command"] {
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|v| v.as_str().map(str::to_string).ok_or_else(|| format!("workload `command` items must be strings, not {v}")))
                        .collect::<Result<Vec<_>, _>>()?,
                    toml::Value::String(s) => {
                        return Err(format!(
                            "workload `command` is an array of arguments, never a shell string: write command = {:?}",
                            s.split_whitespace().collect::<Vec<_>>()
                        ));
                    }
                    other => return Err(format!("workload `command` must be an array of strings, not {other}")),
                };
                if command.is_empty() || command[0].is_empty() {
                    return Err("workload `command` is empty: give the program and its arguments".into());
                }
                WorkloadRef::Command { command }
            }
        })
    }
}

impl From<WorkloadRef> for RawWorkload {
    fn from(w: WorkloadRef) -> RawWorkload {
        let mut t = toml::Table::new();
        match w {
            WorkloadRef::Named(name) => return RawWorkload::Name(name),
            WorkloadRef::Project { project, ready_to_run } => {
                t.insert("project".into(), project.display().to_string().into());
                if ready_to_run {
                    t.insert("ready_to_run".into(), true.into());
                }
            }
            WorkloadRef::Dll { dll } => {
                t.insert("dll".into(), dll.display().to_string().into());
            }
            WorkloadRef::Command { command } => {
                t.insert("command".into(), toml::Value::Array(command.into_iter().map(Into::into).collect()));
            }
            WorkloadRef::Image { image } => {
                t.insert("image".into(), image.into());
            }
        }
        RawWorkload::Table(t)
    }
}

impl WorkloadRef {
    /// Relative paths in a scenario file mean paths next to that file; every path comes out
    /// absolute and without `.` or `..` ([`normalized`]), as a container mounts it.
    pub(crate) fn resolve_against(&mut self, base: &Path) {
        let join = |p: &mut PathBuf| *p = normalized(&base.join(&*p));
        match self {
            WorkloadRef::Project { project, .. } => join(project),
            WorkloadRef::Dll { dll } => join(dll),
            // `./app` or `bin/app` is a file next to the TOML; a bare `app` is looked up on PATH.
            WorkloadRef::Command { command } if command[0].contains('/') => {
                command[0] = normalized(&base.join(&command[0])).display().to_string();
            }
            _ => {}
        }
    }
}

/// `path` with its `.` and `..` resolved by the text alone (`/a/b/../c` is `/a/c`): a container
/// target mounts the app's folder at the same path inside, where the folders `..` climbs out of
/// may not exist (`init --dll /abs/App.dll` once wrote `../../../../abs/App.dll`, and the
/// container found no app).
pub(crate) fn normalized(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                // Above the root is the root.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            other => out.push(other),
        }
    }
    out
}

/// Whether the app speaks tracelab's protocol (`--truth`, `--go-file`, `TRACELAB READY`): the
/// built-in workloads do; a user's app does not, and nothing is added to its argv.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tracelab,
    None,
}

/// A truth file the app writes in its own format, and how tracelab's keys derive from it.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TruthSpec {
    /// Where the app writes it, relative to the app's working folder (its run folder unless `cwd`).
    pub path: PathBuf,
    /// tracelab key (a truth path, as checks name it: dotted, a part with dots of its own in
    /// double quotes — `'exceptions."App.Errors.Bad: boom"'`) → expression over the file's
    /// values: JSON pointers in braces, numbers, `+ - * /` and parentheses. Empty: the file is
    /// used as it is.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
}

impl TruthSpec {
    pub(crate) fn validate(&self) -> Result<()> {
        use crate::scenario_path as path;
        for (key, expr) in &self.map {
            let place = || path!("truth", "map", key.as_str());
            judge::truth_path_keys(key).map_err(|why| super::place::at(place(), anyhow::anyhow!("truth.map key: {why}")))?;
            super::truth_map::Expr::parse(expr).with_context(|| format!("truth.map.\"{key}\"")).map_err(|e| super::place::at(place(), e))?;
        }
        Ok(())
    }

    /// Where the app writes the file, for an app working in `app_cwd`.
    pub(crate) fn file(&self, app_cwd: &Path) -> PathBuf {
        if self.path.is_relative() { app_cwd.join(&self.path) } else { self.path.clone() }
    }

    /// Reads the app's file and derives the truth tracelab checks.
    pub(crate) fn read(&self, app_cwd: &Path) -> Result<serde_json::Value> {
        let path = self.file(app_cwd);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("the app wrote no truth file {} (scenario `truth.path`)", path.display()))?;
        let file: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("the truth file {} is not JSON", path.display()))?;
        if self.map.is_empty() {
            return Ok(file);
        }
        let mut truth = serde_json::json!({});
        for (key, expr) in &self.map {
            let value = super::truth_map::Expr::parse(expr)
                .and_then(|e| e.eval(&file))
                .with_context(|| format!("truth.map.\"{key}\" over {}", path.display()))?;
            let keys = judge::truth_path_keys(key).map_err(|why| anyhow::anyhow!("truth.map key: {why}"))?;
            insert_at(&mut truth, &keys, value);
        }
        Ok(truth)
    }
}

/// Sets `a.b.c` (the keys of a truth path) in a JSON object, creating the objects on the way.
fn insert_at(root: &mut serde_json::Value, parts: &[String], value: f64) {
    let mut node = root;
    for (i, part) in parts.iter().enumerate() {
        let obj = node.as_object_mut().expect("truth map nodes are objects");
        if i + 1 == parts.len() {
            obj.insert(part.to_string(), serde_json::json!(value));
            return;
        }
        node = obj.entry(part.to_string()).or_insert_with(|| serde_json::json!({}));
        if !node.is_object() {
            *node = serde_json::json!({});
        }
    }
}

/// Whether an app built into `dir` is an ASP.NET Core app: its runtimeconfig.json lists the
/// Microsoft.AspNetCore.App framework.
pub fn is_aspnetcore(dll: &Path) -> bool {
    let config = dll.with_extension("runtimeconfig.json");
    std::fs::read_to_string(config).is_ok_and(|t| t.contains("Microsoft.AspNetCore.App"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_next_to_the_scenario_come_out_absolute_and_without_dots() {
        let mut dll = WorkloadRef::Dll { dll: "../../some/where/./App.dll".into() };
        dll.resolve_against(Path::new("/home/me/scenarios/mine"));
        assert!(matches!(&dll, WorkloadRef::Dll { dll } if dll == Path::new("/home/me/some/where/App.dll")), "{dll:?}");
        let mut abs = WorkloadRef::Dll { dll: "/srv/app/../app2/App.dll".into() };
        abs.resolve_against(Path::new("/x"));
        assert!(matches!(&abs, WorkloadRef::Dll { dll } if dll == Path::new("/srv/app2/App.dll")), "{abs:?}");
        assert_eq!(normalized(Path::new("/../a")), Path::new("/a"));
        let mut cmd = WorkloadRef::Command { command: vec!["./bin/../bin/app".into(), "--x".into()] };
        cmd.resolve_against(Path::new("/w"));
        assert!(matches!(&cmd, WorkloadRef::Command { command } if command[0] == "/w/bin/app"), "{cmd:?}");
    }

    fn workload(text: &str) -> Result<WorkloadRef, String> {
        #[derive(Deserialize)]
        struct W {
            workload: WorkloadRef,
        }
        toml::from_str::<W>(text).map(|w| w.workload).map_err(|e| e.to_string())
    }

    #[test]
    fn each_workload_form_parses_and_mistakes_say_what_to_write() {
        assert_eq!(workload("workload = \"cpu-bound\"").unwrap(), WorkloadRef::Named("cpu-bound".into()));
        assert_eq!(workload("workload = { dll = \"a.dll\" }").unwrap(), WorkloadRef::Dll { dll: "a.dll".into() });
        assert_eq!(
            workload("workload = { project = \"p\", ready_to_run = true }").unwrap(),
            WorkloadRef::Project { project: "p".into(), ready_to_run: true }
        );
        assert_eq!(
            workload("workload = { command = [\"./app\", \"--flag\"] }").unwrap(),
            WorkloadRef::Command { command: vec!["./app".into(), "--flag".into()] }
        );
        assert_eq!(workload("workload = { image = \"me/app:1\" }").unwrap(), WorkloadRef::Image { image: "me/app:1".into() });
        for (text, why) in [
            ("workload = { exe = \"x\" }", "unknown workload form `exe`"),
            ("workload = { command = \"./app --flag\" }", "never a shell string: write command = [\"./app\", \"--flag\"]"),
            ("workload = { dll = \"a\", image = \"b\" }", "names dll and image: give exactly one"),
            ("workload = { ready_to_run = true }", "names no form"),
            ("workload = { dll = \"a\", ready_to_run = true }", "applies to `project` workloads only"),
            ("workload = { command = [] }", "is empty"),
        ] {
            let err = workload(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        // The error points into the file.
        assert!(workload("\n\nworkload = { exe = \"x\" }").unwrap_err().contains("line 3"));
    }

    #[test]
    fn forms_round_trip_through_toml() {
        for w in [
            WorkloadRef::Named("gc-heavy".into()),
            WorkloadRef::Command { command: vec!["app".into()] },
            WorkloadRef::Project { project: "p".into(), ready_to_run: true },
        ] {
            #[derive(Deserialize, Serialize)]
            struct W {
                workload: WorkloadRef,
            }
            let text = toml::to_string(&W { workload: w.clone() }).unwrap();
            assert_eq!(toml::from_str::<W>(&text).unwrap().workload, w, "{text}");
        }
    }

    #[test]
    fn relative_paths_mean_next_to_the_scenario_file() {
        let base = Path::new("/home/me/app");
        let mut w = WorkloadRef::Dll { dll: "../build/x.dll".into() };
        w.resolve_against(base);
        assert_eq!(w, WorkloadRef::Dll { dll: "/home/me/build/x.dll".into() });
        let mut c = WorkloadRef::Command { command: vec!["./bin/app".into(), "./arg".into()] };
        c.resolve_against(base);
        assert_eq!(c, WorkloadRef::Command { command: vec!["/home/me/app/bin/app".into(), "./arg".into()] });
        let mut on_path = WorkloadRef::Command { command: vec!["dotnet".into()] };
        on_path.resolve_against(base);
        assert_eq!(on_path, WorkloadRef::Command { command: vec!["dotnet".into()] });
    }

    #[test]
    fn truth_map_derives_dotted_keys_from_the_apps_own_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out.json"), r#"{"hot_alpha_s": 3.0, "hot_beta_s": 1.0}"#).unwrap();
        let spec = TruthSpec {
            path: "out.json".into(),
            map: [("shares.cpu.Alpha".to_string(), "{/hot_alpha_s} / ({/hot_alpha_s} + {/hot_beta_s})".to_string())].into(),
        };
        spec.validate().unwrap();
        assert_eq!(spec.read(dir.path()).unwrap(), serde_json::json!({"shares": {"cpu": {"Alpha": 0.75}}}));
        let missing = TruthSpec { path: "out.json".into(), map: [("x".to_string(), "{/nope}".to_string())].into() };
        let err = format!("{:#}", missing.read(dir.path()).unwrap_err());
        assert!(err.contains("truth.map.\"x\"") && err.contains("/nope"), "{err}");
        let absent = TruthSpec { path: "gone.json".into(), map: BTreeMap::new() };
        assert!(format!("{:#}", absent.read(dir.path()).unwrap_err()).contains("wrote no truth file"));
    }

    #[test]
    fn a_quoted_truth_map_key_keeps_its_dots() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out.json"), r#"{"bad": 25, "late": 3}"#).unwrap();
        let spec = TruthSpec {
            path: "out.json".into(),
            map: [
                (r#"exceptions."App.Errors.BadInput: no \"name\"""#.to_string(), "{/bad}".to_string()),
                (r#"exceptions."System.TimeoutException: late""#.to_string(), "{/late}".to_string()),
            ]
            .into(),
        };
        spec.validate().unwrap();
        assert_eq!(
            spec.read(dir.path()).unwrap(),
            serde_json::json!({"exceptions": {"App.Errors.BadInput: no \"name\"": 25.0, "System.TimeoutException: late": 3.0}})
        );
        let unclosed = TruthSpec { path: "out.json".into(), map: [(r#"exceptions."A.B"#.to_string(), "{/bad}".to_string())].into() };
        assert!(format!("{:#}", unclosed.validate().unwrap_err()).contains("a quoted key is not closed"));
    }
}
