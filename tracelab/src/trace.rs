//! `tracelab trace inspect FILE.nettrace [--out DIR] [--full]`: a summary of an EventPipe trace and its
//! stacks (folded, speedscope); `tracelab trace fold PERF.DATA [--out FILE] [--symbols DIR]`:
//! perf.data → folded stacks. The work is `lab::inspect`.

use std::path::PathBuf;

use anyhow::Result;

use crate::flags::Trace;

pub fn run(what: Trace) -> Result<()> {
    match what {
        Trace::Inspect { file, out, full } => lab::inspect::nettrace(&user_path(file)?, out.map(user_path).transpose()?, full),
        Trace::Fold { file, out, symbols } => lab::inspect::perf_fold(&user_path(file)?, out.map(user_path).transpose()?.as_deref(), &symbols),
    }
}

/// Relative paths are the user's working folder's (xtask's tasks otherwise run in the checkout).
fn user_path(path: PathBuf) -> Result<PathBuf> {
    Ok(if path.is_relative() { std::env::current_dir()?.join(path) } else { path })
}
