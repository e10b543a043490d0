//! The diagnostics IPC client (dotnet/diagnostics `documentation/design-docs/ipc-protocol.md`):
//! a Unix socket per runtime, one command per connection, 20-byte headers, UTF-16 strings.
//!
//! - [`find_socket`]: `dotnet-diagnostic-{pid}-{key}-socket` in the target's temp folder, seen
//!   through `/proc/PID/root` so a process in a container is found from the host (its pid inside
//!   its namespace comes from `NSpid`).
//! - [`DiagnosticsClient`]: ProcessInfo, ResumeRuntime, CollectTracing5…2 (falling back when the
//!   runtime answers "unknown command"), StopTracing.
//! - [`ReverseListener`]: startup tracing. With `DOTNET_DiagnosticPorts=PATH,connect,suspend` the
//!   runtime connects to us and waits: start the session on the first connection, then send
//!   ResumeRuntime on the next one ([`ReverseListener::start_suspended_session`]).
//! - [`DiagnosticsClient::write_dump`]: the Dump command set (GenerateCoreDump3…1): the runtime
//!   starts its `createdump` next to itself, in the app's own namespaces, and answers when the
//!   file is written.
//! - [`EventPipeSession::drain_to`]: copies the nettrace stream to a writer on a thread. Draining
//!   concurrently matters: a client that stops reading makes StopTracing and the app's exit hang.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 14] = b"DOTNET_IPC_V1\0";
const HEADER_LEN: usize = 20;
const COMMAND_SET_DUMP: u8 = 0x01;
const COMMAND_SET_EVENTPIPE: u8 = 0x02;
const COMMAND_SET_PROCESS: u8 = 0x04;
const COMMAND_SET_SERVER: u8 = 0xFF;
const STOP_TRACING: u8 = 0x01;
const PROCESS_INFO: u8 = 0x00;
const RESUME_RUNTIME: u8 = 0x01;
const ENABLE_PERF_MAP: u8 = 0x05;
const DISABLE_PERF_MAP: u8 = 0x06;
const RESPONSE_OK: u8 = 0x00;
const RESPONSE_ERROR: u8 = 0xFF;

/// HRESULTs the diagnostics server answers with.
pub const E_BAD_ENCODING: u32 = 0x8013_1384;
pub const E_UNKNOWN_COMMAND: u32 = 0x8013_1385;
pub const E_UNKNOWN_MAGIC: u32 = 0x8013_1386;

/// How long to wait for a command's reply before calling the runtime unresponsive.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// A full dump of a large process takes a while: the runtime answers when createdump is done.
const DUMP_REPLY_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("process {pid} does not exist (or exited): {detail}")]
    NoProcess { pid: u32, detail: String },
    #[error(
        "no diagnostics socket `dotnet-diagnostic-{ns_pid}-*-socket` for process {pid} in {}: is it a .NET process, with DOTNET_EnableDiagnostics not 0, and still running?",
        searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NoSocket { pid: u32, ns_pid: u32, searched: Vec<PathBuf> },
    #[error("{what} ({}): {source}", path.display())]
    Io { what: String, path: PathBuf, source: std::io::Error },
    #[error("the runtime refused {command}: HRESULT {hresult:#010x}{}", hresult_meaning(*hresult))]
    Refused { command: &'static str, hresult: u32 },
    #[error("unexpected reply to {command} ({}): {what}", path.display())]
    Protocol { command: &'static str, path: PathBuf, what: String },
    #[error("invalid provider `{spec}`: {why} (expected Name[:0xKeywords[:Level[:key=value;…]]])")]
    BadProvider { spec: String, why: String },
    #[error("the runtime could not write the dump {}: HRESULT {hresult:#010x}{}{}", path.display(), hresult_meaning(*hresult), if message.is_empty() { String::new() } else { format!(": {message}") })]
    DumpFailed { path: PathBuf, hresult: u32, message: String },
    #[error("no runtime connected to {} within {timeout:?}: was the app started with DOTNET_DiagnosticPorts={},connect,suspend?", path.display(), path.display())]
    NoConnection { path: PathBuf, timeout: Duration },
}

fn hresult_meaning(h: u32) -> &'static str {
    match h {
        E_BAD_ENCODING => " (bad encoding)",
        E_UNKNOWN_COMMAND => " (unknown command)",
        E_UNKNOWN_MAGIC => " (unknown magic)",
        _ => "",
    }
}

pub type IpcResult<T> = std::result::Result<T, IpcError>;

/// One provider to enable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provider {
    pub name: String,
    pub keywords: u64,
    /// 0 LogAlways … 5 Verbose.
    pub level: u32,
    /// `key=value;key=value` arguments (EventSource filter data).
    pub arguments: String,
}

