//! Building what a guest boots: a Debian kernel (from the suite's `linux-image-*-cloud-amd64`, or
//! built from source by [`super::kernel_build`]), a busybox initramfs that loads the virtio
//! modules that kernel lacks built in, and a root disk per userland suite — bullseye (perf 5.10,
//! LTTng 2.12 with liblttng-ust0, libicu67) for Debian's kernels, bookworm (glibc 2.36, which
//! `dotnet-trace collect-linux` needs) for the user_events one — each with the .NET toolchain,
//! made with `mkfs.ext4 -d`, so no loop mount and no privileges beyond writing files.
//! Everything is cached under `.build/vm/`; a stamp file beside each product names its inputs.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::KernelSpec;

/// Suite of the guest's root filesystem: bullseye is the newest Debian whose LTTng (2.12,
/// liblttng-ust0) the .NET runtime can load, and its userland runs on all three kernels.
pub const ROOTFS_SUITE: &str = "bullseye";

/// Packages of the bullseye guest's userland (besides debootstrap's minbase).
pub const ROOTFS_PACKAGES: &[&str] = &[
    "linux-perf-5.10",
    "liblttng-ust0",
    "lttng-tools",
    "libicu67",
    "libssl1.1",
    "ca-certificates",
    "procps",
    "kmod",
];

/// Packages of the bookworm guest's userland: no LTTng (bookworm's LTTng-UST 2.13 is one the .NET
/// runtime cannot load), the ICU and OpenSSL of bookworm.
pub const BOOKWORM_PACKAGES: &[&str] = &["linux-perf", "libicu72", "libssl3", "ca-certificates", "procps", "kmod"];

/// The packages of a guest rootfs suite.
pub fn rootfs_packages(suite: &str) -> Result<&'static [&'static str]> {
    match suite {
        ROOTFS_SUITE => Ok(ROOTFS_PACKAGES),
        "bookworm" => Ok(BOOKWORM_PACKAGES),
        other => bail!("no guest rootfs is defined for suite `{other}` (bullseye, bookworm)"),
    }
}

/// Modules the cloud kernels may build as modules and the guest needs before it can mount its
/// root disk, in load order (a module's dependencies come first).
pub const BOOT_MODULES: &[&str] =
    &["virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci", "virtio_blk"];

/// Of [`BOOT_MODULES`], those without which the root disk cannot appear.
const REQUIRED_MODULES: &[&str] = &["virtio_pci", "virtio_blk"];

/// The cache folder `.build/vm` (git-ignored).
pub fn cache_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TRACELAB_VM_CACHE") {
        return dir.into();
    }
    harness::project_root().join(".build").join("vm")
}

pub(super) fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("{what}: could not start {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {:?}\n{}{}",
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stdout).chars().rev().take(3000).collect::<String>().chars().rev().collect::<String>(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn stamp_matches(stamp: &Path, inputs: &str) -> bool {
    std::fs::read_to_string(stamp).is_ok_and(|s| s == inputs)
}

/// The Debian mirror: `TRACELAB_DEBIAN_MIRROR`, else the first `…/debian` URI of the host's apt
/// sources (one-line or deb822 form). Never hard-coded, so no mirror host lands in the repository.
pub fn debian_mirror() -> Result<String> {
    if let Ok(m) = std::env::var("TRACELAB_DEBIAN_MIRROR") {
        return Ok(m);
    }
    let mut texts = Vec::new();
    if let Ok(t) = std::fs::read_to_string("/etc/apt/sources.list") {
        texts.push(t);
    }
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            if let Ok(t) = std::fs::read_to_string(&p) {
                texts.push(t);
            }
        }
    }
    for text in &texts {
        if let Some(m) = mirror_from_sources(text) {
            return Ok(m);
        }
    }
    bail!(
        "found no Debian mirror in /etc/apt/sources.list*: set TRACELAB_DEBIAN_MIRROR to a Debian \
         archive URL (the folder holding dists/ and pool/)"
    )
}

