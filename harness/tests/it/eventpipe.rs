//! Integration tests: eventpipe.