impl Provider {
    pub fn new(name: &str, keywords: u64, level: u32) -> Provider {
        Provider { name: name.into(), keywords, level, arguments: String::new() }
    }
}

impl FromStr for Provider {
    type Err = IpcError;
    /// `Name[:0xKeywords[:Level[:arguments]]]`, as dotnet-trace's `--providers` spells one
    /// provider. Missing keywords mean all, a missing level means Verbose (5).
    fn from_str(spec: &str) -> IpcResult<Provider> {
        let bad = |why: &str| IpcError::BadProvider { spec: spec.into(), why: why.into() };
        let mut parts = spec.splitn(4, ':');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            return Err(bad("empty provider name"));
        }
        let keywords = match parts.next().map(str::trim) {
            None | Some("") | Some("*") => u64::MAX,
            Some(k) => {
                let hex = k.strip_prefix("0x").or_else(|| k.strip_prefix("0X")).unwrap_or(k);
                u64::from_str_radix(hex, 16).map_err(|_| bad("keywords must be hexadecimal"))?
            }
        };
        let level = match parts.next().map(str::trim) {
            None | Some("") => 5,
            Some(l) => match l.to_ascii_lowercase().as_str() {
                "logalways" => 0,
                "critical" => 1,
                "error" => 2,
                "warning" => 3,
                "informational" => 4,
                "verbose" => 5,
                n => n.parse().ok().filter(|v| *v <= 5).ok_or_else(|| bad("level must be 0..5 or a level name"))?,
            },
        };
        let arguments = parts.next().unwrap_or("").to_string();
        Ok(Provider { name: name.into(), keywords, level, arguments })
    }
}

/// What to ask CollectTracing for.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub providers: Vec<Provider>,
    pub buffer_mb: u32,
    /// Rundown at the end of the session (method and module ranges for symbolization).
    pub rundown: bool,
    /// Stacks on events (CollectTracing3 and later).
    pub stackwalk: bool,
}

/// The rundown keywords CollectTracing2/3 imply when rundown is requested (the runtime's
/// `ep_default_rundown_keyword`); CollectTracing4/5 take them explicitly.
pub const DEFAULT_RUNDOWN_KEYWORDS: u64 = 0x8002_0139;

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { providers: Vec::new(), buffer_mb: 256, rundown: true, stackwalk: true }
    }
}

/// What a dump holds (the runtime's `DumpType`, as dotnet-dump's `--type` names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DumpType {
    /// Stacks, modules and thread state (`Normal`).
    Mini = 1,
    /// Mini plus the GC heaps (`WithHeap`, dotnet-dump's default).
    Heap = 2,
    /// Mini with personal data removed (`Triage`).
    Triage = 3,
    /// The whole address space (`Full`).
    Full = 4,
}

impl DumpType {
    pub const ALL: [DumpType; 4] = [DumpType::Mini, DumpType::Heap, DumpType::Triage, DumpType::Full];

    pub fn as_str(self) -> &'static str {
        match self {
            DumpType::Mini => "mini",
            DumpType::Heap => "heap",
            DumpType::Triage => "triage",
            DumpType::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<DumpType> {
        DumpType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// `GenerateDumpFlags` of the Dump command: createdump's own log goes to the app's stdout.
pub const DUMP_FLAG_LOGGING: u32 = 0x01;
pub const DUMP_FLAG_VERBOSE_LOGGING: u32 = 0x02;
pub const DUMP_FLAG_CRASH_REPORT: u32 = 0x04;

/// ProcessInfo's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The pid inside the process's own pid namespace.
    pub pid: u64,
    pub runtime_cookie: [u8; 16],
    pub command_line: String,
    pub os: String,
    pub arch: String,
}

/// The runtime's hello on a reverse connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertise {
    pub runtime_cookie: [u8; 16],
    pub pid: u64,
}

/// `NSpid` of a process: its pid in the innermost pid namespace (itself on the host).
pub fn namespace_pid(host_pid: u32) -> IpcResult<u32> {
    let status_path = format!("/proc/{host_pid}/status");
    let status = std::fs::read_to_string(&status_path)
        .map_err(|e| IpcError::NoProcess { pid: host_pid, detail: format!("{status_path}: {e}") })?;
    Ok(status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|v| v.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(host_pid))
}

/// The newest `dotnet-diagnostic-{ns_pid}-{key}-socket` in `dir` (largest key = latest start).
pub fn find_socket_in(dir: &Path, ns_pid: u32) -> Option<PathBuf> {
    let prefix = format!("dotnet-diagnostic-{ns_pid}-");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let key: u64 = name.strip_prefix(&prefix)?.strip_suffix("-socket")?.parse().ok()?;
            Some((key, e.path()))
        })
        .max_by_key(|(key, _)| *key)
        .map(|(_, p)| p)
}

