//! (stage `workload`: being written)
