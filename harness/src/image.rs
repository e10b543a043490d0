//! (stage `image`: being written)
