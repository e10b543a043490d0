//! Stage `workload`: builds the app under test and reads the ground truth it writes.
//!
//! Named workloads (`workloads/<name>/`) build into `.build/workloads/<name>/` (ReadyToRun:
//! `.build/workloads/<name>-r2r/`); a user's project builds into the XDG cache
//! (`~/.cache/tracelab/build/<hash>/`); a user's dll, command or image is used as it is. A build is skipped when the SHA-256 of its inputs (sources,
//! project files, the shared props, the SDK used) matches the stamp left by the last build, so a
//! scenario run costs no build when nothing changed.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::host::dotnet::{Dotnet, tail};
use crate::scenario::WorkloadRef;

/// A built app, ready to start with `dotnet <dll>`.
#[derive(Clone, Debug)]
pub struct BuiltWorkload {
    /// The workload's name (`cpu-bound`), or the user project's / dll's file stem.
    pub name: String,
    /// The entry assembly.
    pub dll: PathBuf,
    /// The output folder holding it and its dependencies.
    pub dir: PathBuf,
    /// Published ReadyToRun (precompiled) rather than JIT-only.
    pub ready_to_run: bool,
    /// False when the stamp matched and nothing was built.
    pub rebuilt: bool,
}

/// `workloads/` in the project.
pub fn workloads_dir() -> PathBuf {
    crate::project_root().join("workloads")
}

/// Names of the workloads of this repository (folders of `workloads/` holding a project).
pub fn names() -> Result<Vec<String>> {
    let dir = workloads_dir();
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let path = entry?.path();
        if path.is_dir() && find_project(&path).is_ok() {
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

pub use crate::run::Program;

/// A scenario's app, ready to start: built when it is a project, found when it is a file.
#[derive(Clone, Debug)]
pub struct PreparedApp {
    /// The workload's name, or the user app's file stem / image name.
    pub name: String,
    pub program: Program,
    /// The build, for `dll` and `project` forms.
    pub built: Option<BuiltWorkload>,
}

/// Builds (or finds) what a scenario's `workload` names, in any of its forms.
pub fn prepare(workload: &WorkloadRef) -> Result<PreparedApp> {
    match workload {
        WorkloadRef::Command { command } => {
            let program = Path::new(&command[0]);
            if command[0].contains('/') && !program.is_file() {
                bail!("workload command `{}` does not exist (relative paths are next to the scenario file)", program.display());
            }
            let name = program.file_stem().map_or_else(|| command[0].clone(), |s| s.to_string_lossy().into_owned());
            Ok(PreparedApp { name, program: Program::Command(command.clone()), built: None })
        }
        WorkloadRef::Image { image } => {
            let name = image.rsplit('/').next().unwrap_or(image).split([':', '@']).next().unwrap_or(image).to_string();
            Ok(PreparedApp { name, program: Program::Image(image.clone()), built: None })
        }
        other => {
            let built = build(other)?;
            Ok(PreparedApp { name: built.name.clone(), program: Program::Dll(built.dll.clone()), built: Some(built) })
        }
    }
}

/// Builds (or finds up to date) a `dotnet` workload: named, a project or a dll.
pub fn build(workload: &WorkloadRef) -> Result<BuiltWorkload> {
    if let WorkloadRef::Dll { dll } = workload {
        // A built dll needs no SDK; don't install one just to hand it back.
        return use_dll(dll);
    }
    let dotnet = Dotnet::locate_or_install()?;
    build_with(&dotnet, workload)
}

pub fn build_with(dotnet: &Dotnet, workload: &WorkloadRef) -> Result<BuiltWorkload> {
    match workload {
        WorkloadRef::Named(name) => build_named(dotnet, name, false),
        WorkloadRef::Dll { dll } => use_dll(dll),
        WorkloadRef::Command { .. } | WorkloadRef::Image { .. } => {
            bail!("a `command` or `image` workload is not built: tracelab runs it as it is")
        }
        WorkloadRef::Project { project, ready_to_run } => {
            let project = if project.is_relative() { std::path::absolute(project)? } else { project.clone() };
            if !project.exists() {
                bail!("workload project {} does not exist (relative paths are next to the scenario file)", project.display());
            }
            let folder = if project.is_file() {
                project.parent().unwrap_or(Path::new(".")).to_path_buf()
            } else {
                project.clone()
            };
            // `{ project = "../workloads/cpu-bound", ready_to_run = true }` is how a scenario asks
            // for the precompiled variant of one of ours: build it where the named one goes.
            if let (Ok(canon), Ok(ours)) = (folder.canonicalize(), workloads_dir().canonicalize())
                && canon.parent() == Some(ours.as_path())
            {
                let name = canon.file_name().unwrap().to_string_lossy().into_owned();
                return build_named(dotnet, &name, *ready_to_run);
            }
            build_project(dotnet, &project, *ready_to_run)
        }
    }
}

/// Where a user's project builds: the XDG cache (`$XDG_CACHE_HOME/tracelab/build`, else
/// `~/.cache/tracelab/build`), never the tracelab checkout nor the user's folder.
pub(crate) fn user_build_cache() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| std::env::temp_dir().join("tracelab-cache"));
    base.join("tracelab").join("build")
}

