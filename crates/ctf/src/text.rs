//! babeltrace's text line for an event (`babeltrace2 --clock-seconds` and babeltrace 1's default
//! clock), so a decoded trace can be compared with babeltrace's, line by line.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::{Event, Value};

/// How the timestamp at the start of a line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextClock {
    /// `[07:08:02.544279952]`: time of day, UTC (babeltrace 1's default).
    TimeOfDay,
    /// `[1795331282.544279952]`: seconds since the clock's origin (`babeltrace2 --clock-seconds`).
    Seconds,
}

/// babeltrace2's text sink escapes strings as C does; babeltrace 1 prints them as they are.
fn string_text(s: &str, clock: TextClock, out: &mut String) {
    out.push('"');
    if clock == TextClock::TimeOfDay {
        out.push_str(s);
    } else {
        for c in s.chars() {
            match c {
                '\u{07}' => out.push_str("\\a"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{0b}' => out.push_str("\\v"),
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

fn value_text(v: &Value, clock: TextClock, out: &mut String) {
    match v {
        Value::UInt(x) => write!(out, "{x}").unwrap(),
        Value::SInt(x) => write!(out, "{x}").unwrap(),
        Value::Float(x) if clock == TextClock::Seconds => out.push_str(&c_g(*x)),
        Value::Float(x) => write!(out, "{x}").unwrap(),
        Value::Str(s) => string_text(s, clock, out),
        // babeltrace prints LTTng's raw payload bytes as the signed 8-bit integers TSDL declares.
        Value::Bytes(b) => {
            out.push_str("[ ");
            for (i, x) in b.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write!(out, "[{i}] = {}", *x as i8).unwrap();
            }
            out.push_str(" ]");
        }
        other => write!(out, "{other:?}").unwrap(),
    }
}

/// C's `%g` (6 significant digits, trailing zeros dropped), as babeltrace2 prints reals.
fn c_g(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    let e = format!("{x:.5e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        return format!("{}e{}{:02}", trim(mantissa.to_string()), if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    trim(format!("{x:.*}", (5 - exp).max(0) as usize))
}

fn fields_text(names: &[Arc<str>], values: &[Value], clock: TextClock, out: &mut String) {
    if values.is_empty() && clock == TextClock::Seconds {
        // babeltrace2 prints an empty structure as `{ }`.
        out.push_str("{ }");
        return;
    }
    out.push_str("{ ");
    for (i, (n, v)) in names.iter().zip(values).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(out, "{n} = ").unwrap();
        value_text(v, clock, out);
    }
    out.push_str(" }");
}

/// The event's line as babeltrace prints it: timestamp, delta from the previous event
/// (`prev`, its `ns_from_origin`), hostname, name, cpu_id, stream context, payload.
pub fn babeltrace_line(ev: &Event<'_>, prev: Option<i64>, hostname: &str, clock: TextClock) -> String {
    let ns = ev.ns_from_origin;
    let mut out = match clock {
        TextClock::TimeOfDay => {
            let day = ns.rem_euclid(86_400_000_000_000);
            let (h, m, s, frac) = (day / 3_600_000_000_000, day / 60_000_000_000 % 60, day / 1_000_000_000 % 60, day % 1_000_000_000);
            format!("[{h:02}:{m:02}:{s:02}.{frac:09}] ")
        }
        TextClock::Seconds => format!("[{}.{:09}] ", ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000)),
    };
    match prev {
        Some(p) => {
            let d = ns - p;
            write!(out, "(+{}.{:09})", d / 1_000_000_000, d % 1_000_000_000).unwrap();
        }
        None => out.push_str("(+?.?????????)"),
    }
    write!(out, " {hostname} {}: ", ev.name()).unwrap();
    if let Some(cpu) = ev.cpu_id {
        write!(out, "{{ cpu_id = {cpu} }}, ").unwrap();
    }
    fields_text(&ev.stream_class.event_context_names, &ev.stream_context, clock, &mut out);
    out.push_str(", ");
    fields_text(&ev.class.field_names, &ev.payload, clock, &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reals_print_as_c_g() {
        assert_eq!(super::c_g(24.571428571428573), "24.5714");
        assert_eq!(super::c_g(22.75), "22.75");
        assert_eq!(super::c_g(24.439024390243901), "24.439");
        assert_eq!(super::c_g(1234567.0), "1.23457e+06");
        assert_eq!(super::c_g(0.0001234), "0.0001234");
    }
}
