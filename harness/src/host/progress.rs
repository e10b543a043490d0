//! Progress of every phase of a run (build, images, launch, collect, decode, report, soak), owned
//! here so every caller prints the same way. On a terminal a spinner shows the phase and its real
//! elapsed time; without one (CI logs, pipes) each phase prints timestamped lines on stderr
//! (`[HH:MM:SS] collect: 4.0 s of ~10 s`), because a CI log that stays silent until the verdict
//! cannot tell a slow step from a hung one. `TRACELAB_QUIET=1` silences both.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};

// Every line goes through `say`: a progress line never panics on a closed stderr (from the ticker
// thread it killed only the ticker; from the run's own thread it left the staging folder).
use super::owner::say;

/// How often a step with a known duration prints its elapsed time without a terminal: often
/// enough to show life in a CI log, rare enough not to flood it.
pub(crate) const TICK: Duration = Duration::from_secs(5);

/// How often a step of unknown duration says it is still running without a terminal (a
/// collection that runs to a count, a build): a CI log must show life at least every 15 s.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);

/// The spinners on screen, innermost last, so that every line prints above them rather than
/// through them. Each has its own id: a step that ends removes only its own spinner (one slot
/// once let an inner step's end leave the outer spinner unguarded).
static ACTIVE: Mutex<Vec<(u64, ProgressBar)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn quiet() -> bool {
    std::env::var_os("TRACELAB_QUIET").is_some_and(|v| v == "1")
}

fn terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Runs `write` with the running spinner (if any) cleared from the screen and redrawn after, so
/// a line written meanwhile stays on the screen above it. Every line of stderr goes through here
/// ([`say`]): a line written past the spinner was erased by its next frame (issue 38: `load: 5
/// connection(s) per route …`).
pub(crate) fn above_spinner<R>(write: impl FnOnce() -> R) -> R {
    // The bar is cloned out of the lock: `write` may print again (and so come back here).
    let bar = ACTIVE.lock().ok().and_then(|a| a.last().map(|(_, b)| b.clone()));
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
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
        // Above a running spinner, not through it (`say` suspends it).
        say(&format!("==> {phase}: {msg}"));
    } else {
        say(&line(phase, msg));
    }
}

/// What a step's ticker shows besides the elapsed time: the current sub-step and the size of a
/// folder being recorded into.
#[derive(Default)]
struct Live {
    detail: Option<String>,
    watch: Option<PathBuf>,
}

/// One running step. Finish it with [`Step::done`] or [`Step::failed`]; dropping it unfinished
/// clears the spinner (or, in logs, says nothing more).
pub struct Step {
    bar: Option<(u64, ProgressBar)>,
    phase: String,
    name: String,
    started: Instant,
    expected: Option<Duration>,
    live: Arc<Mutex<Live>>,
    /// Stops the ticker (log lines, or the spinner's live figures).
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

/// Bytes in the files under `dir` (two levels: an LTTng session writes per-UID folders).
fn bytes_under(dir: &Path, depth: usize) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            Ok(t) if t.is_dir() && depth > 0 => bytes_under(&e.path(), depth - 1),
            _ => 0,
        })
        .sum()
}

/// `1.2 MB recorded` of the watched folder, if any.
fn recorded(live: &Mutex<Live>) -> Option<String> {
    let dir = live.lock().ok()?.watch.clone()?;
    let n = bytes_under(&dir, 3);
    Some(if n >= 1 << 20 { format!("{:.1} MB recorded", n as f64 / (1u64 << 20) as f64) } else { format!("{} KB recorded", n >> 10) })
}

