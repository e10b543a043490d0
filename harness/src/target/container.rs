//! Container and sidecar targets (being written).
