//! Stage `image`: container images built with no registry.
//!
//! Each Debian suite gets two images:
//! - `tracelab/base:<suite>`: a `debootstrap --variant=minbase` root file system with perf,
//!   LTTng and babeltrace, imported through the Docker API;
//! - `tracelab/runtime:<suite>`: the base plus the .NET runtime copied from the local SDK into
//!   /usr/share/dotnet.
//!
//! Workloads are not baked in: targets bind-mount their build folder read-only at the same path
//! as on the host. They change with every edit of an app, and a layer per change would make each
//! scenario run rebuild an image; the bind mount also keeps the paths perf records identical on
//! both sides, so symbolization needs no translation for the app's own files.
//!
//! Every step is cached: the rootfs under `.build/images/<suite>/` with a stamp of its inputs, the
//! images with a `tracelab.inputs` label holding the SHA-256 of theirs. A step runs only when its
//! hash changed. The Debian mirror is read from the host's apt sources at run time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::host::docker::{Docker, LABEL};

/// Label holding the hash of an image's inputs.
pub const LABEL_INPUTS: &str = "tracelab.inputs";
/// Bumped when the recipe below changes in a way the inputs do not show.
const RECIPE_VERSION: &str = "1";

/// A Debian suite the images are built from.
#[derive(Debug)]
pub struct Suite {
    pub name: &'static str,
    /// Packages added to the minbase variant.
    pub packages: &'static [&'static str],
    /// The perf binary inside (bullseye has only the versioned one).
    pub perf: &'static str,
    /// LTTng-UST soname (the .NET runtime's provider needs `liblttng-ust.so.0`).
    pub lttng_ust: &'static str,
}

pub const SUITES: &[Suite] = &[
    Suite {
        name: "bullseye",
        // zip and unzip: the perfcollect collector runs Microsoft's script here, which needs both
        // (its `install` downloads, so its packages come with the image).
        packages: &["linux-perf-5.10", "lttng-tools", "liblttng-ust0", "babeltrace", "libicu67", "libssl1.1", "procps", "zip", "unzip"],
        perf: "perf_5.10",
        lttng_ust: "liblttng-ust.so.0",
    },
    Suite {
        name: "bookworm",
        packages: &["linux-perf", "lttng-tools", "liblttng-ust1", "babeltrace2", "libicu72", "libssl3", "procps"],
        perf: "perf",
        lttng_ust: "liblttng-ust.so.1",
    },
    Suite {
        name: "trixie",
        packages: &["linux-perf", "lttng-tools", "liblttng-ust1t64", "babeltrace2", "libicu76", "libssl3t64", "procps"],
        perf: "perf",
        lttng_ust: "liblttng-ust.so.1",
    },
];

/// The suite containers use unless told otherwise: the one whose LTTng-UST the runtime loads.
pub const DEFAULT_SUITE: &str = "bullseye";

pub fn suite(name: &str) -> Result<&'static Suite> {
    SUITES.iter().find(|s| s.name == name).with_context(|| {
        format!(
            "unknown Debian suite `{name}`: expected one of {}",
            SUITES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        )
    })
}

pub(crate) fn base_tag(suite: &Suite) -> String {
    format!("tracelab/base:{}", suite.name)
}

pub fn runtime_tag(suite: &Suite) -> String {
    format!("tracelab/runtime:{}", suite.name)
}

/// `.build/images/<suite>/`.
pub(crate) fn suite_dir(suite: &Suite) -> PathBuf {
    crate::project_root().join(".build").join("images").join(suite.name)
}

/// The unpacked root file system the base image was made from: where a host-side symbolizer
/// finds the image's libc, perf, LTTng libraries.
pub fn rootfs_dir(suite: &Suite) -> PathBuf {
    suite_dir(suite).join("rootfs")
}

/// One image of the chain, as built or found.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub tag: String,
    pub id: String,
    /// True when the cache was used and nothing was built.
    pub reused: bool,
    pub duration: Duration,
}

/// The result of [`build`] for one suite.
#[derive(Debug, Clone)]
pub struct BuiltSuite {
    pub suite: &'static str,
    pub rootfs_reused: bool,
    pub base: BuiltImage,
    pub runtime: BuiltImage,
    pub duration: Duration,
}

