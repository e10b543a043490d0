//! The .NET apps the benches and tests build from source: the fixture app with a known CPU split
//! (../shared/fixtures/FixtureApp) and the apps written without any tracelab code
//! (`corpus`), each built from a copy so nothing is written into the checkout.

/// The fixture app (../shared/fixtures/FixtureApp), built for tests and benchmarks that need a
/// real .NET process with a known CPU split.
pub mod fixture_app {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, bail};

    use harness::host::dotnet::Dotnet;

    /// Builds FixtureApp into `out_dir/app` (sources copied to `out_dir/src`: the shared folder
    /// is read-only and a build writes `obj/` beside the project). Reuses a previous build.
    pub fn build(dotnet: &Dotnet, out_dir: &Path) -> Result<PathBuf> {
        let dll = out_dir.join("app").join("FixtureApp.dll");
        if dll.is_file() {
            return Ok(dll);
        }
        let source = harness::shared_dir().join("fixtures").join("FixtureApp");
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

/// The apps of `corpus` (written without any tracelab code), built as their user
/// would build them, from a copy: nothing is written into the checkout.
pub mod user_app {
    use std::path::{Path, PathBuf};

    use anyhow::{Context, Result, bail};

    use harness::host::dotnet::Dotnet;

    /// Builds `corpus/<name>` from a copy in `dir/src` into `dir/bin`; the dll.
    pub fn build(name: &str, dir: &Path) -> Result<PathBuf> {
        let dotnet = Dotnet::locate_or_install()?;
        let src = dir.join("src");
        std::fs::create_dir_all(&src)?;
        let from = harness::project_root().join("corpus").join(name);
        for entry in std::fs::read_dir(&from).with_context(|| format!("cannot list {}", from.display()))?.flatten() {
            std::fs::copy(entry.path(), src.join(entry.file_name()))?;
        }
        // The offline feed, as a user of this machine would configure it.
        let config = std::fs::read_to_string(harness::project_root().join("nuget.config"))?
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
