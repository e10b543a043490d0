use std::fmt;

/// Why a nettrace stream could not be read. Every variant that comes from the bytes carries the
/// byte offset (from the start of the stream) where the reader found the problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("byte offset {offset}: {what}")]
    Format { offset: u64, what: String },
    #[error("byte offset {offset}: the stream ends early ({what}); the file is truncated or the writer died")]
    Truncated { offset: u64, what: String },
    #[error("byte offset {offset}: {what} is {size} bytes, above the limit of {limit}: corrupt data?")]
    TooLarge { offset: u64, what: &'static str, size: u64, limit: u64 },
    #[error("byte offset {offset}: read error: {source}")]
    Io { offset: u64, source: std::io::Error },
}

impl Error {
    /// The byte offset the error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            Error::Format { offset, .. }
            | Error::Truncated { offset, .. }
            | Error::TooLarge { offset, .. }
            | Error::Io { offset, .. } => *offset,
        }
    }

    pub(crate) fn format(offset: u64, what: impl fmt::Display) -> Error {
        Error::Format { offset, what: what.to_string() }
    }

    pub(crate) fn truncated(offset: u64, what: impl fmt::Display) -> Error {
        Error::Truncated { offset, what: what.to_string() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
