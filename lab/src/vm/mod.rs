//! qemu guests for the kernel matrix. Containers share the host's kernel, so each kernel of the
//! matrix boots in its own virtual machine: Debian's cloud kernel of a suite, or one built here
//! from Debian's source where no Debian kernel has an option we need ([`kernel_build`]); a root
//! disk per userland suite (bullseye for most, see [`image`]), software emulation (TCG: KVM does not work on the
//! machines this runs on), no network. A job goes in as a tar written onto a raw disk and the
//! results come back the same way, so neither side needs a loop mount or a shared folder (the
//! cloud kernels lack 9p).
//!
//! Emulation is slow and its timing unlike real hardware: guests are for counts and ratios
//! (does collection work, do stacks resolve, does the split come out), never for durations.

pub mod image;
pub mod kernel_build;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

pub use image::PreparedKernel;

/// A kernel of the matrix: the Debian suite whose `linux-image-cloud-amd64` provides it, or whose
/// `linux-source-*` it is built from ([`KernelSpec::build`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelSpec {
    /// The axis value users type (`--kernels 5.10,6.1`).
    pub label: &'static str,
    pub suite: &'static str,
    /// Extra kernel command line for this kernel under emulation.
    pub cmdline: &'static str,
    /// Suite of the guest's root disk ([`image::prepare_disk`]).
    pub rootfs: &'static str,
    /// Built here from Debian's source rather than taken from the archive (`None`: the suite's
    /// cloud kernel).
    pub build: Option<kernel_build::KernelBuild>,
}

/// The kernels of the matrix: one per supported Debian release, plus one built with user_events.
pub const KERNELS: &[KernelSpec] = &[
    KernelSpec { label: "5.10", suite: "bullseye", cmdline: "", rootfs: image::ROOTFS_SUITE, build: None },
    KernelSpec { label: "6.1", suite: "bookworm", cmdline: "", rootfs: image::ROOTFS_SUITE, build: None },
    // 6.12's SLUB allocator takes its per-CPU fast path with `cmpxchg16b %gs:…`, and under TCG
    // that path oopsed (`__kmalloc_noprof`, double faults, corrupted state elsewhere) in about
    // half the boots; `clearcpuid=cx16` hides the instruction from the kernel only (user space,
    // which .NET needs it in, still sees it), and SLUB takes its locked path.
    KernelSpec { label: "6.12", suite: "trixie", cmdline: "clearcpuid=cx16", rootfs: image::ROOTFS_SUITE, build: None },
    // No Debian kernel (5.10, 6.1, 6.12; cloud and generic) has CONFIG_USER_EVENTS, which
    // `dotnet-trace collect-linux` needs: this one is bookworm's linux-source-6.12 built with it.
    // Its userland is bookworm (glibc 2.36): collect-linux asks for glibc ≥ 2.35. Same 6.12 SLUB
    // path under TCG as trixie's, so the same `clearcpuid=cx16`.
    KernelSpec {
        label: USER_EVENTS_KERNEL,
        suite: "bookworm",
        cmdline: "clearcpuid=cx16",
        rootfs: "bookworm",
        build: Some(kernel_build::USER_EVENTS_6_12),
    },
];

/// The label of the kernel built with CONFIG_USER_EVENTS (what collect-linux scenarios run on).
pub const USER_EVENTS_KERNEL: &str = "6.12-user-events";

/// The kernels a run without `--kernels` boots: Debian's own. The built kernel runs the scenarios
/// that need it (`--kernels 6.12-user-events`; its own nightly job).
pub fn default_kernels() -> Vec<KernelSpec> {
    KERNELS.iter().filter(|k| k.build.is_none()).cloned().collect()
}

/// Looks a kernel up by its label (`6.1`) or suite (`bookworm`: Debian's own kernel of it).
pub fn kernel_spec(name: &str) -> Result<KernelSpec> {
    let by_label = KERNELS.iter().find(|k| k.label == name);
    by_label.or_else(|| KERNELS.iter().find(|k| k.suite == name && k.build.is_none())).cloned().with_context(|| {
        let known: Vec<String> = KERNELS.iter().map(|k| format!("{} ({})", k.label, k.suite)).collect();
        format!("unknown kernel `{name}`; the matrix has {}", known.join(", "))
    })
}