fn start(phase: &str, name: String, expected: Option<Duration>) -> Step {
    let started = Instant::now();
    let silent = quiet();
    let live = Arc::new(Mutex::new(Live::default()));
    let mut step = Step { bar: None, phase: phase.to_string(), name, started, expected, live, ticking: None, silent };
    if silent {
        return step;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, phase, name, live) = (stop.clone(), step.phase.clone(), step.name.clone(), step.live.clone());
    let handle = if terminal() {
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
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut active) = ACTIVE.lock() {
            active.push((id, bar.clone()));
        }
        step.bar = Some((id, bar.clone()));
        // The live figures (bytes recorded) once a second; the spinner itself ticks on its own.
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if let Some(bytes) = recorded(&live) {
                    let detail = live.lock().ok().and_then(|l| l.detail.clone());
                    bar.set_message(match detail {
                        Some(d) => format!("{name}: {d}, {bytes}"),
                        None => format!("{name}, {bytes}"),
                    });
                    std::thread::sleep(Duration::from_millis(800));
                }
            }
        })
    } else {
        say(&line(&step.phase, &step.name));
        let every = if expected.is_some() { TICK } else { HEARTBEAT };
        std::thread::spawn(move || {
            let mut next = started + every;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if Instant::now() >= next && !flag.load(Ordering::Relaxed) {
                    let mut text = of_expected(started.elapsed(), expected);
                    if expected.is_none() {
                        text = format!("{name}: still running, {text}");
                    }
                    if let Some(bytes) = recorded(&live) {
                        text = format!("{text}, {bytes}");
                    }
                    say(&line(&phase, &text));
                    next += every;
                }
            }
        })
    };
    step.ticking = Some((stop, handle));
    step
}

impl Step {
    /// Replaces the message after the step's name (e.g. the current sub-step). Only the spinner
    /// shows it: sub-steps can be many (a builder's output lines), too many for a log.
    pub(crate) fn set_detail(&self, detail: &str) {
        if let Ok(mut l) = self.live.lock() {
            l.detail = Some(detail.to_string());
        }
        if let Some((_, bar)) = &self.bar {
            bar.set_message(format!("{}: {detail}", self.name));
        }
    }

    /// One of a few named sub-steps (the report phase's checks, stacks, summary): on the spinner
    /// and, unlike [`Step::set_detail`], as its own line in a log, since a phase that sat 9 s on
    /// "report" with nothing more said looked hung.
    pub(crate) fn sub_step(&self, what: &str) {
        self.set_detail(what);
        if self.bar.is_none() && !self.silent {
            say(&line(&self.phase, &format!("{}: {what}", self.name)));
        }
    }

    /// Shows the size of the files under `dir` as they grow (a collection's artifacts: perf.data,
    /// a .nettrace, an LTTng trace), on the spinner and in the log lines.
    pub(crate) fn watch(&self, dir: &Path) {
        if let Ok(mut l) = self.live.lock() {
            l.watch = Some(dir.to_path_buf());
        }
    }

    fn stop(&mut self) -> Option<ProgressBar> {
        if let Some((stop, handle)) = self.ticking.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
        let (id, bar) = self.bar.take()?;
        bar.finish_and_clear();
        if let Ok(mut active) = ACTIVE.lock() {
            active.retain(|(i, _)| *i != id);
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
        let bytes = recorded(&self.live).map(|b| format!(", {b}")).unwrap_or_default();
        let text = format!("{}: {outcome}{bytes} ({})", self.name, of_expected(self.started.elapsed(), self.expected));
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

    /// A screen as a terminal leaves it after `bytes`: enough of VT100 for what indicatif and
    /// console write (carriage return, newline, cursor up/down/column, erase line and below;
    /// colours and cursor visibility ignored).
    fn screen(bytes: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(bytes);
        let mut lines: Vec<Vec<char>> = vec![Vec::new()];
        let (mut row, mut col) = (0usize, 0usize);
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => col = 0,
                '\n' => {
                    row += 1;
                    col = 0;
                }
                '\u{1b}' if chars.peek() == Some(&'[') => {
                    chars.next();
                    let mut params = String::new();
                    let mut fin = ' ';
                    for p in chars.by_ref() {
                        if p.is_ascii_alphabetic() || p == '@' || p == '~' {
                            fin = p;
                            break;
                        }
                        params.push(p);
                    }
                    let n = params.trim_start_matches('?').split(';').next().and_then(|x| x.parse::<usize>().ok());
                    match fin {
                        'A' => row = row.saturating_sub(n.unwrap_or(1)),
                        'B' => row += n.unwrap_or(1),
                        'G' => col = n.unwrap_or(1).saturating_sub(1),
                        'K' => {
                            if let Some(l) = lines.get_mut(row) {
                                match n.unwrap_or(0) {
                                    0 => l.truncate(col),
                                    _ => l.clear(),
                                }
                            }
                        }
                        'J' => {
                            if let Some(l) = lines.get_mut(row) {
                                l.truncate(col);
                            }
                            lines.truncate(row + 1);
                        }
                        _ => {}
                    }
                }
                '\u{1b}' => {
                    chars.next();
                }
                c if c.is_control() => {}
                c => {
                    while lines.len() <= row {
                        lines.push(Vec::new());
                    }
                    let l = &mut lines[row];
                    while l.len() < col {
                        l.push(' ');
                    }
                    if col < l.len() {
                        l[col] = c;
                    } else {
                        l.push(c);
                    }
                    col += 1;
                }
            }
            while lines.len() <= row {
                lines.push(Vec::new());
            }
        }
        lines.into_iter().map(|l| l.into_iter().collect::<String>().trim_end().to_string()).collect()
    }

