//! Stage `docker`: a blocking façade over the Docker Engine API (bollard on a small private tokio
//! runtime), so the rest of the harness stays synchronous.
//!
//! Every container and volume tracelab creates carries the label [`LABEL`] plus its owner (pid and
//! start time of the creating process), so `cargo xtask sweep` can remove what a killed run left
//! behind without touching the containers of a run that is still alive. Containers created by this
//! process are also kept in a registry that [`remove_registered`] (called by the Ctrl-C/SIGTERM
//! handler of [`crate::host::owner::install`], and by targets on drop) clears; the first container a
//! process creates starts its guardian ([`crate::host::docker::guard_containers`]), which removes them
//! if the process dies without doing so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, BuildImageOptionsBuilder, CreateContainerOptionsBuilder, CreateImageOptionsBuilder, ListContainersOptionsBuilder, ListVolumesOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveVolumeOptions, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

/// Label on everything tracelab creates (value `1`).
pub const LABEL: &str = "tracelab";
/// `PID:STARTTIME` of the process that created the object (liveness check for sweeps).
pub const LABEL_OWNER: &str = "tracelab.owner";
/// What the container is for: `app`, `tool`, `probe`.
pub(crate) const LABEL_ROLE: &str = "tracelab.role";
/// Free-form run id a caller may add (tests use it to count their own leftovers).
pub const LABEL_RUN: &str = "tracelab.run";

static CREATED: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Held across each create + registration, so the signal handler never misses a container whose
/// creation was in flight when the signal came.
static CREATING: Mutex<()> = Mutex::new(());

/// A connection to the Docker daemon with its own runtime; all methods block.
pub struct Docker {
    rt: tokio::runtime::Runtime,
    api: bollard::Docker,
}

/// What [`Docker::create`] creates.
#[derive(Clone, Debug, Default)]
pub struct ContainerSpec {
    pub image: String,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Host folders mounted into the container.
    pub binds: Vec<Bind>,
    pub cap_add: Vec<String>,
    pub privileged: bool,
    /// `container:ID` to join another container's pid namespace.
    pub pid_mode: Option<String>,
    /// `shareable` (app) or `container:ID` (sidecar): LTTng-UST shares /dev/shm with its daemon.
    pub ipc_mode: Option<String>,
    /// `none` unless a loopback load generator needs `host`.
    pub network_mode: String,
    pub role: String,
    pub labels: Vec<(String, String)>,
    pub working_dir: Option<String>,
}

/// A host folder seen inside a container at `target`. Passed to Docker as a typed mount, not as
/// a `HOST:CONTAINER[:ro]` string: a path with `:` or `,` (a results folder a user named) cannot
/// be split wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

impl Bind {
    /// `dir` at the same path inside as outside.
    pub fn same_path(dir: &Path, read_only: bool) -> Bind {
        Bind { source: dir.to_path_buf(), target: dir.to_path_buf(), read_only }
    }

    /// `SOURCE:TARGET[:ro]`, as `docker run -v` would show it (for messages only).
    pub fn describe(&self) -> String {
        format!("{}:{}{}", self.source.display(), self.target.display(), if self.read_only { ":ro" } else { "" })
    }

