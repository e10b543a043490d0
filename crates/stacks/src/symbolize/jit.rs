//! JIT code names: `perf-PID.map` (one `hexstart hexsize name` line per code range, written by the
//! runtime with `DOTNET_PerfMapEnabled=1`) and `jit-PID.dump` (perf's jitdump format, read with
//! linux-perf-data), plus the pid translation a host reader needs for a container's map.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};

use super::table::SymbolTable;

/// Longest line we accept in a perf map: the runtime writes method signatures, which can be
/// long, but a megabyte line means the file is not a perf map.
const MAX_LINE: usize = 1 << 20;

/// What a perf map held that could not be read: lines that are no `HEXSTART HEXSIZE NAME` record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfMapDamage {
    /// Lines no record could be read from whole: each lost at least one method.
    pub lines: u64,
    /// Whole records read back from the end of such lines (written after a damaged record that
    /// lost its newline).
    pub recovered: u64,
    /// The byte offset of the first damaged line.
    pub first_at: Option<u64>,
    /// Whether damaged lines hold non-ASCII bytes: .NET 10.0.12 writes every method whose name
    /// has a non-ASCII character damaged (see [`perf_map_damage_finding`]).
    pub non_ascii: bool,
}

/// Parses a perf map. A line that is no record is counted in the [`PerfMapDamage`], and a whole
/// record at its end (after a damaged one that lost its newline) is kept; a file without one
/// readable record is an error naming the file, the first bad line and its byte offset. A last
/// line without its newline is ignored (the runtime was killed mid-write).
pub fn parse_perf_map(text: &[u8], path: &Path) -> Result<(SymbolTable, PerfMapDamage)> {
    let mut table = SymbolTable::new();
    let mut damage = PerfMapDamage::default();
    let mut first_bad: Option<anyhow::Error> = None;
    let mut offset = 0usize;
    let mut line_no = 0usize;
    while offset < text.len() {
        line_no += 1;
        let rest = &text[offset..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let line = &rest[..nl];
        let at = offset;
        offset += nl + 1;
        if line.len() > MAX_LINE {
            bail!("{}: line {line_no} at byte offset {at} is {} bytes long: not a perf map", path.display(), line.len());
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match perf_map_record(line) {
            Ok((start, end, name)) => table.push(start, end, name),
            Err(why) => {
                damage.lines += 1;
                damage.first_at.get_or_insert(at as u64);
                damage.non_ascii |= !line.is_ascii();
                first_bad.get_or_insert_with(|| {
                    let shown: String = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
                    anyhow::anyhow!("{}: line {line_no} at byte offset {at} is not `HEXSTART HEXSIZE NAME` ({why}): {shown:?}", path.display())
                });
                if let Some((start, end, name)) = glued_record(line) {
                    table.push(start, end, name);
                    damage.recovered += 1;
                }
            }
        }
    }
    if let Some(e) = first_bad
        && table.is_empty()
    {
        return Err(e);
    }
    table.finish();
    Ok((table, damage))
}

/// A whole record at the end of a damaged line: the first place `0x` starts from which the rest of
/// the line is one. Only the line's last run of valid UTF-8 can hold it, and each start is tried
/// by its first few dozen bytes, so a long line of garbage costs one pass.
fn glued_record(line: &[u8]) -> Option<(u64, u64, &str)> {
    let last = line.utf8_chunks().last()?;
    if !last.invalid().is_empty() {
        return None;
    }
    let tail = last.valid();
    // Both spaces of a record come within its first 35 bytes (two 16-digit numbers): a start
    // without them is passed over before the record reader would search the rest of the line.
    tail.match_indices("0x")
        .filter(|&(i, _)| tail.as_bytes()[i..].iter().take(36).filter(|&&b| b == b' ').count() >= 2)
        .find_map(|(i, _)| text_record(&tail[i..]).ok())
}

/// One perf-map record, `HEXSTART HEXSIZE NAME`: (start, end, name), or why it is none.
fn perf_map_record(line: &[u8]) -> std::result::Result<(u64, u64, &str), String> {
    text_record(std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?)
}

/// [`perf_map_record`] of a line already known to be UTF-8.
fn text_record(text_line: &str) -> std::result::Result<(u64, u64, &str), String> {
    let mut parts = text_line.splitn(3, ' ');
    let start = parts.next().unwrap_or("");
    let size = parts.next().ok_or("no size")?;
    let name = parts.next().ok_or("no name")?;
    let hex = |s: &str, what: &str| -> std::result::Result<u64, String> {
        let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
        u64::from_str_radix(digits, 16).map_err(|_| format!("{what} `{s}` is not hexadecimal"))
    };
    let start = hex(start, "start")?;
    let size = hex(size, "size")?;
    let end = start.checked_add(size).ok_or("start + size overflows")?;
    Ok((start, end, name.trim_end()))
}

/// What a user loses to a damaged perf map, and why: `None` when it is whole.
pub fn perf_map_damage_finding(map: &str, damage: &PerfMapDamage) -> Option<String> {
    if damage.lines == 0 {
        return None;
    }
    let why = if damage.non_ascii {
        "the runtime wrote the methods whose names have a non-ASCII character (a namespace, type or method named in \
         another script) damaged — address overwritten, last bytes and newline lost — as .NET 10.0.12 does with any \
         `DOTNET_PerfMapEnabled`; its jitdump cannot stand in (10.0.12's stops after its first records)"
    } else {
        "something other than the runtime wrote into it, or the file was cut"
    };
    Some(format!(
        "{map}: {} line(s) from byte offset {} hold no readable method ({} whole record(s) read back from their ends): {why}. \
         Those methods' JIT frames are unnamed in every perf view; an `eventpipe` collector in the same run names them \
         from the runtime's own method events.",
        damage.lines,
        damage.first_at.unwrap_or(0),
        damage.recovered
    ))
}

/// Reads a jitdump file's code-load records into a table.
pub fn read_jitdump(path: &Path) -> Result<SymbolTable> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = JitDumpReader::new(std::io::BufReader::new(file))
        .map_err(|e| anyhow::anyhow!("{}: not a jitdump file (header at byte offset 0): {e}", path.display()))?;
    let mut table = SymbolTable::new();
    loop {
        let offset = reader.next_record_offset();
        let record = match reader.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => bail!("{}: bad jitdump record at byte offset {offset}: {e}", path.display()),
        };
        match record.parse() {
            Ok(JitDumpRecord::CodeLoad(load)) => {
                let name = String::from_utf8_lossy(&load.function_name.as_slice()).into_owned();
                let size = load.code_bytes.len() as u64;
                table.push(load.code_addr, load.code_addr.saturating_add(size), &name);
            }
            Ok(_) => {}
            Err(e) => bail!("{}: bad jitdump record at byte offset {offset}: {e}", path.display()),
        }
    }
    table.finish();
    Ok(table)
}

