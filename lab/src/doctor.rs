//! `cargo xtask doctor`: the machine's facts (`environment`) and the set-up plan of the default
//! scenario (`prereq`), each as a row saying what it means for which collector and, when it is not
//! ok, the command that fixes it. Apart from `environment` because it reads the scenario, the
//! collectors and the images, which themselves read the machine's facts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use harness::host::environment::*;

/// How a doctor row reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Missing,
}

/// One line of `cargo xtask doctor`: a fact, what it means for which collector, and — for every
/// row that is not ok — the command that fixes it (or, when nothing on this machine can, that
/// said plainly: a kernel option is fixed only by another kernel).
#[derive(Clone, Debug, Serialize)]
pub struct DoctorRow {
    #[serde(rename = "name")]
    pub item: String,
    pub value: String,
    pub status: Status,
    #[serde(rename = "detail")]
    pub meaning: String,
    pub fix: Option<String>,
}

fn row(item: &str, value: impl Into<String>, status: Status, meaning: impl Into<String>) -> DoctorRow {
    DoctorRow { item: item.into(), value: value.into(), status, meaning: meaning.into(), fix: None }
}

impl DoctorRow {
    fn fix(mut self, fix: impl Into<String>) -> DoctorRow {
        if self.status != Status::Ok {
            self.fix = Some(fix.into());
        }
        self
    }
}

/// What doctor checks besides [`Environment`]: the tools and images a scenario's set-up needs.
#[derive(Clone, Debug, Default)]
pub struct Tools {
    /// `tracelab/runtime:SUITE` tags Docker lists.
    pub images: Vec<String>,
    pub debootstrap: bool,
    pub qemu: Option<String>,
    pub chromium: Option<String>,
    /// `podman version` with its set-up for pods: `Err(what is missing)` when pods cannot run
    /// (`None`: not checked).
    pub podman: Option<Result<String, String>>,
    /// `go version`: `go tool pprof` reads the runs' pprof files.
    pub go: Option<String>,
    /// Where dotnet-trace comes from: the installed launcher, or the offline feed's package.
    pub dotnet_trace: Option<String>,
    /// Whether the 6.12-user-events kernel can be built here: its source and tools, or what lacks
    /// (`None`: not checked).
    pub kernel_build: Option<Result<String, String>>,
    /// Microsoft's perfcollect script the perfcollect collector runs (from ../shared), when present.
    pub perfcollect: Option<String>,
    /// `--symbols` folders given, each with whether it exists and how many debug files it holds.
    pub symbols: Vec<(PathBuf, Option<usize>)>,
    /// Whether this kernel records a timer's wake-up of a thread on an idle CPU (the probe's
    /// count, or why it could not run); `None` when not probed (no perf).
    pub idle_wakeups: Option<Result<crate::idle_wakeups::IdleWakeups, String>>,
}

impl Tools {
    /// Reads the machine; `symbols` are the `--symbols` folders to check.
    pub fn collect(symbols: &[PathBuf]) -> Tools {
        let images = probe("docker", &["images", "--format", "{{.Repository}}:{{.Tag}}"], Duration::from_secs(10))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("tracelab/runtime:"))
            .map(String::from)
            .collect();
        let launcher = harness::collect::dotnet_trace::tool_dir().join("dotnet-trace");
        let feed_pkg = std::fs::read_dir(harness::host::dotnet::Dotnet::feed())
            .ok()
            .and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("dotnet-trace."))));
        Tools {
            images,
            debootstrap: which("debootstrap").is_some() || Path::new("/usr/sbin/debootstrap").exists(),
            qemu: probe("qemu-system-x86_64", &["--version"], Duration::from_secs(5)).and_then(|v| v.lines().next().map(String::from)),
            chromium: probe("chromium", &["--version"], Duration::from_secs(10)),
            podman: Some(match harness::host::podman::setup_problem() {
                None => Ok(format!(
                    "{} (runc, ulimits in {})",
                    harness::host::podman::version().unwrap_or_else(|| "?".into()),
                    harness::host::podman::CONF_DROP_IN
                )),
                Some(problem) => Err(problem),
            }),
            go: probe("go", &["version"], Duration::from_secs(10)).map(|v| v.trim().to_string()),
            kernel_build: Some(crate::vm::kernel_build::host_ready(&crate::vm::kernel_build::USER_EVENTS_6_12)),
            dotnet_trace: if launcher.is_file() {
                Some(launcher.display().to_string())
            } else {
                feed_pkg.map(|p| format!("{} (installed on first use)", p.display()))
            },
            perfcollect: Some(harness::collect::perfcollect::script_path()).filter(|p| p.is_file()).map(|p| p.display().to_string()),
            symbols: symbols
                .iter()
                .map(|d| {
                    let n = std::fs::read_dir(d).ok().map(|e| e.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "dbg" || x == "debug")).count());
                    (d.clone(), n)
                })
                .collect(),
            idle_wakeups: perf_binary().map(|perf| crate::idle_wakeups::probe_here(&perf).map_err(|e| format!("{e:#}"))),
        }
    }
}