/// Finds the diagnostics socket of a process given its pid as the host sees it: in the
/// process's TMPDIR (or /tmp) through `/proc/PID/root`, which also reaches into a container.
pub fn find_socket(host_pid: u32) -> IpcResult<PathBuf> {
    let ns_pid = namespace_pid(host_pid)?;
    let root = PathBuf::from(format!("/proc/{host_pid}/root"));
    let tmpdir = std::fs::read(format!("/proc/{host_pid}/environ"))
        .ok()
        .and_then(|env| {
            env.split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"TMPDIR=").map(|v| String::from_utf8_lossy(v).into_owned()))
        })
        .filter(|v| v.starts_with('/'));
    let mut searched = Vec::new();
    for dir in tmpdir.iter().map(String::as_str).chain(["/tmp"]) {
        let through_root = root.join(dir.trim_start_matches('/'));
        for candidate in [through_root, PathBuf::from(dir)] {
            if searched.contains(&candidate) {
                continue;
            }
            if let Some(found) = find_socket_in(&candidate, ns_pid) {
                return Ok(found);
            }
            searched.push(candidate);
        }
        // Only the host's own view may use the plain path: in another mount namespace it names a
        // different folder.
        if ns_pid != host_pid {
            searched.retain(|p| p.starts_with("/proc"));
        }
    }
    if !Path::new(&format!("/proc/{host_pid}")).exists() {
        return Err(IpcError::NoProcess { pid: host_pid, detail: "it exited".into() });
    }
    Err(IpcError::NoSocket { pid: host_pid, ns_pid, searched })
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    if s.is_empty() {
        out.extend_from_slice(&0u32.to_le_bytes());
        return;
    }
    let units: Vec<u16> = s.encode_utf16().chain([0]).collect();
    out.extend_from_slice(&(units.len() as u32).to_le_bytes());
    for u in units {
        out.extend_from_slice(&u.to_le_bytes());
    }
}

fn message(command_set: u8, command_id: u8, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + payload.len());
    m.extend_from_slice(MAGIC);
    m.extend_from_slice(&((HEADER_LEN + payload.len()) as u16).to_le_bytes());
    m.push(command_set);
    m.push(command_id);
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(payload);
    m
}

/// CollectTracing2…5 payload for `config`.
fn collect_tracing_payload(version: u8, config: &SessionConfig) -> Vec<u8> {
    let mut p = Vec::new();
    if version == 5 {
        // Session type 0: a streaming session over this connection (1 would be user_events).
        p.extend_from_slice(&0u32.to_le_bytes());
    }
    p.extend_from_slice(&config.buffer_mb.max(1).to_le_bytes());
    p.extend_from_slice(&1u32.to_le_bytes()); // format: nettrace
    match version {
        2 | 3 => p.push(u8::from(config.rundown)),
        _ => p.extend_from_slice(&(if config.rundown { DEFAULT_RUNDOWN_KEYWORDS } else { 0 }).to_le_bytes()),
    }
    if version >= 3 {
        p.push(u8::from(config.stackwalk));
    }
    p.extend_from_slice(&(config.providers.len() as u32).to_le_bytes());
    for prov in &config.providers {
        p.extend_from_slice(&prov.keywords.to_le_bytes());
        p.extend_from_slice(&prov.level.to_le_bytes());
        put_string(&mut p, &prov.name);
        put_string(&mut p, &prov.arguments);
        if version == 5 {
            // No event-id filter: enable=false, zero ids.
            p.push(0);
            p.extend_from_slice(&0u32.to_le_bytes());
        }
    }
    p
}

fn io_err(what: impl Into<String>, path: &Path) -> impl FnOnce(std::io::Error) -> IpcError + '_ {
    let what = what.into();
    move |source| IpcError::Io { what, path: path.to_path_buf(), source }
}