/// Builds `workloads/<name>`, published ReadyToRun when `ready_to_run`.
pub fn build_named(dotnet: &Dotnet, name: &str, ready_to_run: bool) -> Result<BuiltWorkload> {
    if name.is_empty()
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!(
            "`{name}` is not a workload name (a folder of workloads/, e.g. cpu-bound); use {{ project = \"DIR\" }} for a project elsewhere"
        );
    }
    let src = workloads_dir().join(name);
    if !src.is_dir() {
        let known = names().unwrap_or_default().join(", ");
        bail!(
            "no workload `{name}` ({} does not exist); known: {known}",
            src.display()
        );
    }
    let project = find_project(&src)?;
    let out_name = if ready_to_run {
        format!("{name}-r2r")
    } else {
        name.to_string()
    };
    let out = crate::project_root()
        .join(".build")
        .join("workloads")
        .join(&out_name);
    let mut inputs = InputHash::new();
    inputs.add_tree(&src)?;
    let common = workloads_dir().join("Common");
    if common.is_dir() {
        inputs.add_tree(&common)?;
    }
    for shared in [
        "Directory.Build.props",
        "Directory.Build.targets",
        "Directory.Packages.props",
        "global.json",
    ] {
        inputs.add_file_if_exists(&workloads_dir().join(shared))?;
    }
    inputs.add_file_if_exists(&crate::project_root().join("nuget.config"))?;
    run_build(dotnet, name, &project, &out, ready_to_run, inputs, true)
}

fn build_project(dotnet: &Dotnet, project: &Path, ready_to_run: bool) -> Result<BuiltWorkload> {
    let project_file = if project.is_file() {
        project.to_path_buf()
    } else {
        find_project(project)?
    };
    let folder = project_file.parent().unwrap().to_path_buf();
    let canon = project_file
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", project_file.display()))?;
    let key = hex(&Sha256::digest(
        format!("{}|{ready_to_run}", canon.display()).as_bytes(),
    ))[..16]
        .to_string();
    let out = user_build_cache().join(key);
    let mut inputs = InputHash::new();
    inputs.add_tree(&folder)?;
    // MSBuild imports Directory.Build.* from every folder above the project.
    for dir in folder.ancestors().skip(1) {
        for shared in [
            "Directory.Build.props",
            "Directory.Build.targets",
            "Directory.Packages.props",
            "nuget.config",
            "NuGet.Config",
            "global.json",
        ] {
            inputs.add_file_if_exists(&dir.join(shared))?;
        }
    }
    let name = project_file
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    run_build(
        dotnet,
        &name,
        &project_file,
        &out,
        ready_to_run,
        inputs,
        false,
    )
}

fn use_dll(dll: &Path) -> Result<BuiltWorkload> {
    let dll = std::path::absolute(dll)?;
    if !dll.is_file() {
        bail!("workload dll {} does not exist (relative paths are next to the scenario file)", dll.display());
    }
    // A dll published ReadyToRun carries a ManagedNativeHeader; that is read where it matters
    // (the R2R resolver), so here it is only a label.
    let ready_to_run = false;
    Ok(BuiltWorkload {
        name: dll.file_stem().unwrap().to_string_lossy().into_owned(),
        dir: dll.parent().unwrap().to_path_buf(),
        dll,
        ready_to_run,
        rebuilt: false,
    })
}

fn find_project(dir: &Path) -> Result<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path
            .extension()
            .is_some_and(|e| e == "csproj" || e == "fsproj" || e == "vbproj")
        {
            found.push(path);
        }
    }
    match found.len() {
        1 => Ok(found.pop().unwrap()),
        0 => bail!("{} holds no .csproj", dir.display()),
        _ => bail!(
            "{} holds several projects ({}): point at one file",
            dir.display(),
            found.len()
        ),
    }
}

