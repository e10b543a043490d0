//! tracelab's perf.data layer on top of [`linux_perf_data`]: what `perf record -o FILE` wrote,
//! checked and decoded into owned records.
//!
//! linux-perf-data reads the header, attributes and feature sections; before it sees a file,
//! [`check()`] tests every section, count and record size against the file (the crate allocates
//! whatever they claim, and a failed allocation aborts the process). The data section is then
//! walked here over the borrowed (mapped) bytes, two halves on two threads, each record parsed by
//! linux-perf-event-reader. Every error names the file and the byte offset where it goes wrong.
//!
//! Modules are private; the public surface is the re-exports below (as samply's
//! fxprof-processed-profile does), so moving code between modules changes no caller.

mod check;
mod error;
mod order;
mod records;
mod recording;

pub use check::PERF_HEADER_SIZE;
pub use error::{Error, Result};
pub use order::SampleOrder;
pub use recording::{
    ChainCounts, ChainFrame, ChainRange, CountedChain, KERNEL_PID, PERF_CONTEXT_GUEST, PERF_CONTEXT_GUEST_KERNEL,
    PERF_CONTEXT_GUEST_USER, PERF_CONTEXT_HV, PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER, PerfComm, PerfMmap,
    PerfRecording, PerfSample, PrefetchJob, UserRegs, chain_frames, x86_regs,
};

/// Checks a recording's header, sections, event descriptions and record framing without decoding
/// it: what a reader that walks the records on its own (the DWARF unwinder) needs first.
pub fn check(bytes: &[u8], path: &std::path::Path) -> Result<()> {
    check::check_recording(bytes, path, None).map(|_| ())
}

/// Byte offsets (start, end) of feature section `bit` (tools/perf/util/header.h: 1 = tracing data,
/// 12 = event descriptions) of a recording whose header [`check`] accepted; None when absent.
pub fn feature_section(bytes: &[u8], bit: usize) -> Option<(u64, u64)> {
    check::feature_section(bytes, bit)
}

/// The byte offset of the record of type `record_type` whose body (after its 8-byte header) is
/// `body`: where a record a time-sorting reader handed over lies in the file, for its errors.
pub fn find_record(bytes: &[u8], path: &std::path::Path, record_type: u32, body: &[u8]) -> Option<u64> {
    check::find_record(bytes, path, record_type, body)
}
