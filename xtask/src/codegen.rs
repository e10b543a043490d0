//! `cargo xtask codegen [--check] [--record]`: rewrites (or checks) the event tables generated
//! from the runtime's event manifest and from the committed recording of what its LTTng provider
//! declares (`--record` records that again first). The generator is `lab::codegen`, so its
//! test checks the same thing.

pub fn run(sh: &xshell::Shell, check: bool, record: bool) -> anyhow::Result<()> {
    if record {
        lab::codegen::record(sh.current_dir().as_path())?;
    }
    lab::codegen::run(sh.current_dir().as_path(), check)
}
