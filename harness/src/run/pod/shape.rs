//! The pod shapes users run .NET in, and the Pod each one is: what the app and the tools
//! container share, who they run as, what they may do. The Pod is written as YAML
//! ([`super::yaml`]) into the run's folder and played exactly as written.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How the app's pod is shaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodShape {
    /// A tools sidecar: shared process namespace, and /tmp an emptyDir both mount.
    #[default]
    Sidecar,
    /// An ephemeral debug container's view (`kubectl debug --target`): the process namespace is
    /// shared, /tmp is not; tools reach the app's files through /proc/PID/root.
    Debug,
    /// The chiseled-image hardening: the app runs as UID 1654 with a read-only root file system,
    /// no capabilities and no privilege escalation; /tmp a writable emptyDir shared with tools.
    Hardened,
    /// A tools sidecar with CPU and memory limits on the app's container.
    Limited,
    /// dotnet-monitor's Listen mode: the app connects out to a monitor listening on a socket in a
    /// folder both containers mount (`DOTNET_DiagnosticPorts=/diag/port.sock,suspend`) and waits
    /// until it resumes it; tools beside it as in `sidecar`.
    Listen,
}

impl PodShape {
    pub const ALL: [PodShape; 5] = [PodShape::Sidecar, PodShape::Debug, PodShape::Hardened, PodShape::Limited, PodShape::Listen];

    pub fn as_str(self) -> &'static str {
        match self {
            PodShape::Sidecar => "sidecar",
            PodShape::Debug => "debug",
            PodShape::Hardened => "hardened",
            PodShape::Limited => "limited",
            PodShape::Listen => "listen",
        }
    }

    pub fn parse(s: &str) -> Result<PodShape> {
        match PodShape::ALL.iter().find(|k| k.as_str() == s) {
            Some(k) => Ok(*k),
            None => bail!(
                "unknown pod shape `{s}`: expected {}",
                PodShape::ALL.map(PodShape::as_str).join(", ")
            ),
        }
    }

    /// Whether the tools container sees the app's /tmp as its own (what dotnet-trace needs:
    /// it looks for the app's diagnostics socket in its own /tmp, dotnet/diagnostics#3480).
    pub fn shares_tmp(self) -> bool {
        !matches!(self, PodShape::Debug)
    }

    /// One line for the manifest and the summary.
    pub fn describe(self) -> &'static str {
        match self {
            PodShape::Sidecar => "tools sidecar: shareProcessNamespace, /tmp an emptyDir in both containers",
            PodShape::Debug => "debug container: shareProcessNamespace, /tmp not shared (tools look through /proc/PID/root)",
            PodShape::Hardened => "hardened: app as UID 1654, readOnlyRootFilesystem, no capabilities, /tmp a shared emptyDir",
            PodShape::Limited => "limited: tools sidecar, app limited to cpu and memory (resources.limits)",
            PodShape::Listen => "listen: the app connects out to a monitor's socket in a shared folder and waits to be resumed (DOTNET_DiagnosticPorts=…,suspend)",
        }
    }
}

/// The non-root user of Microsoft's chiseled .NET images (`app`).
pub const APP_UID: u32 = 1654;

/// What goes into the Pod.
#[derive(Clone, Debug)]
pub(crate) struct PodPlan {
    pub name: String,
    pub shape: PodShape,
    /// The tools container's image (tracelab's runtime image: perf, LTTng, the .NET runtime).
    pub image: String,
    /// The app container's image: tracelab's, or a user's own.
    pub app_image: String,
    /// The app container's command (argv); empty: the image's entrypoint.
    pub app_command: Vec<String>,
    /// The app container's args; empty: the image's cmd (or none after `app_command`).
    pub app_args: Vec<String>,
    pub app_env: Vec<(String, String)>,
    pub app_workdir: Option<String>,
    /// Capabilities of the tools container (`SYS_ADMIN` …, or `privileged`).
    pub tool_caps: Vec<String>,
    /// Host folders at the same path inside: (path, read-only, containers: app / tools / both).
    pub host_paths: Vec<HostPath>,
    /// A host folder mounted at another path in both containers: (host, in the pod).
    pub mounted_at: Vec<(PathBuf, String)>,
    /// The host's network (a loopback load generator on the host); none otherwise.
    pub host_network: bool,
    /// `resources.limits` of the app container (`cpu`, `memory`), for the limited shape.
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
    pub labels: Vec<(String, String)>,
}

