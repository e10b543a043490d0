//! The matrices (lab::matrix): the capability axis re-probed against the committed table,
//! the LTTng axis, the kernel matrix (qemu guests) and the merged report. (The nightly workflow's check is a unit
//! test beside its generator: `workflow::tests::checked_in_workflow_is_current`.)
//!
//! `qemu_guest_boots_and_perf_records` is the per-commit smoke test of the guest recipe: one
//! kernel boots, loads its virtio modules, mounts the root disk, runs perf and brings a file back.
//! The full matrix (every kernel × scenario) runs in the nightly workflow and with
//! `cargo xtask matrix kernels`.

use std::path::Path;
use std::process::Command;

use harness::collect::CollectorKind;
use harness::report::merge::{self, Thresholds};
use tracelab_fixtures::{prerequisites, require_root};
use harness::host::environment::require_program;
use lab::vm;

// The matrix tests run what the LTTng tests run (.NET, Docker) and keep work under the same folder.
use crate::lttng::{docker_available, dotnet_available, work_dir};

#[test]
#[ignore = "nightly (job other_images): a Debian kernel's qemu guest, ~2.5 min of CI; the kernels job boots every kernel"]
fn qemu_guest_boots_and_perf_records() {
    let test = "matrix::qemu_guest_boots_and_perf_records";
    if !prerequisites(test, &[&|| vm::boot_prerequisites(), &require_root]) {
        return;
    }
    let kernel = vm::kernel_spec("6.1").unwrap();
    let work = tempfile::tempdir().unwrap();
    // A busy loop in the shell is enough for cpu-clock samples; perf's own file format is what
    // must come back intact.
    let script = r#"
set -e
uname -r > /opt/tracelab/out/uname
perf record -e cpu-clock -F 999 -g -o /opt/tracelab/out/perf.data -- sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'
perf report -i /opt/tracelab/out/perf.data --stdio --sort comm 2>/dev/null | grep -c sh > /opt/tracelab/out/report-lines
"#;
    let job = vm::GuestJob::new(script);
    let opts = vm::BootOptions { timeout: std::time::Duration::from_secs(600), ..Default::default() };
    let (prepared, outcome) = vm::run_job(&kernel, &job, &opts, work.path()).expect("guest boot");
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "guest job failed:\n{}\nconsole:\n{}",
        outcome.job_log(),
        outcome.console_tail(30)
    );
    let uname = std::fs::read_to_string(outcome.out_dir.join("uname")).unwrap();
    assert_eq!(uname.trim(), prepared.release, "the guest ran another kernel than the one prepared");
    assert_eq!(outcome.guest_kernel.as_deref(), Some(prepared.release.as_str()));
    let data = std::fs::read(outcome.out_dir.join("perf.data")).unwrap();
    assert_eq!(&data[..8], b"PERFILE2", "perf.data from the guest is not a perf file");
    assert!(data.len() > 4096, "perf.data holds no samples ({} bytes)", data.len());
    eprintln!("{} booted and recorded in {:.1} s", prepared.release, outcome.wall.as_secs_f64());
}

#[test]
fn unknown_kernel_is_refused_with_the_known_ones() {
    let err = vm::kernel_spec("4.19").unwrap_err().to_string();
    assert!(err.contains("5.10") && err.contains("6.12"), "{err}");
}

fn write_run(root: &Path, name: &str, manifest: serde_json::Value) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    std::fs::write(
        dir.join("flamegraph-perf-cpu.svg"),
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>"#,
    )
    .unwrap();
}

fn run_manifest(scenario: &str, verdict: &str, kernel: &str, vm_kernel: Option<&str>) -> serde_json::Value {
    let mut m = serde_json::json!({
        "scenario": scenario,
        "verdict": verdict,
        "reason": if verdict == "pass" { serde_json::Value::Null } else { "perf record failed: Permission denied".into() },
        "checks": [{"name": "HotLoop share", "verdict": verdict, "expected": "65 % ± 5 pts", "measured": "66.9 %",
                    "collector": "perf-cpu", "values": {"error_pts": 1.8}}],
        "metrics": {"resolved_ratio_jit": 0.99},
        "environment": {"kernel": kernel, "target": if vm_kernel.is_some() { "qemu" } else { "host" },
                        "dotnet_runtimes": ["Microsoft.NETCore.App 10.0.12"]},
        "collectors": ["perf-cpu"],
        "started_utc": "2026-11-22T09:00:00Z"
    });
    if let Some(k) = vm_kernel {
        m["vm"] = serde_json::json!({ "kernel": k });
    }
    m
}