    fn mount(&self) -> Mount {
        Mount {
            source: Some(self.source.display().to_string()),
            target: Some(self.target.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(self.read_only),
            ..Default::default()
        }
    }
}

impl ContainerSpec {
    pub fn new(image: &str, role: &str, cmd: Vec<String>) -> Self {
        ContainerSpec {
            image: image.into(),
            cmd,
            network_mode: "none".into(),
            role: role.into(),
            ..Default::default()
        }
    }
}

/// What a sweep removed.
#[derive(Debug, Default)]
pub struct Swept {
    pub containers: Vec<String>,
    pub volumes: Vec<String>,
    /// Labelled containers left alone because their owner is alive.
    pub kept_alive: Vec<String>,
}

/// An image as `inspect` reports it.
#[derive(Clone, Debug)]
pub struct ImageInfo {
    pub id: String,
    pub labels: HashMap<String, String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `KEY=VALUE` lines of the image's environment.
    pub env: Vec<String>,
    pub working_dir: String,
}

/// Every Docker API failure is an infrastructure error (exit 5), not a verdict on the pipeline.
fn explain(e: bollard::errors::Error) -> anyhow::Error {
    crate::host::errors::Infrastructure::wrap(e)
}

impl Docker {
    /// Connects to the local daemon (DOCKER_HOST or /var/run/docker.sock) and checks it answers.
    pub fn connect() -> Result<Docker> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("tracelab-docker")
            .build()
            .context("cannot start the runtime for the Docker client")?;
        let api = rt
            .block_on(async {
                let api = bollard::Docker::connect_with_local_defaults()?;
                let api = tokio::time::timeout(Duration::from_secs(10), api.negotiate_version()).await??;
                tokio::time::timeout(Duration::from_secs(10), api.ping()).await??;
                Ok::<_, anyhow::Error>(api)
            })
            .map_err(|e| {
                crate::host::errors::Infrastructure::wrap(anyhow!(
                    "no Docker daemon answers at {} ({e}). Start one (`systemctl start docker`, or \
                     `dockerd --bridge=none --iptables=false &` where no service exists) or run with --target host",
                    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
                ))
            })?;
        Ok(Docker { rt, api })
    }

    /// `Ok` when a daemon answers; the reason otherwise (for test prerequisites and the engine's
    /// choice of a default target).
    pub fn available() -> std::result::Result<(), String> {
        Docker::connect().map(|_| ()).map_err(|e| format!("{e:#}"))
    }

    /// The daemon's version string (`20.10.24+dfsg1`).
    pub fn server_version(&self) -> Result<String> {
        let v = self.rt.block_on(self.api.version()).map_err(explain)?;
        Ok(v.version.unwrap_or_default())
    }

    pub fn inspect_image(&self, name: &str) -> Result<Option<ImageInfo>> {
        match self.rt.block_on(self.api.inspect_image(name)) {
            Ok(img) => {
                let config = img.config.unwrap_or_default();
                Ok(Some(ImageInfo {
                    id: img.id.unwrap_or_default(),
                    labels: config.labels.unwrap_or_default(),
                    entrypoint: config.entrypoint.unwrap_or_default(),
                    cmd: config.cmd.unwrap_or_default(),
                    env: config.env.unwrap_or_default(),
                    working_dir: config.working_dir.unwrap_or_default(),
                }))
            }
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(None),
            Err(e) => Err(explain(e)).with_context(|| format!("cannot inspect image {name}")),
        }
    }

    /// Imports a root file system tarball as image `repo:tag` (`docker import`), with labels.
    pub(crate) fn import_rootfs(&self, tarball: &Path, repo: &str, tag: &str, labels: &[(String, String)]) -> Result<String> {
        let changes: Vec<String> = labels.iter().map(|(k, v)| format!("LABEL {k}={v}")).collect();
        let mut options = CreateImageOptionsBuilder::default().from_src("-").repo(repo).tag(tag).build();
        options.changes = changes;
        let body = bollard::body_try_stream(file_chunks(tarball)?);
        self.rt
            .block_on(async {
                let mut stream = self.api.create_image(Some(options), Some(body), None);
                while let Some(item) = stream.next().await {
                    item?;
                }
                Ok::<_, bollard::errors::Error>(())
            })
            .map_err(explain)
            .with_context(|| format!("docker import of {} failed", tarball.display()))?;
        let image = format!("{repo}:{tag}");
        let info = self.inspect_image(&image)?.with_context(|| format!("{image} missing right after its import"))?;
        Ok(info.id)
    }

    /// Builds `tag` from a context tarball holding a Dockerfile, with no network.
    /// `on_line` receives the builder's output lines (progress).
    pub(crate) fn build(
        &self,
        context_tar: &Path,
        tag: &str,
        labels: &[(String, String)],
        on_line: &mut dyn FnMut(&str),
    ) -> Result<String> {
        let labels: HashMap<String, String> = labels.iter().cloned().collect();
        let options = BuildImageOptionsBuilder::default()
            .dockerfile("Dockerfile")
            .t(tag)
            .rm(true)
            .forcerm(true)
            .networkmode("none")
            .labels(&labels)
            .build();
        let body = bollard::body_try_stream(file_chunks(context_tar)?);
        let result: Result<(), bollard::errors::Error> = self.rt.block_on(async {
            let mut stream = self.api.build_image(options, None, Some(body));
            while let Some(item) = stream.next().await {
                let info = item?;
                if let Some(line) = info.stream {
                    for l in line.lines().filter(|l| !l.trim().is_empty()) {
                        on_line(l);
                    }
                }
            }
            Ok(())
        });
        result.map_err(explain).with_context(|| format!("docker build of {tag} failed"))?;
        let info = self.inspect_image(tag)?.with_context(|| format!("{tag} missing right after its build"))?;
        Ok(info.id)
    }

