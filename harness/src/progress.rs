//! (stage `progress`: being written)
