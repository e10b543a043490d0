use std::path::PathBuf;

/// Why a core file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// The bytes do not hold what the format says: `offset` is where in the file.
    #[error("{}byte offset {offset}: {what}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Format { path: Option<PathBuf>, offset: u64, what: String },
}

impl Error {
    pub(crate) fn at(offset: u64, what: impl Into<String>) -> Error {
        Error::Format { path: None, offset, what: what.into() }
    }

    /// The byte offset of a format error.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Format { offset, .. } => Some(*offset),
            Error::Io { .. } => None,
        }
    }

    pub(crate) fn in_file(self, file: &std::path::Path) -> Error {
        match self {
            Error::Format { path: None, offset, what } => Error::Format { path: Some(file.to_path_buf()), offset, what },
            other => other,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
