//! `perf script`'s text with callchains (`-F …,tid,time,ip,sym,dso`), read back sample by sample:
//! what tracelab's own decode is compared with (the perf bench, the symbol-name tests).

use anyhow::{Context, Result, bail};

/// One frame as `perf script` prints it: `ADDR SYMBOL (DSO)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptFrame {
    pub addr: u64,
    /// Without perf's `+0x1a` offset; `None` for `[unknown]`.
    pub symbol: Option<String>,
    pub dso: String,
}

/// One sample: its process and thread (when the header shows `PID/TID`), its time in µs and its
/// frames, leaf first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSample {
    /// A system-wide recording (perfcollect's `perf record -a`) holds every process: this picks one.
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time_us: u64,
    pub frames: Vec<ScriptFrame>,
}

/// Parses `perf script` text; `source` names it in errors (with the line).
#[cfg(test)]
pub fn parse_script(text: &str, source: &str) -> Result<Vec<ScriptSample>> {
    let mut reader = ScriptReader::new(source);
    let mut out = Vec::new();
    for line in text.lines() {
        out.extend(reader.line(line)?);
    }
    out.extend(reader.finish());
    Ok(out)
}

/// Reads `perf script` text line by line (a long recording's text runs to hundreds of MB: it is
/// read as perf writes it, one sample held at a time).
pub struct ScriptReader<'s> {
    source: &'s str,
    line: usize,
    current: Option<ScriptSample>,
}

impl<'s> ScriptReader<'s> {
    /// `source` names the text in errors.
    pub fn new(source: &'s str) -> ScriptReader<'s> {
        ScriptReader { source, line: 0, current: None }
    }

    /// Takes the next line; returns the sample it completed, if any.
    pub fn line(&mut self, line: &str) -> Result<Option<ScriptSample>> {
        self.line += 1;
        let at = || format!("{} line {}", self.source, self.line);
        if line.trim().is_empty() {
            return Ok(None);
        }
        if !line.starts_with(char::is_whitespace) {
            // `dotnet 16459/16459   734.742372:    1001001 cpu-clock: `
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(time) = words
                .iter()
                .find(|w| w.ends_with(':') && w.contains('.') && w[..w.len() - 1].replace('.', "").bytes().all(|b| b.is_ascii_digit()))
            else {
                bail!("{}: no `SECONDS.MICROS:` time in `{line}` (run perf script with -F …,time,…)", at());
            };
            let (s, us) = time.trim_end_matches(':').split_once('.').unwrap_or_default();
            let (s, us): (u64, u64) = (s.parse().with_context(at)?, us.parse().with_context(at)?);
            let ids = words.iter().find_map(|w| {
                let (pid, tid) = w.split_once('/')?;
                Some((pid.parse().ok(), tid.parse().ok()?))
            });
            let (pid, tid) = (ids.and_then(|i| i.0), ids.map(|i| i.1));
            let next = ScriptSample { pid, tid, time_us: s * 1_000_000 + us, frames: Vec::new() };
            return Ok(self.current.replace(next));
        }
        let frame = line.trim();
        let (addr, rest) = frame.split_once(' ').unwrap_or((frame, ""));
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            bail!("{}: `{addr}` is not an address (frames are `ADDR SYMBOL (DSO)`)", at());
        };
        // The symbol may hold spaces and parentheses, and so may the dso (`/memfd:x (deleted)`):
        // the dso is the last balanced `(…)`.
        let Some(open) = dso_start(rest) else { bail!("{}: no ` (dso)` in `{frame}` (run perf script with -F …,dso)", at()) };
        let symbol = rest[..open].trim_end();
        let dso = rest[open + 1..rest.len() - 1].to_string();
        let symbol = (symbol != "[unknown]").then(|| strip_offset(symbol).to_string());
        let Some(sample) = self.current.as_mut() else { bail!("{}: a frame before any sample header", at()) };
        sample.frames.push(ScriptFrame { addr, symbol, dso });
        Ok(None)
    }

    /// The last sample, at the end of the text.
    pub fn finish(self) -> Option<ScriptSample> {
        self.current
    }
}

/// Byte index of the `(` that opens the `(dso)` ending `rest`.
fn dso_start(rest: &str) -> Option<usize> {
    if !rest.ends_with(')') {
        return None;
    }
    let mut depth = 0;
    for (i, b) in rest.bytes().enumerate().rev() {
        match b {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `name+0x1a` → `name` (perf's decoration with `-F +symoff`).
fn strip_offset(symbol: &str) -> &str {
    match symbol.rsplit_once("+0x") {
        Some((name, hex)) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => symbol,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_lines_parse_with_offsets_and_parenthesised_symbols() {
        let text = "dotnet 1/2   734.742372:    1001001 cpu-clock: \n\
                    \tffffffff821c5409 mas_leaf_max_gap+0x19 ([kernel.kallsyms])\n\
                    \t    7f0012345678 instance void [System.Runtime] X::Y(int32)[OptimizedTier1] (/tmp/perf-2.map)\n\
                    \t               0 [unknown] ([unknown])\n\
                    \t            1234 [unknown] (/memfd:doublemapper (deleted))\n";
        let s = parse_script(text, "inline").unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].pid, s[0].tid, s[0].time_us), (Some(1), Some(2), 734_742_372));
        assert_eq!(s[0].frames[0].symbol.as_deref(), Some("mas_leaf_max_gap"));
        assert_eq!(s[0].frames[1].symbol.as_deref(), Some("instance void [System.Runtime] X::Y(int32)[OptimizedTier1]"));
        assert_eq!(s[0].frames[1].dso, "/tmp/perf-2.map");
        assert_eq!((s[0].frames[2].addr, s[0].frames[2].symbol.as_deref()), (0, None));
        assert_eq!((s[0].frames[3].symbol.as_deref(), s[0].frames[3].dso.as_str()), (None, "/memfd:doublemapper (deleted)"));
    }

    #[test]
    fn malformed_text_names_the_line() {
        let e = parse_script("x 1/2 1.000001: cpu-clock:\n\tzz foo (bar)\n", "t").unwrap_err().to_string();
        assert!(e.contains("t line 2") && e.contains("`zz` is not an address"), "{e}");
        let e = parse_script("\tff foo (bar)\n", "t").unwrap_err().to_string();
        assert!(e.contains("t line 1") && e.contains("before any sample"), "{e}");
        let e = parse_script("dotnet 1/2 cpu-clock:\n", "t").unwrap_err().to_string();
        assert!(e.contains("no `SECONDS.MICROS:` time"), "{e}");
    }
}
