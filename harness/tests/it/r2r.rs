//! Integration tests: r2r.
