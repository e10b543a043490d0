//! What runs tracelab's pipeline many times, or looks after the machine it runs on: benchmarks
//! against the peer tools (`bench`), compatibility matrices (`matrix`) and their qemu guests
//! (`vm`), repeated runs (`soak`), the machine's facts and the one prerequisite installer
//! (`doctor`, `prereq`), a user image's tracing answers (`check_image`), one-off looks at trace
//! files (`inspect`, `viewer`), the generated tables (`codegen`, with the LTTng provider's
//! recording in `lttng_provider`), the nightly workflow (`ci`) and the .NET apps benches and tests
//! build (`apps`).
//!
//! Invariant: nothing imports this crate but the binaries (tracelab, xtask) and its own tests,
//! benches and examples. It calls the harness to run scenarios; the harness never calls it.

pub mod apps;
#[cfg(test)]
mod architecture;
pub mod bench;
pub mod check_image;
pub mod ci;
pub mod codegen;
pub mod doctor;
pub mod features;
pub mod idle_wakeups;
pub mod inspect;
pub mod lttng_provider;
pub mod matrix;
pub mod prereq;
pub mod soak;
pub mod viewer;
pub mod vm;
