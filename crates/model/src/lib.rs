//! The data every stage of tracelab shares (shared/DESIGN.md §2): samples with resolved frames,
//! events with named fields ([`Collection`]), and the one place that spells a frame's label for
//! every writer of stacks ([`frame_label`], [`method_label`]).
//!
//! Code map:
//! - `data`: [`Collection`], [`Sample`], [`Frame`], [`Event`], [`DsoClass`], method names and
//!   their code versions.
//! - `naming`: what a frame's label shows, and how well each DSO was named.
//! - `offwake`: the off-wake view (blocked stack, `--`, the waker's stack), which the
//!   `perf-offwake` collector builds and checks and writers read.
//!
//! Invariant: this crate knows no process, no file and no format. Collectors decode into these
//! types; everything after decoding reads only them, so a check does not care whether a stack
//! came from perf, EventPipe or LTTng. Modules are private; the public surface is below.

mod data;
mod naming;
mod offwake;

pub use data::{Collection, DepthLimit, DsoClass, Event, Frame, MethodName, Sample, Sampling, Value, frame_assembly, merge_code_version, LOST_CALLER};
pub use naming::{
    DsoNaming, FrameKind, NO_STACK, anonymous_function, anonymous_function_start, dso_file, dso_naming, frame_label, has_symbol,
    label, label_kinds, method_label, short_label, short_labels, stub_kind, unnamed_dso_hints,
};
pub use offwake::{WakerKind, Wakeup, nearest_managed, offwake_sample, split_offwake, wakeups_tsv};