/// First archive URI (path ending in `/debian`) in apt sources text, one-line or deb822.
pub fn mirror_from_sources(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let candidates: Vec<&str> = if let Some(rest) = line.strip_prefix("URIs:") {
            rest.split_whitespace().collect()
        } else if line.starts_with("deb ") {
            line.split_whitespace().filter(|w| w.contains("://")).take(1).collect()
        } else {
            continue;
        };
        for uri in candidates {
            if uri.trim_end_matches('/').ends_with("/debian") {
                return Some(uri.trim_end_matches('/').to_string());
            }
        }
    }
    None
}

/// An apt configuration of its own for one suite (lists and downloads under the cache), so
/// fetching another suite's packages neither needs nor touches the host's apt state.
struct SuiteApt {
    dir: PathBuf,
}

impl SuiteApt {
    fn new(suite: &str) -> Result<SuiteApt> {
        let dir = cache_dir().join(format!("apt-{suite}"));
        for sub in ["lists/partial", "cache/archives/partial", "debs"] {
            std::fs::create_dir_all(dir.join(sub)).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        if !Path::new(keyring).is_file() {
            bail!("{keyring} is missing: `apt-get install debian-archive-keyring`");
        }
        let mirror = debian_mirror()?;
        std::fs::write(dir.join("sources.list"), format!("deb [signed-by={keyring}] {mirror} {suite} main\n"))?;
        // No package is installed through these lists: an empty status file says so. (apt 2.6
        // cannot parse /dev/null as one — "Unable to parse package file /dev/null" — so a fresh
        // machine's first guest never booted.)
        std::fs::write(dir.join("status"), "")?;
        let apt = SuiteApt { dir };
        if std::fs::read_dir(apt.dir.join("lists"))?.count() <= 1 {
            run(Command::new("apt-get").args(apt.options()).arg("update"), &format!("apt-get update for {suite}"))?;
        }
        Ok(apt)
    }

    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        vec![
            format!("-oDir::Etc::SourceList={d}/sources.list"),
            "-oDir::Etc::SourceParts=/dev/null".into(),
            format!("-oDir::State::Lists={d}/lists"),
            format!("-oDir::Cache={d}/cache"),
            format!("-oDir::State::status={d}/status"),
            // Our own lists and cache: the host's apt lock guards nothing of ours.
            "-oDebug::NoLocking=1".into(),
            "-oAPT::Sandbox::User=root".into(),
        ]
    }

    /// The package a metapackage depends on (`linux-image-cloud-amd64` → the versioned image).
    fn resolve(&self, meta: &str, prefix: &str) -> Result<String> {
        let out = run(Command::new("apt-cache").args(self.options()).args(["depends", meta]), "apt-cache depends")?;
        out.lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .find(|p| p.starts_with(prefix))
            .map(str::to_string)
            .with_context(|| format!("`{meta}` depends on no `{prefix}*` package:\n{out}"))
    }

    fn download(&self, package: &str) -> Result<PathBuf> {
        let debs = self.dir.join("debs");
        let found = |debs: &Path| -> Option<PathBuf> {
            std::fs::read_dir(debs).ok()?.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
            })
        };
        if let Some(p) = found(&debs) {
            return Ok(p);
        }
        run(
            Command::new("apt-get").args(self.options()).args(["download", package]).current_dir(&debs),
            &format!("apt-get download {package}"),
        )?;
        found(&debs).with_context(|| format!("apt-get download {package} left no .deb in {}", debs.display()))
    }
}

/// A kernel ready to boot.
#[derive(Clone, Debug)]
pub struct PreparedKernel {
    pub spec: KernelSpec,
    /// `uname -r` of the kernel (`6.1.0-50-cloud-amd64`).
    pub release: String,
    /// The Debian package it came from, with version.
    pub package: String,
    pub vmlinuz: PathBuf,
    pub initramfs: PathBuf,
}