/// What a jitdump holds, read as far as it goes: a file a runtime failed to write (.NET 10.0.12's
/// holds 2 code loads then a record whose size runs past the end: a `writev` of an uncommitted
/// stub block failed with EFAULT, dotnet/runtime#132935) is counted, not refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JitDumpCensus {
    /// Whole `JIT_CODE_LOAD` records: one per method version the runtime reported.
    pub code_loads: u64,
    /// All whole records.
    pub records: u64,
    /// The byte offset of the first record that could not be read (`None`: read to its end).
    pub cut_at: Option<u64>,
}

/// Counts a jitdump's records (see [`JitDumpCensus`]).
pub fn jitdump_census(path: &Path) -> Result<JitDumpCensus> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut reader = JitDumpReader::new(std::io::BufReader::new(file))
        .map_err(|e| anyhow::anyhow!("{}: not a jitdump file (header at byte offset 0): {e}", path.display()))?;
    let mut census = JitDumpCensus::default();
    loop {
        let offset = reader.next_record_offset();
        match reader.next_record() {
            Ok(Some(record)) => {
                census.records += 1;
                if matches!(record.parse(), Ok(JitDumpRecord::CodeLoad(_))) {
                    census.code_loads += 1;
                }
            }
            Ok(None) => break,
            Err(_) => {
                census.cut_at = Some(offset);
                break;
            }
        }
    }
    // A record that claims more bytes than are left ends the reader without an error.
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if census.cut_at.is_none() && reader.next_record_offset() < len {
        census.cut_at = Some(reader.next_record_offset());
    }
    Ok(census)
}

