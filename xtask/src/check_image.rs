//! `cargo xtask check-image IMAGE [--app-cmd ARGS…]`: the answer for a user's own image, as a
//! table (`lab::check_image`), printed and written as check-image.md in its results folder.

use anyhow::Result;

use crate::flags::CheckImage;

pub fn run(f: CheckImage) -> Result<()> {
    let root = lab::check_image::results_root(f.results);
    std::fs::create_dir_all(&root)?;
    let report = lab::check_image::check(&f.image, &f.app_cmd, &root)?;
    let text = report.markdown();
    std::fs::write(root.join("check-image.md"), &text)?;
    println!("{text}\n(written to {})", root.join("check-image.md").display());
    Ok(())
}
