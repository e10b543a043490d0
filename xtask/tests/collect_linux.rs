//! The four `*-collect-linux` scenarios on a kernel without user_events: each SKIPs (exit 4)
//! naming `CONFIG_USER_EVENTS` and the kernel to run it on, within seconds — before any workload
//! is built — through the built `cargo xtask` binary as a user or CI meets it. On a kernel that
//! has user_events the test has nothing to prove and says so (the kernel matrix's
//! `6.12-user-events` cell runs the scenarios for real).

use std::process::Command;
use std::time::Instant;

const SCENARIOS: [&str; 4] = [
    "cpu-bound-collect-linux",
    "on-vs-off-cpu-collect-linux",
    "gc-heavy-collect-linux",
    "exceptions-collect-linux",
];

#[test]
fn collect_linux_scenarios_skip_naming_config_user_events_on_a_kernel_without_it() {
    if std::path::Path::new("/sys/kernel/tracing/user_events_data").exists() {
        eprintln!(
            "SKIPPED collect_linux: this kernel has user_events; the scenarios run here instead of skipping"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for name in SCENARIOS {
        let results = dir.path().join(name);
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args([
                "scenario",
                name,
                "--target",
                "host",
                "--no-setup",
                "--results",
            ])
            .arg(&results)
            .env("TRACELAB_QUIET", "1")
            .output()
            .expect("the xtask binary runs");
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(4),
            "{name}: stdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let manifest: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(results.join("latest/manifest.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(manifest["verdict"], "skip", "{manifest:#}");
        let reason = manifest["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("CONFIG_USER_EVENTS") && reason.contains("--kernels 6.12-user-events"),
            "{name}: {reason}"
        );
        // Decided before the workload was built or launched.
        assert!(took.as_secs() < 15, "{name} took {took:?} to skip");
    }
}
