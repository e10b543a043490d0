//! Files written whole or not at all.

use std::path::Path;

/// Writes `path` whole or not at all: `write` fills a file beside it (buffered), which is renamed
/// into place when complete, so a reader never sees half a file and a failed write leaves none.
pub fn write_whole(path: &Path, write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut out = std::io::BufWriter::new(tmp.as_file_mut());
    write(&mut out)?;
    out.into_inner().map_err(|e| e.into_error())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

