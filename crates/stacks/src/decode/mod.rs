//! Recordings and traces into the model: a perf.data recording (samples symbolized) and an
//! EventPipe trace (events, stacks named by the trace's own method events, counters).

mod instantiations;
mod nettrace;
mod perf;

pub use instantiations::{InstantiationCount, Instantiations};
pub use nettrace::{add_counter_metrics, decode_nettrace, name_ready_to_run_frames, to_collection};
pub use perf::{decode_recording, preload_samples, samples_to_model};