#[derive(Clone, Debug)]
pub(crate) struct HostPath {
    pub path: PathBuf,
    pub read_only: bool,
    pub in_app: bool,
    pub in_tools: bool,
}

impl HostPath {
    pub fn both(path: &Path, read_only: bool) -> HostPath {
        HostPath { path: path.to_path_buf(), read_only, in_app: true, in_tools: true }
    }
}

impl PodPlan {
    /// The Pod (core/v1), as `podman kube play` and a cluster read it.
    pub fn pod(&self) -> Value {
        let mut volumes = Vec::new();
        let mut app_mounts = Vec::new();
        let mut tool_mounts = Vec::new();
        for (i, hp) in self.host_paths.iter().enumerate() {
            let name = format!("host-{i}");
            volumes.push(json!({"name": name, "hostPath": {"path": hp.path.display().to_string(), "type": "Directory"}}));
            let mount = json!({"name": name, "mountPath": hp.path.display().to_string(), "readOnly": hp.read_only});
            if hp.in_app {
                app_mounts.push(mount.clone());
            }
            if hp.in_tools {
                tool_mounts.push(mount);
            }
        }
        for (i, (host, at)) in self.mounted_at.iter().enumerate() {
            let name = format!("mount-{i}");
            volumes.push(json!({"name": name, "hostPath": {"path": host.display().to_string(), "type": "Directory"}}));
            app_mounts.push(json!({"name": name, "mountPath": at}));
            tool_mounts.push(json!({"name": name, "mountPath": at}));
        }
        // /tmp: an emptyDir, in both containers unless the shape keeps it the app's own.
        volumes.push(json!({"name": "tmp", "emptyDir": {}}));
        app_mounts.push(json!({"name": "tmp", "mountPath": "/tmp"}));
        if self.shape.shares_tmp() {
            tool_mounts.push(json!({"name": "tmp", "mountPath": "/tmp"}));
        }
        let mut app_security = json!({
            "capabilities": {"drop": ["ALL"]},
            "allowPrivilegeEscalation": false,
        });
        if self.shape == PodShape::Hardened {
            app_security["runAsUser"] = json!(APP_UID);
            app_security["runAsGroup"] = json!(APP_UID);
            app_security["runAsNonRoot"] = json!(true);
            app_security["readOnlyRootFilesystem"] = json!(true);
        }
        let mut app = json!({
            "name": "app",
            "image": self.app_image,
            "imagePullPolicy": "Never",
            "env": self.app_env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
            "volumeMounts": app_mounts,
            "securityContext": app_security,
        });
        if let Some(dir) = &self.app_workdir {
            app["workingDir"] = json!(dir);
        }
        if !self.app_command.is_empty() {
            app["command"] = json!(self.app_command);
        }
        if !self.app_args.is_empty() {
            app["args"] = json!(self.app_args);
        }
        let mut limits = serde_json::Map::new();
        if let Some(cpu) = &self.cpu_limit {
            limits.insert("cpu".into(), json!(cpu));
        }
        if let Some(mem) = &self.memory_limit {
            limits.insert("memory".into(), json!(mem));
        }
        if !limits.is_empty() {
            app["resources"] = json!({"limits": limits});
        }
        let privileged = self.tool_caps.iter().any(|c| c.eq_ignore_ascii_case(super::super::container::PRIVILEGED));
        let mut tool_security = json!({});
        if privileged {
            tool_security["privileged"] = json!(true);
        } else if !self.tool_caps.is_empty() {
            tool_security["capabilities"] = json!({"add": self.tool_caps});
        }
        let tools = json!({
            "name": "tools",
            "image": self.image,
            "imagePullPolicy": "Never",
            // The tools container idles; collectors are exec'd into it, as `kubectl exec` would.
            "command": ["sleep", "infinity"],
            "volumeMounts": tool_mounts,
            "securityContext": tool_security,
        });
        let mut spec = json!({
            "shareProcessNamespace": true,
            "restartPolicy": "Never",
            "containers": [app, tools],
            "volumes": volumes,
        });
        if self.host_network {
            spec["hostNetwork"] = json!(true);
        }
        let labels: serde_json::Map<String, Value> = self.labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
        })
    }

    /// The Pod as the YAML file that is played.
    pub fn yaml(&self) -> String {
        super::yaml::to_yaml(
            &self.pod(),
            &[
                &format!("Pod of shape `{}` ({}), written by tracelab", self.shape.as_str(), self.shape.describe()),
                "and played as it is with `podman kube play --network none --log-driver k8s-file` (hostNetwork aside).",
                "hostPath volumes are the run's folder and the app's files; on a cluster they come from the image.",
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(shape: PodShape) -> PodPlan {
        PodPlan {
            name: "tracelab-1-0".into(),
            shape,
            image: "localhost/tracelab/runtime:bullseye".into(),
            app_image: "localhost/tracelab/runtime:bullseye".into(),
            app_command: vec!["dotnet".into(), "/w/app.dll".into()],
            app_args: Vec::new(),
            app_env: vec![("DOTNET_PerfMapEnabled".into(), "1".into())],
            app_workdir: Some("/w".into()),
            tool_caps: vec!["SYS_ADMIN".into()],
            host_paths: vec![HostPath::both(Path::new("/w"), false)],
            mounted_at: if shape == PodShape::Listen { vec![(PathBuf::from("/tmp/tracelab-diag-x"), "/diag".into())] } else { Vec::new() },
            host_network: false,
            cpu_limit: (shape == PodShape::Limited).then(|| "0.5".into()),
            memory_limit: (shape == PodShape::Limited).then(|| "512Mi".into()),
            labels: vec![("tracelab".into(), "1".into())],
        }
    }

    /// The committed Pod schema (from the Kubernetes API reference).
    fn schema() -> jsonschema::Validator {
        let text = include_str!("../../../data/pod-v1.schema.json");
        jsonschema::validator_for(&serde_json::from_str(text).unwrap()).unwrap()
    }

    fn errors(v: &Value) -> Vec<String> {
        schema().iter_errors(v).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }

    #[test]
    fn every_shapes_yaml_reads_back_as_its_pod_and_fits_the_pod_schema() {
        for shape in PodShape::ALL {
            let plan = PodPlan { labels: vec![("tracelab".into(), "1".into()), ("tracelab.owner".into(), "123.456".into())], ..plan(shape) };
            let read_back: Value = serde_norway::from_str(&plan.yaml()).unwrap();
            assert_eq!(read_back, plan.pod(), "{}", plan.yaml());
            assert_eq!(errors(&read_back), Vec::<String>::new(), "{shape:?}:\n{}", plan.yaml());
        }
    }

    #[test]
    fn the_schema_refuses_what_a_cluster_would() {
        let good = plan(PodShape::Sidecar).pod();
        let mut typo = good.clone();
        typo["spec"]["shareProcessNamespaces"] = json!(true);
        assert!(!errors(&typo).is_empty(), "a misspelt field passes");
        // The owner tag PID:STARTTIME is no label value: written as PID.STARTTIME.
        let mut colon = good.clone();
        colon["metadata"]["labels"]["tracelab.owner"] = json!("123:456");
        assert!(!errors(&colon).is_empty(), "a label value with a colon passes");
        let mut name = good.clone();
        name["metadata"]["name"] = json!("Tracelab_1");
        assert!(!errors(&name).is_empty(), "an object name with capitals passes");
        let mut cpu = good;
        cpu["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "half"}});
        assert!(!errors(&cpu).is_empty(), "a quantity that is not one passes");
    }

    #[test]
    fn shapes_parse_and_name_themselves() {
        for s in PodShape::ALL {
            assert_eq!(PodShape::parse(s.as_str()).unwrap(), s);
        }
        assert!(PodShape::parse("daemonset").unwrap_err().to_string().contains("expected sidecar, debug, hardened, limited, listen"));
    }

    #[test]
    fn only_the_debug_shape_keeps_tmp_from_the_tools() {
        let mounts = |shape| {
            let pod = plan(shape).pod();
            pod["spec"]["containers"][1]["volumeMounts"].as_array().unwrap().iter().any(|m| m["mountPath"] == "/tmp")
        };
        assert!(mounts(PodShape::Sidecar));
        assert!(!mounts(PodShape::Debug));
        assert!(mounts(PodShape::Hardened));
    }

    #[test]
    fn the_hardened_shape_runs_the_app_as_the_chiseled_user_read_only() {
        let pod = plan(PodShape::Hardened).pod();
        let sc = &pod["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["runAsUser"], 1654);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["capabilities"]["drop"][0], "ALL");
        let limited = plan(PodShape::Limited).pod();
        assert_eq!(limited["spec"]["containers"][0]["resources"]["limits"]["cpu"], "0.5");
    }
}
