//! What a scenario (or the test suite) needs from the machine, and the one installer that gets it:
//! Debian packages in ONE apt transaction, tracefs, a Docker engine, the offline .NET SDK and the
//! container images. `cargo xtask scenario`, `cargo xtask test`, `cargo xtask setup`, `.ci/run`
//! and `ci/setup.sh` all go through here, so there is one list of needs with one reason each.
//!
//! The planner is a pure function of what [`Observe`] answered, so it is unit-tested on answers
//! recorded on a real machine (`lab/tests/data/prereq/*/`, each with the command that made it).
//! It prints within seconds, before any build: a missing prerequisite must never surface after the
//! workload or an image was built.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use harness::collect::CollectorKind;
use harness::run::TargetKind;
use harness::scenario::Scenario;

/// A Debian package and why tracelab needs it. Owned-or-static: Ubuntu's perf package is named
/// after the running kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Package {
    pub name: Cow<'static, str>,
    pub why: &'static str,
}

const fn pkg(name: &'static str, why: &'static str) -> Package {
    Package { name: Cow::Borrowed(name), why }
}

// One list of what each feature needs. `wrk` and `bpftrace` are not here: loopback load is our own
// `loadgen` crate and the perf-offcpu bpftrace backend is not built (collect::offcpu).
pub const PERF: &[Package] = &[pkg("linux-perf", "perf-cpu / perf-offcpu collectors record with perf")];
pub const LTTNG: &[Package] = &[
    pkg("lttng-tools", "the lttng collector drives lttng-sessiond / lttng"),
    pkg("liblttng-ust-dev", "LTTng-UST on the host (the runtime's provider loads it)"),
    pkg("babeltrace2", "LTTng traces are checked against babeltrace2"),
];
pub const IMAGES: &[Package] = &[
    pkg("debootstrap", "builds the root file system of each container image suite"),
    pkg("tar", "packs root file systems into image layers"),
    pkg("xz-utils", "unpacks .xz archives (the .NET SDK, compressed modules)"),
];
pub const KERNELS: &[Package] = &[
    pkg("qemu-system-x86", "the kernel matrix boots Debian kernels in qemu guests"),
    pkg("qemu-utils", "the kernel matrix makes the guests' disks"),
    pkg("busybox-static", "the guests' initramfs runs a static busybox"),
    pkg("e2fsprogs", "mkfs.ext4 makes the guests' root disk"),
    pkg("zstd", "newer Debian kernels ship zstd-compressed modules"),
    pkg("binutils", "objcopy splits debug files (split-debug symbol tests)"),
    pkg("debian-archive-keyring", "debootstrap and apt-get download verify the guests' packages"),
];
/// What building the kernel with CONFIG_USER_EVENTS takes (vm::kernel_build): Debian's source and
/// the kernel's build tools.
pub const KERNEL_BUILD: &[Package] = &[
    pkg("linux-source-6.12", "the 6.12-user-events kernel is built from Debian's source (no Debian kernel has CONFIG_USER_EVENTS)"),
    pkg("build-essential", "make and gcc build the 6.12-user-events kernel"),
    pkg("bc", "the kernel build computes constants with bc"),
    pkg("bison", "the kernel's Kconfig parser is generated with bison"),
    pkg("flex", "the kernel's Kconfig lexer is generated with flex"),
    pkg("libelf-dev", "objtool (ORC unwinder) reads ELF with libelf"),
    pkg("libssl-dev", "the kernel build signs and reads certificates with OpenSSL"),
    pkg("dwarves", "pahole, which the kernel build asks for when BTF is on"),
];
pub const REPORT_TESTS: &[Package] = &[
    pkg("chromium", "the merged HTML report is opened in headless Chromium by a test"),
    pkg("fonts-dejavu-core", "headless Chromium needs a font to render the report"),
    pkg("libxml2-utils", "xmllint validates junit.xml against the strict JUnit schema"),
    pkg("golang-go", "`go tool pprof` reads the pprof profiles a run writes (a test checks them with it)"),
];
pub const SYMBOL_TESTS: &[Package] = &[pkg(
    "libc6-dbg",
    "symbol tests name libc's static functions (__libc_start_call_main) from /usr/lib/debug, as perf does",
)];
pub const HOG: &[Package] = &[pkg("stress-ng", "`soak --hog` loads every core beside the scenario")];
pub const PODS: &[Package] = &[
    pkg("podman", "the pod target plays Pod YAML with `podman kube play`"),
    pkg("runc", "podman's OCI runtime here (crun fails: \"cgroups in hybrid mode not supported\")"),
    pkg("catatonit", "the init of a pod's infra container"),
];
pub const DOCKER: Package = pkg("docker.io", "container and sidecar targets, image builds (no Docker engine installed)");

/// Debian's `qemu-system-x86` of bookworm (7.2) "Breaks" the backports `qemu-utils` these machines
/// ship, so when qemu-utils comes from backports qemu-system-x86 must come from there too.
pub const BACKPORTS_LIST: &str = "/etc/apt/sources.list.d/tracelab-backports.list";
pub const BACKPORTS_LINE: &str = "deb http://deb.debian.org/debian bookworm-backports main";
/// qemu-system-x86 of backports needs these at backports versions too, and apt resolves
/// dependencies from the default release: each is named with `/bookworm-backports` (seen on a
/// fresh machine: "Depends: qemu-system-data (> 1:10.0.2+ds~) but 1:7.2+dfsg-7+deb12u18 is to be
/// installed", then the same for seabios).
pub const QEMU_BACKPORTS_COMPANIONS: [&str; 3] = ["qemu-system-common", "qemu-system-data", "seabios"];

