//! The installed binary, as `cargo install --path tracelab` leaves it: a copy outside the target
//! folder, run from a scratch folder outside the checkout. It runs the built-in `cpu-bound`
//! scenario from the checkout it was built from, PASSes, and writes `./results` of the folder it
//! was run in. Needs root, perf and .NET (skips with the reason, fails under CI=true). The copy
//! stands in for `cargo install`, whose release build of the whole workspace (minutes) the
//! nightly workflow's `install` job runs for real (`a_real_install_runs_a_scenario`).

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use harness::collect::perf::detect_perf_binary;
use tracelab_fixtures::{prerequisites, require_root};

fn real_run_prerequisites(test: &str) -> bool {
    let perf = || detect_perf_binary().map(|_| ()).ok_or_else(|| "no `perf` (or `perf_X.Y`) on PATH".to_string());
    let dotnet = || harness::host::dotnet::Dotnet::locate_or_install().map(|_| ()).map_err(|e| format!("no .NET SDK: {e:#}"));
    prerequisites(test, &[&require_root, &perf, &dotnet])
}

/// Runs `bin scenario cpu-bound --target host` in a new folder below `scratch` and checks what a
/// user sees: exit 0, PASS, and the run under that folder's `results/`.
fn passes_cpu_bound_from(bin: &Path, scratch: &Path) {
    let work = scratch.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(bin)
        .args(["scenario", "cpu-bound", "--target", "host", "--no-setup"])
        .current_dir(&work)
        .env_remove("TRACELAB_HOME")
        .env("TRACELAB_QUIET", "1")
        .output()
        .expect("the installed binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("cpu-bound PASS"), "{stdout}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("results/latest/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["verdict"], "pass", "{manifest:#}");
    let printed = stdout.lines().find_map(|l| l.strip_prefix("results: ")).expect("the results line");
    assert!(PathBuf::from(printed).starts_with(work.join("results")), "{printed}");
}

#[test]
fn the_installed_binary_runs_a_built_in_scenario_from_a_scratch_folder() {
    if !real_run_prerequisites("installed::the_installed_binary_runs_a_built_in_scenario_from_a_scratch_folder") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin").join("tracelab");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(assert_cmd::cargo::cargo_bin("tracelab"), &bin).unwrap();
    passes_cpu_bound_from(&bin, scratch.path());
}

/// `cargo install --path tracelab --root SCRATCH` for real, then the same run. A release build of
/// the workspace: minutes, so nightly only.
#[test]
#[ignore = "nightly: a real `cargo install` (a release build, minutes)"]
fn a_real_install_runs_a_scenario() {
    if !real_run_prerequisites("installed::a_real_install_runs_a_scenario") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let status = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["install", "--locked", "--path"])
        .arg(checkout.join("tracelab"))
        .arg("--root")
        .arg(scratch.path())
        // The workspace's own target folder: what the release benches built is reused.
        .env("CARGO_TARGET_DIR", checkout.join("target"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo install: {status}");
    let bin = scratch.path().join("bin").join("tracelab");
    Command::new(&bin).arg("--version").assert().success();
    passes_cpu_bound_from(&bin, scratch.path());
}
