//! The pod target: scenarios run as real pods (`podman kube play` of the YAML tracelab writes,
//! kept in the results), each shape judged as a user's pod would be — the tools in a sidecar
//! sharing /tmp, in a debug container that does not, the app hardened or limited — and no pod
//! left behind. The whole shape × collector grid is `cargo xtask matrix pods` (nightly).

use std::path::Path;

use harness::engine::{RunOptions, RunOutcome};
use harness::run::TargetKind;
use harness::run::pod::PodShape;
use harness::scenario::Scenario;
use judge::Verdict;
use tracelab_fixtures::{prerequisites, require_root};

use crate::describe;

pub fn pods_available() -> Result<(), String> {
    match harness::host::podman::setup_problem() {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

fn perf_available() -> Result<(), String> {
    harness::host::environment::perf_binary().map(|_| ()).ok_or_else(|| "no perf binary (apt-get install linux-perf)".into())
}

/// Pods labelled by tracelab, live or not.
fn tracelab_pods() -> Vec<String> {
    let out = std::process::Command::new("podman")
        .args(["pod", "ps", "--filter", "label=tracelab=1", "--format", "{{.Name}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

pub fn run_in_pod(scenario: &Scenario, shape: PodShape) -> (RunOutcome, tempfile::TempDir) {
    let results = tempfile::tempdir().unwrap();
    let opts = RunOptions {
        target: Some(TargetKind::Pod),
        shape: Some(shape),
        results_root: Some(results.path().to_path_buf()),
        ..Default::default()
    };
    let outcome = harness::engine::run(scenario, &opts).unwrap_or_else(|e| panic!("{} in a {shape:?} pod: {e:#}", scenario.name));
    crate::report::assert_junit_valid(&outcome.dir);
    (outcome, results)
}

/// The Pod YAML a run played, read back and checked against the committed Pod schema.
pub fn played_pod(run_dir: &Path) -> serde_json::Value {
    let yaml = run_dir.join("artifacts/pod.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap_or_else(|e| panic!("{}: {e}", yaml.display()));
    let pod: serde_json::Value = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", yaml.display()));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(harness::project_root().join("harness/data/pod-v1.schema.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(&pod).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{} does not fit the Pod schema: {errors:?}\n{text}", yaml.display());
    pod
}

fn tools_mount_tmp(pod: &serde_json::Value) -> bool {
    let tools = pod["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == "tools").unwrap();
    tools["volumeMounts"].as_array().unwrap().iter().any(|m| m["mountPath"] == "/tmp")
}

/// The CI slice: cpu-bound in a sidecar pod, a debug-container pod and a listen-mode pod, PASS
/// with its hot method's share within 5 pts of truth; the YAML each played fits the Pod schema;
/// in the listen pod the runtime connected out to tracelab's socket and was resumed by it; no
/// pod is left.
#[test]
fn cpu_bound_passes_in_a_sidecar_a_debug_and_a_listen_pod() {
    let test = "pods::cpu_bound_passes_in_a_sidecar_a_debug_and_a_listen_pod";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available, &pods_available]) {
        return;
    }
    let before = tracelab_pods();
    let scenario = Scenario::find("cpu-bound").unwrap();
    for shape in [PodShape::Sidecar, PodShape::Debug, PodShape::Listen] {
        let (o, _results) = crate::until_decided(&format!("{test} {shape:?}"), || run_in_pod(&scenario, shape));
        assert_eq!(o.verdict, Verdict::Pass, "{shape:?}: {}", describe(&o));
        assert_eq!(o.manifest.environment.target, "pod");
        assert_eq!(o.manifest.environment.pod_shape.as_deref(), Some(shape.as_str()));
        let share = o.manifest.checks.iter().find(|c| c.name.contains("share")).expect("a share check");
        assert_eq!(share.verdict, Verdict::Pass, "{shape:?}: {share:?}");
        let pod = played_pod(&o.dir);
        assert_eq!(pod["spec"]["shareProcessNamespace"], true);
        assert_eq!(tools_mount_tmp(&pod), shape != PodShape::Debug, "{shape:?}: /tmp shared with the tools but in the debug shape");
        assert!(!o.dir.join("artifacts/pod-control").exists(), "the control folder is removed with the pod");
        if shape == PodShape::Listen {
            let seen = std::fs::read_to_string(o.dir.join("artifacts").join(harness::run::pod::LISTEN_RECORD)).unwrap_or_default();
            assert!(seen.contains("connected to /diag/port.sock and was resumed"), "{seen}");
            let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
            assert!(env.iter().any(|e| e["name"] == "DOTNET_DiagnosticPorts" && e["value"] == "/diag/port.sock,suspend"), "{env:?}");
        }
    }
    assert_eq!(tracelab_pods(), before, "a pod was left behind");
}

/// dotnet-trace in a debug-container pod: SKIP naming dotnet/diagnostics#3480 and the field that
/// fixes it; our own EventPipe client, which looks through /proc/PID/root/tmp, works there.
#[test]
fn dotnet_trace_skips_in_a_debug_pod_and_our_eventpipe_client_does_not() {
    let test = "pods::dotnet_trace_skips_in_a_debug_pod_and_our_eventpipe_client_does_not";
    if !prerequisites(test, &[&require_root, &crate::lttng::docker_available, &pods_available]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.toml");
    std::fs::write(
        &path,
        "name = \"cpu-bound-dotnet-trace\"\nworkload = \"cpu-bound\"\nargs = [\"--seconds\", \"4\"]\n\n\
         [[collector]]\nkind = \"dotnet-trace\"\nprofile = \"dotnet-sampled-thread-time\"\n\n[[expect]]\nkind = \"frame\"\npattern = \"::HotLoop\\\\b\"\n",
    )
    .unwrap();
    let (o, _r) = run_in_pod(&Scenario::load(&path).unwrap(), PodShape::Debug);
    assert_eq!(o.verdict, Verdict::Skip, "{}", describe(&o));
    let reason = o.reason.clone().unwrap_or_default();
    assert!(reason.contains("dotnet/diagnostics#3480") && reason.contains("sidecar"), "{reason}");
    let ours = Scenario::find("cpu-bound-eventpipe").unwrap();
    let (o, _r) = crate::until_decided(test, || run_in_pod(&ours, PodShape::Debug));
    assert_eq!(o.verdict, Verdict::Pass, "{}", describe(&o));
}

/// An app whose diagnostics are off (`DOTNET_EnableDiagnostics=0`, common in production pods):
/// the IPC collectors SKIP naming the variable and the fix, before anything is launched.
#[test]
fn ipc_collectors_skip_naming_enable_diagnostics_in_a_hardened_pod() {
    let test = "pods::ipc_collectors_skip_naming_enable_diagnostics_in_a_hardened_pod";
    if !prerequisites(test, &[&require_root, &crate::lttng::docker_available, &pods_available]) {
        return;
    }
    let mut scenario = Scenario::find("cpu-bound-eventpipe").unwrap();
    scenario.env.insert("DOTNET_EnableDiagnostics".into(), "0".into());
    let (o, _r) = run_in_pod(&scenario, PodShape::Hardened);
    assert_eq!(o.verdict, Verdict::Skip, "{}", describe(&o));
    let reason = o.reason.clone().unwrap_or_default();
    assert!(reason.contains("`DOTNET_EnableDiagnostics=0`") && reason.contains("eventpipe"), "{reason}");
}

/// The hardened pod (UID 1654, read-only root file system, no capabilities) and the limited one
/// (CPU and memory limits): cpu-bound ends PASS, or INCONCLUSIVE/SKIP with a reason — never FAIL;
/// the app really ran as 1654.
#[test]
#[ignore = "nightly: the pods matrix (`cargo xtask matrix pods`) runs the rest of the shapes"]
fn hardened_and_limited_pods_never_fail_cpu_bound() {
    let test = "pods::hardened_and_limited_pods_never_fail_cpu_bound";
    if !prerequisites(test, &[&require_root, &perf_available, &crate::lttng::docker_available, &pods_available]) {
        return;
    }
    let scenario = Scenario::find("cpu-bound").unwrap();
    for shape in [PodShape::Hardened, PodShape::Limited] {
        let (o, _results) = crate::until_decided(&format!("{test} {shape:?}"), || run_in_pod(&scenario, shape));
        assert_ne!(o.verdict, Verdict::Fail, "{shape:?}: {}", describe(&o));
        if o.verdict != Verdict::Pass {
            assert!(o.reason.is_some(), "{shape:?}: {}", describe(&o));
        }
        let pod = played_pod(&o.dir);
        if shape == PodShape::Hardened {
            assert_eq!(pod["spec"]["containers"][0]["securityContext"]["runAsUser"], harness::run::pod::APP_UID);
        }
    }
}
