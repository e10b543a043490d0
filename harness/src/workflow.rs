//! The nightly CI workflow generator (being written).
