//! `cargo xtask open [RESULT] [--collector X] [--port N]`: serves a run's Firefox Profiler
//! profile on 127.0.0.1 and prints the address that loads it (lab::viewer).

use std::io::Write as _;

use anyhow::Result;
use xshell::Shell;

use crate::flags::Open;

pub fn run(_sh: &Shell, a: Open) -> Result<()> {
    let result = a.result.unwrap_or_else(|| harness::project_root().join("results").join("latest"));
    let file = lab::viewer::find_profile(&result, a.collector.as_deref())?;
    let server = lab::viewer::ProfileServer::bind(&file, a.port)?;
    println!("serving {}", file.display());
    println!("profile: {}", server.url());
    println!("open in the Firefox Profiler: {}", server.profiler_url());
    println!("(loopback only; Ctrl-C stops)");
    std::io::stdout().flush()?;
    server.serve(|| true)
}
