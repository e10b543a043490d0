//! The built driver, as a user meets it: `--help` at every level of the command tree prints that
//! command's options and exits 0, and a usage error exits 2 with clap's message under one
//! `error:` prefix. The tree is walked from the help output itself, so a command added to
//! flags.rs is covered without touching this test.

use std::process::Output;

fn xtask(args: &[&str]) -> Output {
    assert_cmd::Command::cargo_bin("xtask").expect("the xtask binary is built").args(args).output().expect("the xtask binary runs")
}

/// The subcommand names listed under `Commands:` in a help text (clap's own `help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

#[test]
fn every_command_prints_its_help_and_exits_0() {
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = xtask(&args);
        let help = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(help.contains("Usage: cargo xtask"), "{args:?}:\n{help}");
        assert!(help.contains("Options:") && help.contains("--help"), "{args:?} lists no options:\n{help}");
        assert!(!help.contains("[ARGS]..."), "{args:?} still takes raw arguments:\n{help}");
        for sub in subcommands(&help) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
        seen += 1;
    }
    // 10 tasks, 6 benches, 4 matrix axes, 2 trace and 2 ci commands, and the root.
    assert!(seen >= 25, "walked only {seen} commands");
}

#[test]
fn version_exits_0_and_names_the_program() {
    let out = assert_cmd::Command::cargo_bin("xtask").unwrap().arg("--version").assert().success().get_output().stdout.clone();
    assert_eq!(String::from_utf8_lossy(&out).trim(), format!("cargo xtask {}", env!("CARGO_PKG_VERSION")));
}

/// The user's commands are `tracelab`'s, flattened in: the same names beside the maintenance tasks.
#[test]
fn the_users_commands_sit_beside_the_maintenance_tasks() {
    let help = String::from_utf8_lossy(&xtask(&["--help"]).stdout).into_owned();
    let listed = subcommands(&help);
    for c in ["scenario", "list", "doctor", "setup", "sweep", "trace", "report", "open", "soak", "init", "check-image"] {
        assert!(listed.iter().any(|l| l == c), "user command `{c}` missing:\n{help}");
    }
    for c in ["test", "bench", "matrix", "images", "codegen", "ci", "fuzz"] {
        assert!(listed.iter().any(|l| l == c), "maintenance task `{c}` missing:\n{help}");
    }
}

#[test]
fn options_of_nested_commands_are_listed() {
    for (args, option) in [
        (&["images", "--help"][..], "--suite"),
        (&["bench", "r2r", "--help"], "--gap-fraction"),
        (&["bench", "ctf", "--help"], "--record-runs"),
        (&["matrix", "caps", "--help"], "--collectors"),
        (&["matrix", "--help"], "--all"),
        (&["trace", "fold", "--help"], "--symbols"),
        (&["ci", "boot", "--help"], "--work-dir"),
        (&["report", "--help"], "--fail-on-regression"),
    ] {
        let out = xtask(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(option), "{args:?} lacks {option}");
    }
}

#[test]
fn usage_errors_exit_2_with_one_error_prefix() {
    for args in [&["matrix", "nosuchaxis"][..], &["bench", "nosuchbench"], &["images", "--nope"], &["bench", "r2r", "--stream", "other"]] {
        let out = xtask(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert_eq!(stderr.matches("error:").count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn a_matrix_without_an_axis_is_an_error_with_one_prefix() {
    let out = xtask(&["matrix"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
    assert!(stderr.contains("--list"), "{stderr}");
}

/// Every matrix axis lists its cells without running anything (no Docker, qemu or .NET run).
#[test]
fn every_matrix_axis_lists_its_cells() {
    for axis in ["caps", "kernels", "dotnet", "lttng"] {
        let out = xtask(&["matrix", axis, "--list"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "matrix {axis} --list: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.lines().count() >= 1, "matrix {axis} --list printed no cell");
    }
    let caps = xtask(&["matrix", "caps", "--collectors", "lttng", "--caps", "none,SYS_ADMIN", "--list"]);
    assert_eq!(String::from_utf8_lossy(&caps.stdout), "lttng / none\nlttng / SYS_ADMIN\n");
}
