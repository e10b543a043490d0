//! A scenario's `args` and `env` reach the app exactly as written, never through a shell: `;`,
//! `$(…)`, backticks, quotes, spaces and newlines arrive as bytes, on the host and in a container.

use std::path::Path;
use std::time::Duration;

use harness::run::{AppLaunch, Program, Target, TargetKind};
use tracelab_fixtures::{prerequisites, require_root};

/// Arguments and an environment value a shell would have run, split or expanded.
const HOSTILE: &[&str] = &["a; touch /tmp/tracelab-pwned", "$(id)", "`id`", "'single' \"double\"", "two  spaces", "line\nbreak", "*", "--"];

/// The app: `sh` printing each argument it got between markers, then the variable (the `sh` is
/// the app's own program, not a shell of tracelab's); it lingers 2 s, as a container target
/// finds its app as the child of the container's pid 1.
fn launch_for(work: &Path) -> AppLaunch {
    AppLaunch {
        program: Program::Command(vec![
            "/bin/sh".into(),
            "-c".into(),
            "for a in \"$@\"; do printf '<%s>\\n' \"$a\"; done; printf 'ENV<%s>\\n' \"$HOSTILE_VALUE\"; echo DONE; sleep 2".into(),
            "app".into(),
        ]),
        args: HOSTILE.iter().map(|s| s.to_string()).collect(),
        env: [("HOSTILE_VALUE".to_string(), HOSTILE.join("|"))].into(),
        work_dir: work.to_path_buf(),
        cwd: None,
        cwd_writable: false,
    }
}

fn check(target: &mut dyn Target, work: &Path) {
    let _ = std::fs::remove_file("/tmp/tracelab-pwned");
    let mut app = target.launch(&launch_for(work)).unwrap();
    app.wait_for_line("DONE", Duration::from_secs(60)).unwrap();
    let _ = target.wait_app(&mut app, Duration::from_secs(30));
    let printed = app.transcript.join("\n");
    let mut want: Vec<String> = HOSTILE.iter().map(|a| format!("<{a}>")).collect();
    want.push(format!("ENV<{}>", HOSTILE.join("|")));
    want.push("DONE".into());
    assert_eq!(printed, want.join("\n"), "on the {} target", target.label());
    assert!(!Path::new("/tmp/tracelab-pwned").exists(), "an argument was run by a shell");
}

#[test]
fn hostile_args_and_env_reach_the_app_verbatim_on_the_host() {
    let work = tempfile::tempdir().unwrap();
    let mut host = harness::run::HostTarget::new("/bin/false".into());
    check(&mut host, work.path());
}

#[test]
fn hostile_args_and_env_reach_the_app_verbatim_in_a_container() {
    let test = "verbatim::hostile_args_and_env_reach_the_app_verbatim_in_a_container";
    if !prerequisites(test, &[&require_root, &|| harness::host::docker::Docker::available()]) {
        return;
    }
    let base = harness::project_root().join("target").join("tracelab-it");
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::Builder::new().prefix("verbatim").tempdir_in(base).unwrap();
    let options = harness::run::container::ContainerOptions::new("bullseye", vec![]).unwrap();
    let mut target = harness::run::container::ContainerTarget::new(TargetKind::Container, options).unwrap();
    check(&mut target, work.path());
    target.cleanup().unwrap();
}