/// The Debian mirror of the host's apt sources: the first `deb` entry whose URI is a Debian
/// archive (path ending in `/debian`), one-line or deb822 format. `TRACELAB_DEBIAN_MIRROR`
/// overrides it.
pub(crate) fn debian_mirror() -> Result<String> {
    if let Ok(m) = std::env::var("TRACELAB_DEBIAN_MIRROR") {
        return Ok(m);
    }
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let name = file.to_string_lossy();
        let found = if name.ends_with(".sources") {
            mirror_from_deb822(&text)
        } else if name.ends_with(".list") {
            mirror_from_one_line(&text)
        } else {
            None
        };
        if let Some(m) = found {
            return Ok(m);
        }
    }
    bail!(
        "no Debian archive entry in the host's apt sources ({}): set TRACELAB_DEBIAN_MIRROR to a Debian mirror URL",
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

fn is_debian_archive(uri: &str) -> bool {
    let uri = uri.trim_end_matches('/');
    (uri.starts_with("http://") || uri.starts_with("https://") || uri.starts_with("file:")) && uri.ends_with("/debian")
}

/// `deb [opts] URI suite components` lines.
pub(crate) fn mirror_from_one_line(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        if words.next() != Some("deb") {
            continue;
        }
        let mut uri = words.next()?;
        if uri.starts_with('[') {
            // Options run to the closing bracket, possibly across words.
            let mut w = uri;
            while !w.ends_with(']') {
                w = words.next()?;
            }
            uri = words.next()?;
        }
        if is_debian_archive(uri) {
            return Some(uri.trim_end_matches('/').to_string());
        }
    }
    None
}

/// deb822 stanzas (`Types: deb`, `URIs: …`).
pub(crate) fn mirror_from_deb822(text: &str) -> Option<String> {
    for stanza in text.split("\n\n") {
        let mut types = "";
        let mut uris = "";
        let mut enabled = true;
        for line in stanza.lines() {
            if line.starts_with('#') {
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "types" => types = v.trim(),
                    "uris" => uris = v.trim(),
                    "enabled" => enabled = v.trim() != "no",
                    _ => {}
                }
            }
        }
        if enabled
            && types.split_whitespace().any(|t| t == "deb")
            && let Some(uri) = uris.split_whitespace().find(|u| is_debian_archive(u))
        {
            return Some(uri.trim_end_matches('/').to_string());
        }
    }
    None
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn rootfs_inputs(suite: &Suite) -> String {
    let recipe = format!("recipe={RECIPE_VERSION};suite={};variant=minbase;packages={}", suite.name, suite.packages.join(","));
    sha256_hex(&[recipe.as_bytes()])
}

/// The parts of a .NET root the runtime layer copies (SDKs and packs are not needed to run).
fn dotnet_parts(dotnet_root: &Path) -> Result<Vec<PathBuf>> {
    let mut parts = vec![PathBuf::from("dotnet"), PathBuf::from("host")];
    for fw in ["Microsoft.NETCore.App", "Microsoft.AspNetCore.App"] {
        if dotnet_root.join("shared").join(fw).is_dir() {
            parts.push(Path::new("shared").join(fw));
        }
    }
    for p in &parts[..2] {
        if !dotnet_root.join(p).exists() {
            bail!("{} lacks {}: not a .NET root", dotnet_root.display(), p.display());
        }
    }
    if parts.len() == 2 {
        bail!("{} holds no shared/Microsoft.NETCore.App: no .NET runtime to copy", dotnet_root.display());
    }
    Ok(parts)
}

/// Relative path, size and mtime of every file the runtime layer copies: cheap to compute (no
/// reading), and it changes whenever the SDK is replaced or updated.
fn dotnet_manifest(dotnet_root: &Path, parts: &[PathBuf]) -> Result<String> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) -> Result<()> {
        let path = root.join(rel);
        let meta = std::fs::symlink_metadata(&path).with_context(|| format!("cannot stat {}", path.display()))?;
        if meta.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(&path)?.flatten().map(|e| e.file_name()).collect();
            entries.sort();
            for e in entries {
                walk(root, &rel.join(e), out)?;
            }
        } else {
            let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
            out.push(format!("{} {} {}", rel.display(), meta.len(), mtime.map(|d| d.as_secs()).unwrap_or(0)));
        }
        Ok(())
    }
    let mut lines = Vec::new();
    for p in parts {
        walk(dotnet_root, p, &mut lines)?;
    }
    Ok(lines.join("\n"))
}

fn dockerfile(suite: &Suite) -> String {
    let mut s = format!("FROM {}\nCOPY dotnet/ /usr/share/dotnet/\n", base_tag(suite));
    if suite.perf != "perf" {
        // One name for every suite, so collectors need not know bullseye's versioned binary.
        s.push_str("COPY bin/ /usr/local/bin/\n");
    }
    s.push_str(
        "ENV DOTNET_ROOT=/usr/share/dotnet DOTNET_NOLOGO=1 DOTNET_CLI_TELEMETRY_OPTOUT=1 \
         PATH=/usr/share/dotnet:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
    );
    s
}

