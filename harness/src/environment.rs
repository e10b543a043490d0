//! (stage `environment`: being written)
