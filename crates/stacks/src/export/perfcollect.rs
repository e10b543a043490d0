//! A perfcollect-compatible `<name>.trace.zip` (what PerfView opens; perfcollect's layout from
//! its `ProcessCollectedData`): one folder `<name>.trace/` holding
//! - `perf.data.txt`: `perf script -F comm,pid,tid,cpu,time,period,event,ip,sym,dso,trace` text of
//!   the on-CPU samples, written from the model so every frame carries the name tracelab gave it
//!   ([`frame_label`], the folded stacks' own: ReadyToRun and code-version-merged JIT names
//!   included);
//! - the runtime's `perf-PID.map`, and `perfinfo-PID.map` ([`perfinfo_text`]: the .NET 10 runtime
//!   writes none, so the perf collector writes it from the recording);
//! - `lttngTrace/`: the LTTng session's CTF folder as LTTng wrote it (`…/ust/uid/0/64-bit/metadata`
//!   and `channel*` streams), when the run traced with LTTng.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::fold::frame_label;
use model::Collection;

/// The zip's file name: PerfView recognises perfcollect traces by the `.trace.zip` suffix.
pub fn file_name(name: &str) -> String {
    format!("{name}.trace.zip")
}

/// What a trace.zip is made of.
pub struct TraceZipInput<'a> {
    /// Names the zip and its folder (perfcollect's trace name).
    pub name: &'a str,
    /// The on-CPU samples (perf cpu-clock), when the run has them.
    pub perf: Option<&'a Collection>,
    /// Thread names from the run (perf's COMM records), for the `comm` column.
    pub run: &'a [Collection],
    /// The LTTng session's output folder (holding `ust/…`), when the run traced with LTTng.
    pub lttng_dir: Option<&'a Path>,
    /// The runtime's perf-PID.map / perfinfo-PID.map files.
    pub runtime_files: Vec<PathBuf>,
}

/// `perf script` text of a collection's samples, in perfcollect's field order: `comm pid/tid
/// [cpu] secs.micros: period event: ` then one `\tADDR SYMBOL (DSO)` line per frame, leaf first,
/// and an empty line. `[cpu]` is the CPU perf recorded (`--sample-cpu`); a sample without one
/// leaves the field out, as perfcollect's fallback `perf script` does where perf has no CPU, so
/// PerfView shows none rather than a made-up CPU 0.
pub fn perf_script_text(coll: &Collection, run: &[Collection]) -> String {
    let period = coll.metrics.get("frequency_hz").filter(|hz| **hz > 0.0).map(|hz| (1e9 / hz).round() as u64).unwrap_or(1);
    let comm = |tid: u32, pid: u32| -> String {
        let name = crate::export::firefox::thread_name(coll, run, tid)
            .or_else(|| crate::export::firefox::thread_name(coll, run, pid))
            .unwrap_or("dotnet");
        // perf prints comm as one field; TraceEvent finds its end at `  PID/TID`.
        name.replace(['\n', '\t'], " ")
    };
    let mut samples: Vec<&model::Sample> = coll.samples.iter().collect();
    samples.sort_by_key(|s| s.time_ns);
    let mut out = String::with_capacity(samples.len() * 256);
    for s in samples {
        let secs = s.time_ns / 1_000_000_000;
        let micros = (s.time_ns % 1_000_000_000) / 1000;
        let weight = period * s.weight.max(1);
        let cpu = s.cpu.map(|c| format!(" [{c:03}]")).unwrap_or_default();
        out.push_str(&format!("{} {}/{}{cpu} {secs}.{micros:06}: {weight} cpu-clock: \n", comm(s.tid, s.pid), s.pid, s.tid));
        for f in &s.frames {
            let mut dso = f.dso.as_deref().unwrap_or("[unknown]").to_string();
            let mut sym = if f.name.is_some() { frame_label(f) } else { "[unknown]".to_string() };
            if f.class == model::DsoClass::Jit {
                // PerfView groups by module: a JIT method's is its assembly (the perf map names it,
                // `[cpu-bound]`), not the `[jit]` pseudo-file every JIT frame shares; and it shows
                // code tiers from the name's `[OptimizedTier1]`-style suffix, which the label merged.
                if let Some(assembly) = model::frame_assembly(f) {
                    dso = format!("{assembly}.dll");
                }
                if let Some(tier) = f.name.as_deref().and_then(code_version_tag) {
                    sym.push_str(tier);
                }
            }
            let dso = dso.as_str();
            // A function known by its start is labelled `FILE!fn@0x…` elsewhere; perf script
            // prints the symbol alone beside its module, and TraceEvent puts `FILE!` in front
            // itself (it read `libcoreclr.so!libcoreclr.so!fn@0x…`).
            let file = dso.rsplit('/').next().unwrap_or(dso);
            if let Some(bare) = sym.strip_prefix(file).and_then(|rest| rest.strip_prefix('!')) {
                sym = bare.to_string();
            }
            out.push_str(&format!("\t{:>16x} {sym} ({dso})\n", f.addr));
        }
        out.push('\n');
    }
    out
}