/// Downloads the suite's cloud kernel (once) and builds its initramfs; a kernel built from
/// source is built (once per input change) instead.
pub fn prepare_kernel(spec: &KernelSpec) -> Result<PreparedKernel> {
    if let Some(build) = &spec.build {
        return super::kernel_build::prepare(spec, build);
    }
    let dir = cache_dir().join("kernels").join(spec.label);
    let stamp = dir.join("stamp");
    let inputs = format!("{}\n{}\n{}\n", spec.suite, BOOT_MODULES.join(","), INIT_SCRIPT);
    if stamp_matches(&stamp, &inputs) {
        let meta: Vec<String> =
            std::fs::read_to_string(dir.join("release"))?.lines().map(str::to_string).collect();
        if meta.len() == 2 {
            return Ok(PreparedKernel {
                spec: spec.clone(),
                release: meta[0].clone(),
                package: meta[1].clone(),
                vmlinuz: dir.join("vmlinuz"),
                initramfs: dir.join("initramfs.cpio"),
            });
        }
    }
    let apt = SuiteApt::new(spec.suite)?;
    let package = apt.resolve("linux-image-cloud-amd64", "linux-image-")?;
    let deb = apt.download(&package)?;
    let extracted = dir.join("deb");
    let _ = std::fs::remove_dir_all(&extracted);
    std::fs::create_dir_all(&extracted)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted), "dpkg-deb -x")?;
    let boot = extracted.join("boot");
    let vmlinuz_src = std::fs::read_dir(&boot)
        .with_context(|| format!("{} has no boot/", deb.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-")))
        .with_context(|| format!("{} holds no boot/vmlinuz-*", deb.display()))?;
    let release = vmlinuz_src.file_name().unwrap().to_str().unwrap().trim_start_matches("vmlinuz-").to_string();
    std::fs::copy(&vmlinuz_src, dir.join("vmlinuz"))?;
    let modules_dir = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|m| extracted.join(m).join(&release))
        .find(|p| p.is_dir())
        .with_context(|| format!("{} holds no modules folder for {release}", deb.display()))?;
    let modules = boot_modules(&modules_dir)?;
    build_initramfs(&dir.join("initramfs.cpio"), &modules)?;
    let version = package_version(&deb);
    std::fs::write(dir.join("release"), format!("{release}\n{package} {version}\n"))?;
    std::fs::remove_dir_all(&extracted)?;
    std::fs::write(&stamp, inputs)?;
    Ok(PreparedKernel {
        spec: spec.clone(),
        release,
        package: format!("{package} {version}"),
        vmlinuz: dir.join("vmlinuz"),
        initramfs: dir.join("initramfs.cpio"),
    })
}

