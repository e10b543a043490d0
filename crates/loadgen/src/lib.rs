//! A small HTTP/1.1 load generator for servers on the loopback interface.
//!
//! Each route gets its own keep-alive connections (one thread each), so a slow route cannot
//! starve a fast one: the on- vs off-CPU scenario drives a CPU route and a blocked route side by
//! side and compares what profilers see for each. Load is bounded by time and, optionally, by a
//! request count per route. Only 127.0.0.0/8 and ::1 are accepted: this tool exists to load the
//! app under test on the same machine, never anything else.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Headers larger than this are an error, not an allocation.
const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Bodies larger than this are an error (the routes under test answer a few bytes).
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} is not a loopback address: loadgen only loads 127.0.0.0/8 or ::1")]
    NotLoopback(String),
    #[error("cannot resolve `{0}`: {1}")]
    Resolve(String, std::io::Error),
    #[error("bad route `{0}`: expected NAME=/path or /path")]
    BadRoute(String),
    #[error("{0}")]
    Config(String),
}

/// One route to load: `name` labels it in the report, `path` is requested with GET.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Route {
    pub name: String,
    pub path: String,
}

impl std::str::FromStr for Route {
    type Err = Error;

    /// `cpu=/cpu`, or just `/cpu` (named after the path).
    fn from_str(s: &str) -> Result<Route, Error> {
        let (name, path) = match s.split_once('=') {
            Some((name, path)) => (name.to_string(), path.to_string()),
            None => (s.trim_start_matches('/').to_string(), s.to_string()),
        };
        if name.is_empty()
            || !path.starts_with('/')
            || path.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::BadRoute(s.to_string()));
        }
        Ok(Route { name, path })
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub target: SocketAddr,
    pub routes: Vec<Route>,
    pub connections_per_route: usize,
    /// Stop issuing requests after this long.
    pub duration: Duration,
    /// Stop a route after this many requests (sent, whatever their outcome).
    pub max_requests_per_route: Option<u64>,
    /// Connect / read / write timeout of one request.
    pub request_timeout: Duration,
}

impl Config {
    /// A config for `target` (`127.0.0.1:5080`, `localhost:5080`, `[::1]:5080`), refusing any
    /// address that is not loopback.
    pub fn new(target: &str, routes: Vec<Route>) -> Result<Config, Error> {
        Ok(Config {
            target: resolve_loopback(target)?,
            routes,
            connections_per_route: 1,
            duration: Duration::from_secs(10),
            max_requests_per_route: None,
            request_timeout: Duration::from_secs(30),
        })
    }
}

/// Resolves `target` and accepts it only when every address it names is loopback.
pub fn resolve_loopback(target: &str) -> Result<SocketAddr, Error> {
    let addrs: Vec<SocketAddr> = target
        .to_socket_addrs()
        .map_err(|e| Error::Resolve(target.to_string(), e))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::Resolve(
            target.to_string(),
            std::io::Error::other("no address"),
        ));
    }
    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.ip())) {
        return Err(Error::NotLoopback(format!("{target} ({})", bad.ip())));
    }
    Ok(addrs[0])
}

pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[0] == 127,
        // Only ::1 itself: an IPv4-mapped address reaches whatever the v4 part names.
        IpAddr::V6(v6) => v6 == std::net::Ipv6Addr::LOCALHOST,
    }
}