/// The code-version suffix of a JIT method's name as the runtime wrote it (`[OptimizedTier1]`,
/// `[QuickJitted]`, `[OptimizedTier1OSR]` …), if it has one.
fn code_version_tag(name: &str) -> Option<&str> {
    let merged = model::merge_code_version(name);
    let tag = name.trim_end()[merged.len()..].trim_start();
    (!tag.is_empty()).then_some(tag)
}

/// Writes `<run_dir>/<name>.trace.zip`; returns its path. Nothing is written when the run has
/// neither perf samples nor an LTTng folder.
pub fn write(input: &TraceZipInput, run_dir: &Path) -> Result<Option<PathBuf>> {
    if input.perf.is_none() && input.lttng_dir.is_none() {
        return Ok(None);
    }
    let path = run_dir.join(file_name(input.name));
    let partial = run_dir.join(format!(".{}.partial", file_name(input.name)));
    let result = write_zip(input, &partial).with_context(|| format!("cannot write {}", path.display())).and_then(|()| {
        std::fs::rename(&partial, &path).with_context(|| format!("cannot rename {} to {}", partial.display(), path.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map(|()| Some(path))
}

/// Unpacks a trace.zip (perfcollect's own, or ours) into `into`; returns its trace folder (the
/// one top folder, `<name>.trace/`). The zip crate keeps every entry inside `into`.
pub fn unpack(zip_path: &Path, into: &Path) -> Result<PathBuf> {
    let file = std::fs::File::open(zip_path).with_context(|| format!("cannot open {}", zip_path.display()))?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(file))
        .with_context(|| format!("{} is not a zip archive: was it written to the end?", zip_path.display()))?;
    archive.extract(into).with_context(|| format!("cannot unpack {} into {}", zip_path.display(), into.display()))?;
    let mut folders: Vec<PathBuf> = std::fs::read_dir(into)?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    folders.sort();
    match folders.as_slice() {
        [one] => Ok(one.clone()),
        _ => anyhow::bail!(
            "{} holds {} top folders, not the one `<name>.trace/` a trace.zip has",
            zip_path.display(),
            folders.len()
        ),
    }
}

fn write_zip(input: &TraceZipInput, path: &Path) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(AfterFailureDiscard::new(std::io::BufWriter::new(file)));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let root = format!("{}.trace", input.name);
    if let Some(perf) = input.perf {
        zip.start_file(format!("{root}/perf.data.txt"), options)?;
        zip.write_all(perf_script_text(perf, input.run).as_bytes())?;
    }
    // A container run's maps appear twice (its /tmp folder and the copy beside it): one entry per
    // name, and a second file of that name with other content (another run) keeps its folder.
    let mut written: std::collections::HashMap<String, Vec<u8>> = std::collections::HashMap::new();
    for f in &input.runtime_files {
        let Some(name) = f.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let bytes = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
        let entry = match written.get(&name) {
            None => format!("{root}/{name}"),
            Some(first) if *first == bytes => continue,
            Some(_) => {
                let folder = f.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                format!("{root}/{folder}/{name}")
            }
        };
        zip.start_file(entry, options)?;
        zip.write_all(&bytes)?;
        written.entry(name).or_insert(bytes);
    }
    if let Some(dir) = input.lttng_dir {
        // perfcollect: `mkdir lttngTrace; cp -r $lttngTraceDir lttngTrace`.
        let session = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "lttng".into());
        add_tree(&mut zip, dir, &format!("{root}/lttngTrace/{session}"), options)?;
    }
    zip.finish()?.flush()?;
    Ok(())
}

/// The zip's file, closed at its first failed write (a full disk): the error goes back to the
/// caller, and what the zip writes afterwards — its `Drop` finalizes an unfinished archive and
/// prints `ZipWriter::drop: failed to finalize archive: …` without a newline when that fails —
/// is accepted and discarded (positions kept, so its seeks agree). The caller removes the file.
struct AfterFailureDiscard<W> {
    inner: Option<W>,
    pos: u64,
    len: u64,
}

impl<W> AfterFailureDiscard<W> {
    fn new(inner: W) -> Self {
        AfterFailureDiscard { inner: Some(inner), pos: 0, len: 0 }
    }
    fn failed<T>(&mut self, e: std::io::Error) -> std::io::Result<T> {
        self.inner = None;
        Err(e)
    }
}

impl<W: std::io::Write> std::io::Write for AfterFailureDiscard<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = match &mut self.inner {
            Some(w) => match w.write(buf) {
                Ok(n) => n,
                Err(e) => return self.failed(e),
            },
            None => buf.len(),
        };
        self.pos += n as u64;
        self.len = self.len.max(self.pos);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            Some(w) => match w.flush() {
                Ok(()) => Ok(()),
                Err(e) => self.failed(e),
            },
            None => Ok(()),
        }
    }
}

