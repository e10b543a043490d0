//! Runs the load generator against a tiny HTTP/1.1 server on 127.0.0.1 in this test.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use loadgen::{Config, Route};

/// Serves keep-alive connections: `/fast` (Content-Length), `/chunked` (chunked),
/// `/slow` (sleeps 20 ms), `/close` (answers then closes), `/bad` (malformed status line),
/// anything else 404. Counts requests per path.
struct Server {
    address: String,
    counts: Arc<[AtomicU64; 6]>,
}

const PATHS: [&str; 5] = ["/fast", "/chunked", "/slow", "/close", "/bad"];

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let counts: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
        let c = counts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let c = c.clone();
                std::thread::spawn(move || serve(stream, &c));
            }
        });
        Server { address, counts }
    }

    fn count(&self, path: &str) -> u64 {
        let i = PATHS.iter().position(|p| *p == path).unwrap_or(5);
        self.counts[i].load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, counts: &[AtomicU64; 6]) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_string();
        let i = PATHS.iter().position(|p| *p == path).unwrap_or(5);
        counts[i].fetch_add(1, Ordering::SeqCst);
        let response: Vec<u8> = match path.as_str() {
            "/fast" => b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfast".to_vec(),
            "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nchun\r\n3\r\nked\r\n0\r\n\r\n".to_vec(),
            "/slow" => {
                std::thread::sleep(Duration::from_millis(20));
                b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow".to_vec()
            }
            "/close" => b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nclose".to_vec(),
            "/bad" => b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
            _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        };
        if out.write_all(&response).is_err() || path == "/close" || path == "/bad" {
            return;
        }
    }
}

fn routes(spec: &[&str]) -> Vec<Route> {
    spec.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn loads_each_route_on_its_own_connections() {
    let server = Server::start();
    let mut config = Config::new(
        &server.address,
        routes(&["fast=/fast", "chunked=/chunked", "slow=/slow"]),
    )
    .unwrap();
    config.connections_per_route = 2;
    config.duration = Duration::from_millis(600);
    let report = loadgen::run(&config).unwrap();
    for name in ["fast", "chunked", "slow"] {
        let r = report.route(name).unwrap();
        assert_eq!(r.errors, 0, "{name}: {:?}", r.error_samples);
        assert!(r.requests > 0 && r.ok == r.requests, "{name}: {r:?}");
        assert_eq!(
            r.requests,
            server.count(&r.path),
            "{name}: the server saw a different count"
        );
    }
    let slow = report.route("slow").unwrap();
    // Two connections, 20 ms each, 0.6 s: at most ~60 requests, and latency at least 20 ms.
    assert!(slow.requests <= 62, "{slow:?}");
    assert!(slow.latency.p50_ms >= 19.0, "{slow:?}");
    assert!(
        report.route("fast").unwrap().requests > slow.requests,
        "{report}"
    );
    assert!(
        report.elapsed_s >= 0.6 && report.elapsed_s < 5.0,
        "{report}"
    );
}

#[test]
fn stops_at_the_request_bound() {
    let server = Server::start();
    let mut config = Config::new(&server.address, routes(&["/fast", "/close"])).unwrap();
    config.connections_per_route = 3;
    config.duration = Duration::from_secs(30);
    config.max_requests_per_route = Some(25);
    let report = loadgen::run(&config).unwrap();
    assert!(
        report.elapsed_s < 10.0,
        "did not stop at the bound: {report}"
    );
    for name in ["fast", "close"] {
        let r = report.route(name).unwrap();
        assert_eq!((r.requests, r.ok, r.errors), (25, 25, 0), "{name}: {r:?}");
    }
    assert_eq!(server.count("/fast"), 25);
    assert_eq!(server.count("/close"), 25);
}

#[test]
fn malformed_and_refused_are_counted_as_errors() {
    let server = Server::start();
    let mut config = Config::new(&server.address, routes(&["/bad", "missing=/nope"])).unwrap();
    config.duration = Duration::from_millis(200);
    config.max_requests_per_route = Some(5);
    let report = loadgen::run(&config).unwrap();
    let bad = report.route("bad").unwrap();
    assert_eq!((bad.requests, bad.errors), (0, 5), "{bad:?}");
    assert!(
        bad.error_samples[0].contains("malformed"),
        "{:?}",
        bad.error_samples
    );
    let missing = report.route("missing").unwrap();
    assert_eq!(
        (missing.requests, missing.ok, missing.errors),
        (5, 0, 0),
        "404s are answers, not errors: {missing:?}"
    );

    // A port nobody listens on (bound, then released).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = Config::new(&format!("127.0.0.1:{port}"), routes(&["/x"])).unwrap();
    config.duration = Duration::from_millis(100);
    let report = loadgen::run(&config).unwrap();
    let r = report.route("x").unwrap();
    assert!(r.errors > 0 && r.requests == 0, "{r:?}");
    assert!(
        r.error_samples[0].contains("connect"),
        "{:?}",
        r.error_samples
    );
}

#[test]
fn refuses_non_loopback_targets() {
    for target in ["192.0.2.1:80", "0.0.0.0:80"] {
        let err = Config::new(target, routes(&["/x"])).unwrap_err();
        assert!(err.to_string().contains("not a loopback address"), "{err}");
    }
    let mut config = Config::new("127.0.0.1:1", routes(&["/x"])).unwrap();
    config.target = "192.0.2.1:80".parse().unwrap();
    assert!(loadgen::run(&config).is_err());
}

#[test]
fn binary_prints_a_json_report() {
    let server = Server::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "--target",
            &server.address,
            "--route",
            "fast=/fast",
            "-n",
            "10",
            "-d",
            "5",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["routes"][0]["requests"], 10);
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--target", "192.0.2.1:80", "--route", "/x"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a loopback address"));
}
