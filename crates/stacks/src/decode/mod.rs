//! Recordings and traces into the model: a perf.data recording (samples symbolized) and an
//! EventPipe trace (events, stacks named by the trace's own method events, counters), and a
//! collect-linux trace (nettrace V6: perf samples and the runtime's user_events).

mod collect_linux;
mod instantiations;
mod nettrace;
mod perf;

pub use collect_linux::{decode_collect_linux, v6_to_collection};
pub use instantiations::{InstantiationCount, Instantiations};
pub use nettrace::{add_counter_metrics, decode_nettrace, model_value, name_ready_to_run_frames, to_collection};
pub use perf::{decode_recording, preload_samples, samples_to_model};
