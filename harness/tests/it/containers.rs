//! Integration tests: containers.
