//! Stage `dotnet`: finds the .NET SDK, or installs the offline one kept in
//! `../shared/toolchains` (its `install-dotnet.sh` is idempotent and prints the root it used).
//!
//! Every `dotnet` the harness starts goes through [`Dotnet::command`], which keeps the CLI from
//! writing to `$HOME` (first-run sentinels, NuGet caches) and from leaving build servers behind:
//! a lingering MSBuild node inherits our stdout pipe and makes `Command::output` wait forever.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The major version of the SDK the workloads target (`net10.0`).
pub(crate) const SDK_MAJOR: u32 = 10;

#[derive(Clone, Debug)]
pub struct Dotnet {
    /// DOTNET_ROOT: the folder holding `dotnet`, `sdk/`, `shared/`.
    pub root: PathBuf,
    /// The `dotnet` host binary.
    pub dotnet: PathBuf,
}

/// An installed SDK or runtime as `dotnet --list-sdks/--list-runtimes` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// `Microsoft.NETCore.App`, `Microsoft.AspNetCore.App` … (empty for SDKs).
    pub name: String,
    pub version: String,
    pub path: PathBuf,
}

impl Installed {
    pub(crate) fn major(&self) -> Option<u32> {
        self.version.split('.').next()?.parse().ok()
    }
}

/// Where [`Dotnet::locate_or_install`] looks; taken from the process environment normally,
/// spelled out in tests to check the "nothing anywhere" error without touching the machine.
#[derive(Clone, Debug, Default)]
pub struct Search {
    pub dotnet_root: Option<OsString>,
    pub path: Option<OsString>,
    pub home: Option<OsString>,
    /// `../shared`, whose `toolchains/install-dotnet.sh` installs the offline SDK.
    pub shared_dir: PathBuf,
}

impl Search {
    pub fn from_env() -> Search {
        Search {
            dotnet_root: std::env::var_os("DOTNET_ROOT"),
            path: std::env::var_os("PATH"),
            home: std::env::var_os("HOME"),
            shared_dir: crate::shared_dir(),
        }
    }
}

impl Dotnet {
    /// DOTNET_ROOT, then `dotnet` on PATH, then `~/.dotnet`; the first with a .NET 10 SDK wins.
    /// Failing those, runs `<shared>/toolchains/install-dotnet.sh`.
    pub fn locate_or_install() -> Result<Dotnet> {
        Dotnet::locate_with(&Search::from_env())
    }