/// Reads a reply header; `Ok(Err(hresult))` for an error reply.
fn read_reply(stream: &mut UnixStream, command: &'static str, path: &Path) -> IpcResult<std::result::Result<Vec<u8>, u32>> {
    let mut h = [0u8; HEADER_LEN];
    stream.read_exact(&mut h).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => IpcError::Protocol {
            command,
            path: path.into(),
            what: "the runtime closed the connection without answering (did the process exit?)".into(),
        },
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => IpcError::Protocol {
            command,
            path: path.into(),
            what: format!("no answer within {REPLY_TIMEOUT:?}"),
        },
        _ => IpcError::Io { what: format!("reading the reply to {command}"), path: path.into(), source: e },
    })?;
    if &h[..14] != MAGIC {
        return Err(IpcError::Protocol { command, path: path.into(), what: format!("reply header starts {:02x?}", &h[..14]) });
    }
    let size = u16::from_le_bytes([h[14], h[15]]) as usize;
    if size < HEADER_LEN {
        return Err(IpcError::Protocol { command, path: path.into(), what: format!("reply size {size}") });
    }
    let mut payload = vec![0u8; size - HEADER_LEN];
    stream.read_exact(&mut payload).map_err(io_err(format!("reading the reply to {command}"), path))?;
    if h[16] != COMMAND_SET_SERVER {
        return Err(IpcError::Protocol { command, path: path.into(), what: format!("reply command set {:#04x}", h[16]) });
    }
    match h[17] {
        RESPONSE_OK => Ok(Ok(payload)),
        RESPONSE_ERROR => {
            let hresult = payload.get(0..4).map(|b| u32::from_le_bytes(b.try_into().unwrap())).unwrap_or(0);
            Ok(Err(hresult))
        }
        other => Err(IpcError::Protocol { command, path: path.into(), what: format!("reply id {other:#04x}") }),
    }
}

fn send(stream: &mut UnixStream, msg: &[u8], command: &'static str, path: &Path) -> IpcResult<()> {
    stream.write_all(msg).map_err(io_err(format!("sending {command}"), path))
}

/// A client of one runtime's diagnostics socket.
#[derive(Clone, Debug)]
pub struct DiagnosticsClient {
    path: PathBuf,
}

/// What EnablePerfMap switches on (the runtime's `PerfMapType`; the values of
/// `DOTNET_PerfMapEnabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum PerfMapKind {
    /// `perf-PID.map` and `jit-PID.dump`.
    All = 1,
    /// `jit-PID.dump` only.
    JitDump = 2,
    /// `perf-PID.map` only.
    PerfMap = 3,
}

impl DiagnosticsClient {
    /// The client of the process `host_pid` (discovers its socket, see [`find_socket`]).
    pub fn for_pid(host_pid: u32) -> IpcResult<DiagnosticsClient> {
        Ok(DiagnosticsClient { path: find_socket(host_pid)? })
    }

    /// The client of a known socket path.
    pub fn at(path: impl Into<PathBuf>) -> DiagnosticsClient {
        DiagnosticsClient { path: path.into() }
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    fn connect(&self) -> IpcResult<UnixStream> {
        let stream = UnixStream::connect(&self.path).map_err(io_err("connecting to the diagnostics socket", &self.path))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).ok();
        Ok(stream)
    }

    pub fn process_info(&self) -> IpcResult<ProcessInfo> {
        let mut s = self.connect()?;
        process_info_on(&mut s, &self.path)
    }

    /// Lets a runtime started with `…,suspend` run.
    pub fn resume_runtime(&self) -> IpcResult<()> {
        let mut s = self.connect()?;
        resume_runtime_on(&mut s, &self.path)
    }

    /// Switches the runtime's perf map on (.NET 8+): from now on it writes `perf-PID.map` (and/or
    /// `jit-PID.dump`), beginning with a rundown of every method already compiled — what a tool
    /// attaching to an app started without `DOTNET_PerfMapEnabled` needs to name JIT frames.
    pub fn enable_perf_map(&self, kind: PerfMapKind) -> IpcResult<()> {
        let mut s = self.connect()?;
        send(&mut s, &message(COMMAND_SET_PROCESS, ENABLE_PERF_MAP, &(kind as u32).to_le_bytes()), "EnablePerfMap", &self.path)?;
        match read_reply(&mut s, "EnablePerfMap", &self.path)? {
            Ok(_) => Ok(()),
            Err(hresult) => Err(IpcError::Refused { command: "EnablePerfMap", hresult }),
        }
    }

    /// Switches the runtime's perf map off again (.NET 8+).
    pub fn disable_perf_map(&self) -> IpcResult<()> {
        let mut s = self.connect()?;
        send(&mut s, &message(COMMAND_SET_PROCESS, DISABLE_PERF_MAP, &[]), "DisablePerfMap", &self.path)?;
        match read_reply(&mut s, "DisablePerfMap", &self.path)? {
            Ok(_) => Ok(()),
            Err(hresult) => Err(IpcError::Refused { command: "DisablePerfMap", hresult }),
        }
    }

