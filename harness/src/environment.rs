//! Facts about the machine under test: recorded in every manifest and shown by `cargo xtask doctor`
//! with what each means for which collector. Every fact is read off the machine, never assumed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The environment block of manifest.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Environment {
    pub kernel: String,
    pub distro: String,
    pub perf: Option<String>,
    pub lttng: Option<String>,
    pub lttng_ust: Vec<String>,
    pub dotnet_runtimes: Vec<String>,
    pub docker: Option<String>,
    /// Effective capabilities of the harness process (names).
    pub capabilities: Vec<String>,
    pub perf_event_paranoid: Option<i64>,
    pub kptr_restrict: Option<i64>,
    pub tracefs: bool,
    pub user_events: Option<bool>,
    /// Filled by the engine: host / container / sidecar and the container's capabilities.
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub target_capabilities: Vec<String>,
    #[serde(default)]
    pub image: Option<String>,
    /// The machine's name, for JUnit's `hostname` (CI tells runners apart by it).
    #[serde(default)]
    pub hostname: String,
}

/// Runs a command with a time limit; its trimmed stdout (or stderr when stdout is empty) on success.
pub fn probe(program: &str, args: &[&str], timeout: Duration) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(if out.stdout.is_empty() { &out.stderr } else { &out.stdout }).trim().to_string();
    Some(text)
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

pub fn kernel_release() -> String {
    read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into())
}

pub fn distro() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The perf binary: `perf`, else a versioned `perf_X.Y` (bullseye ships only `perf_5.10`).
pub fn perf_binary() -> Option<PathBuf> {
    if let Some(p) = crate::environment::which("perf") {
        if probe(p.to_str()?, &["--version"], Duration::from_secs(5)).is_some() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("perf_") && name[5..].chars().all(|c| c.is_ascii_digit() || c == '.') {
                    return Some(e.path());
                }
            }
        }
    }
    None
}

pub fn perf_version() -> Option<String> {
    let bin = perf_binary()?;
    probe(bin.to_str()?, &["--version"], Duration::from_secs(5))
}

pub fn tracefs_mounted() -> bool {
    Path::new("/sys/kernel/tracing/events/sched").is_dir()
}

/// Whether the kernel has CONFIG_USER_EVENTS (what `dotnet-trace collect-linux` needs).
pub fn user_events() -> Option<bool> {
    if Path::new("/sys/kernel/tracing/user_events_data").exists() {
        return Some(true);
    }
    let config = format!("/boot/config-{}", kernel_release());
    if let Ok(text) = std::fs::read_to_string(config) {
        return Some(text.lines().any(|l| l == "CONFIG_USER_EVENTS=y"));
    }
    if tracefs_mounted() { Some(false) } else { None }
}

const CAP_NAMES: [&str; 41] = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
    "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
    "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
    "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
    "CHECKPOINT_RESTORE",
];

/// Names of the capabilities in a `CapEff:` hex mask.
pub fn capability_names(mask: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| mask & (1u64 << bit) != 0)
        .map(|bit| CAP_NAMES.get(bit).map(|s| s.to_string()).unwrap_or_else(|| format!("cap{bit}")))
        .collect()
}

pub fn effective_capabilities() -> Vec<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    capability_names(mask)
}

/// liblttng-ust sonames the dynamic linker knows (`liblttng-ust.so.0` = LTTng 2.12, `.so.1` = 2.13+).
pub fn lttng_ust_sonames() -> Vec<String> {
    let mut names: Vec<String> = probe("ldconfig", &["-p"], Duration::from_secs(5))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().split_whitespace().next())
        .filter(|n| n.starts_with("liblttng-ust.so"))
        .map(String::from)
        .collect();
    names.sort();
    names.dedup();
    names
}

pub fn docker_version() -> Option<String> {
    probe("docker", &["version", "--format", "{{.Server.Version}}"], Duration::from_secs(10))
}

/// `dotnet --list-runtimes` of a given dotnet binary, without install paths.
pub fn dotnet_runtimes(dotnet: &Path) -> Vec<String> {
    dotnet
        .to_str()
        .and_then(|d| probe(d, &["--list-runtimes"], Duration::from_secs(20)))
        .map(|t| t.lines().map(|l| l.split(" [").next().unwrap_or(l).to_string()).collect())
        .unwrap_or_default()
}

/// Reads what can be read quickly; the engine adds target facts.
pub fn collect() -> Environment {
    let dotnet_runtimes = crate::environment::which("dotnet")
        .or_else(|| std::env::var_os("DOTNET_ROOT").map(|r| PathBuf::from(r).join("dotnet")))
        .map(|d| dotnet_runtimes(&d))
        .unwrap_or_default();
    Environment {
        kernel: kernel_release(),
        distro: distro(),
        perf: perf_version(),
        lttng: probe("lttng", &["--version"], Duration::from_secs(5)),
        lttng_ust: lttng_ust_sonames(),
        dotnet_runtimes,
        docker: docker_version(),
        capabilities: effective_capabilities(),
        perf_event_paranoid: read_trim("/proc/sys/kernel/perf_event_paranoid").and_then(|v| v.parse().ok()),
        kptr_restrict: read_trim("/proc/sys/kernel/kptr_restrict").and_then(|v| v.parse().ok()),
        tracefs: tracefs_mounted(),
        user_events: user_events(),
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
        ..Default::default()
    }
}

