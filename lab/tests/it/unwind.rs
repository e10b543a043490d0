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
use model::{DsoClass, Frame};
use stacks::{StackEnd, UnwindOptions, Unwound, Kallsyms};

const APP_PID: u32 = 28884;
const MAIN_TID: u32 = 28884;
const RUNTIME: &str = "shared/Microsoft.NETCore.App/10.0.12";

fn fixture_dir() -> PathBuf {
    tracelab_fixtures::fixtures_dir().join("perf")
}

/// The fixture and the .NET root whose runtime files it needs, or why they are missing.
fn fixture_inputs() -> Result<(PathBuf, PathBuf), String> {
    let data = fixture_dir().join("perf-offcpu-dwarf.data");
    if !data.is_file() {
        return Err(format!("{} is missing", data.display()));
    }
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install().map_err(|e| format!("no .NET SDK: {e:#}"))?;
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
    let r2r = std::cell::RefCell::new(stacks::R2rResolver::new());
    let r2r_namer = |path: &Path, file_offset: u64| r2r.borrow_mut().name(path, file_offset);
    let opts = UnwindOptions {
        r2r_namer: Some(&r2r_namer),
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
    stacks::unwind_perf_data(data, opts).expect("the fixture decodes")
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
        Err(e) => return tracelab_fixtures::skip(test, e),
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
        // ReadyToRun code named from the image's own metadata (symbolize::r2r).
        let corelib_name = s.frames[corelib].name.as_deref().unwrap_or("");
        assert!(corelib_name.contains("System.Threading.Thread::Sleep"), "{}", show(&s.frames));
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
        Err(e) => return tracelab_fixtures::skip(test, e),
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
    assert!((490_000_000..=520_000_000).contains(&in_sleep), "Thread.Sleep(500 ms) measured {in_sleep} ns");
    for s in main.iter().filter(|s| s.weight > 50_000_000) {
        eprintln!("{} ns:{}", s.weight, show(&s.frames[..s.frames.len().min(14)]));
    }
    assert!(c.metrics["unwind_root_ratio"] > 0.85, "{:?}", c.metrics);
    assert_eq!(c.metrics["switch_outs"], 96.0);
}

mod robustness {
    //! Random or corrupted stack bytes, registers and perf.data: an error or a short stack,
    //! never a panic, a hang or an unbounded allocation.

    use super::*;
    use stacks::StackUnwinder;
    use proptest::prelude::*;

    /// An unwinder over a process shaped like the fixture's app: libc and ld.so with their
    /// CFI, JIT code by frame pointers.
    fn fixture_like_unwinder() -> Option<StackUnwinder<'static>> {
        let dsos = fixture_dir().join("dsos");
        if !dsos.join("libc.so.6").is_file() {
            return None;
        }
        let mut u = StackUnwinder::new(UnwindOptions { search_dirs: vec![dsos], path_map: &no_path, ..Default::default() });
        u.on_mmap(1, 0x7fa49611e000, 0x26000, 0, "/usr/lib/x86_64-linux-gnu/libc.so.6", false);
        u.on_mmap(1, 0x7fa496144000, 0x156000, 0x26000, "/usr/lib/x86_64-linux-gnu/libc.so.6", true);
        u.on_mmap(1, 0x7fa496655000, 0x26000, 0x1000, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", true);
        u.on_mmap(1, 0x7fa417890000, 0x10000, 0, "//anon", true);
        Some(u)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn unwind_random_stacks_end(
            ip_pick in 0usize..4,
            ip_off in 0u64..0x150000,
            sp in any::<u64>(),
            bp_pick in 0usize..3,
            bp_raw in any::<u64>(),
            words in proptest::collection::vec(any::<u64>(), 0..2048),
            point_into_stack in proptest::collection::vec((0usize..2048, 0usize..2048), 0..64),
        ) {
            thread_local! {
                static UNWINDER: std::cell::RefCell<Option<StackUnwinder<'static>>> =
                    std::cell::RefCell::new(fixture_like_unwinder());
            }
            let ip = match ip_pick {
                0 => 0x7fa496144000 + ip_off,            // libc text (CFI)
                1 => 0x7fa496655000 + ip_off % 0x26000,  // ld.so (CFI)
                2 => 0x7fa417890000 + ip_off % 0x10000,  // JIT (frame pointers)
                _ => ip_off,                              // nowhere
            };
            let sp = sp & !7;
            let mut words = words;
            // Make some words look like plausible frame links and return addresses.
            for (at, target) in point_into_stack {
                if at < words.len() {
                    words[at] = if target % 2 == 0 { sp.wrapping_add(8 * target as u64) } else { 0x7fa496144000 + (target as u64) * 97 };
                }
            }
            let bp = match bp_pick { 0 => sp.wrapping_add(bp_raw % 16384), 1 => 0, _ => bp_raw };
            let stack: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let result = UNWINDER.with(|cell| {
                let mut guard = cell.borrow_mut();
                let u = guard.as_mut()?;
                let (frames, _end) = u.unwind_user(1, ip, sp, bp, &stack);
                for (addr, is_return) in &frames {
                    let _ = u.user_frame(1, *addr, *is_return);
                }
                Some(frames.len())
            });
            if let Some(n) = result {
                prop_assert!((1..=256).contains(&n), "{n} frames");
            }
        }

        #[test]
        fn unwind_corrupted_perf_data_errs_or_decodes(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..24),
            truncate in prop::option::of(any::<prop::sample::Index>()),
        ) {
            let src = fixture_dir().join("perf-offcpu.data");
            // The fixture is part of ../shared: its absence is a broken checkout, not a pass.
            let mut bytes = std::fs::read(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= value | 1;
            }
            if let Some(t) = truncate {
                let n = t.index(bytes.len());
                bytes.truncate(n);
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("corrupt.data");
            std::fs::write(&path, &bytes).unwrap();
            match stacks::unwind_perf_data(&path, UnwindOptions { path_map: &no_path, ..Default::default() }) {
                Ok(u) => prop_assert!(u.samples.len() <= bytes.len() / 8),
                Err(e) => prop_assert!(format!("{e:#}").contains("corrupt.data"), "error names the file: {e:#}"),
            }
        }
    }

    #[test]
    fn unwind_missing_file_names_it() {
        let err = stacks::unwind_perf_data(Path::new("/nonexistent/offcpu.data"), UnwindOptions::default()).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/offcpu.data"), "{err:#}");
    }

    #[test]
    fn unwind_not_perf_data_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("text.data");
        std::fs::write(&path, b"hello, this is not a perf.data file at all, just text").unwrap();
        let err = stacks::unwind_perf_data(&path, UnwindOptions::default()).unwrap_err();
        assert!(format!("{err:#}").contains("text.data"), "{err:#}");
    }
}

/// The real thing: scenario `off-cpu` on the host (the workload's blocked thread waits in
/// SleepWait / LockWait / PipeReadWait while another spins), recorded by `perf-offcpu` with
/// `--call-graph dwarf,16384`, unwound by us, judged against the workload's truth.
#[test]
fn unwind_offcpu_scenario_passes_on_host() {
    use judge::Verdict;
    use harness::engine;
    use harness::engine::RunOptions;
    use tracelab_fixtures::{prerequisites, require_root};
    let perf = || harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".to_string());
    if !prerequisites("stacks::offcpu_scenario_passes_on_host", &[&require_root, &perf]) {
        return;
    }
    let scenario = harness::scenario::Scenario::find("off-cpu").unwrap();
    let (o, _results) = crate::until_decided("off-cpu", || {
        let results = tempfile::tempdir().unwrap();
        let opts = RunOptions {
            target: Some(harness::run::TargetKind::Host),
            results_root: Some(results.path().to_path_buf()),
            ..Default::default()
        };
        (engine::run(&scenario, &opts).expect("the off-cpu scenario runs"), results)
    });
    crate::report::assert_junit_valid(&o.dir);
    let m = &o.manifest.metrics;
    assert_eq!(o.verdict, Verdict::Pass, "{:?} {:?}", o.reason, o.manifest.checks.iter().map(|c| (&c.name, &c.measured)).collect::<Vec<_>>());
    // Completeness report in the manifest: nearly every switch-out unwinds to its thread's root.
    assert!(m["perf-offcpu.unwind_root_ratio"] >= 0.9, "{m:?}");
    assert!(m["perf-offcpu.unwind_with_managed_frame"] > 0.0, "{m:?}");
    assert!(m["perf-offcpu.perf_data_bytes"] > 0.0, "{m:?}");
}

/// Truncation: scenario `deep-stacks` (threads 50, 150 and 500 frames deep, each working at the
/// bottom) through perf's frame-pointer callchain, perf's DWARF stack dump unwound by us, and
/// EventPipe. Each `stack_depth` check reports the collector's deepest stack, and a cut is
/// FAILed naming what cut it: EventPipe at 100 frames, the callchain at
/// `kernel.perf_event_max_stack`; the 64 KiB DWARF dump keeps all 500.
#[test]
fn deep_stacks_are_cut_where_each_collector_cuts_them_and_the_cause_is_named() {
    use judge::Verdict;
    use tracelab_fixtures::{prerequisites, require_root};
    let perf = || harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".to_string());
    if !prerequisites("unwind::deep_stacks_are_cut_where_each_collector_cuts_them_and_the_cause_is_named", &[&require_root, &perf]) {
        return;
    }
    let max_stack: f64 = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack").unwrap().trim().parse().unwrap();
    let scenario = harness::scenario::Scenario::find("deep-stacks").unwrap();
    let (o, _results) = crate::run_scenario(&scenario, harness::run::TargetKind::Host);
    let check = |name: &str| o.manifest.checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check `{name}`: {}", crate::describe(&o)));
    // Against the peer, stack by stack: the 50-deep thread's managed stack, as each collector's
    // most frequent one through DescendShallow, is the same list of methods in all three.
    let managed_stack = |collector: &str| -> Vec<String> {
        let folded = std::fs::read_to_string(o.dir.join(format!("stacks/{collector}.folded"))).unwrap();
        let mut by_stack: std::collections::BTreeMap<Vec<String>, u64> = Default::default();
        for line in folded.lines().filter(|l| l.contains("::DescendShallow(")) {
            let (stack, n) = line.rsplit_once(' ').unwrap();
            // Managed labels are `Type::Method(…)`; native ones `file!fn` or bare symbols.
            let managed: Vec<String> = stack.split(';').filter(|f| f.contains("::") && !f.contains(".so!")).map(String::from).collect();
            *by_stack.entry(managed).or_default() += n.parse::<u64>().unwrap();
        }
        by_stack.into_iter().max_by_key(|(_, n)| *n).map(|(s, _)| s).unwrap_or_default()
    };
    let eventpipe = managed_stack("eventpipe");
    assert_eq!(eventpipe.iter().filter(|f| f.contains("::DescendShallow(")).count(), 50, "{eventpipe:?}");
    for collector in ["perf-cpu", "perf-dwarf"] {
        let ours = managed_stack(collector);
        let only_ours: Vec<&String> = ours.iter().filter(|f| !eventpipe.contains(f)).collect();
        let only_eventpipe: Vec<&String> = eventpipe.iter().filter(|f| !ours.contains(f)).collect();
        assert_eq!(ours, eventpipe, "{collector} vs eventpipe: only in {collector} {only_ours:?}, only in eventpipe {only_eventpipe:?}");
    }
    for (depth, frames) in [(50.0, 50.0), (150.0, 150.0), (500.0, 500.0)] {
        let name = format!("{depth} frames deep, perf-dwarf");
        let c = check(&name);
        eprintln!("{name}: {:?} {}", c.verdict, c.measured);
        assert_eq!((c.verdict, c.values["max_method_frames"]), (Verdict::Pass, frames), "{c:?}");
        // EventPipe keeps 100 frames of any stack.
        let c = check(&format!("{depth} frames deep, eventpipe"));
        eprintln!("{depth} eventpipe: {:?} {}", c.verdict, c.measured);
        if depth < 100.0 {
            assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        } else {
            assert_eq!((c.verdict, c.values["max_stack_frames"]), (Verdict::Fail, 100.0), "{c:?}");
            assert!(c.details.iter().any(|d| d.contains("EP_MAX_STACK_DEPTH")), "{c:?}");
        }
        // perf's callchain holds kernel.perf_event_max_stack entries.
        let c = check(&format!("{depth} frames deep, perf-cpu"));
        eprintln!("{depth} perf-cpu: {:?} {}", c.verdict, c.measured);
        if depth + 30.0 < max_stack {
            assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
        } else if depth > max_stack {
            assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
            assert!((max_stack - 3.0..=max_stack).contains(&c.values["max_stack_frames"]), "{c:?}");
            assert!(c.details.iter().any(|d| d.contains("perf_event_max_stack")), "{c:?}");
        }
    }
}
