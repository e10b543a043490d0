//! `cargo xtask codegen [--check]`: rewrites (or checks) the tables generated from the runtime's
//! event manifest. The generator is `harness::codegen`, so its test checks the same thing.

pub fn run(sh: &xshell::Shell, check: bool) -> anyhow::Result<()> {
    harness::codegen::run(sh.current_dir().as_path(), check)
}