impl<W: std::io::Seek> std::io::Seek for AfterFailureDiscard<W> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let pos = match &mut self.inner {
            Some(w) => match w.seek(to) {
                Ok(p) => p,
                Err(e) => return self.failed(e),
            },
            None => {
                let base = match to {
                    std::io::SeekFrom::Start(p) => return Ok(self.set_pos(p)),
                    std::io::SeekFrom::Current(d) => (self.pos, d),
                    std::io::SeekFrom::End(d) => (self.len, d),
                };
                base.0.saturating_add_signed(base.1)
            }
        };
        Ok(self.set_pos(pos))
    }
}

impl<W> AfterFailureDiscard<W> {
    fn set_pos(&mut self, pos: u64) -> u64 {
        self.pos = pos;
        self.len = self.len.max(pos);
        pos
    }
}

fn add_tree<W: std::io::Write + std::io::Seek>(
    zip: &mut zip::ZipWriter<W>,
    dir: &Path,
    prefix: &str,
    options: zip::write::SimpleFileOptions,
) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
        let kind = e.file_type()?;
        if kind.is_dir() {
            add_tree(zip, &e.path(), &name, options)?;
        } else if kind.is_file() {
            zip.start_file(name, options)?;
            let mut f = std::fs::File::open(e.path()).with_context(|| format!("cannot read {}", e.path().display()))?;
            std::io::copy(&mut f, zip)?;
        }
    }
    Ok(())
}

/// `perfinfo-PID.map` as the runtime wrote it before .NET 9 (`PerfInfo::LogImage`, read back
/// by TraceEvent's `LinuxPerfScriptEventParser.ParsePerfInfoFile`): one
/// `ImageLoad;PATH;{MVID};BASE;` line per image, the MVID as `StringFromGUID2` spells it and the
/// base in hex without `0x` (TraceEvent parses it as a hex number), 0 for an image without
/// precompiled code. The .NET 10 runtime writes no such file (libcoreclr 10.0.12 holds no
/// `perfinfo` string), so it is rebuilt from the recording: each .NET image process `pid`
/// mapped with code (perf records executable mappings only, so IL-only assemblies, which hold
/// no code, are absent), in mapping order; `path_map` finds the file as the app saw it.
///
/// Each line is written twice: TraceEvent 4.0.0 skips the line after every line that carries a
/// base (measured: of `A;B;C;D;E`, it read A, C and E), and reading one image twice is harmless
/// to it (a dictionary by file name) and to any other reader.
pub fn perfinfo_text(rec: &perfdata::PerfRecording, pid: u32, path_map: &dyn Fn(&Path) -> Option<PathBuf>) -> String {
    let mut bases: Vec<(&str, u64)> = Vec::new();
    for m in rec.mmaps.iter().filter(|m| m.pid == pid && !m.in_kernel && m.path.to_ascii_lowercase().ends_with(".dll")) {
        let base = m.start.saturating_sub(m.pgoff);
        match bases.iter_mut().find(|(p, _)| *p == m.path) {
            Some((_, b)) => *b = (*b).min(base),
            None => bases.push((&m.path, base)),
        }
    }
    let cache = r2r::ModuleCache::default();
    let mut out = String::new();
    for (path, base) in bases {
        let Some(module) = path_map(Path::new(path)).and_then(|host| cache.get(&host)) else { continue };
        let Ok(g) = module.mvid() else { continue };
        let base = if module.ready_to_run { base } else { 0 };
        let guid = format!(
            "{:08X}-{:04X}-{:04X}-{:02X}{:02X}-{}",
            u32::from_le_bytes([g[0], g[1], g[2], g[3]]),
            u16::from_le_bytes([g[4], g[5]]),
            u16::from_le_bytes([g[6], g[7]]),
            g[8],
            g[9],
            g[10..].iter().map(|b| format!("{b:02X}")).collect::<String>()
        );
        let line = format!("ImageLoad;{path};{{{guid}}};{base:016X};\n");
        out.push_str(&line);
        out.push_str(&line);
    }
    out
}

