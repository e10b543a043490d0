//! What viewers open, one module per format: Firefox Profiler (`firefox`), pprof (`pprof`) and
//! PerfView's perfcollect-style trace.zip (`perfcollect`).

pub mod firefox;
pub mod perfcollect;
pub mod pprof;