/// NEEDED entries of an ELF file's dynamic section.
pub fn elf_needed(path: &Path) -> anyhow::Result<Vec<String>> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader};
    use object::Endianness;
    let data = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let elf = ElfFile64::<Endianness>::parse(&*data)
        .map_err(|e| anyhow::anyhow!("{} is not a 64-bit ELF file: {e}", path.display()))?;
    let endian = elf.endian();
    let header = elf.elf_header();
    let sections = header.sections(endian, &*data)?;
    let mut needed = Vec::new();
    if let Some((dynamic, index)) = sections.dynamic(endian, &*data)? {
        let strings = sections.strings(endian, &*data, index)?;
        for entry in dynamic {
            if entry.tag(endian) == object::elf::DT_NEEDED {
                let name = entry.string(endian, strings)?;
                needed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok(needed)
}

/// The runtime's LTTng provider library under a .NET root (newest runtime first).
pub fn trace_provider_library(dotnet_root: &Path) -> Option<PathBuf> {
    let base = dotnet_root.join("shared/Microsoft.NETCore.App");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(base).ok()?.flatten().map(|e| e.path()).collect();
    versions.sort();
    versions.into_iter().rev().map(|v| v.join("libcoreclrtraceptprovider.so")).find(|p| p.is_file())
}

/// Everything `cargo xtask doctor` reports. `dotnet_root` is the located .NET, if any.
pub fn doctor(dotnet_root: Option<&Path>, symbols: &[PathBuf]) -> Vec<DoctorRow> {
    let mut rows = doctor_rows(&collect(), &Tools::collect(symbols));
    rows.extend(dotnet_rows(dotnet_root, &collect().lttng_ust));
    rows
}

/// The rows of the machine's facts and tools: a pure function, so a test can check that every
/// row that is not ok names its fix.
pub fn doctor_rows(env: &Environment, tools: &Tools) -> Vec<DoctorRow> {
    let mut rows = vec![row("kernel", &env.kernel, Status::Ok, "containers share it; other kernels need the qemu matrix")];
    rows.push(row("distro", &env.distro, Status::Ok, "decides the host's LTTng-UST version"));
    rows.push(match &env.perf {
        Some(v) => row("perf", v, Status::Ok, "perf-cpu and perf-offcpu collectors"),
        None => row("perf", "not found", Status::Missing, "perf-cpu/perf-offcpu cannot run").fix("apt-get install linux-perf (Ubuntu: linux-tools-$(uname -r))"),
    });
    rows.push(match env.perf_event_paranoid {
        Some(p) if p <= 1 || env.capabilities.iter().any(|c| c == "SYS_ADMIN" || c == "PERFMON") => {
            row("perf_event_paranoid", p.to_string(), Status::Ok, "perf may profile other processes (root/CAP_PERFMON or ≤ 1)")
        }
        Some(p) => row("perf_event_paranoid", p.to_string(), Status::Warn, "unprivileged perf limited to own processes")
            .fix("run as root, or: sysctl kernel.perf_event_paranoid=1"),
        None => row("perf_event_paranoid", "unreadable", Status::Warn, "no perf_event support in this kernel or sandbox")
            .fix("none on this machine: perf needs a kernel with CONFIG_PERF_EVENTS and /proc/sys/kernel visible; run on another machine or kernel"),
    });
    rows.push(match env.kptr_restrict {
        Some(0) => row("kptr_restrict", "0", Status::Ok, "kernel frames can be named from /proc/kallsyms"),
        Some(v) if env.capabilities.iter().any(|c| c == "SYSLOG") => {
            row("kptr_restrict", v.to_string(), Status::Ok, "root with CAP_SYSLOG still reads kallsyms addresses")
        }
        Some(v) => row("kptr_restrict", v.to_string(), Status::Warn, "kernel frames stay unnamed (kallsyms addresses hidden)")
            .fix("run as root (CAP_SYSLOG), or: sysctl kernel.kptr_restrict=0"),
        None => row("kptr_restrict", "unreadable", Status::Warn, "kernel frames may stay unnamed")
            .fix("none needed for user-space frames; kernel frames need /proc/sys/kernel/kptr_restrict readable (run outside this sandbox)"),
    });
    rows.push(if env.tracefs {
        row("tracefs", "/sys/kernel/tracing", Status::Ok, "sched:sched_switch for the perf-offcpu collector")
    } else {
        row("tracefs", "not mounted", Status::Warn, "perf-offcpu needs sched:sched_switch from tracefs").fix("mount -t tracefs nodev /sys/kernel/tracing (as root)")
    });
    rows.push(idle_wakeups_row(tools.idle_wakeups.as_ref()));
    rows.push(match env.user_events {
        Some(true) => row("CONFIG_USER_EVENTS", "yes", Status::Ok, "dotnet-trace collect-linux can work"),
        Some(false) => row("CONFIG_USER_EVENTS", "no", Status::Warn, "dotnet-trace collect-linux cannot work here (scenarios using it SKIP)")
            .fix("no fix on this kernel: it was built without CONFIG_USER_EVENTS; only another kernel built with it (6.4 or newer) helps: \
                  `cargo xtask matrix kernels --kernels 6.12-user-events --scenario NAME` builds one and runs there. Nothing else depends on it"),
        None => row("CONFIG_USER_EVENTS", "unknown", Status::Warn, "tracefs is not mounted, and /boot has no config of this kernel")
            .fix("mount -t tracefs nodev /sys/kernel/tracing (as root), then run doctor again"),
    });
    rows.push(row(
        "capabilities",
        if env.capabilities.len() > 30 { "all (root)".to_string() } else { env.capabilities.join(",") },
        if env.capabilities.iter().any(|c| c == "SYS_ADMIN") { Status::Ok } else { Status::Warn },
        "perf needs SYS_ADMIN (or PERFMON where the engine knows it); EventPipe and LTTng user-space need none",
    ).fix("run as root (sudo -E cargo xtask …); in a container: --cap-add SYS_ADMIN"));
    rows.push(match &env.docker {
        Some(v) => row("docker daemon", v, Status::Ok, "container and sidecar targets, image builds, capability matrix"),
        None => row("docker daemon", "not answering", Status::Missing, "container and sidecar targets, image builds unavailable")
            .fix("cargo xtask setup --scenario cpu-bound (as root: installs docker.io if absent, starts dockerd --bridge=none --iptables=false)"),
    });
    rows.push(match &env.lttng {
        Some(v) => row("lttng-tools", v, Status::Ok, "LTTng collector (lttng-sessiond --no-kernel)"),
        None => row("lttng-tools", "not found", Status::Missing, "LTTng collector on the host unavailable").fix("apt-get install lttng-tools babeltrace2"),
    });
    let ust = if env.lttng_ust.is_empty() { "none".to_string() } else { env.lttng_ust.join(", ") };
    let ust_row = row(
        "liblttng-ust",
        &ust,
        if env.lttng_ust.iter().any(|s| s == "liblttng-ust.so.0") { Status::Ok } else { Status::Warn },
        ".NET's provider needs liblttng-ust.so.0 (LTTng 2.12); .so.1 (2.13+) cannot load it",
    );
    rows.push(if env.lttng_ust.is_empty() {
        ust_row.fix("apt-get install liblttng-ust-dev (on bullseye: liblttng-ust0, the .so.0 .NET loads)")
    } else {
        ust_row.fix("no host fix on this distro (it ships only .so.1): run LTTng scenarios in the bullseye image, e.g. cargo xtask scenario exceptions-lttng --target container --image bullseye")
    });
    rows.extend(tool_rows(tools));
    rows
}

/// Whether perf-offwake can name the waker of every timer wake-up on this kernel.
fn idle_wakeups_row(found: Option<&Result<crate::idle_wakeups::IdleWakeups, String>>) -> DoctorRow {
    const ITEM: &str = "timer wake-ups on idle CPUs";
    match found {
        // Each value opens with the answer, the same on every call for one kernel, then this
        // probe's sample (sleeps seen, how many onto an idle CPU), which varies with the load:
        // three calls once gave three bare answers ("16 of 16 recorded", "no CPU idled", "5 of
        // 16 unrecorded").
        Some(Ok(w)) if w.sleeps > 0 && w.unrecorded == 0 && w.into_idle > 0 => {
            row(ITEM, format!("all recorded: {} of {} this probe ({} onto an idle CPU)", w.sleeps, w.sleeps, w.into_idle), Status::Ok, w.meaning())
        }
        Some(Ok(w)) if w.sleeps > 0 && w.unrecorded == 0 => {
            row(ITEM, format!("cannot tell: {} of {} recorded this probe, none onto an idle CPU", w.sleeps, w.sleeps), Status::Warn, w.meaning())
                .fix("run `cargo xtask doctor` again when the machine is less busy: the gap shows only when a sleeper's CPU goes idle")
        }
        Some(Ok(w)) if w.sleeps > 0 => row(ITEM, format!("some unrecorded: {} of {} this probe ({} onto an idle CPU)", w.unrecorded, w.sleeps, w.into_idle), Status::Warn, w.meaning()).fix(
            "no fix on this kernel: it traces no sched_waking when a timer wakes a thread on an idle CPU. perf-offwake's \
             waker checks leave such intervals out and print how many (`left out: N intervals`); the other checks are unaffected",
        ),
        Some(Ok(w)) => row(ITEM, format!("no timer sleep seen (of {} run)", crate::idle_wakeups::SLEEPS), Status::Warn, w.meaning())
            .fix("run `cargo xtask doctor` again: the probe's `sleep` processes left no switch-out in the recording"),
        Some(Err(e)) => row(ITEM, "cannot tell", Status::Warn, format!("the probe failed: {e}"))
            .fix("run doctor as root with tracefs mounted (mount -t tracefs nodev /sys/kernel/tracing)"),
        None => row(ITEM, "not probed", Status::Warn, "perf is needed to probe it")
            .fix("apt-get install linux-perf (Ubuntu: linux-tools-$(uname -r))"),
    }
}

/// Images, image and guest builders, the report's browser, dotnet-trace, symbol folders.
fn tool_rows(tools: &Tools) -> Vec<DoctorRow> {
    let mut rows = Vec::new();
    for suite in harness::host::image::SUITES {
        let tag = harness::host::image::runtime_tag(suite);
        let default = suite.name == harness::host::image::DEFAULT_SUITE;
        rows.push(if tools.images.contains(&tag) {
            row(&format!("image {}", suite.name), &tag, Status::Ok, format!("container targets on {} (LTTng-UST {})", suite.name, suite.lttng_ust))
        } else {
            row(
                &format!("image {}", suite.name),
                "not built",
                if default { Status::Missing } else { Status::Warn },
                if default { "the default container target (cpu-bound and most scenarios) needs it".to_string() } else { format!("only for --image {}", suite.name) },
            )
            .fix(format!("cargo xtask images --suite {} (as root; ≈2 min)", suite.name))
        });
    }
    rows.push(if tools.debootstrap {
        row("debootstrap", "installed", Status::Ok, "builds image root file systems")
    } else {
        row("debootstrap", "not found", Status::Missing, "images cannot be built").fix("apt-get install debootstrap")
    });
    rows.push(match &tools.qemu {
        Some(v) => row("qemu", v, Status::Ok, "kernel matrix (qemu guests)"),
        None => row("qemu", "not found", Status::Warn, "kernel matrix unavailable")
            .fix("apt-get install qemu-system-x86 qemu-utils (from bookworm-backports when qemu-utils is: cargo xtask setup --tests does that)"),
    });
    rows.extend(tools.kernel_build.as_ref().map(|build| match build {
        Ok(v) => row("kernel build", v, Status::Ok, "the kernel matrix can build its 6.12-user-events kernel (collect-linux)"),
        Err(missing) => row("kernel build", format!("missing {missing}"), Status::Warn, "the 6.12-user-events kernel (collect-linux in the kernel matrix) cannot be built")
            .fix("cargo xtask setup --tests (as root: installs linux-source-6.12 and the kernel's build tools)"),
    }));
    rows.extend(tools.podman.as_ref().map(|podman| match podman {
        Ok(v) => row("podman", v, Status::Ok, "pod target (podman kube play)"),
        Err(problem) => row("podman", "not ready", Status::Warn, format!("pod target unavailable: {problem}"))
            .fix("cargo xtask setup --tests (as root: installs podman runc catatonit, writes the containers.conf drop-in)"),
    }));
    rows.push(match &tools.chromium {
        Some(v) => row("chromium", v, Status::Ok, "the merged report's browser test"),
        None => row("chromium", "not found", Status::Warn, "the headless report test skips").fix("apt-get install chromium fonts-dejavu-core"),
    });
    rows.push(match &tools.go {
        Some(v) => row("go", v, Status::Ok, "`go tool pprof` reads the runs' <collector>.pb.gz"),
        None => row("go", "not found", Status::Warn, "the pprof test skips; the files are still written").fix("apt-get install golang-go"),
    });
    rows.push(match &tools.dotnet_trace {
        Some(v) => row("dotnet-trace", v, Status::Ok, "the dotnet-trace collector"),
        None => row("dotnet-trace", "not found", Status::Warn, "the dotnet-trace collector cannot run (no launcher, no offline feed)")
            .fix("dotnet tool install --tool-path .build/tools dotnet-trace"),
    });
    rows.push(match &tools.perfcollect {
        Some(path) => row("perfcollect", path, Status::Ok, "the perfcollect peer collector (run in a sidecar of the bullseye image: perf, lttng-tools, zip, unzip)"),
        None => row("perfcollect", "not found", Status::Warn, "the perfcollect peer collector cannot run (scenarios using it fail)")
            .fix("put ../shared (with reference/perfcollect) beside the checkout, or set TRACELAB_SHARED to it"),
    });
    for (dir, dbg) in &tools.symbols {
        let name = format!("--symbols {}", dir.display());
        rows.push(match dbg {
            Some(n) if *n > 0 => row(&name, format!("{n} debug files"), Status::Ok, "native frames named from these"),
            Some(_) => row(&name, "no .dbg / .debug files", Status::Warn, "native frames of stripped libraries stay unnamed")
                .fix(format!("dotnet-symbol --symbols -o {} <libcoreclr.so …>", dir.display())),
            None => row(&name, "does not exist", Status::Missing, "the folder given does not exist").fix(format!("mkdir -p {} and fetch symbols into it (dotnet-symbol)", dir.display())),
        });
    }
    rows
}

/// The .NET rows: SDKs, runtimes and whether the runtime's LTTng provider loads here.
fn dotnet_rows(dotnet_root: Option<&Path>, lttng_ust: &[String]) -> Vec<DoctorRow> {
    let mut rows = Vec::new();
    let ust = lttng_ust.join(", ");
    match dotnet_root {
        Some(root) => {
            let dotnet = root.join("dotnet");
            let sdks = probe(dotnet.to_str().unwrap_or("dotnet"), &["--list-sdks"], Duration::from_secs(20)).unwrap_or_default();
            rows.push(row(".NET SDKs", sdks.lines().map(|l| l.split(" [").next().unwrap_or(l)).collect::<Vec<_>>().join(", "), Status::Ok, "builds the workloads"));
            rows.push(row(".NET runtimes", dotnet_runtimes(&dotnet).join(", "), Status::Ok, "runs the workloads"));
            rows.push(jit_naming_row(&dotnet));
            match trace_provider_library(root) {
                Some(lib) => {
                    let needed = elf_needed(&lib).map(|n| n.into_iter().filter(|n| n.contains("lttng")).collect::<Vec<_>>());
                    match needed {
                        Ok(n) => {
                            let fits = n.iter().all(|s| lttng_ust.contains(s));
                            rows.push(row(
                                "libcoreclrtraceptprovider.so NEEDED",
                                n.join(", "),
                                if fits { Status::Ok } else { Status::Warn },
                                if fits {
                                    "the runtime's LTTng provider can load here".to_string()
                                } else {
                                    format!("the provider cannot load on this host (has {ust}): LTTng runtime events only in a bullseye (2.12) container")
                                },
                            )
                            .fix("cargo xtask scenario exceptions-lttng --target container --image bullseye (the image with LTTng 2.12)"));
                        }
                        Err(e) => rows.push(
                            row("libcoreclrtraceptprovider.so NEEDED", format!("{e:#}"), Status::Warn, "cannot tell")
                                .fix("reinstall the SDK: ../shared/toolchains/install-dotnet.sh"),
                        ),
                    }
                }
                None => rows.push(
                    row("libcoreclrtraceptprovider.so", "absent", Status::Warn, "no LTTng provider in this runtime")
                        .fix("use the SDK from ../shared/toolchains (install-dotnet.sh), whose runtime ships it"),
                ),
            }
        }
        None => rows.push(
            row(".NET", "not found", Status::Missing, "workloads cannot build")
                .fix("../shared/toolchains/install-dotnet.sh (offline SDK 10.0.401), or install a .NET 10 SDK and set DOTNET_ROOT"),
        ),
    }
    rows
}

/// Which way of naming JIT code works on this machine's runtime: `dotnet --info` (the SDK's own
/// managed code, JIT-compiled by the runtime the workloads use) run once with
/// `DOTNET_PerfMapEnabled=1` into a scratch folder, its perf map's lines against its jitdump's
/// code loads. Both are counted files, so the row gives one answer on every call.
fn jit_naming_row(dotnet: &Path) -> DoctorRow {
    let meaning = "perf collectors name JIT frames from the perf map; `perf inject --jit` and samply read the jitdump";
    let measured = (|| -> anyhow::Result<(u64, stacks::JitDumpCensus)> {
        let scratch = tempfile::Builder::new().prefix("tracelab-doctor-jit-").tempdir()?;
        let status = std::process::Command::new(dotnet)
            .arg("--info")
            .env("DOTNET_PerfMapEnabled", "1")
            .env("DOTNET_PerfMapJitDumpPath", scratch.path())
            // The SDK's CLI leaves two scratch folders in TMPDIR on every call: they go with ours.
            .env("TMPDIR", scratch.path())
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .env("DOTNET_NOLOGO", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "`dotnet --info` ended {status}");
        let file = |prefix: &str| {
            std::fs::read_dir(scratch.path()).ok()?.flatten().map(|e| e.path()).find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
        };
        let map = file("perf-").ok_or_else(|| anyhow::anyhow!("the runtime wrote no perf map"))?;
        let entries = std::fs::read_to_string(&map)?.lines().count() as u64;
        let census = match file("jit-") {
            Some(dump) => stacks::jitdump_census(&dump)?,
            None => stacks::JitDumpCensus::default(),
        };
        Ok((entries, census))
    })();
    match measured {
        Ok((entries, census)) => {
            let value = format!("perf map {entries} methods, jitdump {} code loads", census.code_loads);
            match stacks::jit_naming_finding(entries, &census) {
                None => row("JIT naming", value, Status::Ok, format!("{meaning}: both work on this runtime")),
                Some(finding) => row("JIT naming", value, Status::Warn, format!("perf map works; jitdump broken: {finding}"))
                    .fix("nothing to do for tracelab (it reads the perf map); for perf inject --jit or samply, a .NET 10 patch newer than 10.0.12, or name frames from the perf map (DOTNET_PerfMapEnabled=3)"),
            }
        }
        Err(e) => row("JIT naming", format!("{e:#}"), Status::Warn, "cannot tell which JIT-naming path works")
            .fix("run `dotnet --info` by hand; reinstall the SDK with ../shared/toolchains/install-dotnet.sh if it fails"),
    }
}

/// The default scenario: `cargo xtask doctor` exits 4 when its set-up is incomplete.
pub const DEFAULT_SCENARIO: &str = "cpu-bound";

/// Whether the README's first command can run here: its set-up plan, as a doctor row.
pub fn default_scenario_row() -> DoctorRow {
    let item = format!("scenario {DEFAULT_SCENARIO} (default)");
    let scenario = match harness::scenario::Scenario::find(DEFAULT_SCENARIO) {
        Ok(s) => s,
        Err(e) => return row(&item, format!("{e:#}"), Status::Missing, "the scenario file does not load").fix("git checkout scenarios/"),
    };
    let plan = crate::prereq::Plan::for_scenario(&scenario, None, None);
    if !plan.needs_root() {
        return row(&item, "ready", Status::Ok, "every prerequisite of its set-up is present");
    }
    let missing: Vec<String> = plan.steps.iter().filter(|s| s.needs_root()).map(|s| s.why()).collect();
    row(&item, "set-up incomplete", Status::Missing, missing.join("; "))
        .fix(format!("cargo xtask setup --scenario {DEFAULT_SCENARIO} (as root), i.e.: {}", plan.commands().join(" && ")))
}

/// `cargo xtask doctor --json`: the rows as a JSON array (name, value, status, detail, fix).
pub fn rows_json(rows: &[DoctorRow]) -> String {
    serde_json::to_string_pretty(rows).expect("doctor rows are plain data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_not_ok_names_a_fix() {
        // A machine with nothing: every fact unknown or absent, no tools, a --symbols folder that
        // does not exist and one without debug files.
        let empty = std::env::temp_dir().join(format!("tracelab-doctor-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let tools = Tools {
            symbols: vec![("/nonexistent/symbols".into(), None), (empty.clone(), Some(0))],
            kernel_build: Some(Err("bison".into())),
            ..Tools::default()
        };
        let mut env = Environment { perf_event_paranoid: Some(2), kptr_restrict: Some(1), user_events: Some(false), ..Default::default() };
        let mut rows = doctor_rows(&env, &tools);
        env.perf_event_paranoid = None;
        env.kptr_restrict = None;
        env.user_events = None;
        env.lttng_ust = vec!["liblttng-ust.so.1".into()];
        rows.extend(doctor_rows(&env, &tools));
        rows.extend(dotnet_rows(None, &[]));
        use crate::idle_wakeups::IdleWakeups;
        for found in [
            Ok(IdleWakeups { sleeps: 16, unrecorded: 5, into_idle: 7 }),
            Ok(IdleWakeups { sleeps: 0, unrecorded: 0, into_idle: 0 }),
            Ok(IdleWakeups { sleeps: 16, unrecorded: 0, into_idle: 3 }),
            Ok(IdleWakeups { sleeps: 16, unrecorded: 0, into_idle: 0 }),
            Err("perf record -a … failed".to_string()),
        ] {
            rows.push(idle_wakeups_row(Some(&found)));
        }
        let gap = rows.iter().find(|r| r.value == "some unrecorded: 5 of 16 this probe (7 onto an idle CPU)").expect("the idle wake-up row");
        assert_eq!(gap.status, Status::Warn);
        assert!(gap.meaning.starts_with("5 of 16 timer wake-ups unrecorded: waker checks leave them out"), "{gap:?}");
        assert!(rows.iter().any(|r| r.value == "all recorded: 16 of 16 this probe (3 onto an idle CPU)" && r.status == Status::Ok));
        assert!(rows.iter().any(|r| r.value == "cannot tell: 16 of 16 recorded this probe, none onto an idle CPU" && r.status == Status::Warn));
        let bad: Vec<_> = rows.iter().filter(|r| r.status != Status::Ok).collect();
        assert!(bad.len() >= 15, "{} rows not ok", bad.len());
        for r in &bad {
            let fix = r.fix.as_deref().unwrap_or_else(|| panic!("{} ({}) names no fix", r.item, r.value));
            assert!(!fix.trim().is_empty(), "{}", r.item);
        }
        for r in rows.iter().filter(|r| r.status == Status::Ok) {
            assert!(r.fix.is_none(), "{} is ok but carries a fix", r.item);
        }
        let json: serde_json::Value = serde_json::from_str(&rows_json(&rows)).unwrap();
        let first = &json[0];
        for key in ["name", "status", "detail", "fix", "value"] {
            assert!(first.get(key).is_some(), "{key} missing: {first}");
        }
        let user_events = rows.iter().find(|r| r.item == "CONFIG_USER_EVENTS" && r.value == "no").unwrap();
        assert!(user_events.fix.as_deref().unwrap().starts_with("no fix on this kernel"), "{user_events:?}");
        let _ = std::fs::remove_dir(&empty);
    }
}