/// The runtime's perf-PID.map / perfinfo-PID.map files under `artifacts` (a host run moves them
/// there; a container run's /tmp is a folder of the run).
pub fn runtime_files(artifacts: &Path) -> Vec<PathBuf> {
    let is_runtime_file = |name: &str| {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        name.strip_prefix("perf-").or_else(|| name.strip_prefix("perfinfo-")).and_then(|r| r.strip_suffix(".map")).is_some_and(digits)
    };
    let mut out = Vec::new();
    let mut todo = vec![(artifacts.to_path_buf(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.file_type() {
                Ok(t) if t.is_dir() && depth < 2 && !name.starts_with("lttng") && !name.starts_with('.') => todo.push((e.path(), depth + 1)),
                Ok(t) if t.is_file() && is_runtime_file(&name) => out.push(e.path()),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk that fills up after `room` bytes.
    struct Full {
        file: std::io::Cursor<Vec<u8>>,
        room: u64,
    }
    impl std::io::Write for Full {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.file.position() + buf.len() as u64 > self.room {
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            self.file.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl std::io::Seek for Full {
        fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
            self.file.seek(to)
        }
    }

    #[test]
    fn a_zip_on_a_full_disk_fails_once_and_finishes_quietly() {
        use std::io::Write as _;
        let full = Full { file: std::io::Cursor::new(Vec::new()), room: 4096 };
        let mut zip = zip::ZipWriter::new(AfterFailureDiscard::new(full));
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("a", options).unwrap();
        let err = zip.write_all(&[7u8; 64 * 1024]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
        // What the zip's Drop would do with an unfinished archive succeeds: it prints nothing.
        let rest = zip.finish().expect("finishing after the failure is discarded");
        assert!(rest.inner.is_none(), "the file stays closed");
    }

    #[test]
    fn a_function_known_by_its_start_carries_its_module_once() {
        let mut coll = Collection::new("perf-cpu");
        let so = "/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.12/libcoreclr.so";
        let frame = model::Frame { name: Some("fn@0x3689f0".into()), dso: Some(so.into()), class: model::DsoClass::RuntimeNative, addr: 0x7f00_0000_1000 };
        coll.samples.push(model::Sample::new(7, 7, 1, vec![frame]));
        let text = perf_script_text(&coll, &[]);
        assert!(text.contains(&format!(" fn@0x3689f0 ({so})")), "{text}");
        assert!(!text.contains("libcoreclr.so!"), "{text}");
    }

    #[test]
    fn perf_script_text_has_perfcollects_fields_and_our_names() {
        let d = crate::perf_fixtures::decode_fixture("perf-cpu", 16459, 16459, &[], &|_| None);
        let mut coll = d.collection;
        coll.metrics.insert("frequency_hz".into(), 999.0);
        let text = perf_script_text(&coll, &[]);
        let first = text.lines().next().unwrap();
        // `comm pid/tid secs.micros: period event: `, as perf script prints those fields of a
        // recording without CPUs (this one's `perf record` had no `--sample-cpu`).
        assert!(coll.samples.iter().all(|s| s.cpu.is_none()));
        let re = regex::Regex::new(r"^\S.* \d+/\d+ \d+\.\d{6}: 1001001 cpu-clock: $").unwrap();
        assert!(re.is_match(first), "{first:?}");
        assert_eq!(text.matches("cpu-clock:").count(), coll.samples.len());
        // One label per method, as in the folded stacks (model): no return type; the code tier
        // PerfView shows tiers from kept after it, and the assembly as the frame's module.
        assert!(text.contains(" Fixture.Phases::CpuHot(int64)[OptimizedTier1] (FixtureApp.dll)"), "{}", &text[..2000]);
        assert!(!text.lines().any(|l| l.contains("::CpuHot(") && l.contains("([jit])")), "a method of the app in the [jit] pseudo-module");
    }

    #[test]
    fn zip_holds_perfcollects_layout() {
        let dir = tempfile::tempdir().unwrap();
        let mut coll = Collection::new("perf-cpu");
        coll.samples.push(model::Sample { cpu: Some(1), ..model::Sample::new(7, 7, 1_500_000_000, vec![]) });
        let map = dir.path().join("artifacts/tmp/perf-7.map");
        std::fs::create_dir_all(map.parent().unwrap()).unwrap();
        std::fs::write(&map, "1000 10 W::Hot()\n").unwrap();
        std::fs::write(dir.path().join("artifacts/tmp/perfinfo-7.map"), "ImageLoad;/app/W.dll;{guid};\n").unwrap();
        let files = runtime_files(&dir.path().join("artifacts"));
        assert_eq!(files.len(), 2, "{files:?}");
        let lttng = tracelab_fixtures::fixture("lttng/ctf-bullseye-gc-exceptions");
        let input = TraceZipInput { name: "run", perf: Some(&coll), run: &[], lttng_dir: Some(&lttng), runtime_files: files };
        let path = write(&input, dir.path()).unwrap().unwrap();
        assert_eq!(path.file_name().unwrap(), "run.trace.zip");
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
        let names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
        for want in [
            "run.trace/perf.data.txt",
            "run.trace/perf-7.map",
            "run.trace/perfinfo-7.map",
            "run.trace/lttngTrace/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit/metadata",
            "run.trace/lttngTrace/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit/channel0_0",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut zip.by_name("run.trace/perf.data.txt").unwrap(), &mut text).unwrap();
        assert_eq!(text, "dotnet 7/7 [001] 1.500000: 1 cpu-clock: \n\n");
        assert!(!dir.path().join(".run.trace.zip.partial").exists());
        // Entries are dated when written, not 1980-01-01 (the zip format's zero).
        let year = zip.by_name("run.trace/perf.data.txt").unwrap().last_modified().map(|d| d.year()).unwrap_or(1980);
        assert!(year >= 2025, "entry dated {year}");
        // Read back as the perfcollect collector reads the real script's zip.
        let out = dir.path().join("unpacked");
        let folder = unpack(&path, &out).unwrap();
        assert_eq!(folder, out.join("run.trace"));
        assert_eq!(std::fs::read_to_string(folder.join("perf.data.txt")).unwrap(), text);
        assert!(folder.join("lttngTrace/ctf-bullseye-gc-exceptions/ust/uid/0/64-bit/metadata").is_file());
        let e = unpack(&map, &dir.path().join("x")).unwrap_err();
        assert!(format!("{e:#}").contains("is not a zip archive"), "{e:#}");
    }

    #[test]
    fn a_map_found_twice_is_one_entry_and_another_runs_map_of_that_name_keeps_its_folder() {
        // A container run: the map in the container's /tmp folder and its copy beside it; a
        // second run of the scenario whose app got the same pid.
        let dir = tempfile::tempdir().unwrap();
        let artifacts = dir.path().join("artifacts");
        for (rel, text) in [("perf-7.map", "1000 10 W::Hot()\n"), ("container-tmp/perf-7.map", "1000 10 W::Hot()\n"), ("run-2/perf-7.map", "2000 10 W::Cold()\n")] {
            std::fs::create_dir_all(artifacts.join(rel).parent().unwrap()).unwrap();
            std::fs::write(artifacts.join(rel), text).unwrap();
        }
        let mut coll = Collection::new("perf-cpu");
        coll.samples.push(model::Sample::new(7, 7, 1, vec![]));
        let input = TraceZipInput { name: "run", perf: Some(&coll), run: &[], lttng_dir: None, runtime_files: runtime_files(&artifacts) };
        let path = write(&input, dir.path()).unwrap().unwrap();
        let zip = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["run.trace/perf-7.map", "run.trace/perf.data.txt", "run.trace/run-2/perf-7.map"]);
    }
}
