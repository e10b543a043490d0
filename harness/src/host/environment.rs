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
    /// Filled by the engine: host / container / sidecar / pod and the tools' capabilities.
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub target_capabilities: Vec<String>,
    #[serde(default)]
    pub image: Option<String>,
    /// The pod's shape on the pod target (`sidecar`, `debug` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_shape: Option<String>,
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

pub(crate) fn distro() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The perf binary: `perf`, else a versioned `perf_X.Y` (bullseye ships only `perf_5.10`).
pub fn perf_binary() -> Option<PathBuf> {
    if let Some(p) = crate::host::environment::which("perf") {
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

pub(crate) fn perf_version() -> Option<String> {
    let bin = perf_binary()?;
    probe(bin.to_str()?, &["--version"], Duration::from_secs(5))
}

pub(crate) fn tracefs_mounted() -> bool {
    Path::new("/sys/kernel/tracing/events/sched").is_dir()
}

/// The file whose presence proves the kernel has user_events (tracefs mounted).
pub const USER_EVENTS_DATA: &str = "/sys/kernel/tracing/user_events_data";

/// What the kernel says about user_events: `Some(true)` proven present, `Some(false)` proven
/// absent (tracefs mounted without the file, or the kernel's config says so), `None` unknown.
pub fn user_events_state(
    data_file: &Path,
    tracefs_mounted: bool,
    config: Option<&str>,
) -> Option<bool> {
    if data_file.exists() {
        return Some(true);
    }
    if let Some(text) = config {
        return Some(text.lines().any(|l| l == "CONFIG_USER_EVENTS=y"));
    }
    if tracefs_mounted { Some(false) } else { None }
}

/// Whether the kernel has CONFIG_USER_EVENTS (what `dotnet-trace collect-linux` needs).
pub(crate) fn user_events() -> Option<bool> {
    user_events_state(
        Path::new(USER_EVENTS_DATA),
        tracefs_mounted(),
        kernel_config().as_ref().map(|(_, text)| text.as_str()),
    )
}

/// The running kernel's configuration and where it was read: `/boot/config-RELEASE`, else
/// `/proc/config.gz` (a kernel built with IKCONFIG_PROC, as the matrix's own is).
pub(crate) fn kernel_config() -> Option<(String, String)> {
    let boot = format!("/boot/config-{}", kernel_release());
    if let Ok(text) = std::fs::read_to_string(&boot) {
        return Some((boot, text));
    }
    let gz = std::fs::File::open("/proc/config.gz").ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).ok()?;
    Some(("/proc/config.gz".into(), text))
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
pub(crate) fn capability_names(mask: u64) -> Vec<String> {
    (0..64)
        .filter(|bit| mask & (1u64 << bit) != 0)
        .map(|bit| CAP_NAMES.get(bit).map(|s| s.to_string()).unwrap_or_else(|| format!("cap{bit}")))
        .collect()
}

pub(crate) fn effective_capabilities() -> Vec<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    capability_names(mask)
}

/// liblttng-ust sonames the dynamic linker knows (`liblttng-ust.so.0` = LTTng 2.12, `.so.1` = 2.13+).
pub(crate) fn lttng_ust_sonames() -> Vec<String> {
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

pub(crate) fn docker_version() -> Option<String> {
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
    let dotnet_runtimes = crate::host::environment::which("dotnet")
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
pub(crate) fn short_label(target: &str, image: Option<&str>) -> String {
    let k = kernel_release();
    let k = k.split('-').next().unwrap_or(&k).to_string();
    let k: String = k.split('.').take(2).collect::<Vec<_>>().join(".");
    match image {
        Some(i) => format!("{target}-{i}-k{k}"),
        None => format!("{target}-k{k}"),
    }
}

/// The first `program` on PATH (the lookup a shell does), for tools tracelab drives.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| p.is_file())
}

/// `Err(reason)` when `program` is not on PATH.
pub fn require_program(program: &str) -> Result<(), String> {
    which(program).map(|_| ()).ok_or_else(|| format!("`{program}` is not on PATH"))
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
    fn short_label_shape() {
        assert!(short_label("host", None).starts_with("host-k"));
        assert!(short_label("container", Some("bullseye")).starts_with("container-bullseye-k"));
    }
}
