//! `cargo xtask open RESULT [--collector X]`: serves a run's Firefox Profiler profile on the
//! loopback interface and prints the address the profiler loads it from (its `from-url` form),
//! the way samply hands a recording to the profiler. Nothing here contacts any other host: the
//! browser the user opens fetches the profile from this machine.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// The Firefox Profiler's address; the profile's own URL goes after `from-url/`, percent-encoded.
pub const FIREFOX_PROFILER: &str = "https://profiler.firefox.com";

/// The profile to open in `result`: a profile file itself, a run folder (`results/NAME`), or a
/// folder of runs (`results/`, whose `latest` is taken). With several collectors and none named,
/// the first with samples in the manifest's order wins, and the others are listed in the error
/// only when `collector` names none of them.
pub fn find_profile(result: &Path, collector: Option<&str>) -> Result<PathBuf> {
    if result.is_file() {
        return Ok(result.to_path_buf());
    }
    if !result.is_dir() {
        bail!("{} is neither a run folder nor a profile file", result.display());
    }
    let run = if result.join("manifest.json").is_file() {
        result.to_path_buf()
    } else if result.join("latest").join("manifest.json").is_file() {
        result.join("latest")
    } else {
        bail!("{} holds no manifest.json (and no `latest` run): give a run folder, e.g. results/latest", result.display());
    };
    let name = |c: &str| stacks::firefox::file_name(c);
    let mut profiles: Vec<(String, PathBuf)> = std::fs::read_dir(&run)
        .with_context(|| format!("cannot read {}", run.display()))?
        .flatten()
        .filter_map(|e| {
            let file = e.file_name().to_string_lossy().into_owned();
            let collector = file.strip_suffix(".firefox.json.gz")?.to_string();
            Some((collector, e.path()))
        })
        .collect();
    profiles.sort();
    if let Some(c) = collector {
        let path = run.join(name(c));
        if path.is_file() {
            return Ok(path);
        }
        let have: Vec<&str> = profiles.iter().map(|(c, _)| c.as_str()).collect();
        bail!("{} has no profile of collector `{c}`; it has: {}", run.display(), if have.is_empty() { "none".into() } else { have.join(", ") });
    }
    match profiles.into_iter().next() {
        Some((_, path)) => Ok(path),
        None => bail!("{} has no Firefox Profiler profile (*.firefox.json.gz): its collectors recorded no samples, or the run predates them", run.display()),
    }
}

/// A profile served on 127.0.0.1 under a random path (other local users cannot guess it).
pub struct ProfileServer {
    listener: TcpListener,
    file: PathBuf,
    path: String,
}

impl ProfileServer {
    /// Binds 127.0.0.1:`port` (0: any free port) for `file`.
    pub fn bind(file: &Path, port: u16) -> Result<ProfileServer> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        let mut token = [0u8; 8];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut token)).context("reading /dev/urandom")?;
        let token: String = token.iter().map(|b| format!("{b:02x}")).collect();
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "profile.json".into());
        Ok(ProfileServer { listener, file: file.to_path_buf(), path: format!("/{token}/{name}") })
    }

    /// Where the profile is served.
    pub fn url(&self) -> String {
        let addr = self.listener.local_addr().expect("a bound listener has an address");
        format!("http://{addr}{}", self.path)
    }

    /// The address that makes the Firefox Profiler load the profile from [`ProfileServer::url`].
    pub fn profiler_url(&self) -> String {
        format!("{FIREFOX_PROFILER}/from-url/{}", percent_encode(&self.url()))
    }

    /// Answers requests until `keep_going` says stop (checked between connections).
    pub fn serve(&self, mut keep_going: impl FnMut() -> bool) -> Result<()> {
        while keep_going() {
            let (stream, peer) = self.listener.accept().context("accepting a connection")?;
            if !peer.ip().is_loopback() {
                continue;
            }
            if let Err(e) = self.answer(stream) {
                eprintln!("warning: a request from {peer} failed: {e:#}");
            }
        }
        Ok(())
    }

    fn answer(&self, mut stream: TcpStream) -> Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let request_path = loop {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(_)) => break (req.method.unwrap_or("").to_string(), req.path.unwrap_or("").to_string()),
                Ok(httparse::Status::Partial) if buf.len() < 64 * 1024 => continue,
                _ => return respond(&mut stream, "400 Bad Request", "text/plain", b"bad request\n"),
            }
        };
        // The profiler fetches with a CORS request from its own origin.
        match request_path {
            (m, p) if p == self.path && (m == "GET" || m == "HEAD") => {
                let body = std::fs::read(&self.file).with_context(|| format!("cannot read {}", self.file.display()))?;
                let kind = if body.starts_with(&[0x1f, 0x8b]) { "application/gzip" } else { "application/json" };
                respond(&mut stream, "200 OK", kind, if m == "HEAD" { &[] } else { &body })
            }
            (m, _) if m == "OPTIONS" => respond(&mut stream, "204 No Content", "text/plain", &[]),
            _ => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n"),
        }
    }
}

fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &[u8]) -> Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()?;
    Ok(())
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(url: &str) -> (String, Vec<u8>) {
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_at(rest.find('/').unwrap());
        let mut s = TcpStream::connect(host).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {FIREFOX_PROFILER}\r\n\r\n").unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        (String::from_utf8_lossy(&out[..split]).into_owned(), out[split + 4..].to_vec())
    }

    #[test]
    fn serves_the_profile_on_loopback_with_cors_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("manifest.json"), "{}").unwrap();
        std::fs::write(run.join("perf-cpu.firefox.json.gz"), b"\x1f\x8bprofile").unwrap();
        std::fs::write(run.join("eventpipe.firefox.json.gz"), b"\x1f\x8bother").unwrap();
        let file = find_profile(&run, Some("perf-cpu")).unwrap();
        let e = find_profile(&run, Some("lttng")).unwrap_err().to_string();
        assert!(e.contains("no profile of collector `lttng`; it has: eventpipe, perf-cpu"), "{e}");
        assert!(find_profile(&dir.path().join("none"), None).is_err());

        let server = ProfileServer::bind(&file, 0).unwrap();
        let url = server.url();
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/perf-cpu.firefox.json.gz"), "{url}");
        let enc = server.profiler_url();
        assert!(enc.starts_with("https://profiler.firefox.com/from-url/http%3A%2F%2F127.0.0.1%3A"), "{enc}");
        let mut left = 2;
        let wrong = url.rsplit_once('/').unwrap().0.to_string() + "/other";
        std::thread::scope(|s| {
            s.spawn(|| server.serve(|| { left -= 1; left >= 0 }).unwrap());
            let (head, body) = get(&url);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");
            assert_eq!(body, b"\x1f\x8bprofile");
            let (head, _) = get(&wrong);
            assert!(head.starts_with("HTTP/1.1 404"), "{head}");
        });
    }
}
