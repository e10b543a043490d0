//! (stage `engine`: being written)