/// What the machine answered; everything the planner decides on. The real implementation asks the
/// machine ([`Machine`]); tests read answers recorded from it ([`Recorded`]).
pub trait Observe {
    /// stdout of `dpkg-query -W -f '${Package} ${Status} ${Version}\n' PACKAGES…` (a package dpkg
    /// has never heard of has no line; dpkg-query names it on stderr).
    fn dpkg(&self, packages: &[&str]) -> String;
    /// `docker info --format '{{.ServerVersion}}'` when the engine answers, else None.
    fn docker(&self) -> Option<String>;
    /// `mountpoint -q /sys/kernel/tracing` succeeded.
    fn tracefs(&self) -> bool;
    /// `id -u`.
    fn uid(&self) -> u32;
    /// `docker images --format '{{.Repository}}:{{.Tag}}'`, one per line (empty when Docker is down).
    fn images(&self) -> String;
    /// The .NET 10 SDK's root, when one is installed (DOTNET_ROOT, PATH, ~/.dotnet).
    fn dotnet(&self) -> Option<PathBuf>;
    /// `/proc/sys/kernel/perf_event_mlock_kb` (None when it cannot be read, or was not recorded).
    fn perf_mlock_kb(&self) -> Option<u64>;
    /// A working `perf` (or `perf_X.Y`) is on PATH, as `doctor` and the collectors find it
    /// (recorded answers: yes).
    fn perf_runs(&self) -> bool {
        true
    }
    /// A cargo subcommand binary (`cargo-fuzz`) is installed (recorded answers: yes).
    fn cargo_tool(&self, _binary: &str) -> bool {
        true
    }
    /// `rustup run nightly rustc --version` works (recorded answers: yes).
    fn nightly(&self) -> bool {
        true
    }
    /// podman's configuration for pods is in place ([`harness::host::podman::CONF_DROP_IN`])
    /// (recorded answers: yes).
    fn podman_configured(&self) -> bool {
        true
    }
}

/// The machine this process runs on.
pub struct Machine;

fn output(program: &str, args: &[&str]) -> Option<String> {
    harness::host::environment::probe(program, args, Duration::from_secs(20))
}

impl Observe for Machine {
    fn perf_runs(&self) -> bool {
        harness::host::environment::perf_binary().is_some()
    }
    fn cargo_tool(&self, binary: &str) -> bool {
        let home = std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
        home.is_some_and(|h| h.join("bin").join(binary).is_file()) || output(binary, &["--version"]).is_some()
    }
    fn nightly(&self) -> bool {
        output("rustup", &["run", "nightly", "rustc", "--version"]).is_some()
    }
    fn podman_configured(&self) -> bool {
        harness::host::podman::configured()
    }
    fn dpkg(&self, packages: &[&str]) -> String {
        // Exit status 1 when a package is unknown; stdout still lists the known ones.
        Command::new("dpkg-query")
            .args(["-W", "-f", "${Package} ${Status} ${Version}\n"])
            .args(packages)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
    fn docker(&self) -> Option<String> {
        output("docker", &["info", "--format", "{{.ServerVersion}}"]).filter(|v| !v.is_empty())
    }
    fn tracefs(&self) -> bool {
        Command::new("mountpoint").args(["-q", "/sys/kernel/tracing"]).status().is_ok_and(|s| s.success())
    }
    fn uid(&self) -> u32 {
        output("id", &["-u"]).and_then(|u| u.parse().ok()).unwrap_or(u32::MAX)
    }
    fn images(&self) -> String {
        output("docker", &["images", "--format", "{{.Repository}}:{{.Tag}}"]).unwrap_or_default()
    }
    fn dotnet(&self) -> Option<PathBuf> {
        // An empty shared dir makes locate_with only look, never run the installer.
        let search = harness::host::dotnet::Search { shared_dir: PathBuf::new(), ..harness::host::dotnet::Search::from_env() };
        harness::host::dotnet::Dotnet::locate_with(&search).ok().map(|d| d.root).or_else(offline_sdk)
    }
    fn perf_mlock_kb(&self) -> Option<u64> {
        harness::collect::offcpu::perf_mlock_kb()
    }
}

/// An SDK the offline installer already unpacked (it marks its folders with `.tracelab-sdk`):
/// `install-dotnet.sh` then only prints its path, so the plan need not list it.
fn offline_sdk() -> Option<PathBuf> {
    let mut parents = vec![PathBuf::from("/opt/tracelab-dotnet")];
    parents.extend(std::env::var_os("TRACELAB_DOTNET_ROOT").map(PathBuf::from).and_then(|r| r.parent().map(Path::to_path_buf)));
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    parents.extend(cache.map(|c| c.join("tracelab-dotnet")));
    parents
        .iter()
        .filter_map(|p| std::fs::read_dir(p).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()))
        .find(|root| root.join(".tracelab-sdk").is_file() && root.join("dotnet").is_file())
}

/// Answers recorded into a folder, one file per question (see lab/tests/data/prereq/README.md).
pub struct Recorded {
    pub dir: PathBuf,
}

impl Recorded {
    fn read(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name)).ok()
    }
}

impl Observe for Recorded {
    fn dpkg(&self, packages: &[&str]) -> String {
        let all = self.read("dpkg-query.out").unwrap_or_default();
        all.lines().filter(|l| packages.contains(&l.split(' ').next().unwrap_or(""))).map(|l| format!("{l}\n")).collect()
    }
    fn docker(&self) -> Option<String> {
        let status = self.read("docker-info.status")?;
        (status.trim() == "0").then(|| self.read("docker-info.out").unwrap_or_default().trim().to_string())
    }
    fn tracefs(&self) -> bool {
        self.read("mountpoint.status").is_some_and(|s| s.trim() == "0")
    }
    fn uid(&self) -> u32 {
        self.read("id-u.out").and_then(|u| u.trim().parse().ok()).unwrap_or(u32::MAX)
    }
    fn images(&self) -> String {
        self.read("docker-images.out").unwrap_or_default()
    }
    fn dotnet(&self) -> Option<PathBuf> {
        self.read("dotnet.out").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).map(PathBuf::from)
    }
    fn perf_mlock_kb(&self) -> Option<u64> {
        self.read("perf_event_mlock_kb").and_then(|s| s.trim().parse().ok())
    }
}

/// Why off-CPU runs in a container need a larger perf buffer allowance: a root perf outside the
/// host's init namespace lacks CAP_IPC_LOCK, so its buffers are bounded by this sysctl, and the
/// default (516 KiB per CPU) loses 2–3 % of sched_switch records with their 16 KiB stacks
/// (measured: 24 lost of 822 on off-cpu, 436 of 19 419 on on-vs-off-cpu, idle machine).
const OFFCPU_BUFFERS: &str = "perf-offcpu in a container keeps its stacks only with 4 MiB ring buffers per CPU; without CAP_IPC_LOCK perf may lock no more than this sysctl allows";

