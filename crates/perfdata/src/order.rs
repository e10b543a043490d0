//! The order samples come out in. The two halves of the data section decode separately, each in
//! file order; these put them together, in file order or by time.

use crate::recording::PerfSample;

/// The order of [`PerfRecording::samples`](crate::PerfRecording::samples).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleOrder {
    /// By timestamp, ties in file order: what a timeline needs (perf writes each CPU's buffer
    /// in turn, so the file interleaves stretches of time).
    Time,
    /// As perf wrote them: enough for anything that only counts, such as folded stacks, and
    /// saves sorting (a quarter of decoding a cpu-clock recording).
    File,
}

/// Both halves' samples one after the other; the second half's callchains move by
/// `chain_offset` (its pool follows the first's).
pub(crate) fn file_order(mut first: Vec<PerfSample>, second: Vec<PerfSample>, chain_offset: u32) -> Vec<PerfSample> {
    let split = first.len();
    first.extend(second);
    for s in &mut first[split..] {
        s.callchain.start += chain_offset;
    }
    first
}

/// The samples of both halves (each in file order) in time order, ties in file order; the
/// second half's callchains move by `chain_offset` (its pool follows the first's).
///
/// Sorts (time, position) keys and then permutes the samples in place, cycle by cycle: sorting
/// the samples themselves, or gathering them into a new vector, moved or newly touched more
/// memory than decoding them did.
pub(crate) fn time_order(first: Vec<PerfSample>, second: Vec<PerfSample>, chain_offset: u32) -> Vec<PerfSample> {
    let mut samples = file_order(first, second, chain_offset);
    let mut order: Vec<(u64, u32)> = samples.iter().enumerate().map(|(i, s)| (s.time_ns, i as u32)).collect();
    if order.is_sorted() {
        return samples;
    }
    // Keys are distinct (positions are), so an unstable sort orders exactly as a stable one.
    order.sort_unstable();
    // `from[k]`: the position whose sample belongs at k. Each cycle is walked once; a finished
    // slot is marked by pointing at itself.
    let mut from: Vec<u32> = order.into_iter().map(|(_, i)| i).collect();
    for start in 0..from.len() {
        let mut k = start;
        while from[k] as usize != k {
            let source = from[k] as usize;
            from[k] = k as u32;
            if source == start {
                break;
            }
            samples.swap(k, source);
            k = source;
        }
    }
    samples
}

/// Merges lists sorted by `key`; on equal keys `first`'s items come first (they are earlier in
/// the file).
pub(crate) fn merge_sorted<T>(first: Vec<T>, second: Vec<T>, key: impl Fn(&T) -> u64) -> Vec<T> {
    if second.is_empty() {
        return first;
    }
    let mut out = Vec::with_capacity(first.len() + second.len());
    let mut second = second.into_iter().peekable();
    for item in first {
        while let Some(next) = second.next_if(|n| key(n) < key(&item)) {
            out.push(next);
        }
        out.push(item);
    }
    out.extend(second);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_the_first_lists_items_first_on_equal_keys() {
        let first = vec![(1, 'a'), (3, 'b'), (3, 'c'), (7, 'd')];
        let second = vec![(0, 'w'), (3, 'x'), (5, 'y'), (9, 'z')];
        let merged: String = merge_sorted(first, second, |(k, _)| *k).into_iter().map(|(_, c)| c).collect();
        assert_eq!(merged, "wabcxydz");
    }
}
