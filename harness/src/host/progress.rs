//! Progress of every phase of a run (build, images, launch, collect, decode, report, soak), owned
//! here so every caller prints the same way. On a terminal a spinner shows the phase and its real
//! elapsed time; without one (CI logs, pipes) each phase prints timestamped lines on stderr
//! (`[HH:MM:SS] collect: 4.0 s of ~10 s`), because a CI log that stays silent until the verdict
//! cannot tell a slow step from a hung one. `TRACELAB_QUIET=1` silences both.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};

// Every line goes through `say`: a progress line never panics on a closed stderr (from the ticker
// thread it killed only the ticker; from the run's own thread it left the staging folder).
use super::owner::say;

/// How often a step with a known duration prints its elapsed time without a terminal: often
/// enough to show life in a CI log, rare enough not to flood it.
pub(crate) const TICK: Duration = Duration::from_secs(5);

/// The spinner on screen, so notes print above it rather than through it.
static ACTIVE: std::sync::Mutex<Option<ProgressBar>> = std::sync::Mutex::new(None);

fn quiet() -> bool {
    std::env::var_os("TRACELAB_QUIET").is_some_and(|v| v == "1")
}

fn terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// `HH:MM:SS` of the machine clock (UTC: the results folders' stamps are UTC too).
pub(crate) fn clock() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// One timestamped line for the log form: `[HH:MM:SS] phase: msg`.
pub(crate) fn line(phase: &str, msg: &str) -> String {
    format!("[{}] {phase}: {msg}", clock())
}

/// A one-off note inside a phase (e.g. `launch: starting collector perf-cpu`), printed on a
/// terminal and in logs alike.
pub fn note(phase: &str, msg: &str) {
    if quiet() {
        return;
    }
    if terminal() {
        let text = format!("==> {phase}: {msg}");
        // Above a running spinner, not through it.
        match ACTIVE.lock().ok().and_then(|a| a.clone()) {
            Some(bar) => bar.println(text),
            None => say(&text),
        }
    } else {
        say(&line(phase, msg));
    }
}

/// One running step. Finish it with [`Step::done`] or [`Step::failed`]; dropping it unfinished
/// clears the spinner (or, in logs, says nothing more).
pub struct Step {
    bar: Option<ProgressBar>,
    phase: String,
    name: String,
    started: Instant,
    expected: Option<Duration>,
    /// Stops the log ticker of a step with an expected duration.
    ticking: Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
    silent: bool,
}

/// Starts a step of `phase` (build, images, launch, collect, decode, report …) named `name`
/// (e.g. "workload cpu-bound").
pub fn step(phase: &str, name: impl Into<String>) -> Step {
    start(phase, name.into(), None)
}

/// A step whose duration is known in advance (a collection of ~N seconds): the spinner and the
/// log lines show `elapsed of ~expected`.
pub(crate) fn timed_step(phase: &str, name: impl Into<String>, expected: Duration) -> Step {
    start(phase, name.into(), Some(expected))
}

fn of_expected(elapsed: Duration, expected: Option<Duration>) -> String {
    match expected {
        Some(e) => format!("{:.1} s of ~{:.0} s", elapsed.as_secs_f64(), e.as_secs_f64()),
        None => format!("{:.1} s", elapsed.as_secs_f64()),
    }
}

fn start(phase: &str, name: String, expected: Option<Duration>) -> Step {
    let started = Instant::now();
    let silent = quiet();
    let mut step = Step { bar: None, phase: phase.to_string(), name, started, expected, ticking: None, silent };
    if silent {
        return step;
    }
    if terminal() {
        let bar = ProgressBar::new_spinner();
        // `{elapsed}` counts from the bar's creation, which is the step's start: the bar is made
        // here and nowhere else, so it cannot start late.
        let template = match expected {
            Some(e) => format!("{{spinner}} {{prefix}}: {{msg}} ({{elapsed}} of ~{:.0}s)", e.as_secs_f64()),
            None => "{spinner} {prefix}: {msg} ({elapsed})".to_string(),
        };
        bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
        bar.set_prefix(step.phase.clone());
        bar.set_message(step.name.clone());
        bar.enable_steady_tick(Duration::from_millis(120));
        if let Ok(mut active) = ACTIVE.lock() {
            *active = Some(bar.clone());
        }
        step.bar = Some(bar);
    } else {
        say(&line(&step.phase, &step.name));
        if expected.is_some() {
            let stop = Arc::new(AtomicBool::new(false));
            let (flag, phase) = (stop.clone(), step.phase.clone());
            let handle = std::thread::spawn(move || {
                let mut next = started + TICK;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if Instant::now() >= next && !flag.load(Ordering::Relaxed) {
                        say(&line(&phase, &of_expected(started.elapsed(), expected)));
                        next += TICK;
                    }
                }
            });
            step.ticking = Some((stop, handle));
        }
    }
    step
}

impl Step {
    /// Replaces the message after the step's name (e.g. the current sub-step). Only the spinner
    /// shows it: sub-steps can be many (a builder's output lines), too many for a log.
    pub(crate) fn set_detail(&self, detail: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{}: {detail}", self.name));
        }
    }

    fn stop(&mut self) -> Option<ProgressBar> {
        if let Some((stop, handle)) = self.ticking.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
        let bar = self.bar.take()?;
        bar.finish_and_clear();
        if let Ok(mut active) = ACTIVE.lock() {
            *active = None;
        }
        Some(bar)
    }

    fn finish(&mut self, text: String) {
        let bar = self.stop();
        if self.silent {
            return;
        }
        match bar {
            Some(_) => {
                say(&format!("{} {}: {text}", if text.starts_with("failed") { "✗" } else { "✓" }, self.phase));
            }
            None => say(&line(&self.phase, &text)),
        }
    }

    pub fn done(mut self, outcome: &str) {
        let text = format!("{}: {outcome} ({})", self.name, of_expected(self.started.elapsed(), self.expected));
        self.finish(text);
    }

    pub(crate) fn failed(mut self) {
        let text = format!("failed: {} ({})", self.name, of_expected(self.started.elapsed(), None));
        self.finish(text);
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_timestamped_with_their_phase() {
        let l = line("collect", "4.0 s of ~10 s");
        let re = regex::Regex::new(r"^\[\d\d:\d\d:\d\d\] collect: 4\.0 s of ~10 s$").unwrap();
        assert!(re.is_match(&l), "{l}");
    }

    #[test]
    fn elapsed_is_shown_against_the_expected_duration() {
        assert_eq!(of_expected(Duration::from_millis(4040), Some(Duration::from_secs(10))), "4.0 s of ~10 s");
        assert_eq!(of_expected(Duration::from_millis(1240), None), "1.2 s");
    }
}