/// What to run in a guest: files to place (host path → absolute guest path) and a shell script.
/// The script's working folder is `/opt/tracelab/job`; whatever it leaves in `/opt/tracelab/out`
/// comes back.
#[derive(Clone, Debug, Default)]
pub struct GuestJob {
    pub script: String,
    pub files: Vec<(PathBuf, PathBuf)>,
}

impl GuestJob {
    pub fn new(script: impl Into<String>) -> GuestJob {
        GuestJob { script: script.into(), files: Vec::new() }
    }
    /// Places the host file or folder `host` at `guest` (absolute) in the guest.
    pub fn with(mut self, host: impl Into<PathBuf>, guest: impl Into<PathBuf>) -> GuestJob {
        self.files.push((host.into(), guest.into()));
        self
    }

    /// Writes the job as one tar (paths relative to `/`, unpacked there by the guest init).
    fn write_tar(&self, out: &Path) -> Result<()> {
        let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
        let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
        tar.follow_symlinks(false);
        let mut header = tar::Header::new_gnu();
        header.set_size(self.script.len() as u64);
        header.set_mode(0o755);
        header.set_mtime(now_unix());
        header.set_cksum();
        tar.append_data(&mut header, "opt/tracelab/job/run.sh", self.script.as_bytes())?;
        for (host, guest) in &self.files {
            let rel = guest.strip_prefix("/").with_context(|| format!("guest path {} is not absolute", guest.display()))?;
            if host.is_dir() {
                tar.append_dir_all(rel, host).with_context(|| format!("cannot pack {}", host.display()))?;
            } else {
                tar.append_path_with_name(host, rel).with_context(|| format!("cannot pack {}", host.display()))?;
            }
        }
        tar.into_inner()?.flush()?;
        Ok(())
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The emulated CPU: Nehalem (x86-64-v2: SSE4.2, POPCNT, CMPXCHG16B, which .NET needs). With
/// `-cpu max` trixie's 6.12 kernel crashed under TCG in most boots (oopses in SLUB, ACPI, devtmpfs
/// with garbage in the saved EFLAGS' upper half; also a SIGILL in user space), with or without
/// 5-level paging, AVX or PKU and with single-threaded TCG too; with Nehalem 3 of 3 boots were
/// clean and the kernels of 5.10 and 6.1 run as before. Guests measure counts and ratios, so the
/// missing AVX costs nothing but JIT code paths nobody scores.
pub const DEFAULT_CPU: &str = "Nehalem";

/// Software emulation (KVM hangs on the machines this runs on), one host thread per guest CPU.
pub const DEFAULT_ACCEL: &str = "tcg";

/// Guest size and limits.
#[derive(Clone, Debug)]
pub struct BootOptions {
    pub memory_mb: u64,
    pub cpus: u32,
    /// qemu's `-cpu` model (see [`DEFAULT_CPU`]; `TRACELAB_QEMU_CPU` overrides).
    pub cpu: String,
    /// qemu's `-accel` (see [`DEFAULT_ACCEL`]; `TRACELAB_QEMU_ACCEL` overrides).
    pub accel: String,
    /// Size of the results disk; the guest's `out` folder must fit as a tar.
    pub results_mb: u64,
    /// Wall-clock limit for the whole boot (the guest is killed after it).
    pub timeout: Duration,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            memory_mb: 3072,
            cpus: 2,
            cpu: std::env::var("TRACELAB_QEMU_CPU").unwrap_or_else(|_| DEFAULT_CPU.to_string()),
            accel: std::env::var("TRACELAB_QEMU_ACCEL").unwrap_or_else(|_| DEFAULT_ACCEL.to_string()),
            results_mb: 1024,
            timeout: Duration::from_secs(900),
        }
    }
}

/// What came back from one boot.
#[derive(Debug)]
pub struct GuestOutcome {
    /// The job script's exit code; `None` when the guest never reported one (it crashed, hung,
    /// or the job disk did not unpack: see `console`).
    pub exit_code: Option<i32>,
    /// `uname -r` as the guest reported it.
    pub guest_kernel: Option<String>,
    /// The guest's `/opt/tracelab/out`, unpacked on the host (`job.log` holds the job's output).
    pub out_dir: PathBuf,
    /// The serial console transcript.
    pub console_log: PathBuf,
    pub wall: Duration,
}

impl GuestOutcome {
    /// The last lines of the console, for error messages.
    pub fn console_tail(&self, lines: usize) -> String {
        tail_of(&self.console_log, lines)
    }
    pub fn job_log(&self) -> String {
        std::fs::read_to_string(self.out_dir.join("job.log")).unwrap_or_default()
    }
}