/// What one installed package looks like in dpkg-query's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub version: String,
}

/// Packages dpkg reports as `install ok installed` (other states — config-files, half-installed —
/// need a reinstall too).
pub fn parse_dpkg(text: &str) -> Vec<Installed> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() >= 4 && f[1..4] == ["install", "ok", "installed"])
                .then(|| Installed { name: f[0].to_string(), version: f.get(4).unwrap_or(&"").to_string() })
        })
        .collect()
}

/// What a plan needs, before looking at the machine.
#[derive(Clone, Debug, Default)]
pub struct Needs {
    /// What the plan is for (printed).
    pub purpose: String,
    pub packages: Vec<Package>,
    pub tracefs: Option<&'static str>,
    /// perf's ring buffers must be allowed [`harness::collect::offcpu::perf_mlock_kb_needed`].
    pub perf_buffers: Option<&'static str>,
    pub docker: Option<&'static str>,
    /// Image suites to build, with why.
    pub images: Vec<(String, String)>,
    /// Cargo subcommands installed with `cargo install --locked` (crate = binary), with why.
    pub cargo_tools: Vec<(&'static str, &'static str)>,
    /// A nightly toolchain (cargo-fuzz builds with sanitizers), with why.
    pub nightly: Option<&'static str>,
    /// podman set up for pods (runtime, ulimits), with why.
    pub pods: Option<&'static str>,
}

impl Needs {
    fn add(&mut self, pkgs: &[Package]) {
        for p in pkgs {
            if !self.packages.iter().any(|q| q.name == p.name) {
                self.packages.push(p.clone());
            }
        }
    }

    /// What one scenario needs on `target` (default: the scenario's, else container, as the engine
    /// chooses once a Docker engine answers — which this plan makes sure of).
    pub fn for_scenario(scenario: &Scenario, target: Option<TargetKind>, image: Option<&str>) -> Needs {
        let target = target.or(scenario.target).unwrap_or(TargetKind::Container);
        let mut needs = Needs { purpose: format!("scenario {} ({})", scenario.name, target.as_str()), ..Needs::default() };
        let kinds: BTreeSet<CollectorKind> = scenario.collectors.iter().map(|c| c.kind()).collect();
        // In a container, perf and the lttng tools are the image's own (collect::perf picks the
        // container's perf; collect::lttng::session enters the container's namespaces), so only
        // a host target needs them on the host.
        for kind in kinds.iter().filter(|_| target == TargetKind::Host) {
            match kind {
                CollectorKind::PerfCpu | CollectorKind::PerfOffcpu | CollectorKind::PerfOffwake | CollectorKind::PerfSyscalls => {
                    needs.add(PERF)
                }
                CollectorKind::Lttng => needs.add(LTTNG),
                // EventPipe is our own client; dotnet-trace comes from the offline NuGet feed.
                // Dumps: our client, and the runtime's own createdump.
                CollectorKind::EventPipe | CollectorKind::DotnetTrace | CollectorKind::Dump => {}
                // dotnet-trace's own recorder (librecordtrace.so) records through perf_event_open;
                // it needs tracefs (below) and a kernel with user_events, which no package gives.
                CollectorKind::CollectLinux => {}
                // Runs only in a sidecar of the bullseye image, with the image's packages.
                CollectorKind::Perfcollect => {}
            }
        }
        let tracepoint_kinds = [CollectorKind::PerfOffcpu, CollectorKind::PerfOffwake, CollectorKind::PerfSyscalls, CollectorKind::CollectLinux];
        if let Some(kind) = tracepoint_kinds.iter().find(|k| kinds.contains(k)) {
            needs.tracefs = Some(match kind {
                CollectorKind::PerfOffcpu => "perf-offcpu records sched:sched_switch from tracefs",
                CollectorKind::PerfOffwake => "perf-offwake records sched:sched_switch and sched:sched_waking from tracefs",
                CollectorKind::CollectLinux => "collect-linux registers the runtime's events in tracefs's user_events_data",
                _ => "perf-syscalls records syscalls:sys_enter_* from tracefs",
            });
        }
        if target != TargetKind::Host {
            if tracepoint_kinds.iter().any(|k| kinds.contains(k)) {
                needs.perf_buffers = Some(OFFCPU_BUFFERS);
            }
            needs.docker = Some(if target == TargetKind::Pod {
                "the pod target's images are built in Docker, then moved into podman"
            } else {
                "the container / sidecar target runs the app in Docker"
            });
            if target == TargetKind::Pod {
                needs.add(PODS);
                needs.pods = Some("the pod target runs the app in a pod (`podman kube play`)");
            }
            needs.add(IMAGES);
            let suite = image.map(String::from).or_else(|| scenario.image.clone()).unwrap_or_else(|| harness::host::image::DEFAULT_SUITE.into());
            needs.images.push((suite.clone(), format!("the {} target runs in tracelab/runtime:{suite}", target.as_str())));
        }
        needs
    }

    /// The same needs in the package names of the running distro: Ubuntu ships perf per kernel
    /// (`linux-tools-RELEASE`), Debian as `linux-perf`.
    pub fn for_distro(mut self, os_id: &str, kernel_release: &str) -> Needs {
        if os_id == "ubuntu" {
            if let Some(i) = self.packages.iter().position(|p| p.name == "linux-perf") {
                self.packages[i] = Package {
                    name: format!("linux-tools-{kernel_release}").into(),
                    why: "perf for the running kernel (Ubuntu builds it per kernel)",
                };
                self.packages.insert(i, pkg("linux-tools-common", "the `perf` wrapper that picks linux-tools-RELEASE"));
            }
            // Debian's kernel source is no Ubuntu package (one unknown name fails the whole apt
            // transaction): there the 6.12-user-events kernel says what it lacks when it is built.
            self.packages.retain(|p| !p.name.starts_with("linux-source-"));
        }
        self
    }