/// Short label for result folder names: `host-k6.18` / `container-bullseye-k6.18`.
pub fn short_label(target: &str, image: Option<&str>) -> String {
    let k = kernel_release();
    let k = k.split('-').next().unwrap_or(&k).to_string();
    let k: String = k.split('.').take(2).collect::<Vec<_>>().join(".");
    match image {
        Some(i) => format!("{target}-{i}-k{k}"),
        None => format!("{target}-k{k}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_mask_names() {
        // CAP_SYS_ADMIN is bit 21, CAP_PERFMON 38.
        assert_eq!(capability_names((1 << 21) | (1 << 38)), vec!["SYS_ADMIN", "PERFMON"]);
    }

    #[test]
    fn every_row_not_ok_names_a_fix() {
        // A machine with nothing: every fact unknown or absent, no tools, a --symbols folder that
        // does not exist and one without debug files.
        let empty = std::env::temp_dir().join(format!("tracelab-doctor-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let tools = Tools {
            symbols: vec![("/nonexistent/symbols".into(), None), (empty.clone(), Some(0))],
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

    #[test]
    fn short_label_shape() {
        assert!(short_label("host", None).starts_with("host-k"));
        assert!(short_label("container", Some("bullseye")).starts_with("container-bullseye-k"));
    }
}

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
    /// Where dotnet-trace comes from: the installed launcher, or the offline feed's package.
    pub dotnet_trace: Option<String>,
    /// `--symbols` folders given, each with whether it exists and how many debug files it holds.
    pub symbols: Vec<(PathBuf, Option<usize>)>,
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
        let launcher = crate::collect::dotnet_trace::tool_dir().join("dotnet-trace");
        let feed_pkg = std::fs::read_dir(crate::dotnet::Dotnet::feed())
            .ok()
            .and_then(|d| d.flatten().map(|e| e.path()).find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("dotnet-trace."))));
        Tools {
            images,
            debootstrap: which("debootstrap").is_some() || Path::new("/usr/sbin/debootstrap").exists(),
            qemu: probe("qemu-system-x86_64", &["--version"], Duration::from_secs(5)).and_then(|v| v.lines().next().map(String::from)),
            chromium: probe("chromium", &["--version"], Duration::from_secs(10)),
            dotnet_trace: if launcher.is_file() {
                Some(launcher.display().to_string())
            } else {
                feed_pkg.map(|p| format!("{} (installed on first use)", p.display()))
            },
            symbols: symbols
                .iter()
                .map(|d| {
                    let n = std::fs::read_dir(d).ok().map(|e| e.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "dbg" || x == "debug")).count());
                    (d.clone(), n)
                })
                .collect(),
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
    rows.push(match env.user_events {
        Some(true) => row("CONFIG_USER_EVENTS", "yes", Status::Ok, "dotnet-trace collect-linux can work"),
        Some(false) => row("CONFIG_USER_EVENTS", "no", Status::Warn, "dotnet-trace collect-linux cannot work here (scenarios using it SKIP)")
            .fix("no fix on this kernel: it was built without CONFIG_USER_EVENTS; only another kernel built with it (6.4 or newer) helps. Nothing else depends on it"),
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

/// Images, image and guest builders, the report's browser, dotnet-trace, symbol folders.
fn tool_rows(tools: &Tools) -> Vec<DoctorRow> {
    let mut rows = Vec::new();
    for suite in crate::image::SUITES {
        let tag = crate::image::runtime_tag(suite);
        let default = suite.name == crate::image::DEFAULT_SUITE;
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
    rows.push(match &tools.chromium {
        Some(v) => row("chromium", v, Status::Ok, "the merged report's browser test"),
        None => row("chromium", "not found", Status::Warn, "the headless report test skips").fix("apt-get install chromium fonts-dejavu-core"),
    });
    rows.push(match &tools.dotnet_trace {
        Some(v) => row("dotnet-trace", v, Status::Ok, "the dotnet-trace collector"),
        None => row("dotnet-trace", "not found", Status::Warn, "the dotnet-trace collector cannot run (no launcher, no offline feed)")
            .fix("dotnet tool install --tool-path .build/tools dotnet-trace"),
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

/// The first `program` on PATH (the lookup a shell does), for tools tracelab drives.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// The default scenario: `cargo xtask doctor` exits 4 when its set-up is incomplete.
pub const DEFAULT_SCENARIO: &str = "cpu-bound";

/// Whether the README's first command can run here: its set-up plan, as a doctor row.
pub fn default_scenario_row() -> DoctorRow {
    let item = format!("scenario {DEFAULT_SCENARIO} (default)");
    let scenario = match crate::scenario::Scenario::find(DEFAULT_SCENARIO) {
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