/// `Err(reason)` when this machine cannot boot guests (for tests' prerequisite checks).
pub fn boot_prerequisites() -> std::result::Result<(), String> {
    for (program, package) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("mkfs.ext4", "e2fsprogs"),
        ("debootstrap", "debootstrap"),
        ("dpkg-deb", "dpkg"),
        ("apt-get", "apt"),
    ] {
        harness::host::environment::require_program(program).map_err(|e| format!("{e} (`apt-get install {package}`)"))?;
    }
    Ok(())
}

/// Boots `kernel` on the shared root disk, runs `job`, and returns what came back. Work files
/// (job and results disks, console log, unpacked results) go under `work_dir`. The root disk is
/// opened with `snapshot=on` (not qemu's global `-snapshot`, which would also discard what the
/// guest writes onto the results disk): a guest never changes the cached image.
pub fn boot(kernel: &PreparedKernel, root_disk: &Path, job: &GuestJob, opts: &BootOptions, work_dir: &Path) -> Result<GuestOutcome> {
    std::fs::create_dir_all(work_dir).with_context(|| format!("cannot create {}", work_dir.display()))?;
    let job_disk = work_dir.join("job.tar");
    job.write_tar(&job_disk)?;
    pad_to_sectors(&job_disk)?;
    let results_disk = work_dir.join("results.img");
    {
        let f = std::fs::File::create(&results_disk)?;
        f.set_len(opts.results_mb << 20)?;
    }
    let console_log = work_dir.join("console.log");
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-machine", "q35", "-accel", &opts.accel, "-cpu", &opts.cpu])
        .args(["-smp", &opts.cpus.to_string(), "-m", &format!("{}M", opts.memory_mb)])
        .args(["-nic", "none", "-display", "none", "-no-reboot"])
        .args(["-serial", "stdio", "-monitor", "none"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&kernel.initramfs)
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=1 oops=panic quiet loglevel=3 rw {} {}",
            kernel.spec.cmdline,
            std::env::var("TRACELAB_QEMU_APPEND").unwrap_or_default()
        ))
        .arg("-drive")
        .arg(drive(root_disk, "snapshot=on"))
        .arg("-drive")
        .arg(drive(&results_disk, "snapshot=off"))
        .arg("-drive")
        .arg(drive(&job_disk, "snapshot=off,readonly=on"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd.spawn().context("could not start qemu-system-x86_64 (`apt-get install qemu-system-x86`)")?;
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let log_path = console_log.clone();
    let reader = std::thread::spawn(move || -> (Option<i32>, Option<String>) {
        let mut log = std::fs::File::create(&log_path).ok();
        let (mut exit, mut uname) = (None, None);
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line).trim_end_matches('\r').to_string();
            if let Some(f) = log.as_mut() {
                let _ = writeln!(f, "{line}");
            }
            if let Some(rest) = line.strip_prefix("TRACELAB-GUEST-EXIT ") {
                exit = rest.trim().parse().ok();
            }
            if let Some(rest) = line.strip_prefix("TRACELAB-GUEST-START ") {
                uname = rest.split_whitespace().next().map(str::to_string);
            }
        }
        (exit, uname)
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > opts.timeout {
            let _ = child.kill();
            let _ = child.wait();
            let tail = tail_of(&console_log, 30);
            bail!(
                "the {} guest ({}) did not power off within {:?}; killed. Console ({}):\n{tail}",
                kernel.spec.label,
                kernel.release,
                opts.timeout,
                console_log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let wall = started.elapsed();
    let (exit_code, guest_kernel) = reader.join().unwrap_or((None, None));
    let qemu_err = err_reader.join().unwrap_or_default();
    if !status.success() && exit_code.is_none() {
        bail!(
            "qemu failed ({status}) booting the {} kernel: {}\nConsole ({}):\n{}",
            kernel.spec.label,
            qemu_err.trim(),
            console_log.display(),
            tail_of(&console_log, 30)
        );
    }
    let out_dir = work_dir.join("out");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    if exit_code.is_some() {
        unpack_results(&results_disk, &out_dir)?;
    }
    let _ = std::fs::remove_file(&results_disk);
    let _ = std::fs::remove_file(&job_disk);
    Ok(GuestOutcome { exit_code, guest_kernel, out_dir, console_log, wall })
}

fn drive(path: &Path, extra: &str) -> String {
    // qemu's option syntax doubles commas inside values.
    format!("file={},format=raw,if=virtio,cache=unsafe,{extra}", path.display().to_string().replace(',', ",,"))
}

/// qemu rounds a raw image down to whole sectors; pad so the tar's end is not cut off.
fn pad_to_sectors(path: &Path) -> Result<()> {
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    f.set_len(len.div_ceil(512 * 1024) * 512 * 1024 + 512 * 1024)?;
    Ok(())
}

fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Reads the tar the guest wrote onto the raw results disk.
pub fn unpack_results(results_disk: &Path, out_dir: &Path) -> Result<()> {
    let file = std::fs::File::open(results_disk).with_context(|| format!("cannot open {}", results_disk.display()))?;
    let mut archive = tar::Archive::new(BufReader::new(file));
    archive.set_preserve_permissions(false);
    archive.set_overwrite(true);
    archive.unpack(out_dir).with_context(|| {
        format!(
            "the guest's results disk {} is not a readable tar (the guest may have died while writing it)",
            results_disk.display()
        )
    })
}

/// The user-visible name of a guest environment (`qemu-6.1`), used in result folder names.
pub fn environment_label(kernel: &KernelSpec) -> String {
    format!("qemu-{}", kernel.label)
}

/// Runs one job on one kernel: prepares the kernel and disk (cached) and boots.
pub fn run_job(kernel: &KernelSpec, job: &GuestJob, opts: &BootOptions, work_dir: &Path) -> Result<(PreparedKernel, GuestOutcome)> {
    let (prepared, disk) = {
        // Two runs preparing the cache at once (a test beside a matrix run) take turns.
        std::fs::create_dir_all(image::cache_dir())?;
        let lock_path = image::cache_dir().join("prepare.lock");
        let lock = std::fs::File::create(&lock_path).with_context(|| format!("cannot create {}", lock_path.display()))?;
        lock.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
        let step = harness::host::progress::step("images", format!("kernel {} and guest disk", kernel.label));
        let prepared = (image::prepare_kernel(kernel)?, image::prepare_disk(kernel.rootfs)?);
        step.done("ready");
        prepared
    };
    let step = harness::host::progress::step("launch", format!("booting kernel {} in qemu", kernel.label));
    let outcome = boot(&prepared, &disk, job, opts, work_dir)?;
    step.done("guest finished");
    Ok((prepared, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lookup_by_label_or_suite() {
        assert_eq!(kernel_spec("6.1").unwrap().suite, "bookworm");
        assert_eq!(kernel_spec("trixie").unwrap().label, "6.12");
        // The built kernel's suite is its userland's; the suite still names Debian's own kernel.
        assert_eq!(kernel_spec("bookworm").unwrap().label, "6.1");
        assert_eq!(kernel_spec(USER_EVENTS_KERNEL).unwrap().rootfs, "bookworm");
        assert!(default_kernels().iter().all(|k| k.label != USER_EVENTS_KERNEL));
        let err = kernel_spec("4.19").unwrap_err().to_string();
        assert!(err.contains("5.10 (bullseye)"), "{err}");
    }

    #[test]
    fn job_tar_round_trips_through_a_raw_disk() {
        let dir = tempfile::tempdir().unwrap();
        let payload = dir.path().join("payload.txt");
        std::fs::write(&payload, "hello guest").unwrap();
        let job = GuestJob::new("echo hi\n").with(&payload, "/opt/tracelab/job/payload.txt");
        let disk = dir.path().join("job.tar");
        job.write_tar(&disk).unwrap();
        pad_to_sectors(&disk).unwrap();
        assert_eq!(std::fs::metadata(&disk).unwrap().len() % 512, 0);
        let out = dir.path().join("out");
        unpack_results(&disk, &out).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("opt/tracelab/job/payload.txt")).unwrap(), "hello guest");
        assert_eq!(std::fs::read_to_string(out.join("opt/tracelab/job/run.sh")).unwrap(), "echo hi\n");
    }

    #[test]
    fn garbage_results_disk_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("results.img");
        std::fs::write(&disk, vec![0x41u8; 4096]).unwrap();
        let err = format!("{:#}", unpack_results(&disk, &dir.path().join("out")).unwrap_err());
        assert!(err.contains("results.img") && err.contains("not a readable tar"), "{err}");
    }
}