    /// Creates a container (labelled, registered for cleanup); returns its id.
    pub fn create(&self, spec: &ContainerSpec) -> Result<String> {
        let mut labels: HashMap<String, String> = spec.labels.iter().cloned().collect();
        labels.insert(LABEL.into(), "1".into());
        labels.insert(LABEL_OWNER.into(), crate::host::owner::tag());
        labels.insert(LABEL_ROLE.into(), spec.role.clone());
        let host_config = HostConfig {
            mounts: Some(spec.binds.iter().map(Bind::mount).collect()),
            cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
            privileged: Some(spec.privileged),
            pid_mode: spec.pid_mode.clone(),
            ipc_mode: spec.ipc_mode.clone(),
            network_mode: Some(spec.network_mode.clone()),
            init: Some(false),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            // Empty: the image's own cmd (a user's image keeps its entrypoint and cmd).
            cmd: (!spec.cmd.is_empty()).then(|| spec.cmd.clone()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            working_dir: spec.working_dir.clone(),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            host_config: Some(host_config),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default().build();
        crate::host::docker::guard_containers();
        let _creating = CREATING.lock().unwrap_or_else(|p| p.into_inner());
        if crate::host::owner::shutting_down() {
            bail!("tracelab is shutting down (signal received): no new container");
        }
        let created = self
            .rt
            .block_on(self.api.create_container(Some(options), body))
            .map_err(explain)
            .with_context(|| format!("cannot create a container from {}", spec.image))?;
        CREATED.lock().unwrap_or_else(|p| p.into_inner()).push(created.id.clone());
        Ok(created.id)
    }

    /// Attaches to a created container's stdout/stderr (call before `start` to miss nothing) and
    /// forwards each line into `tx` from a background task; the channel closes when the output does.
    pub fn forward_output(&self, id: &str, tx: std::sync::mpsc::Sender<String>) -> Result<()> {
        let options = AttachContainerOptionsBuilder::default().stdout(true).stderr(true).stream(true).logs(true).build();
        let attached = self
            .rt
            .block_on(self.api.attach_container(id, Some(options)))
            .map_err(explain)
            .with_context(|| format!("cannot attach to container {}", short(id)))?;
        let mut output = attached.output;
        self.rt.spawn(async move {
            let mut pending = String::new();
            while let Some(Ok(chunk)) = output.next().await {
                pending.push_str(&String::from_utf8_lossy(chunk.as_ref()));
                while let Some(nl) = pending.find('\n') {
                    let line: String = pending.drain(..=nl).collect();
                    if tx.send(line.trim_end_matches(['\n', '\r']).to_string()).is_err() {
                        return;
                    }
                }
            }
            if !pending.is_empty() {
                let _ = tx.send(pending);
            }
        });
        Ok(())
    }

    pub fn start(&self, id: &str) -> Result<()> {
        self.rt
            .block_on(self.api.start_container(id, None))
            .map_err(explain)
            .with_context(|| format!("cannot start container {}", short(id)))
    }

    /// The host pid of the container's main process (0 once it exited).
    pub(crate) fn host_pid(&self, id: &str) -> Result<u32> {
        let c = self
            .rt
            .block_on(self.api.inspect_container(id, None))
            .map_err(explain)
            .with_context(|| format!("cannot inspect container {}", short(id)))?;
        Ok(c.state.and_then(|s| s.pid).unwrap_or(0).max(0) as u32)
    }

    /// Waits for the container to stop; its exit code, or an error after `timeout`.
    pub fn wait(&self, id: &str, timeout: Duration) -> Result<i64> {
        let options = WaitContainerOptionsBuilder::default().condition("not-running").build();
        let waited = self.rt.block_on(async {
            let mut stream = self.api.wait_container(id, Some(options));
            tokio::time::timeout(timeout, stream.next()).await
        });
        match waited {
            Err(_) => bail!("container {} did not exit within {timeout:?}", short(id)),
            Ok(None) => bail!("the daemon closed the wait on container {} without an exit code", short(id)),
            Ok(Some(Ok(r))) => Ok(r.status_code),
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => Ok(code),
            Ok(Some(Err(e))) => Err(explain(e)).with_context(|| format!("waiting for container {}", short(id))),
        }
    }

    /// Removes a container (running or not) with its anonymous volumes; a missing one is fine.
    pub fn remove(&self, id: &str) -> Result<()> {
        let options = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        let result = match self.rt.block_on(self.api.remove_container(id, Some(options))) {
            Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            // 409: removal already in progress.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => Ok(()),
            Err(e) => Err(explain(e)).with_context(|| format!("cannot remove container {}", short(id))),
        };
        CREATED.lock().unwrap_or_else(|p| p.into_inner()).retain(|c| c != id);
        result
    }

    /// Ids and labels of containers carrying `label` (`key` or `key=value`), running or not.
    pub fn containers_with_label(&self, label: &str) -> Result<Vec<(String, HashMap<String, String>)>> {
        let filters = HashMap::from([("label".to_string(), vec![label.to_string()])]);
        let options = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let list = self.rt.block_on(self.api.list_containers(Some(options))).map_err(explain)?;
        Ok(list.into_iter().map(|c| (c.id.unwrap_or_default(), c.labels.unwrap_or_default())).collect())
    }

    /// Names of volumes carrying `label`.
    pub fn volumes_with_label(&self, label: &str) -> Result<Vec<String>> {
        let filters = HashMap::from([("label".to_string(), vec![label.to_string()])]);
        let options = ListVolumesOptionsBuilder::default().filters(&filters).build();
        let list = self.rt.block_on(self.api.list_volumes(Some(options))).map_err(explain)?;
        Ok(list.volumes.unwrap_or_default().into_iter().map(|v| v.name).collect())
    }

    /// Number of dangling (unused) volumes, labelled or not.
    pub fn dangling_volumes(&self) -> Result<usize> {
        let filters = HashMap::from([("dangling".to_string(), vec!["true".to_string()])]);
        let options = ListVolumesOptionsBuilder::default().filters(&filters).build();
        let list = self.rt.block_on(self.api.list_volumes(Some(options))).map_err(explain)?;
        Ok(list.volumes.map(|v| v.len()).unwrap_or(0))
    }

    /// Removes tracelab containers and volumes whose owner process is gone (all of them with
    /// `everything`).
    pub fn sweep(&self, everything: bool) -> Result<Swept> {
        let mut swept = Swept::default();
        for (id, labels) in self.containers_with_label(LABEL)? {
            // A container inherits its image's labels: one a user started from a tracelab image
            // carries `tracelab` too, but only the ones tracelab created name their owner.
            let Some(owner) = labels.get(LABEL_OWNER) else {
                continue;
            };
            let alive = crate::host::owner::alive(owner);
            if alive && !everything {
                swept.kept_alive.push(id);
                continue;
            }
            self.remove(&id)?;
            swept.containers.push(id);
        }
        for name in self.volumes_with_label(LABEL)? {
            match self.rt.block_on(self.api.remove_volume(&name, None::<RemoveVolumeOptions>)) {
                Ok(()) => swept.volumes.push(name),
                // In use by a live run's container.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {}
                Err(e) => return Err(explain(e)).with_context(|| format!("cannot remove volume {name}")),
            }
        }
        Ok(swept)
    }
}

/// First 12 characters of a container id, as `docker ps` shows it.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Streams a file as a request body (rootfs tarballs are hundreds of MB: never read whole).
fn file_chunks(path: &Path) -> Result<impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let chunks = futures_util::stream::iter(std::iter::from_fn(move || {
        let mut buf = vec![0u8; 1 << 20];
        match file.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some(Ok(bytes::Bytes::from(buf)))
            }
            Err(e) => Some(Err(e)),
        }
    }));
    Ok(chunks)
}

