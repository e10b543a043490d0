//! Stacks, from raw recordings to what people open: naming addresses (`symbolize`: perf maps and
//! jitdump, ReadyToRun images, ELF symbols, kallsyms), walking user stacks (`unwind`: DWARF CFI,
//! PE unwind info, frame pointers), recordings and traces into the model (`decode`), folded stacks,
//! flame graphs and speedscope (`fold`), and each viewer's format (`export`).
//!
//! Invariant: this crate never starts a process, never talks to Docker and never names a
//! collector: it reads files it is given and writes files it is asked for. No tokio, no bollard.

mod decode;
mod export;
mod files;
mod fold;
mod perf_script;
mod symbolize;
mod unwind;

#[cfg(test)]
mod perf_fixtures;
#[cfg(test)]
mod perf_script_names;

// The public surface, by stage. Exporters stay one module per format (each has its
// `file_name`, `write` …), as inferno keeps one module per collapser.
pub use decode::{add_counter_metrics, decode_collect_linux, decode_nettrace, model_value, v6_to_collection, decode_recording, name_ready_to_run_frames, preload_samples, samples_to_model, to_collection};
pub use export::{firefox, perfcollect, pprof};
pub use files::write_whole;
pub use fold::{
    FlameGraph, FoldedStacks, PerfFold, Resolution, ResolutionReport, complete_osr_callers_interned, fold, fold_collection, fold_interned, fold_perf_file,
    fold_recording, folded_text, resolution_report, speedscope_json, write_all, write_collection_flamegraphs, write_flamegraph,
    write_folded, write_folded_into, write_speedscope,
};
pub use perf_script::{ScriptFrame, ScriptReader, ScriptSample};
pub use symbolize::jit::{JitDumpCensus, PerfMapDamage, jit_naming_finding, jitdump_census, parse_perf_map, perf_map_damage_finding};
pub use decode::{InstantiationCount, Instantiations};
pub use symbolize::r2r::R2rResolver;
pub use symbolize::{DecodeContext, Symbolizer, map_file, prefetch_job};
pub use unwind::names::Kallsyms;
pub use unwind::{
    Completeness, SchedSwitch, StackEnd, StackUnwinder, ThreadSwitch, TracepointFormat, UnwindOptions, Unwound, UnwoundSample,
    completeness, completeness_of_collection, completeness_of_unwound, unwind_perf_data, unwind_perf_data_with, LOST_CALLER,
    OsrRepair, complete_osr_callers,
};
