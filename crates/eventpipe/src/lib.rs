//! .NET EventPipe on Linux without any .NET tooling.
//!
//! - [`NettraceReader`]: a streaming reader of the nettrace format (V4/V5, what .NET 5–10 write),
//!   with bounded memory on any input and errors that name the byte offset.
//! - [`decode()`]: a whole trace into events with decoded fields (runtime events by the runtime's
//!   manifest, EventSource events by their metadata), SampleProfiler samples with managed stacks
//!   resolved through method load and rundown events, counts and lost events.
//! - [`ipc`]: a diagnostics IPC client: socket discovery, ProcessInfo, CollectTracing2…5,
//!   StopTracing, ResumeRuntime and reverse-connect startup tracing.

pub mod decode;
mod error;
mod fxhash;
mod known;
mod manifest;
pub mod metadata;
pub mod nettrace;
pub mod payload;
pub mod speedscope;
pub mod symbols;
pub mod varint;
pub mod inspect;
pub mod ipc;

pub use decode::{DecodeOptions, Decoded, DecodedEvent, DecodedSample, SampleKind, decode};
pub use error::{Error, Result};
pub use metadata::EventMetadata;
pub use nettrace::{EventRef, Limits, NettraceReader, Stats, TraceInfo};
pub use payload::{Value, decode_payload};
