//! `cargo xtask open RUN --collector X` as a user meets it: it prints the profile's loopback URL
//! and the Firefox Profiler address that loads it, and serves the profile's bytes at that URL.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

#[test]
fn open_prints_the_url_and_serves_the_profile_over_loopback() {
    let run = tempfile::tempdir().unwrap();
    std::fs::write(run.path().join("manifest.json"), "{}").unwrap();
    let profile: Vec<u8> = b"\x1f\x8b\x08tracelab profile bytes".to_vec();
    std::fs::write(run.path().join("perf-cpu.firefox.json.gz"), &profile).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["open"])
        .arg(run.path())
        .args(["--collector", "perf-cpu"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("the xtask binary runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = None;
    let mut profiler = None;
    for line in lines.by_ref().take(4) {
        let line = line.unwrap();
        if let Some(u) = line.strip_prefix("profile: ") {
            url = Some(u.to_string());
        }
        if let Some(u) = line.strip_prefix("open in the Firefox Profiler: ") {
            profiler = Some(u.to_string());
        }
    }
    let url = url.expect("a `profile:` line");
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/perf-cpu.firefox.json.gz"), "{url}");
    assert!(profiler.expect("a profiler line").starts_with("https://profiler.firefox.com/from-url/http%3A%2F%2F127.0.0.1%3A"));
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut c = TcpStream::connect(host).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: https://profiler.firefox.com\r\n\r\n").unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("Access-Control-Allow-Origin: *"), "{head}");
    assert_eq!(&out[split + 4..], profile.as_slice());
}
