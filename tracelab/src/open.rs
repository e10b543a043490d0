//! `tracelab open [RESULT] [--collector X] [--port N]`: serves a run's Firefox Profiler
//! profile on 127.0.0.1 and prints the address that loads it (lab::viewer).

use std::io::Write as _;

use anyhow::Result;
use crate::Invocation;
use crate::flags::Open;

pub fn run(a: Open, at: &Invocation) -> Result<()> {
    let result = a.result.unwrap_or_else(|| at.results.join("latest"));
    let file = lab::viewer::find_profile(&result, a.collector.as_deref())?;
    let server = lab::viewer::ProfileServer::bind(&file, a.port)?;
    println!("serving {}", file.display());
    println!("profile: {}", server.url());
    println!("open in the Firefox Profiler: {}", server.profiler_url());
    // The page comes from profiler.firefox.com and fetches the profile from this machine's
    // loopback: both must be reachable from the browser that opens it.
    let port = server.url().rsplit(':').next().and_then(|p| p.split('/').next()).unwrap_or("PORT").to_string();
    println!(
        "(loopback only; Ctrl-C stops. The browser needs to reach profiler.firefox.com, and this machine's port {port}: \
         from another machine, `ssh -L {port}:127.0.0.1:{port} THIS_HOST` first, then open the address above there)"
    );
    std::io::stdout().flush()?;
    server.serve(|| true)
}