    /// Starts a streaming session: tries CollectTracing5, then 4, 3, 2 while the runtime answers
    /// "unknown command" (or cannot parse a newer payload).
    pub fn start_session(&self, config: &SessionConfig) -> IpcResult<EventPipeSession> {
        let mut last = None;
        for version in [5u8, 4, 3, 2] {
            let mut s = self.connect()?;
            match start_session_on(&mut s, &self.path, config, version)? {
                Ok(id) => return Ok(EventPipeSession::new(id, version, s, self.path.clone())),
                Err(h @ (E_UNKNOWN_COMMAND | E_BAD_ENCODING)) => last = Some(h),
                Err(hresult) => return Err(IpcError::Refused { command: "CollectTracing", hresult }),
            }
        }
        Err(IpcError::Refused { command: "CollectTracing (versions 5 to 2)", hresult: last.unwrap_or(0) })
    }

    /// Asks the runtime to write a core dump of itself to `path` — a path as the *app* sees it
    /// (createdump runs in the app's mount namespace). Tries GenerateCoreDump3 (whose error reply
    /// carries createdump's message), then 2 and 1 while the runtime answers "unknown command".
    /// Returns the command version the runtime accepted.
    pub fn write_dump(&self, path: &Path, dump_type: DumpType, flags: u32) -> IpcResult<u8> {
        let payload = dump_payload(path, dump_type, flags);
        for version in [3u8, 2, 1] {
            let mut s = self.connect()?;
            s.set_read_timeout(Some(DUMP_REPLY_TIMEOUT)).ok();
            send(&mut s, &message(COMMAND_SET_DUMP, version, &payload), "GenerateCoreDump", &self.path)?;
            match read_dump_reply(&mut s, &self.path)? {
                Ok(()) => return Ok(version),
                Err((E_UNKNOWN_COMMAND, _)) if version > 1 => continue,
                Err((hresult, message)) => return Err(IpcError::DumpFailed { path: path.into(), hresult, message }),
            }
        }
        unreachable!("version 1 always returns")
    }

    /// Stops a session (sent on a new connection; the session's own stream then ends with EOF).
    pub fn stop_tracing(&self, session_id: u64) -> IpcResult<()> {
        let mut s = self.connect()?;
        send(&mut s, &message(COMMAND_SET_EVENTPIPE, STOP_TRACING, &session_id.to_le_bytes()), "StopTracing", &self.path)?;
        match read_reply(&mut s, "StopTracing", &self.path)? {
            Ok(_) => Ok(()),
            Err(hresult) => Err(IpcError::Refused { command: "StopTracing", hresult }),
        }
    }
}

fn process_info_on(s: &mut UnixStream, path: &Path) -> IpcResult<ProcessInfo> {
    send(s, &message(COMMAND_SET_PROCESS, PROCESS_INFO, &[]), "ProcessInfo", path)?;
    let p = match read_reply(s, "ProcessInfo", path)? {
        Ok(p) => p,
        Err(hresult) => return Err(IpcError::Refused { command: "ProcessInfo", hresult }),
    };
    let bad = |what: &str| IpcError::Protocol { command: "ProcessInfo", path: path.into(), what: what.into() };
    if p.len() < 24 {
        return Err(bad("reply shorter than pid + cookie"));
    }
    let pid = u64::from_le_bytes(p[0..8].try_into().unwrap());
    let runtime_cookie: [u8; 16] = p[8..24].try_into().unwrap();
    let mut pos = 24;
    let mut string = |field: &str| -> IpcResult<String> {
        let n = p.get(pos..pos + 4).ok_or_else(|| bad(&format!("{field} missing")))?;
        let n = u32::from_le_bytes(n.try_into().unwrap()) as usize;
        pos += 4;
        let bytes = p.get(pos..pos + n * 2).ok_or_else(|| bad(&format!("{field} runs past the reply")))?;
        pos += n * 2;
        let units: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|u| *u != 0).collect();
        Ok(String::from_utf16_lossy(&units))
    };
    Ok(ProcessInfo { pid, runtime_cookie, command_line: string("command line")?, os: string("OS")?, arch: string("architecture")? })
}

fn resume_runtime_on(s: &mut UnixStream, path: &Path) -> IpcResult<()> {
    send(s, &message(COMMAND_SET_PROCESS, RESUME_RUNTIME, &[]), "ResumeRuntime", path)?;
    match read_reply(s, "ResumeRuntime", path)? {
        Ok(_) => Ok(()),
        Err(hresult) => Err(IpcError::Refused { command: "ResumeRuntime", hresult }),
    }
}