    /// What `cargo xtask fuzz` needs: libFuzzer through cargo-fuzz on a nightly toolchain.
    pub fn for_fuzzing() -> Needs {
        Needs {
            purpose: "fuzzing (cargo xtask fuzz)".into(),
            cargo_tools: vec![("cargo-fuzz", "builds and runs the libFuzzer targets under crates/*/fuzz")],
            nightly: Some("cargo-fuzz instruments with -Zsanitizer, which only nightly rustc has"),
            ..Needs::default()
        }
    }

    /// What `cargo xtask bench perf` needs besides perf: samply, its second peer tool.
    pub fn for_perf_bench() -> Needs {
        Needs {
            purpose: "the perf benchmark's peer tools (cargo xtask bench perf)".into(),
            packages: [PERF, &[pkg("time", "GNU time measures each benchmarked process's own peak RSS")]].concat(),
            cargo_tools: vec![("samply", "`samply import` is the perf benchmark's second peer (perf.data → a Firefox Profiler file)")],
            ..Needs::default()
        }
    }

    /// What `cargo nextest run --workspace` needs for its real-run tests not to skip. Images are
    /// built by the tests that use them (each suite once, cached by input hash).
    pub fn for_tests() -> Needs {
        let mut needs = Needs { purpose: "the test suite (cargo nextest run --workspace)".into(), ..Needs::default() };
        for pkgs in [PERF, LTTNG, IMAGES, KERNELS, KERNEL_BUILD, REPORT_TESTS, SYMBOL_TESTS, HOG, PODS] {
            needs.add(pkgs);
        }
        needs.pods = Some("pod-target tests play pods with podman");
        needs.tracefs = Some("perf-offcpu tests record sched:sched_switch from tracefs");
        needs.perf_buffers = Some(OFFCPU_BUFFERS);
        needs.docker = Some("container, sidecar and capability-matrix tests run in Docker");
        needs
    }
}

/// One step of a plan: what, why, and the exact command a person would type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Writes the bookworm-backports source (qemu-system-x86 must come from there).
    Backports,
    AptUpdate,
    /// ONE `apt-get install` transaction; `backports` packages get `/bookworm-backports`.
    AptInstall { packages: Vec<(String, String)>, backports: Vec<String> },
    MountTracefs { why: String },
    /// Raises `kernel.perf_event_mlock_kb` (not namespaced: the host's value binds containers).
    RaisePerfMlock { from: u64, why: String },
    StartDocker { why: String },
    /// Writes podman's drop-in ([`harness::host::podman::CONF_DROP_IN`]): runc, ulimits.
    ConfigurePodman { why: String },
    InstallDotnet,
    BuildImage { suite: String, why: String },
    CargoInstall { krate: String, why: String },
    /// Offline machines have the toolchain or not: rustup needs its server for this.
    RustupNightly { why: String },
}

impl Step {
    /// The shell command a person (root) would run for this step.
    pub fn command(&self, shared: &Path) -> String {
        match self {
            Step::Backports => format!("echo '{BACKPORTS_LINE}' > {BACKPORTS_LIST}"),
            Step::AptUpdate => "apt-get update".into(),
            Step::AptInstall { packages, backports } => {
                let names: Vec<String> = packages
                    .iter()
                    .map(|(p, _)| if backports.contains(p) { format!("{p}/bookworm-backports") } else { p.clone() })
                    .collect();
                format!("DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}", names.join(" "))
            }
            Step::MountTracefs { .. } => "mount -t tracefs nodev /sys/kernel/tracing".into(),
            Step::RaisePerfMlock { .. } => {
                format!("sysctl -w kernel.perf_event_mlock_kb={}", harness::collect::offcpu::perf_mlock_kb_needed(harness::collect::offcpu::online_cpus()))
            }
            // Guarded: a user outside the docker group sees "not answering" while a daemon runs.
            Step::StartDocker { .. } => {
                "docker info >/dev/null 2>&1 || (dockerd --bridge=none --iptables=false >/tmp/tracelab-dockerd.log 2>&1 &)".into()
            }
            // One line a person can paste: the settings without the file's comment lines.
            Step::ConfigurePodman { .. } => format!(
                "mkdir -p /etc/containers/containers.conf.d && printf '{}' > {}",
                harness::host::podman::CONF_TEXT
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .map(|l| format!("{}\\n", l.replace('\'', "'\\''")))
                    .collect::<String>(),
                harness::host::podman::CONF_DROP_IN
            ),
            Step::InstallDotnet => format!("{}", shared.join("toolchains/install-dotnet.sh").display()),
            Step::BuildImage { suite, .. } => format!("cargo xtask images --suite {suite}"),
            Step::CargoInstall { krate, .. } => format!("cargo install --locked {krate}"),
            Step::RustupNightly { .. } => "rustup toolchain install nightly --profile minimal".into(),
        }
    }

    /// Whether the step needs root (the offline .NET installer falls back to ~/.cache without it).
    pub fn needs_root(&self) -> bool {
        !matches!(self, Step::InstallDotnet | Step::CargoInstall { .. } | Step::RustupNightly { .. })
    }

    /// Why, in one line.
    pub fn why(&self) -> String {
        match self {
            Step::Backports => "these machines ship qemu-utils from bookworm-backports; bookworm's qemu-system-x86 breaks it".into(),
            Step::AptUpdate => "fresh package lists for the install below".into(),
            Step::AptInstall { packages, .. } => {
                packages.iter().map(|(p, why)| format!("{p}: {why}")).collect::<Vec<_>>().join("; ")
            }
            Step::MountTracefs { why }
            | Step::StartDocker { why }
            | Step::ConfigurePodman { why }
            | Step::BuildImage { why, .. }
            | Step::CargoInstall { why, .. }
            | Step::RustupNightly { why } => why.clone(),
            Step::RaisePerfMlock { from, why } => format!("{why} (now {from} KiB)"),
            Step::InstallDotnet => "builds and runs the workloads (the offline .NET 10 SDK and NuGet feed)".into(),
        }
    }
}

/// What is missing on this machine for [`Needs`], as the steps that fix it, in order.
#[derive(Clone, Debug)]
pub struct Plan {
    pub purpose: String,
    pub steps: Vec<Step>,
    pub root: bool,
    /// Requirements already met (printed so a reader sees what was checked).
    pub present: Vec<String>,
}