fn run_build(
    dotnet: &Dotnet,
    name: &str,
    project: &Path,
    out: &Path,
    ready_to_run: bool,
    mut inputs: InputHash,
    ours: bool,
) -> Result<BuiltWorkload> {
    inputs.add_str(&format!(
        "sdk={} r2r={ready_to_run} layout=1",
        dotnet.root.display()
    ));
    let stamp_value = inputs.finish();
    let stamp_path = out.with_extension("stamp");
    std::fs::create_dir_all(out.parent().unwrap())?;

    // Two runs (tests, parallel scenarios) building the same workload take turns.
    let lock_path = out.with_extension("lock");
    let lock = File::create(&lock_path)
        .with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;

    let up_to_date = std::fs::read_to_string(&stamp_path).is_ok_and(|s| s.trim() == stamp_value);
    if up_to_date && let Ok(dll) = entry_dll(out, project) {
        return Ok(BuiltWorkload {
            name: name.to_string(),
            dll,
            dir: out.to_path_buf(),
            ready_to_run,
            rebuilt: false,
        });
    }

    let _ = std::fs::remove_file(&stamp_path);
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    let verb = if ready_to_run { "publish" } else { "build" };
    let step = crate::host::progress::step("build", format!(
        "workload {name} (dotnet {verb}{})",
        if ready_to_run { ", ReadyToRun" } else { "" }
    ));
    let mut cmd = dotnet.command();
    cmd.arg(verb).arg(project).args([
        "-c",
        "Release",
        "-nologo",
        "--disable-build-servers",
        "-v:minimal",
    ]);
    cmd.arg("-o").arg(out);
    if ready_to_run {
        cmd.args([
            "-r",
            "linux-x64",
            "--self-contained",
            "false",
            "-p:PublishReadyToRun=true",
            // Otherwise the SDK asks for the ASP.NET Core runtime pack, which the offline feed lacks.
            "-p:DisableTransitiveFrameworkReferenceDownloads=true",
        ]);
    }
    if !ours {
        // obj/ and bin/ of a user's project stay in the cache too, not beside its sources.
        cmd.arg("--artifacts-path").arg(out.with_extension("artifacts"));
    }
    if ours {
        // workloads/Directory.Build.props keys obj/ on this, so the plain and the R2R build of
        // one project don't overwrite each other's restore output.
        cmd.arg(format!(
            "-p:TracelabVariant={}",
            if ready_to_run { "r2r" } else { "jit" }
        ));
    }
    cmd.current_dir(project.parent().unwrap());
    let output = cmd
        .output()
        .with_context(|| format!("cannot run {} {verb}", dotnet.dotnet.display()))?;
    if !output.status.success() {
        step.failed();
        bail!(
            "`dotnet {verb} {}` failed ({}); last lines of its output:\n{}",
            project.display(),
            output.status,
            tail(&[&output.stdout[..], &output.stderr[..]].concat(), 40)
        );
    }
    let dll = entry_dll(out, project).with_context(|| {
        format!(
            "after `dotnet {verb}`; its output:\n{}",
            tail(&[&output.stdout[..], &output.stderr[..]].concat(), 20)
        )
    })?;
    std::fs::write(&stamp_path, format!("{stamp_value}\n"))
        .with_context(|| format!("cannot write {}", stamp_path.display()))?;
    step.done("built");
    Ok(BuiltWorkload {
        name: name.to_string(),
        dll,
        dir: out.to_path_buf(),
        ready_to_run,
        rebuilt: true,
    })
}

/// The app's entry assembly in a build output: the dll beside a `.runtimeconfig.json`,
/// preferring the project's own name.
fn entry_dll(out: &Path, project: &Path) -> Result<PathBuf> {
    let stem = project.file_stem().unwrap().to_string_lossy().into_owned();
    let preferred = out.join(format!("{stem}.dll"));
    if preferred.is_file() && out.join(format!("{stem}.runtimeconfig.json")).is_file() {
        return Ok(preferred);
    }
    let mut apps = Vec::new();
    for entry in std::fs::read_dir(out).with_context(|| format!("cannot list {}", out.display()))? {
        let path = entry?.path();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(app) = file.strip_suffix(".runtimeconfig.json") {
            let dll = out.join(format!("{app}.dll"));
            if dll.is_file() {
                apps.push(dll);
            }
        }
    }
    match apps.len() {
        1 => Ok(apps.pop().unwrap()),
        0 => bail!(
            "{} holds no app (no *.runtimeconfig.json beside a dll)",
            out.display()
        ),
        _ => bail!("{} holds several apps: {:?}", out.display(), apps),
    }
}

/// SHA-256 over relative paths and contents of a project's inputs.
struct InputHash {
    files: BTreeMap<String, Vec<u8>>,
    extra: Vec<String>,
}

impl InputHash {
    fn new() -> InputHash {
        InputHash {
            files: BTreeMap::new(),
            extra: Vec::new(),
        }
    }