/// Removes every container this process created and has not removed yet. Safe to call from a
/// signal-handling thread and more than once.
pub(crate) fn remove_registered() {
    let _creating = CREATING.lock().unwrap_or_else(|p| p.into_inner());
    let ids: Vec<String> = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|p| p.into_inner()));
    if ids.is_empty() {
        return;
    }
    match Docker::connect() {
        Ok(docker) => {
            for id in ids {
                if let Err(e) = docker.remove(&id) {
                    super::owner::say(&format!("tracelab: {e:#}"));
                }
            }
        }
        Err(e) => super::owner::say(&format!("tracelab: could not remove containers {}: {e:#}", ids.join(" "))),
    }
}
/// Seconds a guardian waits for the owner's next renewal before it removes the owner's
/// containers (the lease).
pub const LEASE_S: u64 = 60;

const RENEW_EVERY_S: u64 = 15;

/// Starts (once per process) a guardian for this process's containers: a `bash` process in its
/// own session, reading a pipe this process renews every 15 s. When the pipe closes (this process
/// died, even of SIGKILL), it removes every container and volume labelled with this owner's tag
/// through the `docker` CLI (and its pods through `podman`) and ends. A lease of [`LEASE_S`] s without renewal while the pipe
/// stays open is an owner that lives but does not run — stopped (Ctrl-Z, SIGSTOP) or starved —
/// and keeps its containers (a removal then once turned a resumed run inconclusive). A Docker
/// daemon that does not answer (restarting) is asked again every 2 s for up to 10 minutes. It
/// depends on nothing inside the containers, so a user's image keeps its own entrypoint.
pub(crate) fn guard_containers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        super::owner::on_signal(remove_registered);
        match start_guardian() {
            Ok(pid) => super::owner::spare_on_signal(pid),
            Err(e) => super::owner::say(&format!(
                "tracelab: no guardian for this run's containers ({e:#}); if tracelab is killed, the next run or `cargo xtask sweep` removes them"
            )),
        }
    });
}

