//! An app as it is — no `TRACELAB READY` line, no go-file — is measured once it is ready and
//! stopped the way it is meant to stop. Readiness is read where it can be seen from the host on
//! every target: the app's output, its own /proc/PID/net/tcp* (its network namespace, even with
//! no network), its diagnostics socket in the /tmp the target shares.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::RunningApp;

/// When the app is ready to be measured.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "toml::Table", into = "toml::Table")]
pub enum Ready {
    /// A line of its output matches this regex; a named capture `url` feeds `[load]`.
    Line(String),
    /// Something listens on this TCP port (read from the app's own /proc/PID/net/tcp*, so it
    /// works in a container without a network).
    Port(u16),
    /// The runtime's diagnostics socket exists and answers ProcessInfo.
    DiagnosticSocket,
    /// A fixed delay after the start.
    Delay(f64),
}

/// ASP.NET Core's own start-up line (Microsoft.Hosting.Lifetime), with the address it bound.
pub const ASPNETCORE_READY_LINE: &str = r"Now listening on: (?P<url>https?://\S+)";

const READY_FORMS: &str = "{ line = \"regex\" }, { port = N }, { diagnostic_socket = true } or { delay_s = N }";

impl TryFrom<toml::Table> for Ready {
    type Error = String;
    fn try_from(t: toml::Table) -> Result<Self, String> {
        if t.len() != 1 {
            return Err(format!("`ready` takes exactly one of {READY_FORMS}"));
        }
        let (key, value) = t.into_iter().next().unwrap();
        match (key.as_str(), value) {
            ("line", toml::Value::String(re)) => {
                regex::Regex::new(&re).map_err(|e| format!("`ready.line` is not a valid regex: {e}"))?;
                Ok(Ready::Line(re))
            }
            ("port", toml::Value::Integer(p)) if (1..=65535).contains(&p) => Ok(Ready::Port(p as u16)),
            ("port", other) => Err(format!("`ready.port` must be a TCP port 1–65535, not {other}")),
            ("diagnostic_socket", toml::Value::Boolean(true)) => Ok(Ready::DiagnosticSocket),
            ("delay_s", toml::Value::Integer(s)) if s >= 0 => Ok(Ready::Delay(s as f64)),
            ("delay_s", toml::Value::Float(s)) if s >= 0.0 && s.is_finite() => Ok(Ready::Delay(s)),
            (key @ ("line" | "diagnostic_socket" | "delay_s"), other) => Err(format!("`ready.{key}` has the wrong type ({other}): give {READY_FORMS}")),
            (other, _) => Err(format!("unknown readiness `{other}`: give {READY_FORMS}")),
        }
    }
}

impl From<Ready> for toml::Table {
    fn from(r: Ready) -> toml::Table {
        let mut t = toml::Table::new();
        match r {
            Ready::Line(re) => t.insert("line".into(), re.into()),
            Ready::Port(p) => t.insert("port".into(), i64::from(p).into()),
            Ready::DiagnosticSocket => t.insert("diagnostic_socket".into(), true.into()),
            Ready::Delay(s) => t.insert("delay_s".into(), s.into()),
        };
        t
    }
}

impl Ready {
    pub(crate) fn describe(&self) -> String {
        match self {
            Ready::Line(re) => format!("a line matching `{re}`"),
            Ready::Port(p) => format!("a listener on TCP port {p}"),
            Ready::DiagnosticSocket => "the runtime's diagnostics socket answering ProcessInfo".into(),
            Ready::Delay(s) => format!("{s} s after the start"),
        }
    }
}

/// How the app is stopped once the measured window is over.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "toml::Value", into = "toml::Value")]
pub enum Stop {
    Sigint,
    Sigterm,
    /// `GET` this path on the app's URL.
    Http(String),
    /// Wait for the app to end by itself.
    Exit,
}

impl TryFrom<toml::Value> for Stop {
    type Error = String;
    fn try_from(v: toml::Value) -> Result<Self, String> {
        const FORMS: &str = "\"sigint\", \"sigterm\", \"exit\" or { http = \"/path\" }";
        match v {
            toml::Value::String(s) => match s.as_str() {
                "sigint" => Ok(Stop::Sigint),
                "sigterm" => Ok(Stop::Sigterm),
                "exit" => Ok(Stop::Exit),
                other => Err(format!("unknown stop `{other}`: give {FORMS}")),
            },
            toml::Value::Table(t) => match t.get("http") {
                Some(toml::Value::String(p)) if p.starts_with('/') && t.len() == 1 => Ok(Stop::Http(p.clone())),
                _ => Err(format!("`stop` as a table is {{ http = \"/path\" }} (the path starts with /); or give {FORMS}")),
            },
            other => Err(format!("`stop` must be {FORMS}, not {other}")),
        }
    }
}

