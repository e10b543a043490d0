//! `cargo xtask doctor`: what this machine can trace, and what each fact means for which collector.

use anyhow::Result;
use harness::environment::{Status, doctor};
use xshell::Shell;

pub fn run(_sh: &Shell) -> Result<()> {
    let dotnet = harness::dotnet::Dotnet::locate_or_install().ok();
    let rows = doctor(dotnet.as_ref().map(|d| d.root.as_path()));
    let width = rows.iter().map(|r| r.item.len()).max().unwrap_or(10);
    for r in &rows {
        let mark = match r.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Missing => "MISS",
        };
        println!("{mark}  {:<width$}  {}\n      {:<width$}  → {}", r.item, r.value, "", r.meaning);
    }
    Ok(())
}
