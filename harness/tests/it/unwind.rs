//! Integration tests: unwind.