fn package_version(deb: &Path) -> String {
    Command::new("dpkg-deb")
        .args(["-f"])
        .arg(deb)
        .arg("Version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// For each of [`BOOT_MODULES`] that this kernel builds as a module, its bytes (uncompressed:
/// busybox's insmod reads plain ELF only); modules listed in `modules.builtin` are skipped.
fn boot_modules(modules_dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut index = std::collections::HashMap::new();
    let mut stack = vec![modules_dir.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(name) = p.file_name().and_then(|n| n.to_str())
                && let Some(stem) = name.split(".ko").next().filter(|_| name.contains(".ko"))
            {
                index.insert(stem.replace('-', "_"), p.clone());
            }
        }
    }
    let builtin = std::fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default();
    let mut out = Vec::new();
    for m in BOOT_MODULES {
        if let Some(path) = index.get(*m) {
            let name = path.file_name().unwrap().to_str().unwrap();
            let bytes = if name.ends_with(".ko.xz") {
                decompress("xz", path)?
            } else if name.ends_with(".ko.zst") {
                decompress("zstd", path)?
            } else {
                std::fs::read(path)?
            };
            out.push((m.to_string(), bytes));
        } else if REQUIRED_MODULES.contains(m)
            && !builtin.lines().any(|l| l.rsplit('/').next().is_some_and(|f| f.starts_with(&format!("{m}.ko"))))
        {
            bail!("module {m} is neither in {} nor built in (modules.builtin): this kernel cannot mount a virtio disk", modules_dir.display());
        }
        // Others may simply not exist in this kernel version (5.10 predates virtio_pci_modern_dev).
    }
    Ok(out)
}

fn decompress(tool: &str, path: &Path) -> Result<Vec<u8>> {
    let out = Command::new(tool)
        .args(["-d", "-c"])
        .arg(path)
        .output()
        .with_context(|| format!("`{tool}` is needed to unpack {}", path.display()))?;
    if !out.status.success() {
        bail!("`{tool} -d` failed on {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// The initramfs `/init`: load the virtio modules, mount the root disk, hand over to the guest
/// init on it. `panic=1` plus qemu's `-no-reboot` turn any failure here into a prompt exit.
pub(super) const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do
  insmod /modules/$m.ko || echo "TRACELAB-INITRAMFS: insmod $m failed"
done
for i in $(seq 1 50); do [ -b /dev/vda ] && break; sleep 0.1; done
mkdir -p /newroot
if ! mount -t ext4 /dev/vda /newroot; then
  echo "TRACELAB-INITRAMFS: cannot mount /dev/vda"; ls /dev; exit 1
fi
# The loopback interface starts down and the root disk has no `ip`: system-events' loopback
# connections got "Network is unreachable 127.0.0.1" on 6.1. lo stays up across switch_root
# (one network namespace); the kernel gives it 127.0.0.1 as it comes up.
ip link set lo up || ifconfig lo 127.0.0.1 up || echo "TRACELAB-INITRAMFS: cannot bring up lo"
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /opt/tracelab/guest-init
"#;

fn busybox_static() -> Result<Vec<u8>> {
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        // Only a static busybox runs in an initramfs without libc.
        if let Ok(bytes) = std::fs::read(p)
            && !bytes.windows(11).any(|w| w == b"ld-linux-x8")
        {
            return Ok(bytes);
        }
    }
    let apt = SuiteApt::new(&host_suite())?;
    let deb = apt.download("busybox-static")?;
    let dir = cache_dir().join("busybox-static");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir), "dpkg-deb -x busybox-static")?;
    std::fs::read(dir.join("bin/busybox")).context("busybox-static has no bin/busybox")
}

/// The host's Debian suite (`VERSION_CODENAME`), for tools fetched to run on the host side.
fn host_suite() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("VERSION_CODENAME=").map(|s| s.trim_matches('"').to_string())))
        .unwrap_or_else(|| "bookworm".into())
}

