//! `tracelab init mine.toml --dll app.dll [--web]`: writes a starter scenario for a user's app
//! (`harness::scenario::starter`); paths are taken as given from the caller's folder.

use anyhow::{Result, bail};
use harness::scenario::starter::{StarterApp, starter_toml};

use crate::Invocation;
use crate::flags::Init;

pub fn run(f: Init, at: &Invocation) -> Result<()> {
    if f.toml.exists() {
        bail!("{} exists: tracelab does not overwrite it; give another file name", f.toml.display());
    }
    let app = match (&f.dll, &f.project, &f.image) {
        (Some(dll), _, _) => StarterApp::Dll(dll),
        (_, Some(project), _) => StarterApp::Project(project),
        (_, _, Some(image)) => StarterApp::Image(image),
        _ => bail!("name your app: --dll PATH, --project DIR or --image NAME"),
    };
    let text = starter_toml(&f.toml, app, f.web)?;
    std::fs::write(&f.toml, text)?;
    println!("wrote {}; run it with: {} scenario {}", f.toml.display(), at.program, f.toml.display());
    Ok(())
}