/// Sends CollectTracing`version` on `s`; `Ok(Err(hresult))` when the runtime refused.
fn start_session_on(s: &mut UnixStream, path: &Path, config: &SessionConfig, version: u8) -> IpcResult<std::result::Result<u64, u32>> {
    let command_id = version + 1; // CollectTracing2 is 0x03 … CollectTracing5 is 0x06
    let payload = collect_tracing_payload(version, config);
    if payload.len() + HEADER_LEN > usize::from(u16::MAX) {
        return Err(IpcError::Protocol { command: "CollectTracing", path: path.into(), what: "too many providers for one message".into() });
    }
    send(s, &message(COMMAND_SET_EVENTPIPE, command_id, &payload), "CollectTracing", path)?;
    Ok(match read_reply(s, "CollectTracing", path)? {
        Ok(p) if p.len() >= 8 => Ok(u64::from_le_bytes(p[0..8].try_into().unwrap())),
        Ok(_) => return Err(IpcError::Protocol { command: "CollectTracing", path: path.into(), what: "reply without a session id".into() }),
        Err(h) => Err(h),
    })
}

/// GenerateCoreDump payload: dump name (UTF-16), u32 dump type, u32 flags (the same for 1…3).
fn dump_payload(path: &Path, dump_type: DumpType, flags: u32) -> Vec<u8> {
    let mut p = Vec::new();
    put_string(&mut p, &path.to_string_lossy());
    p.extend_from_slice(&(dump_type as u32).to_le_bytes());
    p.extend_from_slice(&flags.to_le_bytes());
    p
}

/// A dump reply: OK, or an error HRESULT with GenerateCoreDump3's message (u32 HRESULT, then a
/// UTF-16 string; older commands send the HRESULT alone).
fn read_dump_reply(s: &mut UnixStream, path: &Path) -> IpcResult<std::result::Result<(), (u32, String)>> {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => IpcError::Protocol {
            command: "GenerateCoreDump",
            path: path.into(),
            what: format!("no answer within {DUMP_REPLY_TIMEOUT:?}"),
        },
        std::io::ErrorKind::UnexpectedEof => IpcError::Protocol {
            command: "GenerateCoreDump",
            path: path.into(),
            what: "the runtime closed the connection without answering (did the process exit?)".into(),
        },
        _ => IpcError::Io { what: "reading the reply to GenerateCoreDump".into(), path: path.into(), source: e },
    })?;
    let bad = |what: String| IpcError::Protocol { command: "GenerateCoreDump", path: path.into(), what };
    if &h[..14] != MAGIC || h[16] != COMMAND_SET_SERVER {
        return Err(bad(format!("reply header {:02x?}", &h[..18])));
    }
    let size = u16::from_le_bytes([h[14], h[15]]) as usize;
    let mut payload = vec![0u8; size.saturating_sub(HEADER_LEN)];
    s.read_exact(&mut payload).map_err(io_err("reading the reply to GenerateCoreDump", path))?;
    match h[17] {
        RESPONSE_OK => Ok(Ok(())),
        RESPONSE_ERROR => {
            let hresult = payload.get(0..4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
            Ok(Err((hresult, dump_error_message(&payload))))
        }
        other => Err(bad(format!("reply id {other:#04x}"))),
    }
}

/// The message of a GenerateCoreDump3 error reply (after the HRESULT: u32 length, UTF-16); empty
/// when absent or garbled.
fn dump_error_message(payload: &[u8]) -> String {
    let Some(n) = payload.get(4..8).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize) else { return String::new() };
    let Some(bytes) = payload.get(8..8 + n.saturating_mul(2)) else { return String::new() };
    let units: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).take_while(|u| *u != 0).collect();
    String::from_utf16_lossy(&units).trim().to_string()
}

/// An established session; its connection carries the nettrace stream.
#[derive(Debug)]
pub struct EventPipeSession {
    pub id: u64,
    /// The CollectTracing version the runtime accepted (2…5).
    pub command_version: u8,
    stream: UnixStream,
    path: PathBuf,
}

impl EventPipeSession {
    fn new(id: u64, command_version: u8, stream: UnixStream, path: PathBuf) -> Self {
        // The stream may be quiet for long stretches: no timeout while draining.
        stream.set_read_timeout(None).ok();
        EventPipeSession { id, command_version, stream, path }
    }

    /// The raw connection (the nettrace stream follows).
    pub fn into_stream(self) -> UnixStream {
        self.stream
    }

