//! `tracelab doctor [--json] [--symbols DIR]`: what this machine can trace, what each fact means
//! for which collector, and the command that fixes each row that is not ok. Exit 4 when a
//! prerequisite of the default scenario is missing (the exit-code table: skip, environment).

use std::process::ExitCode;

use anyhow::Result;
use lab::doctor::{Status, default_scenario_row, doctor, rows_json};

use crate::flags::Doctor;

pub fn run(args: Doctor) -> Result<ExitCode> {
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().ok();
    let mut rows = doctor(dotnet.as_ref().map(|d| d.root.as_path()), &args.symbols);
    rows.push(default_scenario_row());
    let ready = rows.last().is_some_and(|r| r.status == Status::Ok);
    if args.json {
        println!("{}", rows_json(&rows));
    } else {
        let width = rows.iter().map(|r| r.item.len()).max().unwrap_or(10);
        for r in &rows {
            let mark = match r.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Missing => "MISS",
            };
            println!("{mark}  {:<width$}  {}\n      {:<width$}  → {}", r.item, r.value, "", r.meaning);
            if let Some(fix) = &r.fix {
                println!("      {:<width$}  fix: {fix}", "");
            }
        }
    }
    Ok(if ready { ExitCode::SUCCESS } else { ExitCode::from(4) })
}
