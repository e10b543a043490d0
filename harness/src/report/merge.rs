//! Merging result folders into one report (being written).
