//! A kernel the Debian archive does not ship, built here from Debian's own source package: no
//! Debian kernel (5.10, 6.1, 6.12; cloud and generic) has `CONFIG_USER_EVENTS`, which
//! `dotnet-trace collect-linux` needs. The source is the host's `/usr/src/linux-source-X.Y.tar.xz`
//! (the `linux-source-X.Y` package, installed by the prerequisite installer with the build tools),
//! configured from the kernel's own `x86_64_defconfig` + `kvm_guest.config` (virtio disk, ext4,
//! serial console and devtmpfs built in: the initramfs loads no modules) plus our options.
//!
//! The build tree stays in the cache beside the kernel (`kernels/LABEL/build`), so a change of
//! options recompiles only what it touches; the stamp names the source package's version, the
//! configuration and the initramfs script, and the kernel is rebuilt only when one changes.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::KernelSpec;
use super::image::{PreparedKernel, build_initramfs, cache_dir, run, stamp_matches};

/// How a kernel is built from a Debian `linux-source-*` package.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KernelBuild {
    /// The package whose `/usr/src/PACKAGE.tar.xz` is the source.
    pub source_package: &'static str,
    /// `make` configuration targets the configuration starts from.
    pub base_configs: &'static [&'static str],
    /// Options turned on over them (`scripts/config -e`), each checked to survive `olddefconfig`.
    pub enable: &'static [&'static str],
    /// Appended to the release (`uname -r` = 6.12.117-user-events).
    pub localversion: &'static str,
}

/// The collect-linux kernel: user_events and what perf, uprobes and .NET's tracing use; the rest
/// (virtio, ext4, devtmpfs, tmpfs, sysrq) is in the base configs already and listed so that a
/// base that lost one fails the build by name instead of a guest that cannot mount its disk.
pub const USER_EVENTS_6_12: KernelBuild = KernelBuild {
    source_package: "linux-source-6.12",
    base_configs: &["x86_64_defconfig", "kvm_guest.config"],
    enable: &[
        "FTRACE",
        "TRACING",
        "USER_EVENTS",
        "PERF_EVENTS",
        "TRACEPOINTS",
        "DYNAMIC_FTRACE",
        "FUNCTION_TRACER",
        "UPROBE_EVENTS",
        "BPF_SYSCALL",
        // /proc/config.gz: what doctor and collect-linux's preflight read in the guest.
        "IKCONFIG",
        "IKCONFIG_PROC",
        "KPROBE_EVENTS",
        "DEBUG_FS",
        "MAGIC_SYSRQ",
        "DEVTMPFS",
        "TMPFS",
        "VIRTIO_PCI",
        "VIRTIO_BLK",
        "EXT4_FS",
        "BLK_DEV_INITRD",
        "SERIAL_8250_CONSOLE",
    ],
    localversion: "-user-events",
};

/// Debian packages the build needs on the host besides the source (the prerequisite installer's
/// list, `prereq::KERNEL_BUILD`, names the same with reasons).
pub const BUILD_TOOLS: &[&str] = &[
    "make",
    "gcc",
    "bc",
    "bison",
    "flex",
    "libelf-dev",
    "libssl-dev",
    "dwarves",
];

/// Whether this machine can build `build`: `Ok(source package and version)`, or `Err(what lacks)`
/// (for `doctor`).
pub fn host_ready(build: &KernelBuild) -> std::result::Result<String, String> {
    let mut missing: Vec<String> = Vec::new();
    let version = package_version(build.source_package);
    if version.is_none() {
        missing.push(build.source_package.to_string());
    }
    for tool in ["make", "gcc", "bc", "bison", "flex"] {
        if harness::host::environment::require_program(tool).is_err() {
            missing.push(tool.to_string());
        }
    }
    for (header, package) in [
        ("/usr/include/libelf.h", "libelf-dev"),
        ("/usr/include/openssl/ssl.h", "libssl-dev"),
    ] {
        if !Path::new(header).is_file() {
            missing.push(package.to_string());
        }
    }
    match version {
        Some(v) if missing.is_empty() => Ok(format!("{} {v}", build.source_package)),
        _ => Err(missing.join(", ")),
    }
}

