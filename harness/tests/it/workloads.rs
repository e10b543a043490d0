//! Integration tests: workloads.
