//! Integration tests: perf.
