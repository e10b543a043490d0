//! Helpers for tests that need real tools (dotnet, perf, docker, LTTng, qemu).
//!
//! Locally a test whose prerequisite is absent skips with a printed reason; under `CI=true` the
//! same absence fails the test, because `.ci/run` is responsible for installing it
//! (shared/DESIGN.md §4). Every skip is appended to `target/tracelab-skips.txt`, which `.ci/run`
//! counts into its summary, so a skip is never silent.

use std::io::Write;

/// True when running under CI, where prerequisites are mandatory.
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true") | Ok("1"))
}

/// Records a skip (or, in CI, fails). Call as `if let Err(why) = check() { return skip(test, why) }`.
#[track_caller]
pub fn skip(test: &str, reason: impl std::fmt::Display) {
    let line = format!("SKIP {test}: {reason}");
    if in_ci() {
        panic!("{line} (CI=true: .ci/run must provide this prerequisite)");
    }
    eprintln!("{line}");
    let path = crate::project_root().join("target").join("tracelab-skips.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// `Err(reason)` when `program` is not on PATH.
pub fn require_program(program: &str) -> Result<(), String> {
    crate::environment::which(program).map(|_| ()).ok_or_else(|| format!("`{program}` is not on PATH"))
}


pub fn require_root() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } == 0 { Ok(()) } else { Err("needs root".into()) }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// A prerequisite check for tests: runs each check, skipping on the first failure.
/// Returns true when the test may go on.
#[track_caller]
pub fn prerequisites(test: &str, checks: &[&dyn Fn() -> Result<(), String>]) -> bool {
    for check in checks {
        if let Err(why) = check() {
            skip(test, why);
            return false;
        }
    }
    true
}
/// The fixture app (../shared/fixtures/FixtureApp), built for tests and benchmarks that need a
/// real .NET process with a known CPU split.
pub mod fixture_app {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, bail};

    use crate::dotnet::Dotnet;

    /// Builds FixtureApp into `out_dir/app` (sources copied to `out_dir/src`: the shared folder
    /// is read-only and a build writes `obj/` beside the project). Reuses a previous build.
    pub fn build(dotnet: &Dotnet, out_dir: &Path) -> Result<PathBuf> {
        let dll = out_dir.join("app").join("FixtureApp.dll");
        if dll.is_file() {
            return Ok(dll);
        }
        let source = crate::shared_dir().join("fixtures").join("FixtureApp");
        let src = out_dir.join("src");
        std::fs::create_dir_all(&src).with_context(|| format!("cannot create {}", src.display()))?;
        for file in ["FixtureApp.csproj", "Program.cs"] {
            std::fs::copy(source.join(file), src.join(file))
                .with_context(|| format!("cannot copy {} (is ../shared present?)", source.join(file).display()))?;
        }
        let out = dotnet
            .command()
            .args(["build", "-c", "Release", "-v", "q", "-nologo", "-o"])
            .arg(out_dir.join("app"))
            .arg(src.join("FixtureApp.csproj"))
            .output()
            .context("cannot run `dotnet build`")?;
        if !out.status.success() || !dll.is_file() {
            bail!(
                "`dotnet build` of FixtureApp failed ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(dll)
    }
}

/// The apps of `harness/tests/apps` (written without any tracelab code), built as their user
/// would build them, from a copy: nothing is written into the checkout.
pub mod user_app {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, bail};

    use crate::dotnet::Dotnet;

    /// Builds `harness/tests/apps/<name>` from a copy in `dir/src` into `dir/bin`; the dll.
    pub fn build(name: &str, dir: &Path) -> Result<PathBuf> {
        let dotnet = Dotnet::locate_or_install()?;
        let src = dir.join("src");
        std::fs::create_dir_all(&src)?;
        let from = crate::project_root().join("harness/tests/apps").join(name);
        for entry in std::fs::read_dir(&from).with_context(|| format!("cannot list {}", from.display()))?.flatten() {
            std::fs::copy(entry.path(), src.join(entry.file_name()))?;
        }
        // The offline feed, as a user of this machine would configure it.
        let config = std::fs::read_to_string(crate::project_root().join("nuget.config"))?
            .replace("../shared/toolchains/nuget-feed", &Dotnet::feed().display().to_string());
        std::fs::write(src.join("nuget.config"), config)?;
        let out = dir.join("bin");
        let built = dotnet
            .command()
            .args(["build", "-c", "Release", "-v", "q", "-nologo", "--disable-build-servers", "--artifacts-path"])
            .arg(dir.join("artifacts"))
            .arg("-o")
            .arg(&out)
            .arg(src.join(format!("{name}.csproj")))
            .output()
            .context("cannot run `dotnet build`")?;
        if !built.status.success() {
            bail!("dotnet build {name}: {}{}", String::from_utf8_lossy(&built.stdout), String::from_utf8_lossy(&built.stderr));
        }
        Ok(out.join(format!("{name}.dll")))
    }
}
