//! The app's memory map as an EventPipe collector saw it (/proc/PID/maps while the app ran, at
//! the session's start and stop, lines united): EventPipe's stacks hold bare addresses for code
//! the runtime never announced, and the map is what says which ReadyToRun image such an address
//! is in (`stacks::name_ready_to_run_frames`). Kept beside the trace as `NAME.maps`.
//!
//! What this module must not know: which collector asks, or what the names are for.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};

#[derive(Debug, Default)]
pub(crate) struct ProcessMaps {
    lines: BTreeSet<String>,
}

impl ProcessMaps {
    /// Adds the file-backed mappings of `host_pid` now; a process that is gone adds nothing.
    pub(crate) fn snapshot(&mut self, host_pid: u32) {
        if host_pid == 0 {
            return;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{host_pid}/maps")) {
            self.lines.extend(text.lines().filter(|l| l.split_whitespace().nth(5).is_some_and(|p| p.starts_with('/'))).map(String::from));
        }
    }

    /// Writes the united map to `path` (nothing when no snapshot saw the process).
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        if self.lines.is_empty() {
            return Ok(());
        }
        let text: String = self.lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect();
        stacks::write_whole(path, |out| out.write_all(text.as_bytes())).with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Names a decoded EventPipe collection's unnamed ReadyToRun frames from the map kept beside its
/// trace (`NAME.maps`), when there is one.
pub(crate) fn name_frames(c: &mut model::Collection, maps: &Path, ctx: &stacks::DecodeContext) -> Result<()> {
    if !maps.is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(maps).with_context(|| format!("cannot read {}", maps.display()))?;
    stacks::name_ready_to_run_frames(c, &text, ctx.path_map);
    Ok(())
}
