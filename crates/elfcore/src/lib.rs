//! What a Linux ELF core file says about the process it was taken of, read from its headers and
//! notes only (a full dump's memory is never read): the threads (one `NT_PRSTATUS` note each),
//! the files mapped into it (`NT_FILE`), the process name and pid (`NT_PRPSINFO`) and its
//! loadable segments, each checked to lie inside the file.
//!
//! Layouts: the System V gABI (ELF header, program headers, notes) and Linux's
//! `include/uapi/linux/elfcore.h` / `fs/binfmt_elf.c` (what `NT_FILE` holds). Only 64-bit
//! little-endian cores are read (x86_64 and aarch64: what .NET's `createdump` writes there).
//!
//! Every malformed input gives an [`Error`] naming the byte offset of what is wrong; nothing
//! panics and no count or size is trusted before it is checked against the file's length.

mod error;
mod read;

pub use error::{Error, Result};
pub use read::{CoreFile, Mapping, Note, Segment, ThreadStatus};