    /// Copies the stream into `out` on a thread until EOF (the session stopped or the process
    /// exited).
    pub fn drain_to<W: Write + Send + 'static>(self, mut out: W) -> SessionDrain {
        let bytes = Arc::new(AtomicU64::new(0));
        let counter = bytes.clone();
        let mut stream = self.stream;
        let shutdown = stream.try_clone().ok();
        let path = self.path.clone();
        let thread = std::thread::Builder::new()
            .name(format!("eventpipe-drain-{}", self.id))
            .spawn(move || -> IpcResult<u64> {
                let mut buf = vec![0u8; 256 << 10];
                loop {
                    let n = match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        // A runtime killed mid-session resets the connection: the stream ends here.
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                        Err(e) => return Err(IpcError::Io { what: "reading the trace stream".into(), path, source: e }),
                    };
                    out.write_all(&buf[..n]).map_err(|e| IpcError::Io { what: "writing the trace".into(), path: path.clone(), source: e })?;
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
                out.flush().map_err(|e| IpcError::Io { what: "writing the trace".into(), path: path.clone(), source: e })?;
                Ok(counter.load(Ordering::Relaxed))
            })
            .expect("spawning a thread");
        SessionDrain { session_id: self.id, command_version: self.command_version, bytes, thread: Some(thread), shutdown }
    }
}

/// A session whose stream is being copied on a thread.
pub struct SessionDrain {
    pub session_id: u64,
    pub command_version: u8,
    bytes: Arc<AtomicU64>,
    thread: Option<JoinHandle<IpcResult<u64>>>,
    shutdown: Option<UnixStream>,
}