/// A spinner with elapsed time for steps that take long; hidden when stderr is not a terminal.
fn spinner(msg: String) -> crate::host::progress::Step {
    crate::host::progress::step("images", msg)
}

fn run_logged(cmd: &mut Command, what: &str, pb: &crate::host::progress::Step) -> Result<()> {
    use std::io::BufRead;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {what}: is it installed?"))?;
    let stderr = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        std::io::BufReader::new(stderr).lines().map_while(|l| l.ok()).collect::<Vec<_>>()
    });
    let mut tail: Vec<String> = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines().map_while(|l| l.ok()) {
        pb.set_detail(&line);
        tail.push(line);
        if tail.len() > 20 {
            tail.remove(0);
        }
    }
    let status = child.wait()?;
    let err = err_thread.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "{what} failed ({status}):\n{}\n{}",
            tail.join("\n"),
            err.iter().rev().take(20).rev().cloned().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// Builds (or finds) the rootfs of `suite` under `.build/images/<suite>/`: `rootfs/` and
/// `rootfs.tar`. Returns true when the cache was used.
pub(crate) fn ensure_rootfs(suite: &Suite) -> Result<bool> {
    let dir = suite_dir(suite);
    let stamp = dir.join("rootfs.inputs");
    let tarball = dir.join("rootfs.tar");
    let inputs = rootfs_inputs(suite);
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(inputs.as_str()) && tarball.is_file() && rootfs_dir(suite).is_dir() {
        return Ok(true);
    }
    if crate::host::environment::which("debootstrap").is_none() && !Path::new("/usr/sbin/debootstrap").exists() {
        bail!("`debootstrap` is not installed: `apt-get install debootstrap` (needed once per suite to build images)");
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let partial = dir.join("rootfs.partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).with_context(|| format!("cannot remove {}", partial.display()))?;
    }
    let mirror = debian_mirror()?;
    let pb = spinner(format!("debootstrap {} (≈75 s)", suite.name));
    let started = Instant::now();
    run_logged(
        Command::new("debootstrap")
            .arg("--variant=minbase")
            .arg(format!("--include={}", suite.packages.join(",")))
            .arg(suite.name)
            .arg(&partial)
            .arg(&mirror),
        &format!("debootstrap {} from {mirror}", suite.name),
        &pb,
    )?;
    // Package caches would only bloat the image.
    for sub in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        if let Ok(entries) = std::fs::read_dir(partial.join(sub)) {
            for e in entries.flatten() {
                if e.path().is_file() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    pb.done("done");
    let pb = spinner(format!("tar rootfs {}", suite.name));
    let tar_partial = dir.join("rootfs.tar.partial");
    run_logged(
        Command::new("tar").arg("--numeric-owner").arg("-C").arg(&partial).arg("-cf").arg(&tar_partial).arg("."),
        "tar of the rootfs",
        &pb,
    )?;
    let final_dir = rootfs_dir(suite);
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir)?;
    }
    std::fs::rename(&partial, &final_dir)?;
    std::fs::rename(&tar_partial, &tarball)?;
    std::fs::write(&stamp, &inputs)?;
    pb.done(&format!("done; rootfs {} built in {:.0} s", suite.name, started.elapsed().as_secs_f64()));
    Ok(false)
}

/// Builds whatever is missing or stale of `suite`'s chain; a second call with the same inputs
/// only hashes and inspects (seconds).
pub fn build(docker: &Docker, suite: &'static Suite, dotnet_root: &Path) -> Result<BuiltSuite> {
    let started = Instant::now();
    // Two runs (tests, a scenario beside a matrix) may ask for the same suite at once: the second
    // waits for the first build and then finds it cached.
    std::fs::create_dir_all(suite_dir(suite))?;
    let lock_path = suite_dir(suite).join(".lock");
    let lock = std::fs::File::create(&lock_path).with_context(|| format!("cannot create {}", lock_path.display()))?;
    lock.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
    crate::host::progress::note("images", &format!("{}: rootfs, base and runtime images (each reused when its inputs are unchanged)", suite.name));
    let rootfs_reused = ensure_rootfs(suite)?;

    let t = Instant::now();
    let base_inputs = rootfs_inputs(suite);
    let tag = base_tag(suite);
    let base = match docker.inspect_image(&tag)? {
        Some(img) if img.labels.get(LABEL_INPUTS) == Some(&base_inputs) => {
            BuiltImage { tag, id: img.id, reused: true, duration: t.elapsed() }
        }
        _ => {
            let pb = spinner(format!("docker import {tag}"));
            let id = docker.import_rootfs(
                &suite_dir(suite).join("rootfs.tar"),
                "tracelab/base",
                suite.name,
                &[(LABEL.into(), "1".into()), (LABEL_INPUTS.into(), base_inputs.clone())],
            )?;
            pb.done("imported");
            BuiltImage { tag, id, reused: false, duration: t.elapsed() }
        }
    };

    let t = Instant::now();
    let parts = dotnet_parts(dotnet_root)?;
    let manifest = dotnet_manifest(dotnet_root, &parts)?;
    let dockerfile = dockerfile(suite);
    let runtime_inputs = sha256_hex(&[RECIPE_VERSION.as_bytes(), base.id.as_bytes(), manifest.as_bytes(), dockerfile.as_bytes()]);
    let tag = runtime_tag(suite);
    let runtime = match docker.inspect_image(&tag)? {
        Some(img) if img.labels.get(LABEL_INPUTS) == Some(&runtime_inputs) => {
            BuiltImage { tag, id: img.id, reused: true, duration: t.elapsed() }
        }
        _ => {
            let pb = spinner(format!("docker build {tag}"));
            let context = tempfile::Builder::new()
                .prefix("runtime-context")
                .tempdir_in(suite_dir(suite))
                .context("cannot create the build context folder")?;
            std::fs::write(context.path().join("Dockerfile"), &dockerfile)?;
            let mut extra = vec!["Dockerfile".to_string()];
            if suite.perf != "perf" {
                let bin = context.path().join("bin");
                std::fs::create_dir_all(&bin)?;
                std::os::unix::fs::symlink(format!("/usr/bin/{}", suite.perf), bin.join("perf"))?;
                extra.push("bin".into());
            }
            let tar = context.path().join("context.tar");
            let mut cmd = Command::new("tar");
            cmd.arg("-C").arg(dotnet_root).arg("--transform").arg("s,^,dotnet/,").arg("-cf").arg(&tar).args(&parts);
            run_logged(&mut cmd, "tar of the .NET runtime", &pb)?;
            let mut cmd = Command::new("tar");
            cmd.arg("-C").arg(context.path()).arg("-rf").arg(&tar).args(&extra);
            run_logged(&mut cmd, "tar of the Dockerfile", &pb)?;
            let id = docker.build(
                &tar,
                &tag,
                &[(LABEL.into(), "1".into()), (LABEL_INPUTS.into(), runtime_inputs.clone())],
                &mut |line| pb.set_detail(line),
            )?;
            pb.done("built");
            BuiltImage { tag, id, reused: false, duration: t.elapsed() }
        }
    };
    Ok(BuiltSuite { suite: suite.name, rootfs_reused, base, runtime, duration: started.elapsed() })
}

/// The runtime image of `suite_name`, built first if missing or stale. Returns its tag.
/// A failed build is an infrastructure error (exit 5); an unknown suite is a usage error.
pub fn ensure(docker: &Docker, suite_name: &str) -> Result<String> {
    let suite = suite(suite_name)?;
    let dotnet = crate::host::dotnet::Dotnet::locate_or_install()?;
    let built = build(docker, suite, &dotnet.root)
        .map_err(|e| crate::host::errors::Infrastructure::wrap(e.context(format!("building the {} images", suite.name))))?;
    Ok(built.runtime.tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_picks_the_debian_archive_not_security() {
        let text = "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n\
                    Types: deb deb-src\n# comment\nURIs: http://mirror.example/debian/\nSuites: bookworm\nComponents: main\n";
        assert_eq!(mirror_from_deb822(text).as_deref(), Some("http://mirror.example/debian"));
    }

    #[test]
    fn deb822_skips_disabled_and_source_only_stanzas() {
        let text = "Types: deb-src\nURIs: http://a.example/debian\n\nTypes: deb\nEnabled: no\nURIs: http://b.example/debian\n";
        assert_eq!(mirror_from_deb822(text), None);
    }

    #[test]
    fn one_line_sources_with_options() {
        let text = "# deb http://old.example/debian bullseye main\n\
                    deb [arch=amd64 signed-by=/k.gpg] https://c.example/debian bookworm main\n";
        assert_eq!(mirror_from_one_line(text).as_deref(), Some("https://c.example/debian"));
        assert_eq!(mirror_from_one_line("deb https://packages.example/apt cloud main\n"), None);
    }

    #[test]
    fn rootfs_inputs_change_with_packages() {
        let a = rootfs_inputs(&SUITES[0]);
        let b = rootfs_inputs(&SUITES[1]);
        assert_ne!(a, b);
        assert_eq!(a, rootfs_inputs(&SUITES[0]));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn unknown_suite_is_named() {
        let e = suite("buster").unwrap_err().to_string();
        assert!(e.contains("buster") && e.contains("bullseye"), "{e}");
    }
}