    #[test]
    fn the_screen_model_follows_erases_and_cursor_moves() {
        let s = screen(b"a line\r\n\x1b[2Kspinner\r\x1b[2Kkept\r\nnext\x1b[1A\r\x1b[2Kover\n");
        assert_eq!(s, ["a line", "over", "next"]);
    }

    /// The child half of [`a_line_printed_while_a_spinner_runs_survives`]: does nothing unless
    /// that test started it on a pseudo-terminal.
    #[test]
    fn pty_child() {
        if std::env::var_os("TRACELAB_PTY_CHILD").is_none() {
            return;
        }
        let outer = step("collect", "app `x`");
        std::thread::sleep(Duration::from_millis(400));
        note("collect", "load: 5 connection(s) per route on /cpu for 1 s");
        std::thread::sleep(Duration::from_millis(400));
        let inner = step("decode", "perf-cpu");
        std::thread::sleep(Duration::from_millis(300));
        inner.done("1000 samples");
        std::thread::sleep(Duration::from_millis(300));
        say("a plain line from say");
        std::thread::sleep(Duration::from_millis(400));
        outer.done("stopped");
    }

    /// On a real pseudo-terminal (script(1), from util-linux: no new dependency, and the pty is
    /// the kernel's, not an emulation of one), lines printed while spinners run stay on the
    /// screen (issue 38: the load line was erased), an inner step's end leaves the outer spinner
    /// guarded, and the spinners leave no frame behind.
    #[test]
    fn a_line_printed_while_a_spinner_runs_survives() {
        // bsdutils is Essential in Debian: every machine of this kind has script(1).
        if let Err(e) = crate::host::environment::require_program("script") {
            panic!("{e}: apt-get install bsdutils");
        }
        let exe = std::env::current_exe().unwrap();
        let child = format!(
            "stty cols 160 rows 40; {} --exact host::progress::tests::pty_child --nocapture --test-threads=1",
            crate::host::proc::quoted([exe.display().to_string()])
        );
        let out = std::process::Command::new("script")
            .args(["-qfec", &child, "/dev/null"])
            .env("TRACELAB_PTY_CHILD", "1")
            .env("TERM", "xterm-256color")
            .env_remove("TRACELAB_QUIET")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let screen = screen(&out.stdout);
        let has = |want: &str| screen.iter().any(|l| l == want);
        for want in ["==> collect: load: 5 connection(s) per route on /cpu for 1 s", "a plain line from say"] {
            assert!(has(want), "`{want}` did not survive; the screen:\n{}", screen.join("\n"));
        }
        assert!(screen.iter().any(|l| l.starts_with("✓ decode: perf-cpu: 1000 samples (")), "{}", screen.join("\n"));
        assert!(screen.iter().any(|l| l.starts_with("✓ collect: app `x`: stopped (")), "{}", screen.join("\n"));
        // No spinner frame left: every line is one of ours or the test harness's.
        assert!(!screen.iter().any(|l| l.contains(" collect: app `x` (") || l.contains(" decode: perf-cpu (")), "{}", screen.join("\n"));
    }

    #[test]
    fn elapsed_is_shown_against_the_expected_duration() {
        assert_eq!(of_expected(Duration::from_millis(4040), Some(Duration::from_secs(10))), "4.0 s of ~10 s");
        assert_eq!(of_expected(Duration::from_millis(1240), None), "1.2 s");
    }
}
