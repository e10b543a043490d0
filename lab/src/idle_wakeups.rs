//! Does this kernel record the wake-up of a thread a timer wakes on an idle CPU? `perf-offwake`
//! joins each blocked interval to its `sched:sched_waking`; a kernel that emits none for such a
//! wake-up (seen on 6.18 with cpuidle_haltpoll: no sched_waking, no sched_wakeup, no switch from
//! the idle task) leaves intervals with no waker at all, and the waker checks leave them out.
//! The probe measures it in about a second: `perf record -a` of sched_waking and sched_switch
//! over a shell that runs `sleep` [`SLEEPS`] times, then counts, per `sleep` process, the
//! switch-outs into an interruptible sleep against the sched_waking records naming it. Each
//! `sleep` blocks once in nanosleep and only its timer ends that block, so a switch-out without a
//! waking is a timer wake-up the kernel did not record.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use stacks::{UnwindOptions, Unwound, unwind_perf_data};

/// `sleep` processes the probe runs, one after the other.
pub const SLEEPS: usize = 16;
/// Each one's sleep: long enough for its CPU to enter idle, short enough for a 1 s probe.
const SLEEP_S: &str = "0.04";
/// `prev_state` of a task switched out in an interruptible sleep (TASK_INTERRUPTIBLE).
const TASK_INTERRUPTIBLE: u64 = 1;
/// The command whose timer sleeps are counted.
const SLEEPER: &str = "sleep";

/// What the probe measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleWakeups {
    /// Timer sleeps seen (interruptible switch-outs of the `sleep` processes).
    pub sleeps: usize,
    /// Of them, those no sched_waking record ends.
    pub unrecorded: usize,
    /// Of the sleeps, those whose CPU switched to the idle task as the sleeper left it: only
    /// there can the timer fire on an idle CPU (a busy machine hides the gap).
    pub into_idle: usize,
}

impl IdleWakeups {
    /// The sentence doctor prints.
    pub fn meaning(&self) -> String {
        if self.sleeps == 0 {
            "no timer sleep was recorded: cannot tell whether idle-CPU wake-ups are recorded".into()
        } else if self.unrecorded == 0 && self.into_idle == 0 {
            format!(
                "all {} timer wake-ups recorded, but no sleeper left its CPU idle (a busy machine): cannot tell \
                 whether a timer wake-up on an idle CPU is recorded",
                self.sleeps
            )
        } else if self.unrecorded == 0 {
            format!(
                "all {} timer wake-ups recorded (sched_waking), {} of them on a CPU left idle: perf-offwake can name every waker",
                self.sleeps, self.into_idle
            )
        } else {
            format!(
                "{} of {} timer wake-ups unrecorded: waker checks leave them out (this kernel emits no sched_waking \
                 when a timer wakes a thread on an idle CPU)",
                self.unrecorded, self.sleeps
            )
        }
    }
}

/// One tracepoint record as the count needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedEvent {
    /// `sched_switch` with `tid` as the previous task and `next` as the next (0: the idle task).
    SwitchOut { tid: u32, prev_state: u64, next: u32 },
    /// `sched_waking` naming `tid` as the wakee.
    Waking { tid: u32 },
}

/// Counts, over the threads named `sleeper`, interruptible switch-outs and the wakings that end
/// them: per thread, each switch-out is ended by at most one later waking, and the wakings a
/// thread got before its first switch-out (none, for a fresh `sleep`) end nothing.
pub fn count(events: &[SchedEvent], names: &BTreeMap<u32, String>, sleeper: &str) -> IdleWakeups {
    // tid → switch-outs not yet ended by a waking.
    let mut open: BTreeMap<u32, usize> = BTreeMap::new();
    let (mut sleeps, mut ended, mut into_idle) = (0, 0, 0);
    let is_sleeper = |tid: &u32| names.get(tid).is_some_and(|n| n == sleeper);
    for e in events {
        match *e {
            SchedEvent::SwitchOut { tid, prev_state, next } if prev_state == TASK_INTERRUPTIBLE && is_sleeper(&tid) => {
                sleeps += 1;
                into_idle += usize::from(next == 0);
                *open.entry(tid).or_default() += 1;
            }
            SchedEvent::Waking { tid } if is_sleeper(&tid) => {
                if let Some(n) = open.get_mut(&tid).filter(|n| **n > 0) {
                    *n -= 1;
                    ended += 1;
                }
            }
            _ => {}
        }
    }
    IdleWakeups { sleeps, unrecorded: sleeps - ended, into_idle }
}

