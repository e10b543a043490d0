//! `r2r-cost SPEC_JSON`: times naming one stream of ReadyToRun frames (a
//! [`harness::r2r_cost::Spec`] as JSON) and prints the [`harness::r2r_cost::Measurement`] as
//! JSON. Built in release by `cargo xtask bench r2r`, so the timed loop is optimised whatever
//! profile xtask itself was built with.

fn main() -> anyhow::Result<()> {
    let Some(spec) = std::env::args().nth(1) else {
        anyhow::bail!("usage: r2r-cost SPEC_JSON");
    };
    let spec: harness::r2r_cost::Spec = serde_json::from_str(&spec)?;
    let stream = spec.stream.build()?;
    let measured = harness::r2r_cost::measure(&stream, spec.runs)?;
    println!("{}", serde_json::to_string(&measured)?);
    Ok(())
}
