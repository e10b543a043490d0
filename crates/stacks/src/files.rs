//! Files written whole or not at all.

use std::path::Path;

/// Writes `path` whole or not at all: `write` fills a file beside it (buffered), which is renamed
/// into place when complete, so a reader never sees half a file and a failed write leaves none.
pub fn write_whole(path: &Path, write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    // Large writes: a folded file runs to megabytes, and 8 KB writes were hundreds of calls.
    let mut out = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
    write(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?;
    // A rename over an existing file makes ext4 write the new file's data out at once
    // (auto_da_alloc, its guard for programs that skip fsync): ~2 ms of a 30 ms fold, each time
    // the same --out is written again. The old file goes first; a reader then finds the old
    // file, none, or the new one whole — never half of one.
    if tmp.path() != path {
        let _ = std::fs::remove_file(path);
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