/// Which way of naming JIT code works for a run that wrote both a perf map (`map_entries` lines)
/// and a jitdump: `None` when the jitdump holds about as many methods as the map (both work),
/// else what a user of `perf inject --jit` or samply (which read the jitdump) would lose, and
/// what works instead.
pub fn jit_naming_finding(map_entries: u64, jitdump: &JitDumpCensus) -> Option<String> {
    if map_entries == 0 || jitdump.code_loads * 10 >= map_entries * 9 {
        return None;
    }
    let cut = jitdump.cut_at.map(|at| format!(", cut at byte offset {at}")).unwrap_or_default();
    Some(format!(
        "the runtime's jitdump holds {} code loads against {map_entries} methods in its perf map{cut}: tools that name JIT \
         frames from the jitdump (`perf inject --jit`, samply) name almost none on this runtime, which fails to write it \
         (as .NET 10.0.12 does: dotnet/runtime#132935, fixed in a later 10.0 patch). The perf map works (tracelab names JIT frames \
         from it; `DOTNET_PerfMapEnabled=3` writes the map alone)",
        jitdump.code_loads
    ))
}

/// The pid of `host_pid` inside its own (innermost) pid namespace, from `NSpid:` in
/// /proc/PID/status. `Ok(None)` when the process is gone or the kernel predates NSpid (4.1).
pub fn ns_pid(host_pid: u32) -> Result<Option<u32>> {
    ns_pid_from(Path::new("/proc"), host_pid)
}

/// As [`ns_pid`], reading `<proc>/PID/status` (tests point it at a copy).
pub fn ns_pid_from(proc: &Path, host_pid: u32) -> Result<Option<u32>> {
    let path = proc.join(host_pid.to_string()).join("status");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    parse_ns_pid(&text).with_context(|| format!("in {}", path.display()))
}

/// The innermost pid of a `/proc/PID/status` text.
pub fn parse_ns_pid(status: &str) -> Result<Option<u32>> {
    let Some(line) = status.lines().find(|l| l.starts_with("NSpid:")) else {
        return Ok(None);
    };
    let last = line["NSpid:".len()..].split_whitespace().last().context("empty NSpid line")?;
    Ok(Some(last.parse().with_context(|| format!("NSpid `{last}` is not a pid"))?))
}

/// Where the runtime's files for a process may be: the run's artifacts, the app's /tmp as the
/// host sees it, and /proc/PID/root/tmp while the process lives.
pub fn candidate_dirs(artifacts: &Path, app_tmp: &Path, host_pid: u32) -> Vec<PathBuf> {
    vec![
        artifacts.to_path_buf(),
        app_tmp.to_path_buf(),
        PathBuf::from(format!("/proc/{host_pid}/root/tmp")),
    ]
}

