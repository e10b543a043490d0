//! Naming addresses: perf maps and jitdump (JIT code), ReadyToRun images, ELF symbols, kallsyms.

pub mod r2r;
