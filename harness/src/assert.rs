//! (stage `assert`: being written)
