//! One error type: what is wrong and where (a byte offset into the file).

/// A malformed or unsupported image. `offset` is a byte offset into the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} (at byte offset {offset:#x})")]
pub struct Error {
    pub offset: u64,
    pub what: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn bad<T>(offset: u64, what: impl Into<String>) -> Result<T> {
    Err(Error { offset, what: what.into() })
}

/// Bounds-checked little-endian reads over the whole file; offsets are file offsets.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn slice(&self, off: usize, len: usize, what: &str) -> Result<&'a [u8]> {
        match off.checked_add(len) {
            Some(end) if end <= self.0.len() => Ok(&self.0[off..end]),
            _ => bad(off as u64, format!("{what}: {len} bytes run past the end of the file ({} bytes)", self.0.len())),
        }
    }

    pub fn u8(&self, off: usize, what: &str) -> Result<u8> {
        Ok(self.slice(off, 1, what)?[0])
    }

    pub fn u16(&self, off: usize, what: &str) -> Result<u16> {
        let b = self.slice(off, 2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&self, off: usize, what: &str) -> Result<u32> {
        let b = self.slice(off, 4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}
