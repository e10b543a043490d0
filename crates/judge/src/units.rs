//! Numbers as a reader acts on them: every figure a check prints carries its unit (off-CPU sample
//! weights are nanoseconds, which `3786080327 of 3788968293` hid). Manifest values stay plain
//! numbers (seconds, fractions, Hz); only the text a person reads goes through here.

/// A duration given in nanoseconds, in the largest unit that keeps it ≥ 1: `3.79 s`, `12.5 ms`.
pub fn duration_ns(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.2} s", ns_f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", ns_f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// A fraction 0..1 as a percentage: `70.3 %`.
pub fn percent(fraction: f64) -> String {
    format!("{:.1} %", fraction * 100.0)
}

/// A rate in samples per second: `999 Hz`, `131.4 Hz`.
pub fn hertz(hz: f64) -> String {
    if hz >= 100.0 { format!("{hz:.0} Hz") } else { format!("{hz:.1} Hz") }
}

/// Sample weight as its unit says: nanoseconds of off-CPU time, else a count of samples.
pub fn weight(w: u64, weight_ns: bool) -> String {
    if weight_ns { duration_ns(w) } else { format!("{w} samples") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_carry_units() {
        assert_eq!(duration_ns(3_786_080_327), "3.79 s");
        assert_eq!(duration_ns(12_500_000), "12.5 ms");
        assert_eq!(duration_ns(2_500), "2.5 µs");
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(percent(0.7031), "70.3 %");
        assert_eq!(hertz(999.2), "999 Hz");
        assert_eq!(hertz(31.44), "31.4 Hz");
        assert_eq!(weight(3, false), "3 samples");
        assert_eq!(weight(3_788_968_293, true), "3.79 s");
    }
}
