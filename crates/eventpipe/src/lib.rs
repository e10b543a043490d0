//! .NET EventPipe on Linux without any .NET tooling.
//!
//! - [`NettraceReader`]: a streaming reader of the nettrace format (V4/V5, what .NET 5–10 write),
//!   with bounded memory on any input and errors that name the byte offset; events pulled one at
//!   a time or handed to a callback (`for_each_event`, faster), the input optionally read ahead
//!   on a second thread (`read_ahead`).
//! - [`read_v6`]: nettrace V6, what `dotnet-trace collect-linux` writes (perf samples of the whole
//!   machine with their stacks, processes, mappings, symbols and the runtime's user_events).
//! - [`decode()`]: a whole trace into events with decoded fields (runtime events by the runtime's
//!   manifest, EventSource events by their metadata), SampleProfiler samples with managed stacks
//!   resolved through method load and rundown events, counts and lost events.
//! - [`counter_series`]: EventCounters (what dotnet-counters shows) from decoded events.
//! - [`ipc`]: a diagnostics IPC client: socket discovery, ProcessInfo, CollectTracing2…5,
//!   StopTracing, ResumeRuntime and reverse-connect startup tracing.

// Modules are private: the public surface is the re-exports below, chosen (as samply's
// fxprof-processed-profile does), so a reuser depends on types, not on this crate's file layout.
mod counters;
mod decode;
mod error;
mod fxhash;
mod known;
mod manifest;
mod metadata;
mod nettrace;
mod nettrace_v6;
mod payload;
mod speedscope;
mod symbols;
mod varint;
pub mod inspect;
pub mod ipc;

pub use counters::{COUNTER_EVENT, CounterKind, CounterSample, CounterSeries, RUNTIME_COUNTERS, counter_sample, counter_series, interval_argument};
pub use decode::{DecodeOptions, Decoded, DecodedEvent, DecodedSample, FieldCount64, SampleKind, StreamDecoder, StreamEvent, StreamItem, decode};
pub use error::{Error, Result};
pub use metadata::EventMetadata;
pub use nettrace_v6::{V6Event, V6Field, V6Metadata, V6Trace, V6Value, is_nettrace_v6, read_v6};
pub use nettrace::{EventRef, Limits, NettraceReader, Stats, TraceInfo};
pub use known::runtime_event_layout;
pub use payload::{FieldCount, PayloadLayout, Value, count_payload, decode_payload, guid_string};
pub use speedscope::to_speedscope;
pub use symbols::{METHOD_DIAGNOSTIC_KEYWORD, Method, MethodMap, Module};
/// The nettrace varint encoding, for tools (and tests) that write nettrace streams.
pub use varint::write_u64 as write_varint_u64;