    pub fn locate_with(search: &Search) -> Result<Dotnet> {
        let mut tried = Vec::new();
        for root in candidate_roots(search) {
            let dotnet = root.join("dotnet");
            if !dotnet.is_file() {
                tried.push(format!("{} (no dotnet binary)", root.display()));
                continue;
            }
            let found = Dotnet {
                root: root.clone(),
                dotnet,
            };
            match found.sdk_versions() {
                Ok(sdks) if sdks.iter().any(|s| s.major() == Some(SDK_MAJOR)) => return Ok(found),
                Ok(sdks) => tried.push(format!(
                    "{} (SDKs: {})",
                    root.display(),
                    if sdks.is_empty() {
                        "none".into()
                    } else {
                        sdks.iter()
                            .map(|s| s.version.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )),
                Err(e) => tried.push(format!("{} ({e:#})", root.display())),
            }
        }

        let script = search
            .shared_dir
            .join("toolchains")
            .join("install-dotnet.sh");
        if !script.is_file() {
            bail!(
                "no .NET {SDK_MAJOR} SDK found and no offline installer at {}.\n\
                 Looked in: {}.\n\
                 Install the .NET {SDK_MAJOR} SDK (set DOTNET_ROOT to its folder or put `dotnet` on PATH), \
                 or provide ../shared/toolchains with install-dotnet.sh and the SDK archive \
                 (TRACELAB_SHARED points elsewhere).",
                script.display(),
                if tried.is_empty() {
                    "DOTNET_ROOT, PATH, ~/.dotnet (none set or present)".to_string()
                } else {
                    tried.join("; ")
                }
            );
        }
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .with_context(|| format!("cannot run {}", script.display()))?;
        if !out.status.success() {
            bail!(
                "{} failed ({}): {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let dotnet = root.join("dotnet");
        if !dotnet.is_file() {
            bail!(
                "{} reported {} but it holds no dotnet binary",
                script.display(),
                root.display()
            );
        }
        Ok(Dotnet { root, dotnet })
    }

    /// A `dotnet` command that writes nothing to `$HOME`, sends no telemetry and leaves no
    /// build server running.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.dotnet);
        // A build never outlives the run that started it (even one killed with SIGKILL), and
        // what its .NET processes leave in TMPDIR goes with this process's scratch folder.
        crate::host::proc::die_with_owner(&mut cmd);
        if let Ok(scratch) = crate::host::owner::scratch_dir() {
            cmd.env("TMPDIR", scratch);
        }
        let cli_home = crate::project_root().join(".build").join("dotnet-cli-home");
        cmd.env("DOTNET_ROOT", &self.root)
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .env("DOTNET_NOLOGO", "1")
            .env("DOTNET_SKIP_FIRST_TIME_EXPERIENCE", "1")
            .env("DOTNET_GENERATE_ASPNET_CERTIFICATE", "false")
            .env("DOTNET_ADD_GLOBAL_TOOLS_TO_PATH", "false")
            .env("DOTNET_CLI_HOME", &cli_home)
            .env(
                "NUGET_PACKAGES",
                crate::project_root().join(".build").join("nuget-packages"),
            )
            .env("DOTNET_CLI_USE_MSBUILD_SERVER", "0")
            .env("MSBUILDDISABLENODEREUSE", "1")
            .env("UseSharedCompilation", "false")
            // The feed is offline-only; don't let the CLI probe for workload updates.
            .env("DOTNET_CLI_WORKLOAD_UPDATE_NOTIFY_DISABLE", "1");
        cmd
    }

    pub(crate) fn sdk_versions(&self) -> Result<Vec<Installed>> {
        Ok(parse_list(&self.list("--list-sdks")?, false))
    }

    pub fn runtime_versions(&self) -> Result<Vec<Installed>> {
        Ok(parse_list(&self.list("--list-runtimes")?, true))
    }

    /// The newest `Microsoft.NETCore.App` runtime, e.g. `10.0.12`.
    pub fn runtime_version(&self) -> Result<String> {
        self.runtime_versions()?
            .into_iter()
            .filter(|r| r.name == "Microsoft.NETCore.App")
            .max_by_key(|r| version_key(&r.version))
            .map(|r| r.version)
            .with_context(|| {
                format!(
                    "{} lists no Microsoft.NETCore.App runtime",
                    self.dotnet.display()
                )
            })
    }

    fn list(&self, flag: &str) -> Result<String> {
        let out = self
            .command()
            .arg(flag)
            .output()
            .with_context(|| format!("cannot run {} {flag}", self.dotnet.display()))?;
        if !out.status.success() {
            bail!(
                "{} {flag} failed ({}): {}",
                self.dotnet.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The offline NuGet feed (`../shared/toolchains/nuget-feed`).
    pub fn feed() -> PathBuf {
        crate::shared_dir().join("toolchains").join("nuget-feed")
    }

    /// Installs a .NET tool (e.g. `dotnet-trace`) from the offline feed into `dir`, once;
    /// returns the path of its launcher.
    pub(crate) fn install_tool(&self, package: &str, dir: &Path) -> Result<PathBuf> {
        let launcher = dir.join(package);
        if launcher.is_file() {
            return Ok(launcher);
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let feed = Dotnet::feed();
        if !feed.is_dir() {
            bail!(
                "cannot install {package}: the offline NuGet feed {} does not exist",
                feed.display()
            );
        }
        // `--source` replaces the sources (`--add-source` would keep the unreachable public feed).
        let out = self
            .command()
            .args(["tool", "install", "--tool-path"])
            .arg(dir)
            .arg("--source")
            .arg(&feed)
            .arg(package)
            .current_dir(dir)
            .output()
            .with_context(|| format!("cannot run {} tool install", self.dotnet.display()))?;
        if !out.status.success() && !launcher.is_file() {
            bail!(
                "`dotnet tool install {package}` from {} failed ({}):\n{}",
                feed.display(),
                out.status,
                tail(&[&out.stdout[..], &out.stderr[..]].concat(), 30)
            );
        }
        if !launcher.is_file() {
            bail!(
                "`dotnet tool install {package}` succeeded but {} does not exist",
                launcher.display()
            );
        }
        Ok(launcher)
    }
}

fn candidate_roots(search: &Search) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(root) = search.dotnet_root.as_ref().filter(|r| !r.is_empty()) {
        roots.push(PathBuf::from(root));
    }
    if let Some(path) = &search.path {
        for dir in std::env::split_paths(path) {
            let exe = dir.join("dotnet");
            if exe.is_file() {
                // PATH often holds a symlink (/usr/bin/dotnet → /usr/share/dotnet/dotnet).
                let real = std::fs::canonicalize(&exe).unwrap_or(exe);
                if let Some(parent) = real.parent() {
                    roots.push(parent.to_path_buf());
                }
            }
        }
    }
    if let Some(home) = &search.home {
        roots.push(Path::new(home).join(".dotnet"));
    }
    let mut seen = std::collections::HashSet::new();
    roots.retain(|r| seen.insert(r.clone()));
    roots
}

/// Parses `dotnet --list-sdks` (`10.0.401 [/root/sdk]`) or `--list-runtimes`
/// (`Microsoft.NETCore.App 10.0.12 [/root/shared/Microsoft.NETCore.App]`).
fn parse_list(text: &str, named: bool) -> Vec<Installed> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let (head, rest) = line.split_once(" [")?;
            let path = rest.strip_suffix(']')?;
            let (name, version) = if named {
                head.split_once(' ')?
            } else {
                ("", head)
            };
            Some(Installed {
                name: name.to_string(),
                version: version.trim().to_string(),
                path: PathBuf::from(path).join(version.trim()),
            })
        })
        .collect()
}

fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', '-'])
        .map(|p| p.parse().unwrap_or(0))
        .collect()
}

/// The last `lines` lines of a tool's output, for error messages.
pub(crate) fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_list_sdks_and_runtimes() {
        let sdks = parse_list("10.0.401 [/opt/d/sdk]\n", false);
        assert_eq!(
            sdks,
            vec![Installed {
                name: String::new(),
                version: "10.0.401".into(),
                path: "/opt/d/sdk/10.0.401".into()
            }]
        );
        assert_eq!(sdks[0].major(), Some(10));
        let rts = parse_list(
            "Microsoft.AspNetCore.App 10.0.12 [/opt/d/shared/Microsoft.AspNetCore.App]\n\
             Microsoft.NETCore.App 10.0.12 [/opt/d/shared/Microsoft.NETCore.App]\n",
            true,
        );
        assert_eq!(rts.len(), 2);
        assert_eq!(rts[1].name, "Microsoft.NETCore.App");
        assert_eq!(rts[1].version, "10.0.12");
    }

    #[test]
    fn nothing_anywhere_names_what_to_install() {
        let empty = tempfile::tempdir().unwrap();
        let search = Search {
            dotnet_root: None,
            path: Some(empty.path().as_os_str().to_owned()),
            home: Some(empty.path().as_os_str().to_owned()),
            shared_dir: empty.path().join("no-shared"),
        };
        let err = format!("{:#}", Dotnet::locate_with(&search).unwrap_err());
        assert!(err.contains("no .NET 10 SDK found"), "{err}");
        assert!(err.contains("install-dotnet.sh"), "{err}");
        assert!(err.contains("DOTNET_ROOT"), "{err}");
    }

    #[test]
    fn a_root_without_the_binary_is_reported() {
        let empty = tempfile::tempdir().unwrap();
        let search = Search {
            dotnet_root: Some(empty.path().as_os_str().to_owned()),
            path: None,
            home: None,
            shared_dir: empty.path().join("no-shared"),
        };
        let err = format!("{:#}", Dotnet::locate_with(&search).unwrap_err());
        assert!(err.contains("(no dotnet binary)"), "{err}");
    }
}
