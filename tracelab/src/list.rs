//! `tracelab list`: the scenarios, what they run and what they check.

use anyhow::Result;
use harness::scenario::{Scenario, list_names};

pub fn run() -> Result<()> {
    for name in list_names()? {
        let s = Scenario::find(&name)?;
        let collectors: Vec<&str> = s.collectors.iter().map(|c| c.name()).collect();
        println!(
            "{name:<22} target={:<9} collectors={:<40} checks={:<3} {}",
            s.target.map_or("default", |t| t.as_str()),
            collectors.join(","),
            s.expectations.len(),
            s.description
        );
    }
    Ok(())
}
