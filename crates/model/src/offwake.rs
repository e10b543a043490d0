//! The off-wake view (Brendan Gregg's, as bcc's offwaketime folds it): each blocked interval's
//! stack root first, then `--`, then the waker's stack from its leaf back to its root and the
//! waker's name on top, weighted by the blocked time. What the `perf-offwake` collector joins
//! and every reader of its samples (checks, writers) share.

use crate::data::{DsoClass, Frame, Sample};

/// The delimiter between the blocked stack and the waker's in the off-wake view.
const DELIMITER: &str = "--";

/// The DSO of the view's own frames (the delimiter, the waker's name).
const VIEW_DSO: &str = "[wake]";

/// Who ended a blocked interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WakerKind {
    /// A thread of the app, outside interrupt context: its stack is the waker's.
    Thread,
    /// Interrupt context (a timer, a device) or the idle task: no thread woke it.
    Kernel,
    /// A thread of another process.
    Process,
    /// No waking was recorded for the interval (events lost, or outside the app without the
    /// system-wide recording).
    None,
}

impl WakerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WakerKind::Thread => "thread",
            WakerKind::Kernel => "kernel",
            WakerKind::Process => "process",
            WakerKind::None => "none",
        }
    }
}

/// One blocked interval and what ended it.
#[derive(Clone, Debug)]
pub struct Wakeup {
    pub pid: u32,
    /// The blocked thread (the app's namespace).
    pub tid: u32,
    pub thread: String,
    pub from_ns: u64,
    pub blocked_ns: u64,
    /// The blocked thread's stack at its switch-out, leaf first.
    pub blocked_frames: Vec<Frame>,
    pub waker_kind: WakerKind,
    /// The waker's name: an app thread's name, `[kernel: hardirq]`, `[process PID]` …
    pub waker: String,
    /// The waking thread's tid in the app's namespace (app threads), else its global pid.
    pub waker_tid: Option<u32>,
    /// The waker's stack at the waking, leaf first (kernel frames only for a kernel waker).
    pub waker_frames: Vec<Frame>,
    /// From the waking to the woken thread's switch-in.
    pub latency_ns: Option<u64>,
}

fn view_frame(name: &str) -> Frame {
    Frame { name: Some(name.to_string()), dso: Some(VIEW_DSO.into()), class: DsoClass::Unknown, addr: 0 }
}

/// The off-wake view of one wakeup as a sample (frames leaf first, so that the folded stack
/// reads blocked root … blocked leaf ; -- ; waker leaf … waker root ; waker name).
pub fn offwake_sample(w: &Wakeup) -> Sample {
    let mut frames = Vec::with_capacity(w.blocked_frames.len() + w.waker_frames.len() + 2);
    frames.push(view_frame(&w.waker));
    frames.extend(w.waker_frames.iter().rev().cloned());
    frames.push(view_frame(DELIMITER));
    frames.extend(w.blocked_frames.iter().cloned());
    Sample {
        pid: w.pid,
        tid: w.tid,
        time_ns: w.from_ns,
        weight: w.blocked_ns,
        frames,
        kind: Some(w.waker_kind.as_str().into()),
        cpu: None,
    }
}

/// An off-wake sample's two parts: the blocked frames, leaf first, and the waker's, its name
/// first, then its frames root first (as the view draws them). None when the sample is not of
/// the off-wake view.
pub fn split_offwake(sample: &Sample) -> Option<(&[Frame], &[Frame])> {
    let at = sample
        .frames
        .iter()
        .position(|f| f.dso.as_deref() == Some(VIEW_DSO) && f.name.as_deref() == Some(DELIMITER))?;
    Some((&sample.frames[at + 1..], &sample.frames[..at]))
}

/// The method a stack names nearest its leaf: the first managed (JIT or ReadyToRun) frame with
/// a name, the frames given leaf first.
pub fn nearest_managed<'a>(frames: impl IntoIterator<Item = &'a Frame>) -> Option<&'a str> {
    frames.into_iter().find(|f| matches!(f.class, DsoClass::Jit | DsoClass::R2r) && f.name.is_some()).and_then(|f| f.name.as_deref())
}

/// The per-interval list: one tab-separated line per blocked interval.
pub fn wakeups_tsv(wakeups: &[Wakeup]) -> String {
    let mut text = String::from(
        "tid\tthread\tfrom_ns\tblocked_ns\tblocked_method\twaker_kind\twaker\twaker_tid\twaker_method\tlatency_ns\n",
    );
    for w in wakeups {
        let clean = |s: &str| s.replace(['\t', '\n'], " ");
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            w.tid,
            clean(&w.thread),
            w.from_ns,
            w.blocked_ns,
            clean(nearest_managed(&w.blocked_frames).unwrap_or("")),
            w.waker_kind.as_str(),
            clean(&w.waker),
            w.waker_tid.map(|t| t.to_string()).unwrap_or_default(),
            clean(nearest_managed(&w.waker_frames).unwrap_or("")),
            w.latency_ns.map(|t| t.to_string()).unwrap_or_default(),
        ));
    }
    text
}