impl Plan {
    pub fn for_scenario(scenario: &Scenario, target: Option<TargetKind>, image: Option<&str>) -> Plan {
        Plan::make(&here(Needs::for_scenario(scenario, target, image)), &Machine)
    }

    pub fn for_tests() -> Plan {
        Plan::make(&here(Needs::for_tests()), &Machine)
    }

    pub fn for_fuzzing() -> Plan {
        Plan::make(&Needs::for_fuzzing(), &Machine)
    }

    pub fn for_perf_bench() -> Plan {
        Plan::make(&here(Needs::for_perf_bench()), &Machine)
    }

    /// The pure planner: needs + recorded answers → steps.
    pub fn make(needs: &Needs, seen: &dyn Observe) -> Plan {
        let mut names: Vec<&str> = needs.packages.iter().map(|p| p.name.as_ref()).collect();
        names.extend(["docker.io", "docker-ce", "qemu-utils"]);
        let installed = parse_dpkg(&seen.dpkg(&names));
        let has = |n: &str| installed.iter().any(|i| i.name == n);
        let mut present = Vec::new();
        let mut to_install: Vec<(String, String)> = Vec::new();
        for p in &needs.packages {
            // The package is not the tool: `setup` said `present: package linux-perf` while perf
            // was not on PATH and `doctor` said MISS (its /usr/bin/perf removed, or a wrapper
            // that finds no perf for the running kernel). Checked as `doctor` checks it.
            let is_perf = p.name == "linux-perf" || (p.name.starts_with("linux-tools-") && p.name != "linux-tools-common");
            if has(&p.name) && is_perf && !seen.perf_runs() {
                to_install.push((
                    p.name.to_string(),
                    format!("{} (installed, but no working `perf` on PATH: `cargo xtask doctor` shows what it finds)", p.why),
                ));
            } else if has(&p.name) {
                present.push(format!("package {}", p.name));
            } else {
                to_install.push((p.name.to_string(), p.why.to_string()));
            }
        }
        let docker = needs.docker.and_then(|why| match seen.docker() {
            Some(v) => {
                present.push(format!("Docker engine {v}"));
                None
            }
            None => Some(why),
        });
        if docker.is_some() && !has("docker.io") && !has("docker-ce") {
            to_install.push((DOCKER.name.into(), DOCKER.why.into()));
        }
        let mut steps = Vec::new();
        if !to_install.is_empty() {
            let bpo = installed.iter().any(|i| i.name == "qemu-utils" && i.version.contains("~bpo12"));
            let mut backports: Vec<String> =
                to_install.iter().filter(|(p, _)| bpo && p == "qemu-system-x86").map(|(p, _)| p.clone()).collect();
            if !backports.is_empty() {
                steps.push(Step::Backports);
                for companion in QEMU_BACKPORTS_COMPANIONS {
                    backports.push(companion.to_string());
                    to_install.push((companion.to_string(), "qemu-system-x86 of backports needs it at the same release".to_string()));
                }
            }
            steps.push(Step::AptUpdate);
            steps.push(Step::AptInstall { packages: to_install, backports });
        }
        if let Some(why) = needs.tracefs {
            if seen.tracefs() {
                present.push("tracefs at /sys/kernel/tracing".into());
            } else {
                steps.push(Step::MountTracefs { why: why.into() });
            }
        }
        if let Some(why) = needs.perf_buffers {
            match seen.perf_mlock_kb() {
                Some(kb) if kb < harness::collect::offcpu::perf_mlock_kb_needed(harness::collect::offcpu::online_cpus()) => {
                    steps.push(Step::RaisePerfMlock { from: kb, why: why.into() })
                }
                Some(kb) => present.push(format!("kernel.perf_event_mlock_kb = {kb}")),
                None => {}
            }
        }
        if let Some(why) = docker {
            steps.push(Step::StartDocker { why: why.into() });
        }
        if let Some(why) = needs.pods {
            if seen.podman_configured() {
                present.push(format!("podman configured ({})", harness::host::podman::CONF_DROP_IN));
            } else {
                steps.push(Step::ConfigurePodman { why: why.into() });
            }
        }
        match seen.dotnet() {
            Some(root) => present.push(format!(".NET SDK at {}", root.display())),
            None => steps.push(Step::InstallDotnet),
        }
        let images = seen.images();
        for (suite, why) in &needs.images {
            let tag = format!("tracelab/runtime:{suite}");
            // A present image is still checked against its inputs by image::build (seconds); a
            // missing one is the long step, so the plan names it.
            if images.lines().any(|l| l.trim() == tag) {
                present.push(format!("image {tag}"));
            } else {
                steps.push(Step::BuildImage { suite: suite.clone(), why: why.clone() });
            }
        }
        if let Some(why) = needs.nightly {
            if seen.nightly() {
                present.push("nightly toolchain".into());
            } else {
                steps.push(Step::RustupNightly { why: why.into() });
            }
        }
        for (krate, why) in &needs.cargo_tools {
            if seen.cargo_tool(krate) {
                present.push(format!("cargo tool {krate}"));
            } else {
                steps.push(Step::CargoInstall { krate: krate.to_string(), why: why.to_string() });
            }
        }
        Plan { purpose: needs.purpose.clone(), steps, root: seen.uid() == 0, present }
    }