impl SessionDrain {
    /// Bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the stream's end; after `timeout` the connection is shut down (the trace is
    /// then cut short) and an error says so. Returns the bytes received.
    pub fn wait(&mut self, timeout: Duration) -> IpcResult<u64> {
        let deadline = Instant::now() + timeout;
        while !self.is_finished() {
            if Instant::now() >= deadline {
                if let Some(s) = &self.shutdown {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                let _ = self.thread.take().map(|t| t.join());
                return Err(IpcError::Protocol {
                    command: "the trace stream",
                    path: PathBuf::new(),
                    what: format!("did not end within {timeout:?} after the session should have stopped; cut short"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(IpcError::Protocol { command: "the trace stream", path: PathBuf::new(), what: "the drain thread panicked".into() })
            }),
            None => Ok(self.bytes()),
        }
    }
}

/// A listener for runtimes started with `DOTNET_DiagnosticPorts=PATH,connect[,suspend]`.
pub struct ReverseListener {
    listener: UnixListener,
    path: PathBuf,
}

impl ReverseListener {
    pub fn bind(path: impl Into<PathBuf>) -> IpcResult<ReverseListener> {
        let path = path.into();
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(io_err("listening for the runtime", &path))?;
        listener.set_nonblocking(true).map_err(io_err("listening for the runtime", &path))?;
        Ok(ReverseListener { listener, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value for `DOTNET_DiagnosticPorts` that makes a runtime connect here and wait.
    pub fn diagnostic_ports_value(&self) -> String {
        format!("{},connect,suspend", self.path.display())
    }

    /// Accepts the next runtime connection and reads its advertise.
    pub fn accept(&self, timeout: Duration) -> IpcResult<(UnixStream, Advertise)> {
        let deadline = Instant::now() + timeout;
        let mut stream = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(IpcError::NoConnection { path: self.path.clone(), timeout });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(IpcError::Io { what: "accepting a runtime connection".into(), path: self.path.clone(), source: e }),
            }
        };
        stream.set_nonblocking(false).map_err(io_err("accepting a runtime connection", &self.path))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).ok();
        // ADVR_V1\0, 16-byte cookie, u64 pid, u16 reserved.
        let mut adv = [0u8; 34];
        stream.read_exact(&mut adv).map_err(io_err("reading the runtime's advertise", &self.path))?;
        if &adv[..8] != b"ADVR_V1\0" {
            return Err(IpcError::Protocol { command: "advertise", path: self.path.clone(), what: format!("starts {:02x?}", &adv[..8]) });
        }
        Ok((stream, Advertise { runtime_cookie: adv[8..24].try_into().unwrap(), pid: u64::from_le_bytes(adv[24..32].try_into().unwrap()) }))
    }

    /// Startup tracing: starts `config` on the first connection of a suspended runtime, then
    /// resumes it on the next one, so the session sees the app's first managed code.
    pub fn start_suspended_session(&self, config: &SessionConfig, timeout: Duration) -> IpcResult<(EventPipeSession, Advertise)> {
        let (mut first, advertise) = self.accept(timeout)?;
        let mut session = None;
        let mut last = 0;
        for version in [5u8, 4, 3, 2] {
            match start_session_on(&mut first, &self.path, config, version)? {
                Ok(id) => {
                    session = Some(EventPipeSession::new(id, version, first, self.path.clone()));
                    break;
                }
                Err(h @ (E_UNKNOWN_COMMAND | E_BAD_ENCODING)) => {
                    last = h;
                    // One command per connection: the runtime reconnects for the next try.
                    first = self.accept(timeout)?.0;
                }
                Err(hresult) => return Err(IpcError::Refused { command: "CollectTracing", hresult }),
            }
        }
        let session = session.ok_or(IpcError::Refused { command: "CollectTracing (versions 5 to 2)", hresult: last })?;
        let (mut second, _) = self.accept(timeout)?;
        resume_runtime_on(&mut second, &self.path)?;
        Ok((session, advertise))
    }

    /// Resumes a runtime held on this port (`…,connect,suspend`, as dotnet-monitor's Listen mode
    /// does at start): ResumeRuntime on its next reverse connection; the runtime's advertise.
    pub fn resume_next(&self, timeout: Duration) -> IpcResult<Advertise> {
        let (mut s, advertise) = self.accept(timeout)?;
        resume_runtime_on(&mut s, &self.path)?;
        Ok(advertise)
    }

    /// Sends one command on the runtime's next reverse connection: ProcessInfo.
    pub fn process_info(&self, timeout: Duration) -> IpcResult<ProcessInfo> {
        let (mut s, _) = self.accept(timeout)?;
        process_info_on(&mut s, &self.path)
    }
}

impl Drop for ReverseListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_specs_parse() {
        let p: Provider = "Microsoft-Windows-DotNETRuntime:0x8000:4".parse().unwrap();
        assert_eq!(p, Provider::new("Microsoft-Windows-DotNETRuntime", 0x8000, 4));
        let p: Provider = "Microsoft-DotNETCore-SampleProfiler".parse().unwrap();
        assert_eq!((p.keywords, p.level), (u64::MAX, 5));
        let p: Provider = "My-Source:0x1:Informational:EventCounterIntervalSec=1".parse().unwrap();
        assert_eq!((p.level, p.arguments.as_str()), (4, "EventCounterIntervalSec=1"));
        assert!(matches!("X:zz".parse::<Provider>(), Err(IpcError::BadProvider { .. })));
        assert!(matches!(":1".parse::<Provider>(), Err(IpcError::BadProvider { .. })));
        assert!(matches!("X:1:9".parse::<Provider>(), Err(IpcError::BadProvider { .. })));
    }

    #[test]
    fn collect_tracing2_layout() {
        let config = SessionConfig { providers: vec![Provider::new("AB", 0x8000, 4)], buffer_mb: 64, rundown: true, stackwalk: true };
        let p = collect_tracing_payload(2, &config);
        let mut expected = Vec::new();
        expected.extend_from_slice(&64u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.push(1);
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&0x8000u64.to_le_bytes());
        expected.extend_from_slice(&4u32.to_le_bytes());
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(&[b'A', 0, b'B', 0, 0, 0]);
        expected.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(p, expected);
        let m = message(COMMAND_SET_EVENTPIPE, 3, &p);
        assert_eq!(&m[..14], MAGIC);
        assert_eq!(u16::from_le_bytes([m[14], m[15]]) as usize, m.len());
    }

    #[test]
    fn dump_payload_and_error_reply_layout() {
        let p = dump_payload(Path::new("/d"), DumpType::Heap, DUMP_FLAG_LOGGING);
        let mut expected = 3u32.to_le_bytes().to_vec();
        expected.extend_from_slice(&[b'/', 0, b'd', 0, 0, 0]);
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(p, expected);
        let mut reply = 0x8000_4005u32.to_le_bytes().to_vec();
        reply.extend_from_slice(&4u32.to_le_bytes());
        reply.extend_from_slice(&[b'n', 0, b'o', 0, b'!', 0, 0, 0]);
        assert_eq!(dump_error_message(&reply), "no!");
        assert_eq!(dump_error_message(&reply[..4]), "");
        assert_eq!(dump_error_message(&reply[..10]), "");
        for t in DumpType::ALL {
            assert_eq!(DumpType::parse(t.as_str()), Some(t));
        }
    }

    #[test]
    fn dead_pid_is_named() {
        // Pids above pid_max (4194304 at most) never exist.
        let err = find_socket(99_999_999).unwrap_err();
        assert!(matches!(err, IpcError::NoProcess { pid: 99_999_999, .. }), "{err}");
        assert!(err.to_string().contains("99999999"), "{err}");
    }

    #[test]
    fn newest_socket_wins() {
        let dir = tempfile::tempdir().unwrap();
        for key in ["100", "250", "99"] {
            std::fs::write(dir.path().join(format!("dotnet-diagnostic-42-{key}-socket")), b"").unwrap();
        }
        std::fs::write(dir.path().join("dotnet-diagnostic-421-999-socket"), b"").unwrap();
        assert_eq!(find_socket_in(dir.path(), 42).unwrap(), dir.path().join("dotnet-diagnostic-42-250-socket"));
        assert_eq!(find_socket_in(dir.path(), 7), None);
    }
}