/// Renders the merged page in Debian's headless Chromium and checks the table is on it; the
/// screenshot stays in target/tracelab-artifacts/ for a person to look at.
#[test]
fn merged_report_renders_in_headless_chromium() {
    let test = "matrix::merged_report_renders_in_headless_chromium";
    if !prerequisites(test, &[&|| require_program("chromium")]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    write_run(&runs, "a-cpu-bound-host", run_manifest("cpu-bound", "pass", "6.18.0-1-amd64", None));
    write_run(&runs, "b-cpu-bound-qemu-6.1", run_manifest("cpu-bound", "pass", "6.1.0-50-cloud-amd64", Some("6.1")));
    write_run(&runs, "c-cpu-bound-qemu-6.12", run_manifest("cpu-bound", "fail", "6.12.107+deb13-cloud-amd64", Some("6.12")));
    let report = merge::merge(&[runs], None, Thresholds::default()).unwrap();
    let out = d.path().join("report");
    let (html, md) = report.write(&out).unwrap();
    assert!(std::fs::read_to_string(&md).unwrap().contains("| cpu-bound | perf-cpu |"));
    assert!(out.join("flamegraphs").read_dir().unwrap().count() == 3, "flame graphs copied beside the page");

    let artifacts = harness::project_root().join("target").join("tracelab-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("merged-report.png");
    let _ = std::fs::remove_file(&shot);
    let url = format!("file://{}", html.display());
    let chrome = |extra: &[&str]| {
        let profile = tempfile::tempdir().unwrap();
        let out = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,700"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("chromium starts");
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = chrome(&["--dump-dom"]);
    assert!(dom.contains("<table id=\"matrix\">"), "the rendered page has no matrix table:\n{dom}");
    for column in ["host · k6.18", "qemu 6.1", "qemu 6.12"] {
        assert!(dom.contains(column), "column `{column}` missing from the rendered page");
    }
    assert_eq!(dom.matches("class=\"pass\"").count(), 2, "{dom}");
    assert_eq!(dom.matches("class=\"fail\"").count(), 1, "{dom}");
    chrome(&[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[1..4], b"PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 1400, "screenshot of the requested size");
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn capability_probes_match_this_engine() {
    let test = "matrix::capability_probes_match_this_engine";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available]) {
        return;
    }
    let work = work_dir("matrix-caps");
    // The cells that decide what tracelab grants (about 3 s each): perf at each step up to what it
    // needs, LTTng and our IPC client with nothing. The whole matrix (PERFMON, privileged, every
    // collector at every set) is the nightly `caps` job's, on three distros.
    let probe = |collectors: Vec<CollectorKind>, cap_sets: &[&str]| {
        let options = lab::matrix::caps::MatrixOptions {
            collectors,
            cap_sets: cap_sets.iter().map(|c| c.to_string()).collect(),
            work: Some(work.path().to_path_buf()),
            ..Default::default()
        };
        lab::matrix::caps::run_matrix(&options, &mut |p| {
            eprintln!("{} / {}: works={} {} {}", p.collector, p.caps, p.works, p.detail, p.error.as_deref().unwrap_or(""));
        })
        .unwrap()
    };
    let perf = probe(vec![CollectorKind::PerfCpu], &["none", "SYS_ADMIN", "SYS_ADMIN+IPC_LOCK"]);
    let unprivileged = probe(vec![CollectorKind::Lttng, CollectorKind::EventPipe], &["none"]);
    let cell = |c: &str, caps: &str| perf.get(c, caps).or_else(|| unprivileged.get(c, caps)).unwrap().clone();
    // Docker's default seccomp profile lets perf_event_open through only with CAP_SYS_ADMIN
    // (or CAP_PERFMON on engines that know it).
    let none = cell("perf-cpu", "none");
    assert!(!none.works);
    assert!(none.error.as_deref().unwrap().contains("perf_event_open"), "{none:?}");
    // The matrix holds perf's locked-memory budget of uid 0 (as a user's own `perf record -a`
    // or another run would): SYS_ADMIN alone finds it used up and says so; IPC_LOCK lifts it.
    let admin_only = cell("perf-cpu", "SYS_ADMIN");
    assert!(!admin_only.works && admin_only.error.as_deref().unwrap().contains("locked-memory budget"), "{admin_only:?}");
    let admin = cell("perf-cpu", "SYS_ADMIN+IPC_LOCK");
    assert!(admin.works, "{admin:?}");
    let measured = |detail: &str, key: &str| -> f64 {
        detail.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok()).unwrap_or(0.0)
    };
    assert!(measured(&admin.detail, "jit_resolved") > 0.0, "perf in the container resolved no JIT frame: {}", admin.detail);
    // LTTng user-space tracing needs no capability.
    let lttng = cell("lttng", "none");
    assert!(lttng.works, "{lttng:?}");
    assert!(measured(&lttng.detail, "events") > 0.0, "{}", lttng.detail);
    // Our IPC client reaches into the container from the host through /proc/PID/root/tmp.
    let eventpipe = cell("eventpipe", "none");
    assert!(eventpipe.works, "{eventpipe:?}");
    assert!(measured(&eventpipe.detail, "events") > 0.0, "{}", eventpipe.detail);
    // Re-probed cells say what the committed table says (harness/data/caps.toml): a change of
    // engine or kernel that moves a cell must regenerate the table.
    let committed = harness::collect::caps::Matrix::committed();
    for p in perf.probes.iter().chain(&unprivileged.probes) {
        assert!(p.works || p.error.as_deref().is_some_and(|e| !e.trim().is_empty()), "a failure without its error: {p:?}");
        let was = committed.get(&p.collector, &p.caps).unwrap_or_else(|| panic!("the committed table lacks {} / {}", p.collector, p.caps));
        assert_eq!(
            p.works, was.works,
            "{} / {} differs from {}: regenerate it with `cargo xtask matrix caps` ({p:?})",
            p.collector, p.caps, harness::collect::caps::TABLE_PATH
        );
    }
}

/// The LTTng axis of the matrix: PASS where LTTng-UST is 2.12 (bullseye), SKIPPED with the soname
/// reason where it is 2.13+ (bookworm, trixie); markdown and JSON written.
#[test]
#[ignore = "nightly (job other_images): builds the bookworm and trixie images, ~4 min of CI; CI checks the soname refusal on the host"]
fn lttng_matrix_passes_on_2_12_and_skips_on_2_13() {
    let test = "matrix::lttng_matrix_passes_on_2_12_and_skips_on_2_13";
    if !prerequisites(test, &[&require_root, &docker_available, &dotnet_available, &|| require_program("nsenter")]) {
        return;
    }
    use lab::matrix::lttng as matrix;
    let out = work_dir("lttng-matrix");
    let opts = matrix::MatrixOptions {
        scenarios: vec!["exceptions-lttng".into()],
        results_root: Some(out.path().to_path_buf()),
        ..Default::default()
    };
    let report = matrix::run(&opts).unwrap();
    let dir = matrix::write(&report, out.path()).unwrap();
    eprintln!("{}", std::fs::read_to_string(dir.join("lttng.md")).unwrap());
    assert!(dir.join("lttng.json").exists());
    assert_eq!(report.rows.len(), 3);
    for row in &report.rows {
        match row.suite.as_str() {
            "bullseye" => assert_eq!(row.verdict, "pass", "{row:?}"),
            _ => {
                assert_eq!(row.verdict, "skip", "{row:?}");
                assert!(row.reason.as_deref().unwrap_or("").contains("needs liblttng-ust.so.0"), "{row:?}");
            }
        }
        assert!(row.lttng_tools.is_some(), "no lttng-tools version for {}", row.suite);
    }
}