    pub fn is_ready(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether a step only root can take is missing.
    pub fn needs_root(&self) -> bool {
        self.steps.iter().any(Step::needs_root)
    }

    /// The exact commands, one per line, for a person to run as root.
    pub fn commands(&self) -> Vec<String> {
        let shared = harness::shared_dir();
        self.steps.iter().map(|s| s.command(&shared)).collect()
    }

    /// What the plan checked, what is missing and why, and the commands.
    pub fn render(&self) -> String {
        let mut out = format!("set-up for {}:\n", self.purpose);
        if !self.present.is_empty() {
            let _ = writeln!(out, "  present: {}", self.present.join(", "));
        }
        if self.steps.is_empty() {
            out.push_str("  nothing to do\n");
        }
        let shared = harness::shared_dir();
        for s in &self.steps {
            let _ = writeln!(out, "  - {}\n      why: {}", s.command(&shared), s.why());
        }
        out
    }
}

/// `needs` named for this machine's distro.
fn here(needs: Needs) -> Needs {
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let id = os.lines().find_map(|l| l.strip_prefix("ID=")).unwrap_or("").trim_matches('"').to_string();
    needs.for_distro(&id, &harness::host::environment::kernel_release())
}

/// How [`run`] ended, for the caller's exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything was there or has been installed (a dry run: only steps needing no root remain).
    Ready,
    /// Something is missing and this process may not install it (not root, or a dry run): the
    /// commands were printed. Exit 4 (skip: the environment lacks a prerequisite).
    Missing,
}

/// Prints the plan, then (as root, unless `dry_run`) carries it out. Without root, a plan whose
/// only step is the .NET install (which needs no root) still runs.
pub fn run(plan: &Plan, dry_run: bool) -> Result<Outcome> {
    // Through `progress`, so a log (CI, a pipe) gets timestamped `setup:` lines like every phase.
    plan.render().lines().for_each(|l| harness::host::progress::note("setup", l));
    if plan.is_ready() {
        return Ok(Outcome::Ready);
    }
    if dry_run {
        harness::host::progress::note("setup", "dry run: nothing installed");
        return Ok(if plan.needs_root() { Outcome::Missing } else { Outcome::Ready });
    }
    if !plan.root && plan.needs_root() {
        harness::host::progress::note("setup", "not root: run these as root, then again:");
        plan.commands().iter().for_each(|c| harness::host::progress::note("setup", &format!("  {c}")));
        return Ok(Outcome::Missing);
    }
    // Every step is tried, so one failure does not hide the next: the error names all of them.
    let mut failed = Vec::new();
    for step in &plan.steps {
        // An image is built through the Docker engine: without one, building only wastes minutes.
        if matches!(step, Step::BuildImage { .. }) && failed.iter().any(|f: &String| f.starts_with(DOCKER_FAILED)) {
            failed.push(format!("{} not tried: it needs the Docker engine", step.command(&harness::shared_dir())));
            continue;
        }
        if let Err(e) = execute(step) {
            let e = if matches!(step, Step::StartDocker { .. }) { e.context(DOCKER_FAILED) } else { e };
            harness::host::progress::note("setup", &format!("FAILED {}: {e:#}", step.command(&harness::shared_dir())));
            failed.push(format!("{e:#}"));
        }
    }
    if !failed.is_empty() {
        bail!("set-up could not get:\n  {}", failed.join("\n  "));
    }
    Ok(Outcome::Ready)
}

fn sh(cmd: &mut Command, what: &str) -> Result<()> {
    harness::host::progress::note("setup", what);
    let status = cmd.status().with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn execute(step: &Step) -> Result<()> {
    match step {
        Step::Backports => std::fs::write(BACKPORTS_LIST, format!("{BACKPORTS_LINE}\n")).context(BACKPORTS_LIST),
        Step::AptUpdate => sh(Command::new("apt-get").args(["update", "-q"]), "apt-get update"),
        Step::AptInstall { packages, backports } => {
            let line = step.command(Path::new(""));
            if sh(Command::new("sh").args(["-c", &line]), &line).is_ok() {
                return Ok(());
            }
            // The one transaction failed (a package this distro lacks): take the rest one by one
            // and name exactly what could not be got.
            let mut missing = Vec::new();
            for (p, why) in packages {
                let one = Step::AptInstall { packages: vec![(p.clone(), why.clone())], backports: backports.clone() };
                let line = one.command(Path::new(""));
                if sh(Command::new("sh").args(["-c", &line]), &line).is_err() {
                    missing.push(format!("{p} ({why})"));
                }
            }
            if missing.is_empty() { Ok(()) } else { bail!("apt-get could not install: {}", missing.join(", ")) }
        }
        Step::MountTracefs { .. } => {
            sh(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]), "mount tracefs")
        }
        Step::RaisePerfMlock { .. } => {
            let kb = harness::collect::offcpu::perf_mlock_kb_needed(harness::collect::offcpu::online_cpus());
            sh(Command::new("sysctl").args(["-w", &format!("kernel.perf_event_mlock_kb={kb}")]), "raise perf's buffer limit")
        }
        Step::StartDocker { .. } => start_docker(),
        Step::ConfigurePodman { .. } => {
            let path = Path::new(harness::host::podman::CONF_DROP_IN);
            std::fs::create_dir_all(path.parent().unwrap()).with_context(|| format!("cannot create {}", path.parent().unwrap().display()))?;
            std::fs::write(path, harness::host::podman::CONF_TEXT).with_context(|| format!("cannot write {}", path.display()))
        }
        Step::InstallDotnet => harness::host::dotnet::Dotnet::locate_or_install().map(|d| harness::host::progress::note("setup", &format!(".NET at {}", d.root.display()))),
        Step::BuildImage { suite, .. } => {
            let docker = harness::host::docker::Docker::connect()?;
            let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
            let built = harness::host::image::build(&docker, harness::host::image::suite(suite)?, &dotnet.root)?;
            harness::host::progress::note("setup", &format!("{} ready in {:.1} s", built.runtime.tag, built.duration.as_secs_f64()));
            Ok(())
        }
        Step::CargoInstall { krate, .. } => sh(Command::new("cargo").args(["install", "--locked", krate]), &format!("cargo install --locked {krate}")),
        Step::RustupNightly { .. } => sh(
            Command::new("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]),
            "rustup toolchain install nightly (needs rustup's server)",
        ),
    }
}

/// Debian's docker.io started by hand, as on these machines (shared/DESIGN.md §6): no bridge and
/// no iptables rules (the containers run with `--network none`).
/// How a failed engine start begins its error (later steps that need the engine look for it).
const DOCKER_FAILED: &str = "no Docker engine";

