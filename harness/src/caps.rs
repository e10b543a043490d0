//! Capability matrix (being written).