impl From<Stop> for toml::Value {
    fn from(s: Stop) -> toml::Value {
        match s {
            Stop::Sigint => "sigint".into(),
            Stop::Sigterm => "sigterm".into(),
            Stop::Exit => "exit".into(),
            Stop::Http(p) => {
                let mut t = toml::Table::new();
                t.insert("http".into(), p.into());
                toml::Value::Table(t)
            }
        }
    }
}


/// Waits until the app is ready; returns the `url` the readiness line captured, if any. The
/// error names what was awaited and shows the app's last lines.
pub(crate) fn await_ready(app: &mut RunningApp, ready: &Ready, timeout: Duration) -> Result<Option<String>> {
    let started = Instant::now();
    let line_re = match ready {
        Ready::Line(re) => Some(Regex::new(re)?),
        _ => None,
    };
    let mut next_probe = Instant::now();
    loop {
        // Lines first: a readiness line must not be missed because a probe came due.
        while let Ok(line) = app.output.try_recv() {
            app.transcript.push(line.clone());
            if let Some(re) = &line_re
                && let Some(caps) = re.captures(&line)
            {
                return Ok(caps.name("url").map(|m| m.as_str().trim_end_matches('/').to_string()));
            }
        }
        if Instant::now() >= next_probe {
            let done = match ready {
                Ready::Line(_) => false,
                Ready::Port(port) => listening(app.host_pid, *port),
                Ready::DiagnosticSocket => diagnostics_answer(app),
                Ready::Delay(s) => started.elapsed() >= Duration::from_secs_f64(*s),
            };
            if done {
                return Ok(None);
            }
            if !app.is_alive() {
                app.drain_output();
                bail!(
                    "the app exited before it was ready (awaiting {}); its last lines:\n{}",
                    ready.describe(),
                    app.last_lines(15)
                );
            }
            next_probe = Instant::now() + Duration::from_millis(50);
        }
        if started.elapsed() >= timeout {
            bail!(
                "the app was not ready within {} s (awaiting {}); its last lines:\n{}",
                timeout.as_secs(),
                ready.describe(),
                app.last_lines(15)
            );
        }
        match app.output.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => {
                app.transcript.push(line.clone());
                if let Some(re) = &line_re
                    && let Some(caps) = re.captures(&line)
                {
                    return Ok(caps.name("url").map(|m| m.as_str().trim_end_matches('/').to_string()));
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(20)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Lets `seconds` pass while the app runs (its output is kept); false when it exited first.
pub(crate) fn run_for(app: &mut RunningApp, seconds: f64) -> bool {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < until {
        if !app.is_alive() {
            return false;
        }
        match app.output.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => app.transcript.push(line),
            // The app closed its output but may still run: wait without spinning.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(50)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    true
}

/// Whether a socket of the process's network namespace listens on TCP `port` (IPv4 or IPv6):
/// the `st` column is 0A (LISTEN) and the local port is the hex after the colon.
pub(crate) fn listening(host_pid: u32, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{host_pid}/net/{f}")).is_ok_and(|table| listens_on(&table, port))
    })
}

/// [`listening`] on the text of a /proc/net/tcp table.
pub(crate) fn listens_on(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let local_port = cols.get(1).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
        cols.get(3) == Some(&"0A") && local_port == Some(port)
    })
}

/// The runtime's diagnostics socket exists and answers ProcessInfo, found as the EventPipe
/// collectors find it (through /proc/PID/root, so also inside a container).
pub(crate) fn diagnostics_answer(app: &RunningApp) -> bool {
    eventpipe::ipc::DiagnosticsClient::for_pid(app.host_pid).is_ok_and(|c| c.process_info().is_ok())
}

/// Lets a runtime held at start (`DOTNET_DefaultDiagnosticPortSuspend=1`) go: ResumeRuntime over
/// its diagnostics socket, found as [`diagnostics_answer`] finds it.
pub(crate) fn resume_held(app: &RunningApp) -> Result<()> {
    eventpipe::ipc::DiagnosticsClient::for_pid(app.host_pid)
        .and_then(|c| c.resume_runtime())
        .map_err(anyhow::Error::from)
        .map_err(|e| e.context(format!("resuming the runtime held at start (pid {}) over its diagnostics socket", app.host_pid)))
}

/// Why no tool can reach pid `host_pid` over the diagnostics IPC, if none can.
pub(crate) fn diagnostics_unreachable(host_pid: u32) -> Option<String> {
    eventpipe::ipc::DiagnosticsClient::for_pid(host_pid).err().map(|e| e.to_string())
}

/// Switches the runtime's perf map on over its diagnostics socket (EnablePerfMap, .NET 8+: it
/// writes `perf-PID.map`, beginning with a rundown of the methods compiled before); the socket.
pub(crate) fn enable_perf_map(app: &RunningApp) -> Result<std::path::PathBuf> {
    let client = eventpipe::ipc::DiagnosticsClient::for_pid(app.host_pid)?;
    client.enable_perf_map(eventpipe::ipc::PerfMapKind::PerfMap)?;
    Ok(client.socket_path().to_path_buf())
}

/// Switches the runtime's perf map off again (DisablePerfMap).
pub(crate) fn disable_perf_map(app: &RunningApp) -> Result<()> {
    Ok(eventpipe::ipc::DiagnosticsClient::for_pid(app.host_pid)?.disable_perf_map()?)
}

/// Asks the app to stop; returns what was done (for the manifest's commands).
pub(crate) fn stop_app(app: &RunningApp, stop: &Stop, url: Option<&str>) -> Result<String> {
    Ok(match stop {
        Stop::Sigint => {
            crate::host::proc::signal(app.host_pid, 2)?;
            format!("kill -INT {} (stop = \"sigint\")", app.host_pid)
        }
        Stop::Sigterm => {
            crate::host::proc::signal(app.host_pid, 15)?;
            format!("kill -TERM {} (stop = \"sigterm\")", app.host_pid)
        }
        Stop::Exit => "waited for the app to exit (stop = \"exit\")".into(),
        Stop::Http(path) => {
            let Some(url) = url else {
                bail!("`stop = {{ http = \"{path}\" }}` needs the app's URL: a `ready.line` with a (?P<url>…) capture or `[load] url`")
            };
            let host_port = super::load::loopback_host_port(url)?;
            let mut config = loadgen::Config::new(&host_port, vec![path.parse()?])?;
            config.max_requests_per_route = Some(1);
            config.duration = Duration::from_secs(5);
            loadgen::run(&config)?;
            format!("GET {url}{path} (stop = {{ http = \"{path}\" }})")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rows in /proc/net/tcp6's layout (proc(5)): a listener on [::]:8080 and an established
    /// connection from local port 5000, which must not count. The live test below reads the
    /// kernel's own table.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1804216 1 0000000000000000 100 0 0 10 0\n   1: 0000000000000000FFFF00000100007F:1388 0000000000000000FFFF00000100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 1804217 1 0000000000000000 20 4 30 10 -1\n";

    #[test]
    fn readiness_and_stop_forms() {
        #[derive(Deserialize)]
        struct R {
            ready: Ready,
        }
        let ready = |t: &str| toml::from_str::<R>(t).map(|r| r.ready).map_err(|e| e.to_string());
        assert_eq!(ready("ready = { port = 8080 }").unwrap(), Ready::Port(8080));
        assert_eq!(ready("ready = { delay_s = 2 }").unwrap(), Ready::Delay(2.0));
        assert_eq!(ready("ready = { diagnostic_socket = true }").unwrap(), Ready::DiagnosticSocket);
        assert_eq!(ready("ready = { line = \"up (?P<url>\\\\S+)\" }").unwrap(), Ready::Line("up (?P<url>\\S+)".into()));
        for (text, why) in [
            ("ready = { line = \"(unclosed\" }", "`ready.line` is not a valid regex"),
            ("ready = { port = 70000 }", "TCP port 1–65535"),
            ("ready = { socket = true }", "unknown readiness `socket`"),
            ("ready = { port = 1, delay_s = 1 }", "exactly one of"),
        ] {
            let err = ready(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
        #[derive(Deserialize)]
        struct S {
            stop: Stop,
        }
        let stop = |t: &str| toml::from_str::<S>(t).map(|r| r.stop).map_err(|e| e.to_string());
        assert_eq!(stop("stop = \"sigint\"").unwrap(), Stop::Sigint);
        assert_eq!(stop("stop = { http = \"/quit\" }").unwrap(), Stop::Http("/quit".into()));
        assert!(stop("stop = \"kill\"").unwrap_err().contains("unknown stop `kill`"));
        assert!(stop("stop = { http = \"quit\" }").unwrap_err().contains("starts with /"));
    }

    #[test]
    fn a_listener_is_found_by_port_and_state() {
        assert!(listens_on(TCP6, 8080));
        assert!(!listens_on(TCP6, 5000), "an established connection is no listener");
        assert!(!listens_on(TCP6, 80));
        assert!(!listens_on("", 8080));
    }

    #[test]
    fn this_process_listening_is_seen_through_proc() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening(std::process::id(), port));
        drop(listener);
        assert!(!listening(std::process::id(), port));
    }
}
