//! (stage `unwind`: being written)
