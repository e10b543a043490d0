//! Podman, for pods: a blocking façade over the `podman` command (pods are played from YAML with
//! `podman kube play`, the one way Kubernetes-shaped pods run on a machine without a cluster).
//!
//! Images come from Docker (`docker save | podman load`, once per image id): tracelab builds its
//! images through the Docker engine and never pulls. Every pod carries the labels `tracelab=1`
//! and `tracelab.owner=PID.STARTTIME` (a Kubernetes label value has no colon), so the guardian,
//! the next run's sweep and `sweep` remove what a killed run left, as for containers.
//!
//! Set-up this machine kind needs, made by the prerequisite installer and shown by `doctor`
//! ([`CONF_DROP_IN`]): the `runc` runtime (crun fails: "cgroups in hybrid mode not supported"),
//! and default ulimits within the machine's hard limits (podman's defaults make runc fail with
//! "error setting rlimit type 7: operation not permitted").

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The containers.conf drop-in the prerequisite installer writes.
pub const CONF_DROP_IN: &str = "/etc/containers/containers.conf.d/tracelab.conf";

/// Its contents. The limits are this machine kind's hard limits (nofile 20000) or below; a
/// machine with higher hard limits works with them too.
pub const CONF_TEXT: &str = "# Written by tracelab's prerequisite installer (cargo xtask setup): pods run here with runc\n\
# (crun: \"cgroups in hybrid mode not supported\") and ulimits within the hard limits\n\
# (podman's defaults: \"error setting rlimit type 7: operation not permitted\").\n\
[containers]\n\
default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
[engine]\n\
runtime = \"runc\"\n";

/// Label naming the owner of a pod: `PID.STARTTIME`.
pub const LABEL_OWNER: &str = "tracelab.owner";

/// The owner tag in a form a Kubernetes label value allows (`[A-Za-z0-9._-]`).
pub(crate) fn owner_label() -> String {
    crate::host::owner::tag().replace(':', ".")
}

fn owner_alive(label: &str) -> bool {
    crate::host::owner::alive(&label.replacen('.', ":", 1))
}

/// What is wrong with this machine's podman set-up for pods, in words a user can act on; `None`
/// when pods can run.
pub fn setup_problem() -> Option<String> {
    if crate::host::environment::which("podman").is_none() {
        return Some("`podman` is not installed (the pod target plays Pod YAML with `podman kube play`): `cargo xtask setup --scenario NAME --target pod` (or `setup --tests`) installs it".into());
    }
    if crate::host::environment::which("runc").is_none() {
        return Some("`runc` is not installed (podman's crun fails here: \"cgroups in hybrid mode not supported\"): `cargo xtask setup --scenario NAME --target pod` (or `setup --tests`) installs it".into());
    }
    if !configured() {
        return Some(format!(
            "{CONF_DROP_IN} does not set podman's runtime to runc and its ulimits within this machine's limits: `cargo xtask setup --scenario NAME --target pod` (or `setup --tests`) writes it"
        ));
    }
    None
}

/// Whether [`CONF_DROP_IN`] sets what pods need here.
pub fn configured() -> bool {
    let conf = std::fs::read_to_string(CONF_DROP_IN).unwrap_or_default();
    conf.contains("runtime = \"runc\"") && conf.contains("default_ulimits")
}