pub(super) fn build_initramfs(out: &Path, modules: &[(String, Vec<u8>)]) -> Result<()> {
    use cpio::newc::Builder;
    let busybox = busybox_static()?;
    let order: String = modules.iter().map(|(m, _)| format!("{m}\n")).collect();
    let mut entries: Vec<(Builder, Vec<u8>)> = Vec::new();
    for d in ["bin", "dev", "proc", "sys", "modules", "newroot"] {
        entries.push((Builder::new(d).mode(0o040755), Vec::new()));
    }
    entries.push((Builder::new("init").mode(0o100755), INIT_SCRIPT.as_bytes().to_vec()));
    entries.push((Builder::new("bin/busybox").mode(0o100755), busybox));
    entries.push((Builder::new("modules/order").mode(0o100644), order.into_bytes()));
    for (m, bytes) in modules {
        entries.push((Builder::new(&format!("modules/{m}.ko")).mode(0o100644), bytes.clone()));
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (i, (builder, data)) in entries.into_iter().enumerate() {
        let mut fp = builder.ino(i as u32 + 1).nlink(1).write(&mut w, data.len() as u32);
        std::io::Write::write_all(&mut fp, &data)?;
        fp.finish()?;
    }
    cpio::newc::trailer(&mut w)?;
    std::io::Write::flush(&mut w)?;
    Ok(())
}

/// The guest's init, on the root disk: mounts what tracing needs, unpacks the job from the
/// third disk (a tar written straight onto it), runs it, writes `/opt/tracelab/out` as a tar
/// onto the second disk and powers off. Lines starting `TRACELAB-GUEST` on the serial console
/// let the host follow along.
pub const GUEST_INIT: &str = r#"#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
mount -t proc proc /proc
mount -t sysfs sys /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
hostname tracelab-guest
echo 1 > /proc/sys/kernel/sysrq
# The guest is a throwaway test box: let perf see everything (trixie's kernel defaults to 3).
echo -1 > /proc/sys/kernel/perf_event_paranoid
echo 0 > /proc/sys/kernel/kptr_restrict
echo "TRACELAB-GUEST-START $(uname -r) paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)"
rm -rf /opt/tracelab/job /opt/tracelab/out
mkdir -p /opt/tracelab/out
if tar xf /dev/vdc -C /; then
  # The job's output goes to the console as well, so the host can follow a long run live.
  { sh /opt/tracelab/job/run.sh 2>&1; echo $? > /tmp/job-rc; } | tee /opt/tracelab/out/job.log
  rc=$(cat /tmp/job-rc)
else
  echo "TRACELAB-GUEST: cannot unpack the job disk /dev/vdc"
  rc=125
fi
echo "$rc" > /opt/tracelab/out/exit-code
tar cf /dev/vdb -C /opt/tracelab/out .
sync
echo "TRACELAB-GUEST-EXIT $rc"
echo o > /proc/sysrq-trigger
sleep 5
"#;

/// Builds (once) the rootfs of `suite` with debootstrap.
pub fn prepare_rootfs(suite: &str) -> Result<PathBuf> {
    let packages = rootfs_packages(suite)?;
    let dir = cache_dir().join(format!("rootfs-{suite}"));
    let stamp = cache_dir().join(format!("rootfs-{suite}.stamp"));
    let inputs = format!("{suite}\n{}\n", packages.join(","));
    if dir.is_dir() && stamp_matches(&stamp, &inputs) {
        return Ok(dir);
    }
    harness::host::environment::require_program("debootstrap")
        .map_err(|e| anyhow::anyhow!("{e}: `apt-get install debootstrap` (it builds the guest's rootfs)"))?;
    let tmp = cache_dir().join(format!("rootfs-{suite}.tmp"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(cache_dir())?;
    run(
        Command::new("debootstrap")
            .arg("--variant=minbase")
            .arg(format!("--include={}", packages.join(",")))
            .arg(suite)
            .arg(&tmp)
            .arg(debian_mirror()?),
        "debootstrap of the guest rootfs",
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir)?;
    std::fs::write(&stamp, inputs)?;
    Ok(dir)
}

/// The .NET installation copied into the guest at the same path as on the host, so the paths
/// harness code computes on the host hold in the guest.
pub fn dotnet_root() -> Result<PathBuf> {
    if let Ok(root) = std::env::var("DOTNET_ROOT")
        && Path::new(&root).join("dotnet").is_file()
    {
        return Ok(root.into());
    }
    let script = harness::shared_dir().join("toolchains/install-dotnet.sh");
    let out = run(Command::new("bash").arg(&script), "install-dotnet.sh")?;
    let root = PathBuf::from(out.lines().last().unwrap_or("").trim());
    if !root.join("dotnet").is_file() {
        bail!("{} printed `{}`, which holds no `dotnet`", script.display(), root.display());
    }
    Ok(root)
}

/// Builds (once per input change) the guest's root disk of `suite`: rootfs + .NET + the guest init.
pub fn prepare_disk(suite: &str) -> Result<PathBuf> {
    let rootfs = prepare_rootfs(suite)?;
    let dotnet = dotnet_root()?;
    let disk = cache_dir().join(format!("disk-{suite}.ext4"));
    let stamp = cache_dir().join(format!("disk-{suite}.stamp"));
    let inputs = format!("{}\n{}\n{GUEST_INIT}", rootfs.display(), dotnet.display());
    if disk.is_file() && stamp_matches(&stamp, &inputs) {
        return Ok(disk);
    }
    harness::host::environment::require_program("mkfs.ext4").map_err(|e| anyhow::anyhow!("{e}: `apt-get install e2fsprogs`"))?;
    let staging = cache_dir().join(format!("disk-staging-{suite}"));
    let _ = std::fs::remove_dir_all(&staging);
    // A hard-linked copy of the rootfs costs no space; what we add goes only into the copy.
    run(Command::new("cp").arg("-al").arg(&rootfs).arg(&staging), "cp -al rootfs")?;
    let in_guest = staging.join(dotnet.strip_prefix("/").unwrap_or(&dotnet));
    std::fs::create_dir_all(in_guest.parent().unwrap())?;
    run(Command::new("cp").arg("-a").arg(&dotnet).arg(&in_guest), "copy .NET into the guest rootfs")?;
    let tl = staging.join("opt/tracelab");
    std::fs::create_dir_all(&tl)?;
    write_executable(&tl.join("guest-init"), GUEST_INIT)?;
    // Debian bullseye ships perf as `perf_5.10` (bookworm as `perf`); collectors ask for `perf`.
    let local_bin = staging.join("usr/local/bin");
    std::fs::create_dir_all(&local_bin)?;
    let _ = std::fs::remove_file(local_bin.join("perf"));
    if let Some(versioned) = versioned_perf(&staging.join("usr/bin")) {
        std::os::unix::fs::symlink(Path::new("/usr/bin").join(versioned), local_bin.join("perf"))?;
    }
    let _ = std::fs::remove_file(local_bin.join("dotnet"));
    std::os::unix::fs::symlink(dotnet.join("dotnet"), local_bin.join("dotnet"))?;
    let used_mb = dir_size(&staging)? / (1 << 20);
    let size_mb = used_mb + used_mb / 4 + 1024;
    let tmp_disk = disk.with_extension("ext4.tmp");
    let _ = std::fs::remove_file(&tmp_disk);
    run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "tracelab", "-E", "root_owner=0:0", "-d"])
            .arg(&staging)
            .arg(&tmp_disk)
            .arg(format!("{size_mb}M")),
        "mkfs.ext4 -d (guest root disk)",
    )?;
    std::fs::rename(&tmp_disk, &disk)?;
    std::fs::remove_dir_all(&staging)?;
    std::fs::write(&stamp, inputs)?;
    Ok(disk)
}

/// `perf_X.Y` in a rootfs's `usr/bin` when it has no plain `perf`.
fn versioned_perf(usr_bin: &Path) -> Option<String> {
    if usr_bin.join("perf").exists() {
        return None;
    }
    let mut found: Vec<String> = std::fs::read_dir(usr_bin)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.strip_prefix("perf_").is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit())))
        .collect();
    found.sort();
    found.pop()
}

fn write_executable(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn dir_size(dir: &Path) -> Result<u64> {
    let out = run(Command::new("du").args(["-sb"]).arg(dir), "du")?;
    out.split_whitespace().next().and_then(|n| n.parse().ok()).context("du printed no size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_from_one_line_and_deb822_sources() {
        let one = "# comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\n";
        assert_eq!(mirror_from_sources(one).as_deref(), Some("http://mirror.example/debian"));
        let deb822 = "Types: deb\nURIs: http://m.example/debian-security\n\nTypes: deb\nURIs: http://m.example/debian/\nSuites: x\n";
        assert_eq!(mirror_from_sources(deb822).as_deref(), Some("http://m.example/debian"));
        assert_eq!(mirror_from_sources("deb http://m.example/ubuntu jammy main"), None);
    }
}