/// Latency figures of one route, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    fn from_micros(mut micros: Vec<u64>) -> Latency {
        if micros.is_empty() {
            return Latency::default();
        }
        micros.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        // Nearest-rank percentile.
        let pct = |p: f64| {
            ms(micros
                [((p / 100.0 * micros.len() as f64).ceil() as usize).clamp(1, micros.len()) - 1])
        };
        Latency {
            min_ms: ms(micros[0]),
            mean_ms: micros.iter().sum::<u64>() as f64 / micros.len() as f64 / 1000.0,
            p50_ms: pct(50.0),
            p90_ms: pct(90.0),
            p99_ms: pct(99.0),
            max_ms: ms(*micros.last().unwrap()),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RouteReport {
    pub name: String,
    pub path: String,
    /// Requests answered with a complete response (any status).
    pub requests: u64,
    /// Of those, answers with a 2xx status.
    pub ok: u64,
    /// Requests that failed (connection refused or reset, timeout, malformed response).
    pub errors: u64,
    /// The first few distinct error messages.
    pub error_samples: Vec<String>,
    pub requests_per_s: f64,
    /// Latency of the complete responses.
    pub latency: Latency,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub target: String,
    pub connections_per_route: usize,
    pub elapsed_s: f64,
    pub routes: Vec<RouteReport>,
}

impl Report {
    pub fn route(&self, name: &str) -> Option<&RouteReport> {
        self.routes.iter().find(|r| r.name == name)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} for {:.1} s, {} connection(s) per route",
            self.target, self.elapsed_s, self.connections_per_route
        )?;
        writeln!(
            f,
            "{:<12} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "route", "requests", "errors", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        )?;
        for r in &self.routes {
            writeln!(
                f,
                "{:<12} {:>9} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                r.name,
                r.requests,
                r.errors,
                r.requests_per_s,
                r.latency.p50_ms,
                r.latency.p90_ms,
                r.latency.p99_ms,
                r.latency.max_ms
            )?;
            for e in &r.error_samples {
                writeln!(f, "  error: {e}")?;
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct RouteTally {
    latencies_us: Vec<u64>,
    ok: u64,
    errors: u64,
    error_samples: Vec<String>,
}

/// Runs the load and reports per route. Errors of single requests are counted, not returned;
/// the call fails only on a bad configuration.
pub fn run(config: &Config) -> Result<Report, Error> {
    if !is_loopback(config.target.ip()) {
        return Err(Error::NotLoopback(config.target.to_string()));
    }
    if config.routes.is_empty() {
        return Err(Error::Config("no route to load".into()));
    }
    if config.connections_per_route == 0 {
        return Err(Error::Config(
            "connections per route must be at least 1".into(),
        ));
    }
    let started = Instant::now();
    let deadline = started + config.duration;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tallies = Vec::new();
    std::thread::scope(|scope| {
        for route in &config.routes {
            let tally = Arc::new(Mutex::new(RouteTally::default()));
            let issued = Arc::new(AtomicU64::new(0));
            for _ in 0..config.connections_per_route {
                let (tally, issued, stop) = (tally.clone(), issued.clone(), stop.clone());
                scope.spawn(move || {
                    connection_loop(config, route, deadline, &issued, &stop, &tally)
                });
            }
            tallies.push(tally);
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let routes = config
        .routes
        .iter()
        .zip(tallies)
        .map(|(route, tally)| {
            let tally = std::mem::take(&mut *tally.lock().unwrap());
            let requests = tally.latencies_us.len() as u64;
            RouteReport {
                name: route.name.clone(),
                path: route.path.clone(),
                requests,
                ok: tally.ok,
                errors: tally.errors,
                error_samples: tally.error_samples,
                requests_per_s: if elapsed > 0.0 {
                    requests as f64 / elapsed
                } else {
                    0.0
                },
                latency: Latency::from_micros(tally.latencies_us),
            }
        })
        .collect();
    Ok(Report {
        target: config.target.to_string(),
        connections_per_route: config.connections_per_route,
        elapsed_s: elapsed,
        routes,
    })
}

fn connection_loop(
    config: &Config,
    route: &Route,
    deadline: Instant,
    issued: &AtomicU64,
    stop: &AtomicBool,
    tally: &Mutex<RouteTally>,
) {
    let mut conn: Option<Connection> = None;
    let mut latencies = Vec::new();
    let (mut ok, mut errors, mut samples) = (0u64, 0u64, Vec::<String>::new());
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some(max) = config.max_requests_per_route
            && issued.fetch_add(1, Ordering::Relaxed) >= max
        {
            break;
        }
        let begun = Instant::now();
        let result = (|| -> Result<Response, String> {
            if conn.is_none() {
                conn = Some(Connection::open(config.target, config.request_timeout)?);
            }
            conn.as_mut()
                .unwrap()
                .get(&route.path, &config.target.to_string())
        })();
        match result {
            Ok(response) => {
                latencies.push(begun.elapsed().as_micros() as u64);
                if (200..300).contains(&response.status) {
                    ok += 1;
                }
                if !response.keep_alive {
                    conn = None;
                }
            }
            Err(message) => {
                errors += 1;
                conn = None;
                if samples.len() < 5 && !samples.contains(&message) {
                    samples.push(message);
                }
                // A refused connection fails at once; don't spin on it.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let mut t = tally.lock().unwrap();
    t.latencies_us.extend(latencies);
    t.ok += ok;
    t.errors += errors;
    for s in samples {
        if t.error_samples.len() < 5 && !t.error_samples.contains(&s) {
            t.error_samples.push(s);
        }
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    keep_alive: bool,
}

struct Connection {
    reader: BufReader<TcpStream>,
}

impl Connection {
    fn open(target: SocketAddr, timeout: Duration) -> Result<Connection, String> {
        let stream = TcpStream::connect_timeout(&target, timeout)
            .map_err(|e| format!("connect {target}: {e}"))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        Ok(Connection {
            reader: BufReader::new(stream),
        })
    }

    fn get(&mut self, path: &str, host: &str) -> Result<Response, String> {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tracelab-loadgen\r\nAccept: */*\r\n\r\n"
        );
        self.reader
            .get_mut()
            .write_all(request.as_bytes())
            .map_err(|e| format!("send {path}: {e}"))?;
        read_response(&mut self.reader).map_err(|e| format!("{path}: {e}"))
    }
}

/// Reads one response (status line, headers, body by Content-Length or chunked) and discards
/// the body.
fn read_response(reader: &mut impl BufRead) -> Result<Response, String> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader
            .by_ref()
            .take((MAX_HEADER_BYTES + 1 - head.len()) as u64)
            .read_until(b'\n', &mut head)
            .map_err(|e| format!("reading headers: {e}"))?;
        if n == 0 {
            return Err(if head.is_empty() {
                "connection closed before a response".into()
            } else {
                "connection closed inside the headers".into()
            });
        }
        if head.len() > MAX_HEADER_BYTES {
            return Err(format!("response headers exceed {MAX_HEADER_BYTES} bytes"));
        }
        if head[before..] == *b"\r\n" || head[before..] == *b"\n" {
            break;
        }
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete response headers".into()),
        Err(e) => return Err(format!("malformed response: {e}")),
    }
    let status = parsed.code.ok_or("response without a status")?;
    let version = parsed.version.unwrap_or(1);
    let header = |name: &str| {
        parsed
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let close = header("connection").is_some_and(|v| v.split(',').any(|t| t.trim() == "close"));
    let keep_alive = if version == 0 {
        header("connection").is_some_and(|v| v.contains("keep-alive"))
    } else {
        !close
    };
    let chunked =
        header("transfer-encoding").is_some_and(|v| v.split(',').any(|t| t.trim() == "chunked"));
    let no_body = (100..200).contains(&status) || status == 204 || status == 304;
    if no_body {
        return Ok(Response { status, keep_alive });
    }
    if chunked {
        read_chunked(reader)?;
    } else if let Some(length) = header("content-length") {
        let length: u64 = length
            .parse()
            .map_err(|_| format!("bad Content-Length `{length}`"))?;
        if length > MAX_BODY_BYTES {
            return Err(format!("body of {length} bytes exceeds {MAX_BODY_BYTES}"));
        }
        discard(reader, length)?;
    } else {
        // Body runs to the end of the connection.
        let n = std::io::copy(
            &mut reader.by_ref().take(MAX_BODY_BYTES + 1),
            &mut std::io::sink(),
        )
        .map_err(|e| format!("reading body: {e}"))?;
        if n > MAX_BODY_BYTES {
            return Err(format!("body exceeds {MAX_BODY_BYTES} bytes"));
        }
        return Ok(Response {
            status,
            keep_alive: false,
        });
    }
    Ok(Response { status, keep_alive })
}

fn discard(reader: &mut impl BufRead, length: u64) -> Result<(), String> {
    let n = std::io::copy(&mut reader.by_ref().take(length), &mut std::io::sink())
        .map_err(|e| format!("reading body: {e}"))?;
    if n < length {
        return Err(format!(
            "connection closed after {n} of {length} body bytes"
        ));
    }
    Ok(())
}

fn read_chunked(reader: &mut impl BufRead) -> Result<(), String> {
    let mut total = 0u64;
    loop {
        let mut line = Vec::new();
        reader
            .by_ref()
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading chunk size: {e}"))?;
        if !line.ends_with(b"\n") {
            return Err("bad or truncated chunk size line".into());
        }
        let text = String::from_utf8_lossy(&line);
        let size_text = text
            .trim()
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let size = u64::from_str_radix(&size_text, 16)
            .map_err(|_| format!("bad chunk size `{size_text}`"))?;
        total += size;
        if total > MAX_BODY_BYTES {
            return Err(format!("chunked body exceeds {MAX_BODY_BYTES} bytes"));
        }
        if size == 0 {
            // Trailers, then an empty line.
            loop {
                let mut trailer = Vec::new();
                let n = reader
                    .by_ref()
                    .take(MAX_HEADER_BYTES as u64)
                    .read_until(b'\n', &mut trailer)
                    .map_err(|e| format!("reading trailers: {e}"))?;
                if n == 0 || trailer == b"\r\n" || trailer == b"\n" {
                    return Ok(());
                }
            }
        }
        discard(reader, size)?;
        let mut crlf = [0u8; 2];
        reader
            .read_exact(&mut crlf)
            .map_err(|e| format!("reading chunk end: {e}"))?;
        if &crlf != b"\r\n" {
            return Err("chunk not followed by CRLF".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_accepted() {
        assert!(resolve_loopback("127.0.0.1:80").is_ok());
        assert!(resolve_loopback("127.9.8.7:80").is_ok());
        assert!(resolve_loopback("[::1]:80").is_ok());
        for bad in [
            "10.0.0.1:80",
            "0.0.0.0:80",
            "8.8.8.8:53",
            "[::]:80",
            "[::ffff:127.0.0.1]:80",
            "[2001:db8::1]:80",
        ] {
            let err = resolve_loopback(bad).unwrap_err();
            assert!(matches!(err, Error::NotLoopback(_)), "{bad}: {err}");
            assert!(err.to_string().contains("not a loopback address"), "{err}");
        }
    }

    #[test]
    fn routes_parse() {
        assert_eq!(
            "cpu=/cpu".parse::<Route>().unwrap(),
            Route {
                name: "cpu".into(),
                path: "/cpu".into()
            }
        );
        assert_eq!("/blocked".parse::<Route>().unwrap().name, "blocked");
        for bad in ["cpu", "x=cpu", "=/x", "a=/b c"] {
            assert!(bad.parse::<Route>().is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_content_length_chunked_and_close() {
        let mut r = BufReader::new(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\nrest"[..]);
        let a = read_response(&mut r).unwrap();
        assert_eq!((a.status, a.keep_alive), (200, true));
        let b = read_response(&mut r).unwrap();
        assert_eq!((b.status, b.keep_alive), (404, true));
        let c = read_response(&mut r).unwrap();
        assert_eq!((c.status, c.keep_alive), (200, false));
    }

    #[test]
    fn malformed_responses_are_errors() {
        for bad in [
            &b"garbage\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n",
            b"",
        ] {
            assert!(
                read_response(&mut BufReader::new(bad)).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BYTES)
        );
        let err = read_response(&mut BufReader::new(huge.as_bytes())).unwrap_err();
        assert!(err.contains("exceed"), "{err}");
    }

    #[test]
    fn latency_percentiles() {
        let l = Latency::from_micros((1..=100).map(|i| i * 1000).collect());
        assert_eq!(
            (l.min_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms),
            (1.0, 50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(Latency::from_micros(vec![]), Latency::default());
    }
}
