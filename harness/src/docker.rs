//! (stage `docker`: being written)