fn start_docker() -> Result<()> {
    if Machine.docker().is_some() {
        return Ok(());
    }
    // An engine the user pointed at elsewhere is theirs to start: a local dockerd would neither
    // answer there nor coexist with the engine that owns /var/run/docker.pid.
    if let Some(host) = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty() && h != "unix:///var/run/docker.sock") {
        bail!("the Docker engine at DOCKER_HOST={host} does not answer: start it, or unset DOCKER_HOST to use the local engine");
    }
    harness::host::progress::note("setup", "dockerd --bridge=none --iptables=false (log /tmp/tracelab-dockerd.log)");
    let log = std::fs::File::create("/tmp/tracelab-dockerd.log")?;
    Command::new("dockerd")
        .args(["--bridge=none", "--iptables=false"])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start dockerd")?;
    for _ in 0..60 {
        if Machine.docker().is_some() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("dockerd did not answer within 60 s: see /tmp/tracelab-dockerd.log")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str) -> Recorded {
        Recorded { dir: harness::project_root().join("lab/tests/data/prereq").join(name) }
    }

    fn cpu_bound() -> Scenario {
        Scenario::find("cpu-bound").unwrap()
    }

    fn installs(plan: &Plan) -> Vec<String> {
        plan.steps
            .iter()
            .find_map(|s| match s {
                Step::AptInstall { packages, .. } => Some(packages.iter().map(|(p, _)| p.clone()).collect()),
                _ => None,
            })
            .unwrap_or_default()
    }

    #[test]
    fn this_machine_ready_needs_nothing() {
        let plan = Plan::make(&Needs::for_scenario(&cpu_bound(), None, None), &case("ready"));
        assert!(plan.is_ready(), "{}", plan.render());
        assert!(plan.root);
        assert!(plan.present.iter().any(|p| p == "image tracelab/runtime:bullseye"), "{:?}", plan.present);
    }

    #[test]
    fn fresh_machine_gets_everything_in_one_transaction() {
        let plan = Plan::make(&Needs::for_tests(), &case("fresh"));
        let apt: Vec<_> = plan.steps.iter().filter(|s| matches!(s, Step::AptInstall { .. })).collect();
        assert_eq!(apt.len(), 1, "{}", plan.render());
        let pkgs = installs(&plan);
        for p in ["debootstrap", "qemu-system-x86", "chromium", "libxml2-utils", "golang-go", "stress-ng", "docker.io", "xz-utils"] {
            assert!(pkgs.iter().any(|q| q == p), "{p} missing from {pkgs:?}");
        }
        // The image rootfs has perf and LTTng-tools: installed packages are not asked for again.
        assert!(!pkgs.iter().any(|q| q == "linux-perf" || q == "lttng-tools"), "{pkgs:?}");
        assert!(plan.steps.iter().any(|s| matches!(s, Step::StartDocker { .. })));
        assert!(plan.steps.iter().any(|s| matches!(s, Step::MountTracefs { .. })));
        assert!(plan.steps.contains(&Step::InstallDotnet));
        // Debian's 516 KiB lets a container's off-CPU perf lose 2–3 % of its records.
        assert!(plan.steps.contains(&Step::RaisePerfMlock { from: 516, why: OFFCPU_BUFFERS.into() }), "{}", plan.render());
        let kb = harness::collect::offcpu::perf_mlock_kb_needed(harness::collect::offcpu::online_cpus());
        assert!(plan.render().contains(&format!("sysctl -w kernel.perf_event_mlock_kb={kb}")), "{}", plan.render());
        assert_eq!(plan.steps[0], Step::AptUpdate, "no qemu-utils from backports on a fresh machine");
        // apt first (dockerd and mount come from packages), images last (they need all the rest).
        let last = plan.steps.iter().rposition(|s| matches!(s, Step::AptInstall { .. })).unwrap();
        assert_eq!(last, 1);
    }

    #[test]
    fn the_pod_target_needs_podman_set_up_in_one_line_a_person_can_paste() {
        let scenario = Scenario::find("cpu-bound").unwrap();
        let needs = Needs::for_scenario(&scenario, Some(TargetKind::Pod), None);
        let names: Vec<&str> = needs.packages.iter().map(|p| p.name.as_ref()).collect();
        assert!(names.contains(&"podman") && names.contains(&"runc") && names.contains(&"catatonit"), "{names:?}");
        assert!(needs.pods.is_some() && needs.docker.is_some(), "images are built in Docker first");
        let cmd = Step::ConfigurePodman { why: String::new() }.command(Path::new("/"));
        assert!(!cmd.contains('\n') && cmd.contains("runtime = \"runc\"") && cmd.ends_with(harness::host::podman::CONF_DROP_IN), "{cmd}");
        assert!(!Needs::for_scenario(&scenario, Some(TargetKind::Container), None).packages.iter().any(|p| p.name == "podman"));
    }

    #[test]
    fn partly_installed_installs_only_what_lacks() {
        // This machine had every package but stress-ng (and libc6-dbg, golang-go, the pod
        // target's podman, runc and catatonit and the user_events kernel's source and build
        // tools, which the suite asked for only after the answers were recorded).
        let plan = Plan::make(&Needs::for_tests(), &case("ready"));
        let kernel_build: Vec<&str> = KERNEL_BUILD.iter().map(|p| p.name.as_ref()).collect();
        let later = ["golang-go", "libc6-dbg", "stress-ng", "podman", "runc", "catatonit"];
        assert_eq!(installs(&plan), [kernel_build.as_slice(), &later].concat(), "{}", plan.render());
        // apt-get update + install, and the perf buffer limit (still Debian's default then).
        assert_eq!(plan.steps.len(), 3, "{}", plan.render());
        assert!(matches!(plan.steps[2], Step::RaisePerfMlock { from: 516, .. }), "{}", plan.render());
        let cmds = plan.commands();
        assert_eq!(
            cmds[1],
            format!(
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} golang-go libc6-dbg stress-ng podman runc catatonit",
                kernel_build.join(" ")
            )
        );
    }

    #[test]
    fn an_installed_perf_package_without_perf_on_path_is_not_present() {
        struct NoPerf;
        impl Observe for NoPerf {
            fn dpkg(&self, _: &[&str]) -> String {
                "linux-perf install ok installed 6.1.0\n".into()
            }
            fn docker(&self) -> Option<String> { None }
            fn tracefs(&self) -> bool { true }
            fn uid(&self) -> u32 { 0 }
            fn images(&self) -> String { String::new() }
            fn dotnet(&self) -> Option<PathBuf> { Some("/opt/dotnet".into()) }
            fn perf_mlock_kb(&self) -> Option<u64> { None }
            fn perf_runs(&self) -> bool { false }
        }
        let needs = Needs { packages: PERF.to_vec(), ..Needs::default() };
        let plan = Plan::make(&needs, &NoPerf);
        assert!(!plan.is_ready(), "{}", plan.render());
        assert!(!plan.present.iter().any(|p| p.contains("linux-perf")), "{}", plan.render());
        assert!(plan.render().contains("no working `perf` on PATH"), "{}", plan.render());
    }

    #[test]
    fn qemu_system_comes_from_backports_when_qemu_utils_does() {
        // A constructed dpkg answer (this machine has qemu-system-x86, and packages are not removed
        // to record its absence): qemu-utils line as recorded in `ready`, qemu-system-x86 unknown.
        struct Answer;
        impl Observe for Answer {
            fn dpkg(&self, _: &[&str]) -> String {
                "qemu-system-x86 unknown ok not-installed \nqemu-utils install ok installed 1:10.0.2+ds-2+deb13u1~bpo12+1\n".into()
            }
            fn docker(&self) -> Option<String> { Some("20.10.24+dfsg1".into()) }
            fn tracefs(&self) -> bool { true }
            fn uid(&self) -> u32 { 0 }
            fn images(&self) -> String { String::new() }
            fn dotnet(&self) -> Option<PathBuf> { Some("/opt/dotnet".into()) }
            fn perf_mlock_kb(&self) -> Option<u64> { None }
        }
        let needs = Needs { packages: KERNELS[..2].to_vec(), ..Needs::default() };
        let plan = Plan::make(&needs, &Answer);
        assert_eq!(plan.steps[0], Step::Backports, "{}", plan.render());
        let cmds = plan.commands();
        assert!(
            cmds[2].ends_with(" qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports qemu-system-data/bookworm-backports seabios/bookworm-backports"),
            "{cmds:?}"
        );
    }

    #[test]
    fn docker_not_answering_starts_dockerd_and_builds_the_image() {
        let plan = Plan::make(&Needs::for_scenario(&cpu_bound(), None, None), &case("docker-down"));
        assert!(plan.steps.iter().any(|s| matches!(s, Step::StartDocker { .. })), "{}", plan.render());
        assert!(plan.steps.contains(&Step::BuildImage {
            suite: "bullseye".into(),
            why: "the container target runs in tracelab/runtime:bullseye".into()
        }));
        assert!(installs(&plan).is_empty(), "{}", plan.render());
        // On the host, cpu-bound needs neither Docker nor images.
        let host = Plan::make(&Needs::for_scenario(&cpu_bound(), Some(TargetKind::Host), None), &case("docker-down"));
        assert!(host.is_ready(), "{}", host.render());
    }

    #[test]
    fn tracefs_unmounted_is_mounted_for_offcpu_only() {
        let off = Scenario::find("off-cpu").unwrap();
        let plan = Plan::make(&Needs::for_scenario(&off, Some(TargetKind::Host), None), &case("tracefs-unmounted"));
        assert!(plan.steps.iter().any(|s| matches!(s, Step::MountTracefs { .. })), "{}", plan.render());
        assert!(plan.commands().contains(&"mount -t tracefs nodev /sys/kernel/tracing".to_string()));
        let cpu = Plan::make(&Needs::for_scenario(&cpu_bound(), Some(TargetKind::Host), None), &case("tracefs-unmounted"));
        assert!(cpu.is_ready(), "{}", cpu.render());
    }

    #[test]
    fn not_root_prints_commands_and_installs_nothing() {
        let plan = Plan::make(&Needs::for_scenario(&cpu_bound(), None, None), &case("not-root"));
        assert!(!plan.root);
        assert!(!plan.is_ready());
        // run() must return before executing anything: not root.
        assert_eq!(run(&plan, false).unwrap(), Outcome::Missing);
        let cmds = plan.commands();
        assert_eq!(
            cmds,
            ["apt-get update", "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap xz-utils"],
        );
    }

    #[test]
    fn ubuntu_takes_perf_for_its_running_kernel() {
        let needs = Needs::for_tests().for_distro("ubuntu", "6.8.0-1021-azure");
        assert!(!needs.packages.iter().any(|p| p.name.starts_with("linux-source-")), "no Debian kernel source on Ubuntu");
        let names: Vec<&str> = needs.packages.iter().map(|p| p.name.as_ref()).collect();
        assert_eq!(names[..2], ["linux-tools-common", "linux-tools-6.8.0-1021-azure"]);
        assert!(!names.contains(&"linux-perf"));
        let debian = Needs::for_tests().for_distro("debian", "6.1.0-40-amd64");
        assert_eq!(debian.packages[0].name, "linux-perf");
    }

    #[test]
    fn perf_and_lttng_on_the_host_only_for_host_targets() {
        let names = |n: Needs| n.packages.iter().map(|p| p.name.to_string()).collect::<Vec<_>>();
        let host = names(Needs::for_scenario(&cpu_bound(), Some(TargetKind::Host), None));
        assert_eq!(host, ["linux-perf"]);
        let container = names(Needs::for_scenario(&cpu_bound(), Some(TargetKind::Container), None));
        assert_eq!(container, ["debootstrap", "tar", "xz-utils"], "perf runs from the image");
        let lttng = Scenario::find("exceptions-lttng").unwrap();
        assert!(names(Needs::for_scenario(&lttng, Some(TargetKind::Host), None)).contains(&"lttng-tools".to_string()));
        assert!(!names(Needs::for_scenario(&lttng, None, None)).contains(&"lttng-tools".to_string()));
    }

    #[test]
    fn dpkg_states_other_than_installed_count_as_missing() {
        let got = parse_dpkg("a install ok installed 1.0\nb deinstall ok config-files 2.0\nc unknown ok not-installed \n");
        assert_eq!(got, vec![Installed { name: "a".into(), version: "1.0".into() }]);
    }
}
