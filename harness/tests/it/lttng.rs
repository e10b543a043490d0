//! Integration tests: lttng.
