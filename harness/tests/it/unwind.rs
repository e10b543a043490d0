//! Integration tests: our own unwinding of perf's sampled user stacks (issue 9) and the
//! `perf-offcpu` collector.
//!
//! The fixture tests run on ../shared/fixtures/perf/perf-offcpu-dwarf (a real recording: perf 6.1,
//! `-a --call-graph dwarf,16384 -e sched:sched_switch`, FixtureApp `sleep,cpu 1`, pid 28884),
//! with the recording host's libc/ld.so from `dsos/` and libcoreclr.so / CoreLib from the
//! offline SDK (same build ids as recorded).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use harness::collect::offcpu::offcpu_collection;
use harness::model::{DsoClass, Frame};
use harness::unwind::{self, StackEnd, UnwindOptions, Unwound, names::Kallsyms};

const APP_PID: u32 = 28884;
const MAIN_TID: u32 = 28884;
const RUNTIME: &str = "shared/Microsoft.NETCore.App/10.0.12";

fn fixture_dir() -> PathBuf {
    harness::shared_dir().join("fixtures/perf")
}

/// The fixture and the .NET root whose runtime files it needs, or why they are missing.
fn fixture_inputs() -> Result<(PathBuf, PathBuf), String> {
    let data = fixture_dir().join("perf-offcpu-dwarf.data");
    if !data.is_file() {
        return Err(format!("{} is missing", data.display()));
    }
    let dotnet = harness::dotnet::Dotnet::locate_or_install().map_err(|e| format!("no .NET SDK: {e:#}"))?;
    if !dotnet.root.join(RUNTIME).join("libcoreclr.so").is_file() {
        return Err(format!("{} has no runtime 10.0.12 (the fixture's libcoreclr.so)", dotnet.root.display()));
    }
    Ok((data, dotnet.root))
}

fn no_path(_: &Path) -> Option<PathBuf> {
    None
}

fn unwind_fixture(data: &Path, dotnet_root: &Path) -> Unwound {
    let dir = fixture_dir();
    let opts = UnwindOptions {
        pids: Some([APP_PID].into_iter().collect()),
        perf_maps: [(APP_PID, dir.join("perf-offcpu-dwarf.perf-28884.map"))].into_iter().collect(),
        // The recording host's libc and ld.so first, then the SDK's runtime and host; nothing
        // from this machine's own /usr (its libc may differ).
        search_dirs: vec![
            dir.join("dsos"),
            dotnet_root.join(RUNTIME),
            dotnet_root.join("host/fxr/10.0.12"),
            dotnet_root.to_path_buf(),
        ],
        path_map: &no_path,
        kallsyms: Some(Kallsyms::read(&dir.join("kallsyms-6.18.txt.xz")).expect("fixture kallsyms")),
        ..Default::default()
    };
    unwind::unwind_perf_data(data, opts).expect("the fixture decodes")
}

fn show(frames: &[Frame]) -> String {
    frames.iter().map(|f| format!("\n  {:#x} {} [{}]", f.addr, f.display_name(), f.class.as_str())).collect()
}

fn has_named_jit(frames: &[Frame]) -> bool {
    frames.iter().any(|f| f.class == DsoClass::Jit && f.name.as_deref().is_some_and(|n| !n.starts_with("stub ")))
}

