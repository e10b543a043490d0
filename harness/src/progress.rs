//! Progress for long steps (building a workload, an image, booting a VM): a spinner with the
//! step's name when stderr is a terminal, nothing otherwise, so CI logs and test output stay
//! clean.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// One running step. Finish it with [`Step::done`] or [`Step::failed`]; dropping it clears the
/// spinner.
pub struct Step {
    bar: Option<ProgressBar>,
    name: String,
    started: Instant,
}

/// Starts a step named `name` (e.g. "building workload cpu-bound").
pub fn step(name: impl Into<String>) -> Step {
    let name = name.into();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(name.clone());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    Step {
        bar,
        name,
        started: Instant::now(),
    }
}

impl Step {
    /// Replaces the message after the step's name (e.g. the current sub-step).
    pub fn set_detail(&self, detail: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}: {detail}", self.name));
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn done(mut self, outcome: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
            eprintln!(
                "✓ {} {outcome} ({:.1} s)",
                self.name,
                self.started.elapsed().as_secs_f64()
            );
        }
    }

    pub fn failed(mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
            eprintln!(
                "✗ {} ({:.1} s)",
                self.name,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