/// `podman version`'s client version, when podman runs.
pub fn version() -> Option<String> {
    let out = Command::new("podman").args(["version", "--format", "{{.Client.Version}}"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs `podman ARGS`, returning stdout; the error carries podman's stderr.
pub(crate) fn podman(args: &[&str]) -> Result<String> {
    let out = Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `podman`: is it installed? (`cargo xtask setup --tests` installs it)")?;
    if !out.status.success() {
        bail!("`podman {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes the Docker image `tag` available to podman under the same name, moving it over when
/// podman's copy is missing or another image: `docker save | podman load`.
pub fn image_from_docker(tag: &str) -> Result<String> {
    let docker_id = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", tag])
        .output()
        .context("cannot run `docker`")?;
    if !docker_id.status.success() {
        bail!("image {tag} is not in Docker: {}", String::from_utf8_lossy(&docker_id.stderr).trim());
    }
    let docker_id = String::from_utf8_lossy(&docker_id.stdout).trim().trim_start_matches("sha256:").to_string();
    let name = podman_name(tag);
    let podman_id = podman(&["image", "inspect", "--format", "{{.Id}}", &name]).ok().map(|s| s.trim().to_string());
    if podman_id.as_deref() == Some(docker_id.as_str()) {
        return Ok(name);
    }
    crate::host::progress::note("image", &format!("moving {tag} from Docker into podman (docker save | podman load, once per image)"));
    let mut save = Command::new("docker")
        .args(["save", tag])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run `docker save`")?;
    let load = Command::new("podman")
        .args(["load", "-q"])
        .stdin(save.stdout.take().unwrap())
        .output()
        .context("cannot run `podman load`")?;
    let saved = save.wait()?;
    if !saved.success() || !load.status.success() {
        bail!("could not move {tag} into podman: `docker save | podman load` failed: {}", String::from_utf8_lossy(&load.stderr).trim());
    }
    Ok(name)
}

/// The name podman gives a Docker image it loaded: `docker save` writes `tracelab/runtime:X`,
/// which podman stores as `localhost/tracelab/runtime:X` (a name with a registry keeps it).
pub fn podman_name(tag: &str) -> String {
    let first = tag.split('/').next().unwrap_or("");
    if tag.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost") {
        tag.to_string()
    } else {
        format!("localhost/{tag}")
    }
}

/// Plays the Pod YAML at `yaml` (no network unless the pod asks for the host's). Its containers
/// log to files, so their output can be followed without journald.
pub(crate) fn play(yaml: &Path, host_network: bool) -> Result<()> {
    let path = yaml.display().to_string();
    let mut args = vec!["kube", "play", "--log-driver", "k8s-file", "--start"];
    if !host_network {
        args.extend(["--network", "none"]);
    }
    args.push(&path);
    podman(&args)
        .with_context(|| format!("`podman kube play {path}` did not start the pod"))?;
    Ok(())
}

/// The host pid of a pod's container (0 once it stopped).
pub(crate) fn container_pid(container: &str) -> Result<u32> {
    let out = podman(&["inspect", "--format", "{{.State.Pid}}", container])?;
    out.trim().parse().with_context(|| format!("podman inspect {container} gave no pid: {out}"))
}

/// The exit code of a stopped container.
pub(crate) fn exit_code(container: &str) -> Result<i32> {
    let out = podman(&["inspect", "--format", "{{.State.ExitCode}}", container])?;
    out.trim().parse().with_context(|| format!("podman inspect {container} gave no exit code: {out}"))
}

/// `podman logs -f CONTAINER`, stdout and stderr both piped.
pub(crate) fn follow_logs(container: &str) -> Result<std::process::Child> {
    let mut cmd = Command::new("podman");
    cmd.args(["logs", "-f", container]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    crate::host::proc::die_with_owner(&mut cmd);
    cmd.spawn().context("cannot run `podman logs`")
}

/// Removes a pod, its containers and the volumes its YAML declared (emptyDirs); idempotent.
pub(crate) fn remove_pod(name: &str) -> Result<()> {
    let volumes = pod_volumes(name);
    let out = Command::new("podman").args(["pod", "rm", "-f", "-t", "0", name]).output().context("cannot run `podman`")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && !stderr.contains("no pod with name") && !stderr.contains("no such pod") {
        bail!("could not remove pod {name}: {}", stderr.trim());
    }
    for v in volumes {
        let _ = podman(&["volume", "rm", "-f", &v]);
    }
    Ok(())
}

/// Named volumes mounted by a pod's containers (podman makes one per emptyDir).
fn pod_volumes(pod: &str) -> Vec<String> {
    let Ok(ids) = podman(&["pod", "inspect", "--format", "{{range .Containers}}{{.Id}} {{end}}", pod]) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for id in ids.split_whitespace() {
        if let Ok(out) = podman(&["inspect", "--format", "{{range .Mounts}}{{if eq .Type \"volume\"}}{{.Name}} {{end}}{{end}}", id]) {
            names.extend(out.split_whitespace().map(str::to_string));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Pods labelled by tracelab: name and owner label.
fn labelled_pods() -> Result<Vec<(String, String)>> {
    let out = podman(&["pod", "ps", "--filter", "label=tracelab=1", "--format", "{{.Name}} {{index .Labels \"tracelab.owner\"}}"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(n, o)| (n.to_string(), o.trim().to_string())))
        .collect())
}

/// Removes pods whose owner is gone (all of them with `everything`); the names removed and the
/// number left to live owners. Nothing when podman is not installed.
pub fn sweep(everything: bool) -> Result<(Vec<String>, usize)> {
    if crate::host::environment::which("podman").is_none() {
        return Ok((Vec::new(), 0));
    }
    let mut removed = Vec::new();
    let mut kept = 0;
    for (name, owner) in labelled_pods()? {
        if !everything && owner_alive(&owner) {
            kept += 1;
            continue;
        }
        remove_pod(&name)?;
        removed.push(name);
    }
    Ok((removed, kept))
}

/// The guardian's removal of this owner's pods, as shell lines, run after the owner died; empty
/// when podman is not installed. Three rounds 3 s apart: a `podman kube play` the owner started
/// just before it died goes on creating its pod after the first.
pub(crate) fn guardian_lines() -> String {
    let Some(podman) = crate::host::environment::which("podman") else { return String::new() };
    let owner = owner_label();
    format!(
        "for round in 1 2 3; do\n  pods=$('{p}' pod ps -q --filter label={LABEL_OWNER}={owner} 2>/dev/null)\n  [ -n \"$pods\" ] && '{p}' pod rm -f -t 0 $pods >/dev/null 2>&1\n  sleep 3\ndone\n",
        p = podman.display()
    )
}

/// Pods this process played and has not removed: removed by the signal handler.
static PLAYED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// `name` is this process's pod until [`forget`]: a signal removes it, a death leaves it to the
/// guardian (started here with the first pod).
pub(crate) fn register(name: &str) -> Result<()> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| crate::host::owner::on_signal(remove_registered));
    crate::host::docker::guard_containers();
    let mut played = PLAYED.lock().unwrap_or_else(|p| p.into_inner());
    if crate::host::owner::shutting_down() {
        bail!("tracelab is shutting down (signal received): no new pod");
    }
    played.push(name.to_string());
    Ok(())
}

pub(crate) fn forget(name: &str) {
    PLAYED.lock().unwrap_or_else(|p| p.into_inner()).retain(|n| n != name);
}

fn remove_registered() {
    let names = std::mem::take(&mut *PLAYED.lock().unwrap_or_else(|p| p.into_inner()));
    for name in names {
        if let Err(e) = remove_pod(&name) {
            crate::host::owner::say(&format!("tracelab: {e:#}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_names_become_podman_names() {
        assert_eq!(podman_name("tracelab/runtime:bullseye"), "localhost/tracelab/runtime:bullseye");
        assert_eq!(podman_name("myapp:1"), "localhost/myapp:1");
        assert_eq!(podman_name("localhost/x:1"), "localhost/x:1");
        assert_eq!(podman_name("registry.example.com/team/app:2"), "registry.example.com/team/app:2");
    }

    #[test]
    fn an_owner_label_reads_back_as_its_tag() {
        let label = owner_label();
        assert!(!label.contains(':'));
        assert!(owner_alive(&label));
        assert!(!owner_alive("1.1"));
    }
}
