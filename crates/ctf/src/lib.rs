//! A reader for CTF 1.8 traces as LTTng writes them (https://diamon.org/ctf/v1.8.3/).
//!
//! A trace is a folder holding a `metadata` file (TSDL text, optionally packetized) and one file
//! per data stream (`channel0_0`, …), each a sequence of packets of events. [`Trace::open`] reads
//! and compiles the metadata; [`Trace::events`] decodes every stream and merges them by time, the
//! order babeltrace prints. Stream files are read packet by packet (one packet per stream in
//! memory at a time), so memory follows the packet size, not the trace's. Field names lose one leading underscore, as the CTF spec asks readers
//! to do (LTTng prefixes every field with `_` so names never collide with TSDL keywords).
//!
//! Malformed input yields an [`Error`] naming the file and byte offset; lengths read from the
//! trace are checked against the bytes left before anything is allocated.

mod decode;
mod metadata;
mod text;
mod tsdl;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use decode::{Event, Events};
pub use metadata::{Clock, EventClass, Metadata, StreamClass};
pub use text::{TextClock, babeltrace_line};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("metadata line {line}: {msg}")]
    Metadata { line: usize, msg: String },
    #[error("{}: {msg}", path.display())]
    MetadataFile { path: PathBuf, msg: String },
    #[error("{}: at byte {offset}: {msg}", path.display())]
    Stream { path: PathBuf, offset: u64, msg: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A folder that is not a whole trace: no `metadata` anywhere, or metadata without streams.
    #[error("{}: {msg}", path.display())]
    Incomplete { path: PathBuf, msg: String },
}

/// A decoded field value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    UInt(u64),
    SInt(i64),
    Float(f64),
    Str(String),
    /// An array or sequence of 8-bit integers without text encoding (LTTng's raw payloads).
    Bytes(Vec<u8>),
    Enum { value: i64, label: Option<Arc<str>> },
    Array(Vec<Value>),
    Struct(Vec<(Arc<str>, Value)>),
    Variant { option: Arc<str>, value: Box<Value> },
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::UInt(v) => Some(v),
            Value::SInt(v) if v >= 0 => Some(v as u64),
            Value::Enum { value, .. } if value >= 0 => Some(value as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::UInt(v) => i64::try_from(v).ok(),
            Value::SInt(v) => Some(v),
            Value::Enum { value, .. } => Some(value),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One data stream file of a trace, open; its packets are read one at a time as events are
/// decoded, so memory stays bounded whatever the file's size.
struct StreamFile {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
}

/// An opened trace: compiled metadata plus its stream files.
pub struct Trace {
    dir: PathBuf,
    metadata: Arc<Metadata>,
    streams: Vec<StreamFile>,
}

impl Trace {
    /// Opens the trace whose `metadata` file is in `dir`. Every other regular, non-hidden file
    /// there is a data stream (LTTng's `index/` folder is a subfolder and is not needed).
    pub fn open(dir: &Path) -> Result<Trace, Error> {
        let meta_path = dir.join("metadata");
        let raw = std::fs::read(&meta_path).map_err(|source| Error::Io { path: meta_path.clone(), source })?;
        let metadata = Metadata::from_bytes(&raw).map_err(|e| match e {
            Error::Metadata { .. } => Error::MetadataFile { path: meta_path.clone(), msg: e.to_string() },
            other => other,
        })?;
        let mut names = Vec::new();
        let entries = std::fs::read_dir(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
            if is_file && name != "metadata" && !name.starts_with('.') {
                names.push(name);
            }
        }
        names.sort_by_key(|n| natural_key(n));
        if names.is_empty() {
            return Err(Error::Incomplete {
                path: dir.to_path_buf(),
                msg: "`metadata` but no stream files beside it: the trace holds no events (copied before the LTTng session was stopped?)".into(),
            });
        }
        let mut streams = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let file = std::fs::File::open(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
            let len = file.metadata().map_err(|source| Error::Io { path: path.clone(), source })?.len();
            streams.push(StreamFile { path, file, len });
        }
        Ok(Trace { dir: dir.to_path_buf(), metadata: Arc::new(metadata), streams })
    }

    /// Every folder under `root` (itself included) that holds a `metadata` file: an LTTng
    /// session's output has one per buffering domain (`ust/uid/0/64-bit`, `ust/pid/…`). None is
    /// an error: a folder without metadata is not a trace, whatever else it holds.
    pub fn find(root: &Path) -> Result<Vec<PathBuf>, Error> {
        let found = Self::find_any(root)?;
        if found.is_empty() {
            let what = if std::fs::read_dir(root).map_err(|source| Error::Io { path: root.to_path_buf(), source })?.next().is_none() {
                "an empty folder"
            } else {
                "no `metadata` file in it or below it"
            };
            return Err(Error::Incomplete {
                path: root.to_path_buf(),
                msg: format!("not a CTF trace: {what} (an LTTng trace folder holds `metadata` and one file per stream, e.g. under ust/uid/0/64-bit)"),
            });
        }
        Ok(found)
    }

    fn find_any(root: &Path) -> Result<Vec<PathBuf>, Error> {
        let mut found = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if dir.join("metadata").is_file() {
                found.push(dir.clone());
            }
            let entries = std::fs::read_dir(&dir).map_err(|source| Error::Io { path: dir.clone(), source })?;
            for entry in entries.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(entry.path());
                }
            }
        }
        found.sort();
        Ok(found)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Bytes of stream data (for throughput figures).
    pub fn stream_bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.len).sum()
    }

    /// All events of all streams, merged in time order (ties keep stream file order).
    pub fn events(&self) -> Events<'_> {
        Events::new(&self.metadata, self.streams.iter().map(|s| (s.path.as_path(), decode::Source::File(&s.file, s.len))).collect())
    }
}

/// `channel0_10` sorts after `channel0_9`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem.to_string(), num.parse().unwrap_or(0))
}

/// Decodes one data stream held in memory (fuzzing, tests); `path` only names it in errors.
pub fn decode_buffer<'t>(metadata: &'t Metadata, path: &'t Path, data: &'t [u8]) -> Events<'t> {
    Events::new(metadata, vec![(path, decode::Source::Memory(data))])
}