/// The installed version of a Debian package (`6.12.117-1~deb12u1`).
fn package_version(package: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", package])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// What the stamp records: any change rebuilds.
fn stamp_text(build: &KernelBuild, version: &str) -> String {
    format!(
        "{} {version}\n{}\n{}\n{}\n{}",
        build.source_package,
        build.base_configs.join(" "),
        build.enable.join(","),
        build.localversion,
        super::image::INIT_SCRIPT
    )
}

/// The built kernel (cached), building it first when its inputs changed.
pub fn prepare(spec: &KernelSpec, build: &KernelBuild) -> Result<PreparedKernel> {
    let dir = cache_dir().join("kernels").join(spec.label);
    let stamp = dir.join("stamp");
    let version = package_version(build.source_package).with_context(|| {
        format!(
            "the {} kernel is built from Debian's `{}`, which is not installed: `cargo xtask setup --tests` \
             (or `apt-get install {} {}`)",
            spec.label,
            build.source_package,
            build.source_package,
            BUILD_TOOLS.join(" ")
        )
    })?;
    let inputs = stamp_text(build, &version);
    let prepared = |release: String| PreparedKernel {
        spec: spec.clone(),
        release,
        package: format!(
            "{} {version} (built: {})",
            build.source_package,
            build.base_configs.join(" ")
        ),
        vmlinuz: dir.join("vmlinuz"),
        initramfs: dir.join("initramfs.cpio"),
    };
    if stamp_matches(&stamp, &inputs)
        && let Ok(release) = std::fs::read_to_string(dir.join("release"))
    {
        return Ok(prepared(release.trim().to_string()));
    }
    for tool in BUILD_TOOLS
        .iter()
        .filter(|t| !["libelf-dev", "libssl-dev", "dwarves"].contains(t))
    {
        harness::host::environment::require_program(tool).map_err(|e| {
            anyhow::anyhow!(
                "{e}: building the {} kernel needs {} (`cargo xtask setup --tests`)",
                spec.label,
                BUILD_TOOLS.join(" ")
            )
        })?;
    }
    let tree = source_tree(&dir.join("build"), build, &version)?;
    configure(&tree, build)?;
    compile(&tree, spec.label)?;
    let release = run(
        Command::new("make")
            .arg("-s")
            .arg("kernelrelease")
            .current_dir(&tree),
        "make kernelrelease",
    )?
    .trim()
    .to_string();
    std::fs::copy(tree.join("arch/x86/boot/bzImage"), dir.join("vmlinuz"))
        .context("copying bzImage")?;
    // Everything the guest needs to reach its root disk is built in: no modules to load.
    build_initramfs(&dir.join("initramfs.cpio"), &[])?;
    std::fs::write(dir.join("release"), format!("{release}\n"))?;
    std::fs::write(&stamp, inputs)?;
    Ok(prepared(release))
}

/// The unpacked source, re-extracted when the package's version changed.
fn source_tree(build_dir: &Path, build: &KernelBuild, version: &str) -> Result<PathBuf> {
    let tree = build_dir.join(build.source_package);
    let marker = build_dir.join("source-version");
    if tree.join("Makefile").is_file()
        && std::fs::read_to_string(&marker).is_ok_and(|v| v == version)
    {
        return Ok(tree);
    }
    let tarball = PathBuf::from(format!("/usr/src/{}.tar.xz", build.source_package));
    if !tarball.is_file() {
        bail!(
            "{} is missing although `{}` is installed: reinstall it",
            tarball.display(),
            build.source_package
        );
    }
    let _ = std::fs::remove_dir_all(build_dir);
    std::fs::create_dir_all(build_dir)?;
    let step = harness::host::progress::step("images", format!("unpacking {}", tarball.display()));
    run(
        Command::new("tar")
            .arg("xf")
            .arg(&tarball)
            .arg("-C")
            .arg(build_dir),
        "unpacking the kernel source",
    )?;
    step.done("unpacked");
    if !tree.join("Makefile").is_file() {
        bail!(
            "{} did not unpack into {}",
            tarball.display(),
            tree.display()
        );
    }
    std::fs::write(&marker, version)?;
    Ok(tree)
}

/// `make BASE…`, `scripts/config -e …`, `make olddefconfig`; every option asked for must be `=y`
/// afterwards (olddefconfig drops an option whose dependencies are off, silently).
fn configure(tree: &Path, build: &KernelBuild) -> Result<()> {
    run(
        Command::new("make")
            .args(build.base_configs)
            .current_dir(tree),
        "make defconfig",
    )?;
    let mut config = Command::new(tree.join("scripts/config"));
    for option in build.enable {
        config.args(["-e", option]);
    }
    config
        .args(["--set-str", "LOCALVERSION", build.localversion])
        .current_dir(tree);
    run(&mut config, "scripts/config")?;
    run(
        Command::new("make").arg("olddefconfig").current_dir(tree),
        "make olddefconfig",
    )?;
    let text = std::fs::read_to_string(tree.join(".config"))?;
    let dropped: Vec<&&str> = build
        .enable
        .iter()
        .filter(|o| !text.lines().any(|l| l == format!("CONFIG_{o}=y")))
        .collect();
    if !dropped.is_empty() {
        bail!(
            "`make olddefconfig` turned off {dropped:?} (a dependency is off): add it to the build's options"
        );
    }
    Ok(())
}

/// `make bzImage` at low priority (the machine is shared), saying how far it got every 500
/// compiled files: a first build takes 12 min of 2 idle cores, more on a busy machine.
fn compile(tree: &Path, label: &str) -> Result<()> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let step = harness::host::progress::step(
        "images",
        format!("building the {label} kernel (make -j{jobs} bzImage)"),
    );
    let mut child = Command::new("nice")
        .args(["-n", "10", "make", &format!("-j{jobs}"), "bzImage"])
        .current_dir(tree)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("could not start make")?;
    let stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stderr), &mut s);
        s
    });
    let mut compiled = 0usize;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        if line.trim_start().starts_with("CC ") {
            compiled += 1;
            if compiled % 500 == 0 {
                harness::host::progress::note(
                    "images",
                    &format!("{label} kernel: {compiled} files compiled"),
                );
            }
        }
    }
    let status = child.wait()?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = errors.lines().collect();
        bail!(
            "building the {label} kernel failed ({status}):\n{}",
            tail[tail.len().saturating_sub(30)..].join("\n")
        );
    }
    step.done(&format!("{compiled} files compiled"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_changes_with_every_input() {
        let base = stamp_text(&USER_EVENTS_6_12, "6.12.117-1~deb12u1");
        assert!(
            base.starts_with("linux-source-6.12 6.12.117-1~deb12u1\n"),
            "{base}"
        );
        assert_ne!(base, stamp_text(&USER_EVENTS_6_12, "6.12.118-1~deb12u1"));
        let fewer = KernelBuild {
            enable: &["USER_EVENTS"],
            ..USER_EVENTS_6_12
        };
        assert_ne!(base, stamp_text(&fewer, "6.12.117-1~deb12u1"));
        assert!(USER_EVENTS_6_12.enable.contains(&"USER_EVENTS"));
    }
}
