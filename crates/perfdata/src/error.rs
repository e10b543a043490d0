//! Why reading a perf.data file failed. Every variant about the file's content names the file
//! and the byte offset where it goes wrong, so a broken recording can be looked at with a hex
//! dump instead of guessed at; the wording says what to do (record again, record without -z …).

use std::path::PathBuf;

/// An error reading a perf.data file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or mapped.
    #[error("cannot read perf data {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The header, its sections or the event descriptions do not fit the file. `message` names
    /// the byte offset of the field that is wrong.
    #[error("{}: {message}", path.display())]
    Header { path: PathBuf, offset: u64, message: String },
    /// A record's framing (its size, or an AUXTRACE record's data size) is broken: checked before
    /// any record is read, since the reader would allocate whatever a size claims.
    #[error("{}: bad record at byte offset {offset}: {why}; the file is truncated or corrupt", path.display())]
    Framing { path: PathBuf, offset: u64, why: String },
    /// A record whose fields do not parse.
    #[error("{}: bad {kind} record at byte offset {offset}: {why}; the file is corrupt", path.display())]
    Record { path: PathBuf, offset: u64, kind: String, why: String },
    /// `perf record -z` output: its records are zstd frames this crate does not open.
    #[error(
        "{}: compressed record at byte offset {offset}: recordings made with `perf record -z` are not supported; \
         record without -z",
        path.display()
    )]
    Compressed { path: PathBuf, offset: u64 },
    /// linux-perf-data refused the header, attributes or feature sections.
    #[error("{}: cannot read the perf.data header and attributes (byte offsets 0..{data_offset}): {source}", path.display())]
    Attributes {
        path: PathBuf,
        data_offset: u64,
        #[source]
        source: linux_perf_data::Error,
    },
    #[error("{}: a big-endian recording; tracelab reads perf.data written on little-endian machines", path.display())]
    BigEndian { path: PathBuf },
    #[error("{}: the recording describes no event (no attributes)", path.display())]
    NoEvents { path: PathBuf },
    #[error("{}: the decoding thread panicked", path.display())]
    ThreadPanicked { path: PathBuf },
}

impl Error {
    /// The byte offset in the file where the content goes wrong, when the error is about one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Header { offset, .. }
            | Error::Framing { offset, .. }
            | Error::Record { offset, .. }
            | Error::Compressed { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
