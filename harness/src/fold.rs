//! (stage `fold`: being written)