/// perf's own DWARF unwinding reached a named JIT frame in 6 of the app's 96 switch-outs
/// (`perf-offcpu-dwarf.script.txt`); ours must reach the waiting managed code.
#[test]
fn unwind_fixture_sleep_reaches_managed_caller() {
    let test = "unwind_fixture_sleep_reaches_managed_caller";
    let (data, root) = match fixture_inputs() {
        Ok(v) => v,
        Err(e) => return harness::testing::skip(test, e),
    };
    let unwound = unwind_fixture(&data, &root);
    for needed in ["libc.so.6", "libcoreclr.so", "System.Private.CoreLib.dll"] {
        assert!(
            !unwound.missing_images.keys().any(|k| k.ends_with(needed)),
            "{needed} not found: {:?}",
            unwound.missing_images
        );
    }
    let app: Vec<_> = unwound.samples.iter().filter(|s| s.pid == APP_PID && s.sched_switch.is_some()).collect();
    assert_eq!(app.len(), 96, "switch-outs of the app's threads (perf script: 96; 63 by threads still named `dotnet`)");

    let with_managed = app.iter().filter(|s| has_named_jit(&s.frames)).count();
    let with_user = app.iter().filter(|s| s.user_frames > 0 && s.end != StackEnd::NoUserStack).count();
    let rooted = app.iter().filter(|s| s.end == StackEnd::Root).count();
    eprintln!("switch-outs reaching a named JIT frame: {with_managed} of {} (perf: 6); {rooted} of {with_user} user stacks end at the thread's root", app.len());
    // Pinned: the startup switch-outs (ld.so, hostfxr reading files) precede any managed code.
    assert_eq!(with_managed, 15, "switch-outs reaching a named JIT frame");
    assert_eq!(rooted, 80, "user stacks unwound to their root");

    // The main thread's sleep: Fixture.Phases.Sleep → Thread.Sleep (CoreLib) → libcoreclr →
    // pthread_cond_timedwait → futex wait, then on down to the process's root.
    let sleeps: Vec<_> = app
        .iter()
        .filter(|s| s.tid == MAIN_TID && s.frames.iter().any(|f| f.display_name().contains("Fixture.Phases::Sleep")))
        .collect();
    assert!(!sleeps.is_empty(), "no switch-out of the main thread reached Fixture.Phases::Sleep");
    for s in &sleeps {
        let pos = |pred: &dyn Fn(&Frame) -> bool| s.frames.iter().position(pred);
        let libc = pos(&|f| f.class == DsoClass::Libc).expect("a libc frame");
        let coreclr = pos(&|f| f.dso.as_deref().is_some_and(|d| d.ends_with("libcoreclr.so"))).expect("a libcoreclr frame");
        let corelib = pos(&|f| f.dso.as_deref().is_some_and(|d| d.ends_with("System.Private.CoreLib.dll")));
        let corelib = corelib.expect("a CoreLib frame");
        let sleep = pos(&|f| f.display_name().contains("Fixture.Phases::Sleep")).unwrap();
        let main = pos(&|f| f.display_name().contains("Fixture.Program::Main")).expect("Main below Sleep");
        assert!(
            libc < coreclr && coreclr < corelib && corelib < sleep && sleep < main,
            "frames out of order:{}",
            show(&s.frames)
        );
        assert_eq!(s.frames[libc].name.as_deref(), Some("__futex_abstimed_wait_common"), "{}", show(&s.frames));
        assert_eq!(s.end, StackEnd::Root, "{}", show(&s.frames));
        let last = s.frames.last().and_then(|f| f.dso.as_deref()).unwrap_or("");
        assert!(last.ends_with("/dotnet"), "the root is the host's _start:{}", show(&s.frames));
    }
}

/// Blocked time: each switch-out weighs until the thread's next switch-in (here from the
/// system-wide recording's `next_pid`). The main thread sleeps 0.5 s in Fixture.Phases.Sleep.
#[test]
fn unwind_fixture_blocked_time_lands_on_sleep() {
    let test = "unwind_fixture_blocked_time_lands_on_sleep";
    let (data, root) = match fixture_inputs() {
        Ok(v) => v,
        Err(e) => return harness::testing::skip(test, e),
    };
    let unwound = unwind_fixture(&data, &root);
    let pids: BTreeSet<u32> = [APP_PID].into_iter().collect();
    let c = offcpu_collection("perf-offcpu", &unwound, &pids);
    let main: Vec<_> = c.samples.iter().filter(|s| s.tid == MAIN_TID && s.kind.as_deref() == Some("blocked")).collect();
    let total: u64 = main.iter().map(|s| s.weight).sum();
    let in_sleep: u64 = main
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.display_name().contains("Fixture.Phases::Sleep")))
        .map(|s| s.weight)
        .sum();
    eprintln!("main thread blocked {total} ns, {in_sleep} ns under Fixture.Phases::Sleep");
    assert!(in_sleep >= 490_000_000 && in_sleep <= 520_000_000, "Thread.Sleep(500 ms) measured {in_sleep} ns");
    for s in main.iter().filter(|s| s.weight > 50_000_000) {
        eprintln!("{} ns:{}", s.weight, show(&s.frames[..s.frames.len().min(14)]));
    }
    assert!(c.metrics["unwind_root_ratio"] > 0.85, "{:?}", c.metrics);
    assert_eq!(c.metrics["switch_outs"], 96.0);
}
