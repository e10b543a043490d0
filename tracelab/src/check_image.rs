//! `tracelab check-image IMAGE [--app-cmd ARGS…] [--pod [SHAPES]]`: the answer for a user's own
//! image, as a table (`lab::check_image`), printed and written as check-image.md in its results
//! folder.

use anyhow::Result;

use crate::Invocation;
use crate::flags::CheckImage;

pub fn run(f: CheckImage, at: &Invocation) -> Result<()> {
    let root = lab::check_image::results_root(Some(f.results.unwrap_or_else(|| at.results.clone())));
    std::fs::create_dir_all(&root)?;
    let shapes = match f.pod {
        None => Vec::new(),
        Some(named) if named.is_empty() => {
            use harness::run::pod::PodShape;
            vec![PodShape::Sidecar, PodShape::Debug, PodShape::Hardened]
        }
        Some(named) => named.iter().map(|s| harness::run::pod::PodShape::parse(s)).collect::<Result<_>>()?,
    };
    let report = lab::check_image::check(&f.image, &f.app_cmd, &root, &shapes)?;
    let text = report.markdown();
    std::fs::write(root.join("check-image.md"), &text)?;
    println!("{text}\n(written to {})", root.join("check-image.md").display());
    Ok(())
}