    fn add_tree(&mut self, dir: &Path) -> Result<()> {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let file = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if matches!(file.as_str(), "bin" | "obj" | "node_modules") || file.starts_with('.')
                {
                    continue;
                }
                self.add_tree(&path)?;
            } else if kind.is_file() && !file.starts_with('.') {
                self.add_file_if_exists(&path)?;
            }
        }
        Ok(())
    }

    fn add_file_if_exists(&mut self, path: &Path) -> Result<()> {
        if path.is_file() {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            self.files
                .insert(path.display().to_string(), Sha256::digest(&bytes).to_vec());
        }
        Ok(())
    }

    fn add_str(&mut self, s: &str) {
        self.extra.push(s.to_string());
    }

    fn finish(self) -> String {
        let mut h = Sha256::new();
        for (path, digest) in &self.files {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(digest);
        }
        for s in &self.extra {
            h.update(s.as_bytes());
            h.update([0]);
        }
        hex(&h.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A workload's truth.json: what it measured about itself.
#[derive(Clone, Debug)]
pub struct Truth {
    pub path: PathBuf,
    pub value: Value,
}

impl Truth {
    pub fn load(path: &Path) -> Result<Truth> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the workload's truth file {} (did the app finish?)",
                path.display()
            )
        })?;
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?;
        if !value.is_object() {
            bail!("{} does not hold a JSON object", path.display());
        }
        Ok(Truth {
            path: path.to_path_buf(),
            value,
        })
    }

    /// A value at a dotted path (`gc.induced`, `shares.cpu.HotLoop`). Keys holding dots
    /// themselves (`exceptions.by_type_message.Tracelab.Workloads.WorkloadException: boom 0`)
    /// are found too: at each level the shortest run of segments naming a key is taken.
    pub fn get(&self, path: &str) -> Option<&Value> {
        let segments: Vec<&str> = path.split('.').collect();
        lookup(&self.value, &segments)
    }

    pub fn f64(&self, path: &str) -> Option<f64> {
        self.get(path)?.as_f64()
    }

    pub fn u64(&self, path: &str) -> Option<u64> {
        let v = self.get(path)?;
        v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                .map(|f| f as u64)
        })
    }
}

fn lookup<'a>(value: &'a Value, segments: &[&str]) -> Option<&'a Value> {
    if segments.is_empty() {
        return Some(value);
    }
    match value {
        Value::Object(map) => (1..=segments.len()).find_map(|n| {
            let key = segments[..n].join(".");
            map.get(&key).and_then(|v| lookup(v, &segments[n..]))
        }),
        Value::Array(items) => {
            let index: usize = segments[0].parse().ok()?;
            lookup(items.get(index)?, &segments[1..])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth(json: &str) -> Truth {
        Truth {
            path: PathBuf::from("truth.json"),
            value: serde_json::from_str(json).unwrap(),
        }
    }

    #[test]
    fn dotted_paths_reach_nested_values() {
        let t = truth(
            r#"{"gc": {"induced": 10}, "shares": {"cpu": {"HotLoop": 0.7}},
                "phases": [{"name": "hot"}],
                "exceptions": {"by_type_message": {"Tracelab.Workloads.WorkloadException: boom 0": 334}}}"#,
        );
        assert_eq!(t.u64("gc.induced"), Some(10));
        assert_eq!(t.f64("shares.cpu.HotLoop"), Some(0.7));
        assert_eq!(t.get("phases.0.name").and_then(|v| v.as_str()), Some("hot"));
        assert_eq!(
            t.u64("exceptions.by_type_message.Tracelab.Workloads.WorkloadException: boom 0"),
            Some(334)
        );
        assert!(t.get("gc.missing").is_none());
        assert!(t.get("gc.induced.deeper").is_none());
    }

    #[test]
    fn unreadable_truth_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth.json");
        let err = format!("{:#}", Truth::load(&path).unwrap_err());
        assert!(err.contains("truth.json"), "{err}");
        std::fs::write(&path, "{ not json").unwrap();
        let err = format!("{:#}", Truth::load(&path).unwrap_err());
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn input_hash_changes_with_content() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.cs"), "class A {}").unwrap();
        std::fs::create_dir(dir.path().join("obj")).unwrap();
        std::fs::write(dir.path().join("obj/x"), "ignored").unwrap();
        let hash = |d: &Path| {
            let mut h = InputHash::new();
            h.add_tree(d).unwrap();
            h.finish()
        };
        let first = hash(dir.path());
        std::fs::write(dir.path().join("obj/x"), "changed but ignored").unwrap();
        assert_eq!(first, hash(dir.path()));
        std::fs::write(dir.path().join("a.cs"), "class B {}").unwrap();
        assert_ne!(first, hash(dir.path()));
    }
}