fn start_guardian() -> Result<u32> {
    use std::os::unix::process::CommandExt as _;
    use std::io::Write as _;
    let docker = super::environment::which("docker").context("the `docker` command is not on PATH")?;
    let owner = format!("{}={}", LABEL_OWNER, super::owner::tag());
    // The label value is PID:STARTTIME (digits and a colon): no quoting needed inside the script.
    // `read` ends 0 on a renewal, 1 at end of file (the owner is gone), above 128 when the lease
    // ran out with the pipe still open (the owner lives: stopped or starved).
    let lease = std::env::var("TRACELAB_LEASE_S").ok().and_then(|v| v.parse::<u64>().ok()).filter(|s| *s > 0).unwrap_or(LEASE_S);
    let script = format!(
        "while :; do read -r -t {lease} _; rc=$?; [ $rc -eq 1 ] && break; done
for try in $(seq 300); do
  ids=$(\"$0\" ps -aq --filter label={owner} 2>/dev/null) && break
  sleep 2
done
[ -n \"$ids\" ] && \"$0\" rm -f -v $ids >/dev/null 2>&1
vols=$(\"$0\" volume ls -q --filter label={owner} 2>/dev/null)
[ -n \"$vols\" ] && \"$0\" volume rm $vols >/dev/null 2>&1
{pods}exit 0",
        pods = super::podman::guardian_lines()
    );
    let (reader, mut writer) = std::io::pipe().context("cannot make the guardian's pipe")?;
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c").arg(script).arg(&docker);
    cmd.stdin(reader).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe; the guardian leaves the process group, so a Ctrl-C or
    // a SIGKILL to the owner's group does not take it along.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = cmd.spawn().context("cannot start bash for the guardian")?;
    let pid = child.id();
    // The child is reaped by init once this process is gone; while it lives, nobody waits on it.
    std::mem::forget(child);
    std::thread::Builder::new()
        .name("tracelab-lease".into())
        .spawn(move || {
            loop {
                if writer.write_all(b"\n").is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_secs(RENEW_EVERY_S));
            }
        })
        .context("cannot start the lease thread")?;
    Ok(pid)
}