/// The probe's records in time order.
pub fn events(unwound: &Unwound) -> Result<Vec<SchedEvent>> {
    let waking = unwound.event_names.iter().position(|n| n == "sched:sched_waking");
    let format = unwound.formats.get("sched:sched_waking");
    let mut samples: Vec<_> = unwound.samples.iter().collect();
    samples.sort_by_key(|s| s.time_ns);
    let mut out = Vec::new();
    for s in samples {
        if let Some(sw) = &s.sched_switch {
            out.push(SchedEvent::SwitchOut { tid: sw.prev_pid, prev_state: sw.prev_state, next: sw.next_pid });
        } else if Some(s.event) == waking {
            let format = format.context("the recording has sched_waking records but no format for them")?;
            let tid = format
                .read_u64(&s.raw, "pid")
                .with_context(|| format!("a sched_waking record of {} bytes has no `pid` field", s.raw.len()))?;
            out.push(SchedEvent::Waking { tid: tid as u32 });
        }
    }
    Ok(out)
}

/// Records the sleep loop system-wide into `work` and counts (needs root and tracefs).
pub fn probe(perf: &Path, work: &Path) -> Result<IdleWakeups> {
    let data = work.join("idle-wakeups.data");
    let script = vec![format!("{SLEEPER} {SLEEP_S}"); SLEEPS].join("; ");
    let out = Command::new(perf)
        .args(["record", "-q", "--no-buildid-cache", "-a", "-e", "sched:sched_waking", "-e", "sched:sched_switch", "-o"])
        .arg(&data)
        .args(["--", "sh", "-c", &script])
        .output()
        .with_context(|| format!("cannot run {}", perf.display()))?;
    if !out.status.success() {
        bail!("perf record -a of sched_waking and sched_switch failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    let unwound = unwind_perf_data(&data, UnwindOptions::default())?;
    Ok(count(&events(&unwound)?, &unwound.thread_names, SLEEPER))
}

/// [`probe`] in a temporary folder, removed after: the recording lasts about `SLEEPS × 40 ms`
/// plus a process start each.
pub fn probe_here(perf: &Path) -> Result<IdleWakeups> {
    let dir = tempfile::Builder::new().prefix("tracelab-idle-wakeups-").tempdir().context("cannot create a temporary folder")?;
    let found = probe(perf, dir.path());
    drop(dir);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use SchedEvent::*;

    fn names(pairs: &[(u32, &str)]) -> BTreeMap<u32, String> {
        pairs.iter().map(|(t, n)| (*t, n.to_string())).collect()
    }

    #[test]
    fn a_sleep_without_its_waking_is_unrecorded() {
        let n = names(&[(10, "sleep"), (11, "sleep"), (12, "sleep"), (5, "sh")]);
        let events = [
            // 10: slept, woken (recorded); then exits (state X = 16 on 6.x).
            SwitchOut { tid: 10, prev_state: 1, next: 0 },
            Waking { tid: 10 },
            SwitchOut { tid: 10, prev_state: 16, next: 0 },
            // The shell waits for each child: not a sleeper, not counted.
            SwitchOut { tid: 5, prev_state: 1, next: 0 },
            Waking { tid: 5 },
            // 11: slept, no waking recorded (the idle-CPU timer case), preempted later.
            SwitchOut { tid: 11, prev_state: 1, next: 0 },
            SwitchOut { tid: 11, prev_state: 0, next: 7 },
            // 12: a waking before any sleep (its start) ends nothing; then a recorded sleep.
            Waking { tid: 12 },
            SwitchOut { tid: 12, prev_state: 1, next: 5 },
            Waking { tid: 12 },
        ];
        let found = count(&events, &n, "sleep");
        assert_eq!(found, IdleWakeups { sleeps: 3, unrecorded: 1, into_idle: 2 });
        assert!(found.meaning().starts_with("1 of 3 timer wake-ups unrecorded: waker checks leave them out"), "{}", found.meaning());
    }

    #[test]
    fn two_wakings_end_one_sleep_only() {
        let n = names(&[(10, "sleep")]);
        let found = count(&[SwitchOut { tid: 10, prev_state: 1, next: 0 }, Waking { tid: 10 }, Waking { tid: 10 }, SwitchOut { tid: 10, prev_state: 1, next: 0 }], &n, "sleep");
        assert_eq!(found, IdleWakeups { sleeps: 2, unrecorded: 1, into_idle: 2 });
    }

    #[test]
    fn meanings_say_what_the_numbers_mean() {
        assert!(IdleWakeups { sleeps: 16, unrecorded: 0, into_idle: 9 }.meaning().starts_with("all 16 timer wake-ups recorded (sched_waking), 9 of them"));
        assert!(IdleWakeups { sleeps: 16, unrecorded: 0, into_idle: 0 }.meaning().contains("cannot tell"));
        assert!(IdleWakeups { sleeps: 0, unrecorded: 0, into_idle: 0 }.meaning().contains("cannot tell"));
    }
}
