//! The installed `tracelab` as a user meets it, run from a scratch folder outside the checkout:
//! `--version`, the user's commands only (the maintenance tasks are `cargo xtask`'s), relative
//! paths taken from the working folder, and a checkout that is gone said once, with what to set.

use assert_cmd::Command;

fn tracelab(cwd: &std::path::Path) -> Command {
    let mut cmd = Command::cargo_bin("tracelab").expect("the tracelab binary is built");
    cmd.current_dir(cwd).env_remove("TRACELAB_HOME");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_exits_0_and_names_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let out = tracelab(dir.path()).arg("--version").assert().success().get_output().stdout.clone();
    assert_eq!(text(&out).trim(), format!("tracelab {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn help_lists_the_users_commands_and_no_maintenance_task() {
    let dir = tempfile::tempdir().unwrap();
    let out = tracelab(dir.path()).arg("--help").assert().success().get_output().stdout.clone();
    let help = text(&out);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for c in ["scenario", "list", "doctor", "setup", "sweep", "trace", "report", "open", "soak", "init", "check-image"] {
        assert!(commands.contains(&c), "`{c}` missing from:\n{help}");
    }
    for c in ["test", "bench", "matrix", "images", "codegen", "ci", "fuzz"] {
        assert!(!commands.contains(&c), "maintenance task `{c}` in tracelab's help:\n{help}");
    }
    assert!(help.contains("Usage: tracelab"), "{help}");
    // A usage error is clap's, exit 2.
    tracelab(dir.path()).arg("bench").assert().code(2);
}

#[test]
fn built_in_scenarios_are_found_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = tracelab(dir.path()).arg("list").assert().success().get_output().stdout.clone();
    assert!(text(&out).lines().any(|l| l.starts_with("cpu-bound ")), "{}", text(&out));
    // Listing reads the checkout and writes nothing where it runs.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_checkout_that_is_gone_is_named_with_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("moved-away");
    for args in [&["list"][..], &["scenario", "cpu-bound", "--no-setup"]] {
        let out = tracelab(dir.path()).env("TRACELAB_HOME", &gone).args(args).assert().code(2).get_output().clone();
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with("error: tracelab's built-in scenarios and workloads are read from $TRACELAB_HOME"), "{args:?}: {stderr}");
        assert!(stderr.contains(&gone.display().to_string()) && stderr.contains("set TRACELAB_HOME"), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("results").exists(), "nothing ran, nothing written");
}

#[test]
fn trace_fold_takes_paths_from_the_working_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(tracelab_fixtures::fixture("perf/perf-container.data"), dir.path().join("perf.data")).unwrap();
    let out = tracelab(dir.path()).args(["trace", "fold", "perf.data", "--out", "perf.folded"]).assert().success().get_output().clone();
    let folded = std::fs::read_to_string(dir.path().join("perf.folded")).unwrap();
    let samples: u64 = folded.lines().map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()).expect("`STACK COUNT`")).sum();
    assert!(samples > 1000, "{folded}");
    assert!(text(&out.stderr).contains("samples"), "{}", text(&out.stderr));
}