/// JIT names for a process: its perf map if one exists (with what it held damaged), else its
/// jitdump. `Ok(None)` if neither.
pub fn load_jit_symbols(dirs: &[PathBuf], ns_pid: u32) -> Result<Option<(SymbolTable, PathBuf, PerfMapDamage)>> {
    for dir in dirs {
        let map = dir.join(format!("perf-{ns_pid}.map"));
        if map.is_file() {
            let bytes = std::fs::read(&map).with_context(|| format!("cannot read {}", map.display()))?;
            let (table, damage) = parse_perf_map(&bytes, &map)?;
            return Ok(Some((table, map, damage)));
        }
    }
    for dir in dirs {
        let dump = dir.join(format!("jit-{ns_pid}.dump"));
        if dump.is_file() {
            return Ok(Some((read_jitdump(&dump)?, dump, PerfMapDamage::default())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_parse() {
        let text = b"0x7fd7da650000 110 stub InitThreadManagerPerfMapData<JIT_CopiedWriteBarriers>\n\
                     7fd7db640000 10000 [FixtureApp] Fixture.Phases::CpuHot(int64)[OptimizedTier1]\n";
        let (t, damage) = parse_perf_map(text, Path::new("perf-1.map")).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(damage, PerfMapDamage::default());
        assert_eq!(t.lookup(0x7fd7db640010), Some("[FixtureApp] Fixture.Phases::CpuHot(int64)[OptimizedTier1]"));
    }

    #[test]
    fn a_file_with_no_readable_record_is_an_error_naming_file_and_offset() {
        let text = b"\nzz 10 bad\n";
        let err = parse_perf_map(text, Path::new("perf-9.map")).unwrap_err().to_string();
        assert!(err.contains("perf-9.map") && err.contains("line 2") && err.contains("byte offset 1"), "{err}");
        // One bad line among good ones is counted, not fatal.
        let (t, damage) = parse_perf_map(b"1000 10 ok\nzz 10 bad\n", Path::new("perf-9.map")).unwrap();
        assert_eq!((t.len(), damage.lines, damage.first_at, damage.non_ascii), (1, 1, Some(11), false));
    }

    /// A perf map .NET 10.0.12 wrote for an app whose namespace is `Probe.Ünïcode`
    /// (fixtures/perfmap, README): its methods' records are damaged, the records around them whole.
    #[test]
    fn the_runtimes_damaged_records_of_non_ascii_names_are_counted_and_their_neighbours_kept() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perfmap/non-ascii-10.0.12.map");
        let (t, damage) = parse_perf_map(&std::fs::read(&path).unwrap(), &path).unwrap();
        assert_eq!((damage.lines, damage.recovered, damage.non_ascii), (4, 4, true), "{damage:?}");
        assert_eq!(t.len(), 13 + 4);
        // A record written after a damaged one, which lost its newline.
        assert_eq!(
            t.lookup(0x7f0adac84750),
            Some("instance void [System.Private.CoreLib] System.Runtime.CompilerServices.AsyncTaskMethodBuilder::Start(!!0&)[QuickJitted]")
        );
        assert!(t.names().all(|n| !n.contains("Probe.")), "a damaged record was read as a method");
        let finding = perf_map_damage_finding("perf-21612.map", &damage).unwrap();
        // A megabyte of would-be record starts is one pass, not one per start.
        let garbage = [&[0xffu8][..], &b"0x0x1 ".repeat(170_000), b"\n1000 10 ok\n"].concat();
        let started = std::time::Instant::now();
        let (t, damage) = parse_perf_map(&garbage, &path).unwrap();
        assert_eq!((t.len(), damage.lines, damage.recovered), (1, 1, 0));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(finding.contains("non-ASCII") && finding.contains("4 line(s)") && finding.contains("eventpipe"), "{finding}");
    }

    #[test]
    fn ns_pid_is_the_innermost() {
        assert_eq!(parse_ns_pid("Name:\tdotnet\nNSpid:\t21425\t1\n").unwrap(), Some(1));
        assert_eq!(parse_ns_pid("Name:\tx\nNSpid:\t77\n").unwrap(), Some(77));
        assert_eq!(parse_ns_pid("Name:\tx\n").unwrap(), None);
    }

    #[test]
    fn own_process_ns_pid_is_readable() {
        let me = std::process::id();
        // In a pid namespace of our own the innermost pid differs; it always exists.
        assert!(ns_pid(me).unwrap().is_some());
    }
}

#[cfg(test)]
mod jitdump_tests {
    use super::*;

    /// The jitdump .NET 10.0.12 wrote beside a 1,949-line perf map (fixtures/jitdump, README).
    #[test]
    fn a_jitdump_the_runtime_failed_to_write_is_counted_and_named_as_broken() {
        let dump = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jitdump/jit-10.0.12.dump");
        let census = jitdump_census(&dump).unwrap();
        assert_eq!(census.code_loads, 1, "{census:?}");
        assert!(census.cut_at.is_some_and(|at| at < 33281), "{census:?}");
        let finding = jit_naming_finding(1949, &census).unwrap();
        assert!(finding.contains("1 code loads against 1949 methods") && finding.contains("dotnet/runtime#132935"), "{finding}");
        // A jitdump that holds what the map holds is no finding.
        assert_eq!(jit_naming_finding(10, &JitDumpCensus { code_loads: 10, records: 10, cut_at: None }), None);
    }
}
