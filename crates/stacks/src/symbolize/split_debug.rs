//! Symbol folders: a stripped binary plus its split debug file (`NAME.dbg`, as dotnet-symbol
//! fetches `libcoreclr.so.dbg`) names a static function the binary itself no longer knows.
//! The ELF files are built here with gcc and split with objcopy, the way distributions do.

use std::path::{Path, PathBuf};
use std::process::Command;

use perfdata::{ChainRange, PERF_CONTEXT_USER, PerfMmap, PerfRecording, PerfSample};

use crate::symbolize::DecodeContext;
use model::DsoClass;
use crate::symbolize::Symbolizer;
use crate::symbolize::elf::{ElfSymbols, hex};
use tracelab_fixtures::prerequisites;
use tracelab_fixtures::require_program;

const SOURCE: &str = r#"
#include <stdio.h>
__attribute__((noinline)) static long hidden_work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i * i; return s; }
int main(int argc, char **argv) { printf("%ld\n", hidden_work(argc * 1000)); return 0; }
"#;

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Builds `prog` (stripped) and `symbols/prog.dbg`; returns (dir, stripped, debug, hidden_work's
/// file offset in the binary).
fn build() -> (tempfile::TempDir, PathBuf, PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("prog.c");
    std::fs::write(&src, SOURCE).unwrap();
    let prog = dir.path().join("prog");
    run(Command::new("gcc").args(["-O1", "-g", "-Wl,--build-id", "-o"]).arg(&prog).arg(&src));
    let full = ElfSymbols::read(&prog).unwrap();
    assert!(full.full_symtab);
    let symbols = dir.path().join("symbols");
    std::fs::create_dir_all(&symbols).unwrap();
    let debug = symbols.join("prog.dbg");
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&prog).arg(&debug));
    // The function's address, from the unstripped file, as a file offset of the loaded binary.
    let text = std::fs::read(&prog).unwrap();
    let offset = function_file_offset(&text, "hidden_work");
    run(Command::new("objcopy").arg("--strip-all").arg(&prog));
    (dir, prog, debug, offset)
}

fn function_file_offset(elf: &[u8], name: &str) -> u64 {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let file = object::File::parse(elf).unwrap();
    let sym = file.symbols().find(|s| s.name() == Ok(name)).expect("symbol in the unstripped build");
    let addr = sym.address() + 2;
    let seg = file
        .segments()
        .find(|s| addr >= s.address() && addr < s.address() + s.size())
        .expect("a segment holding the function");
    addr - seg.address() + seg.file_range().0
}

fn recording(prog: &Path, offset: u64, build_id: Option<Vec<u8>>) -> PerfRecording {
    let start = 0x5555_5555_0000;
    let len = std::fs::metadata(prog).unwrap().len().max(offset + 0x1000);
    PerfRecording {
        mmaps: vec![PerfMmap {
            pid: 42,
            tid: 42,
            time_ns: Some(1),
            start,
            len,
            pgoff: 0,
            path: "/usr/bin/prog".into(),
            build_id,
            executable: true,
            in_kernel: false,
        }],
        samples: vec![PerfSample {
            pid: 42,
            tid: 42,
            time_ns: 2,
            callchain: ChainRange { start: 0, len: 2 },
            ..Default::default()
        }],
        callchains: vec![PERF_CONTEXT_USER, start + offset],
        ..Default::default()
    }
}

fn name_with(prog: &Path, symbols: &[PathBuf], rec: &PerfRecording) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let prog = prog.to_path_buf();
    let path_map = move |p: &Path| -> Option<PathBuf> { (p == Path::new("/usr/bin/prog")).then(|| prog.clone()) };
    let ctx = DecodeContext {
        artifacts: dir.path(),
        app_tmp_dir: dir.path(),
        host_pid: 1,
        target_pid: 1,
        path_map: &path_map,
        symbol_dirs: symbols,
    };
    let mut s = Symbolizer::new(&ctx, rec).unwrap();
    let f = s.frame(42, rec.callchains[1], false);
    assert_eq!(f.class, DsoClass::OtherNative);
    assert_eq!(f.dso.as_deref(), Some("/usr/bin/prog"));
    f.name
}

#[test]
fn split_debug_file_names_what_the_stripped_binary_cannot() {
    if !prerequisites("symbolize::split_debug", &[&|| require_program("gcc"), &|| require_program("objcopy")]) {
        return;
    }
    let (dir, prog, debug, offset) = build();
    let stripped = ElfSymbols::read(&prog).unwrap();
    assert!(!stripped.full_symtab, "strip-all leaves no .symtab");
    let build_id = ElfSymbols::read(&debug).unwrap().build_id.expect("gcc wrote a build id");
    assert_eq!(stripped.build_id.as_deref(), Some(build_id.as_slice()));

    let rec = recording(&prog, offset, Some(build_id.clone()));
    // The stripped binary alone cannot name a static function; its .eh_frame still tells which
    // function it is (a start, not a name).
    let alone = name_with(&prog, &[], &rec);
    assert!(alone.as_deref().is_some_and(|n| model::anonymous_function_start(n).is_some()), "{alone:?}");
    let symbols = vec![dir.path().join("symbols")];
    assert_eq!(name_with(&prog, &symbols, &rec).as_deref(), Some("hidden_work"));

    // A debug file of another build (different build id) must not be used.
    let mut wrong = build_id.clone();
    wrong[0] ^= 0xff;
    let rec = recording(&prog, offset, Some(wrong));
    assert_eq!(name_with(&prog, &symbols, &rec), None, "debug file with build id {} used for another build", hex(&build_id));
}
