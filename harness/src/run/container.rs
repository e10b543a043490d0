//! Container and sidecar targets.
//!
//! The app runs as pid 1 of a container of `tracelab/runtime:<suite>` with no network. Three
//! host folders are bind-mounted at the same path inside as outside (so every artifact path a
//! tool writes or records is also valid on the host): the run's work dir, the workload's build
//! folder (read-only), and a per-run folder mounted as the container's /tmp, where the runtime
//! writes perf-PID.map, jit-PID.dump and its diagnostics socket.
//!
//! Tools run either inside the app's container (`docker exec`: they have the app container's
//! capabilities) or in a sidecar container of the same image that joins the app's pid namespace
//! (`--pid=container:APP`) and mounts the same folders, with the collector's capabilities; the
//! app's container then gets none. A tool writes its in-namespace pid to a file in the shared /tmp
//! first, so the harness can find its host pid and interrupt it with SIGINT.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{AppLaunch, PreLaunch, Program, RunningApp, Target, TargetKind, ToolProcess};
use super::wrapped::{child_of, is_system_dir, start_tool, wait_for_exit};
use crate::host::proc::pid_in_own_namespace;
use crate::host::docker::{Bind, ContainerSpec, Docker};
use crate::host::image::Suite;

/// The folder of the run's work dir that is `/root/lttng-traces` in a sidecar target's app and
/// tool containers alike.
pub(crate) const SIDECAR_LTTNG_TRACES: &str = "container-lttng-traces";

/// The pseudo-capability asking for `--privileged`.
pub(crate) const PRIVILEGED: &str = "privileged";

/// Options of a container or sidecar target.
#[derive(Clone, Debug)]
pub struct ContainerOptions {
    pub suite: &'static Suite,
    /// Capabilities of the collector tools (`SYS_ADMIN`, `SYS_PTRACE`, or [`PRIVILEGED`]).
    pub tool_caps: Vec<String>,
    /// Extra host folders for app and tools (a dotnet-trace install …).
    pub extra_binds: Vec<Bind>,
    /// `none`; `host` only when a loopback load generator on the host needs to reach the app.
    pub network: String,
    /// Added as the `tracelab.run` label to every container (tests count their own leftovers).
    pub run_label: Option<String>,
}

impl ContainerOptions {
    pub fn new(suite_name: &str, tool_caps: Vec<String>) -> Result<Self> {
        Ok(ContainerOptions {
            suite: crate::host::image::suite(suite_name)?,
            tool_caps,
            extra_binds: Vec::new(),
            network: "none".into(),
            run_label: None,
        })
    }
}

pub struct ContainerTarget {
    kind: TargetKind,
    docker: Docker,
    image: String,
    options: ContainerOptions,
    dotnet_root_host: PathBuf,
    app_id: Option<String>,
    tool_ids: Vec<String>,
    /// Binds shared by the app and sidecars, set at launch.
    binds: Vec<Bind>,
    tmp_dir_host: Option<PathBuf>,
    work_dir: Option<PathBuf>,
    /// Host pid of the app container's init shell (lives until cleanup).
    init_pid: u32,
    /// `/proc/APP/root`, opened at launch.
    app_root: Option<std::fs::File>,
    /// The app runs from a user's image: its files are its own, not tracelab's runtime image's.
    user_image: bool,
}

static TOOL_SEQ: AtomicU32 = AtomicU32::new(0);

/// A FIFO in the container's /tmp: its init shell reads a line from it before it starts the app,
/// written once what must precede the app is ready ([`Target::launch_prepared`]).
const GATE_FILE: &str = ".tracelab-gate";

/// Makes the gate: a FIFO the container's init shell reads a line from before it starts the app.
fn make_gate(path: &Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).context("a gate path with a NUL byte")?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("cannot make the app's gate {}", path.display()));
    }
    Ok(())
}

/// Opens the gate: a line in the FIFO, kept open until the app runs (read-write and
/// non-blocking: written before the shell opens its end, the line waits there for it, and a FIFO
/// with no open end would drop it).
fn open_gate(path: &Path) -> Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut fifo = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot open the app's gate {}", path.display()))?;
    fifo.write_all(b"go\n").with_context(|| format!("cannot open the app's gate {}", path.display()))?;
    Ok(fifo)
}

/// Written by the container's init shell into /tmp when the app exits: its exit code.
const APP_EXIT_FILE: &str = ".tracelab-app-exit";

impl ContainerTarget {
    /// Connects to the daemon and makes sure the suite's runtime image exists (building it on
    /// first use). `kind` is [`TargetKind::Container`] or [`TargetKind::Sidecar`].
    pub fn new(kind: TargetKind, options: ContainerOptions) -> Result<Self> {
        if matches!(kind, TargetKind::Host | TargetKind::Pod) {
            bail!("ContainerTarget runs Docker containers; the host and pods have targets of their own");
        }
        crate::host::owner::install();
        let docker = Docker::connect()?;
        let dotnet = crate::host::dotnet::Dotnet::locate_or_install()?;
        let image = crate::host::image::build(&docker, options.suite, &dotnet.root)?.runtime.tag;
        Ok(ContainerTarget {
            kind,
            docker,
            image,
            options,
            dotnet_root_host: dotnet.root,
            app_id: None,
            tool_ids: Vec::new(),
            binds: Vec::new(),
            tmp_dir_host: None,
            work_dir: None,
            init_pid: 0,
            app_root: None,
            user_image: false,
        })
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    fn labels(&self) -> Vec<(String, String)> {
        self.options
            .run_label
            .iter()
            .map(|r| (crate::host::docker::LABEL_RUN.to_string(), r.clone()))
            .collect()
    }

    fn apply_caps(&self, spec: &mut ContainerSpec) {
        for cap in &self.options.tool_caps {
            if cap.eq_ignore_ascii_case(PRIVILEGED) {
                spec.privileged = true;
            } else {
                spec.cap_add.push(cap.clone());
            }
        }
    }

}

impl Target for ContainerTarget {
    fn kind(&self) -> TargetKind {
        self.kind
    }

    fn label(&self) -> String {
        format!("{}-{}", self.kind.as_str(), self.options.suite.name)
    }

    fn capabilities(&self) -> Vec<String> {
        self.options.tool_caps.clone()
    }

    fn launch(&mut self, app: &AppLaunch) -> Result<RunningApp> {
        Ok(self.launch_held(app, None)?.0)
    }

    fn launch_prepared(&mut self, app: &AppLaunch, prepare: &mut dyn FnMut(&PreLaunch) -> Result<()>) -> Result<(RunningApp, bool)> {
        self.launch_held(app, Some(prepare))
    }

    fn spawn_tool(&mut self, app: &RunningApp, argv: &[String], env: &[(String, String)]) -> Result<ToolProcess> {
        let app_id = app.container_id.clone().context("the app does not run in a container")?;
        if argv.is_empty() {
            bail!("no tool to start");
        }
        let seq = TOOL_SEQ.fetch_add(1, Ordering::Relaxed);
        let pid_name = format!(".tracelab-tool-{}-{seq}.pid", std::process::id());
        let pid_file = app.tmp_dir_host.join(&pid_name);
        let _ = std::fs::remove_file(&pid_file);
        // The shell writes its pid and becomes the tool (exec keeps the pid).
        let mut wrapped = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!("echo $$ > /tmp/{pid_name}; exec \"$@\""),
            "sh".to_string(),
        ];
        wrapped.extend(argv.iter().cloned());
        let work_dir = app.work_dir_in_target.display().to_string();

        let (command, description) = match self.kind {
            TargetKind::Container => {
                let mut c = Command::new("docker");
                c.arg("exec").arg("-w").arg(&work_dir);
                for (k, v) in env {
                    c.arg("-e").arg(format!("{k}={v}"));
                }
                c.arg(&app_id).args(&wrapped);
                (c, format!("`{}` in container {}", argv[0], crate::host::docker::short(&app_id)))
            }
            TargetKind::Sidecar => {
                let mut spec = ContainerSpec::new(&self.image, "tool", wrapped);
                spec.env = env.to_vec();
                spec.binds = self.binds.clone();
                spec.pid_mode = Some(format!("container:{app_id}"));
                spec.ipc_mode = Some(format!("container:{app_id}"));
                spec.network_mode = "none".into();
                spec.labels = self.labels();
                spec.working_dir = Some(work_dir);
                self.apply_caps(&mut spec);
                let id = self.docker.create(&spec)?;
                self.tool_ids.push(id.clone());
                let mut c = Command::new("docker");
                c.arg("start").arg("-a").arg(&id);
                (c, format!("`{}` in sidecar {}", argv[0], crate::host::docker::short(&id)))
            }
            TargetKind::Host | TargetKind::Pod => unreachable!(),
        };
        // The app may have exited already: its container's init holds the namespace.
        start_tool(command, self.init_pid, &pid_file, description, "cannot run the `docker` client (needed to attach tools): is docker installed?")
    }

    fn wait_app(&mut self, app: &mut RunningApp, timeout: Duration) -> Result<i32> {
        let id = app.container_id.clone().context("the app does not run in a container")?;
        let exit_file = app.tmp_dir_host.join(APP_EXIT_FILE);
        let docker = &self.docker;
        // The whole container ended (killed, out of memory): its own exit code.
        wait_for_exit(app, &exit_file, timeout, || {
            Ok(if docker.host_pid(&id)? == 0 { Some(docker.wait(&id, Duration::from_secs(10))? as i32) } else { None })
        })
    }

    fn cleanup(&mut self) -> Result<()> {
        let mut first_error = None;
        for id in self.tool_ids.drain(..).chain(self.app_id.take()) {
            if let Err(e) = self.docker.remove(&id) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn path_map(&self, path: &Path) -> Option<PathBuf> {
        if !self.user_image
            && let Ok(rest) = path.strip_prefix("/usr/share/dotnet")
        {
            return Some(self.dotnet_root_host.join(rest));
        }
        if let (Ok(rest), Some(tmp)) = (path.strip_prefix("/tmp"), &self.tmp_dir_host) {
            return Some(tmp.join(rest));
        }
        // Bind mounts sit at the same path inside and out.
        let bound = self.binds.iter().any(|b| b.source == b.target && path.starts_with(&b.source));
        if bound {
            return Some(path.to_path_buf());
        }
        let rel = path.strip_prefix("/").ok()?;
        if !self.user_image {
            let in_rootfs = crate::host::image::rootfs_dir(self.options.suite).join(rel);
            if in_rootfs.exists() {
                return Some(in_rootfs);
            }
        }
        use std::os::fd::AsRawFd;
        let through_root = PathBuf::from(format!("/proc/self/fd/{}", self.app_root.as_ref()?.as_raw_fd())).join(rel);
        through_root.exists().then_some(through_root)
    }
}

impl ContainerTarget {
    /// [`Target::launch`], with `prepare` (when given) run in the container's namespaces before
    /// its init shell starts the app: the shell waits for the gate file in the shared /tmp. A
    /// user's image starts as it is (its own pid 1: nothing can hold it), `prepare` unrun.
    fn launch_held(&mut self, app: &AppLaunch, prepare: Option<&mut dyn FnMut(&PreLaunch) -> Result<()>>) -> Result<(RunningApp, bool)> {
        if self.app_id.is_some() {
            bail!("this target already runs an app; make a new target per run");
        }
        let work_dir = std::path::absolute(&app.work_dir)?;
        let tmp = work_dir.join("container-tmp");
        std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))?;
        }
        // A previous run in the same work dir must not look like this app's exit.
        let _ = std::fs::remove_file(tmp.join(APP_EXIT_FILE));
        let _ = std::fs::remove_file(tmp.join(GATE_FILE));
        if prepare.is_some() {
            make_gate(&tmp.join(GATE_FILE))?;
        }
        let mut binds = vec![
            Bind { source: tmp.clone(), target: "/tmp".into(), read_only: false },
            Bind::same_path(&work_dir, false),
        ];
        // The app's files, read-only at the same path inside as outside.
        let mut bind_folder_of = |file: &Path, what: &str| -> Result<()> {
            let file = std::path::absolute(file)?;
            if !file.is_file() {
                bail!("{what} {} does not exist", file.display());
            }
            let dir = file.parent().context("the app has no folder")?;
            // A system program (`/bin/sh`, `/usr/bin/python3`) is the image's own: binding the
            // host's folder over the image's would run host binaries against the image's libc.
            if !dir.starts_with(&work_dir) && !is_system_dir(dir) {
                binds.push(Bind::same_path(dir, true));
            }
            Ok(())
        };
        match &app.program {
            Program::Dll(dll) => bind_folder_of(dll, "the app dll")?,
            Program::Command(argv) if argv[0].starts_with('/') => bind_folder_of(Path::new(&argv[0]), "the app command")?,
            _ => {}
        }
        if let Some(cwd) = &app.cwd
            && !cwd.starts_with(&work_dir)
        {
            // Outside the run folder the app only reads its working folder, unless the scenario
            // says `cwd_writable = true`.
            binds.push(Bind::same_path(cwd, !app.cwd_writable));
        }
        // Tools the harness installs on the host (dotnet-trace) run inside under the same path.
        let tools = crate::project_root().join(".build").join("tools");
        if tools.is_dir() {
            binds.push(Bind::same_path(&tools, true));
        }
        // LTTng-UST apps find the root session daemon under /var/run/lttng: shared with a
        // sidecar that runs lttng-sessiond (together with the IPC namespace, for /dev/shm).
        let lttng_run = work_dir.join("container-lttng-run");
        std::fs::create_dir_all(&lttng_run).with_context(|| format!("cannot create {}", lttng_run.display()))?;
        binds.push(Bind { source: lttng_run.clone(), target: "/var/run/lttng".into(), read_only: false });
        if self.kind == TargetKind::Sidecar {
            // A session a sidecar's client creates (perfcollect's `lttng create`) is written where
            // that client's home says, by whichever container's daemon runs: the app's, when the
            // lttng collector started one there. The same folder in both, so the client finds it.
            let traces = work_dir.join(SIDECAR_LTTNG_TRACES);
            std::fs::create_dir_all(&traces).with_context(|| format!("cannot create {}", traces.display()))?;
            binds.push(Bind { source: traces, target: "/root/lttng-traces".into(), read_only: false });
        }
        binds.extend(self.options.extra_binds.iter().cloned());

        // pid 1 is a shell that outlives the app: when a pid namespace's init exits, the kernel
        // kills every process in it, and tools (exec'd or in a sidecar) must survive the app's
        // exit to flush their data. The app's exit code goes to a file in the shared /tmp.
        // A user's image keeps its own entrypoint and cmd: it is pid 1 itself (its args, when
        // given, replace the image's cmd as with `docker run IMAGE ARGS`).
        let (image, cmd, wrapped) = match &app.program {
            Program::Image(image) => {
                if self.docker.inspect_image(image)?.is_none() {
                    bail!("image {image} does not exist here: build it (`docker build -t {image} …`) or `docker load` it; tracelab never pulls");
                }
                (image.clone(), app.args.clone(), false)
            }
            program => {
                // `read` is the shell's own: the app is its first child, as without a gate.
                let gate = if prepare.is_some() { format!("read go < /tmp/{GATE_FILE}; ") } else { String::new() };
                let mut cmd = vec![
                    "sh".to_string(),
                    "-c".to_string(),
                    format!("{gate}\"$@\"; echo $? > /tmp/{APP_EXIT_FILE}; exec sleep 86400"),
                    "sh".to_string(),
                    // The container holds the capabilities its exec'd tools need (perf's
                    // SYS_ADMIN …); the app under test runs with none: its bounding, inheritable
                    // and ambient sets emptied, so root in it has no capability at all.
                    "setpriv".to_string(),
                    "--inh-caps=-all".to_string(),
                    "--ambient-caps=-all".to_string(),
                    "--bounding-set=-all".to_string(),
                    "--".to_string(),
                ];
                match program {
                    Program::Dll(dll) => cmd.extend(["dotnet".to_string(), std::path::absolute(dll)?.display().to_string()]),
                    Program::Command(argv) => cmd.extend(argv.iter().cloned()),
                    Program::Image(_) => unreachable!(),
                }
                cmd.extend(app.args.iter().cloned());
                (self.image.clone(), cmd, true)
            }
        };
        let mut spec = ContainerSpec::new(&image, "app", cmd);
        let mut env: Vec<(String, String)> = app.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if wrapped && !app.env.contains_key("DOTNET_ROOT") {
            // A framework-dependent apphost (a `command`) finds the image's runtime here.
            env.push(("DOTNET_ROOT".into(), "/usr/share/dotnet".into()));
        }
        spec.env = env;
        spec.binds = binds.clone();
        spec.network_mode = self.options.network.clone();
        spec.labels = self.labels();
        spec.working_dir = match (&app.cwd, wrapped) {
            (Some(cwd), _) => Some(cwd.display().to_string()),
            (None, true) => Some(work_dir.display().to_string()),
            (None, false) => None,
        };
        if self.kind == TargetKind::Container {
            self.apply_caps(&mut spec);
        } else {
            spec.ipc_mode = Some("shareable".into());
        }
        let id = self.docker.create(&spec)?;
        self.app_id = Some(id.clone());
        let (tx, rx) = mpsc::channel();
        self.docker.forward_output(&id, tx)?;
        self.docker.start(&id)?;
        let init_pid = self.docker.host_pid(&id)?;
        if init_pid == 0 {
            bail!("the app's container {} exited right after its start", crate::host::docker::short(&id));
        }
        let mut gate = None;
        let prepared = match prepare {
            Some(prepare) if wrapped => {
                if let Err(e) = prepare(&PreLaunch { anchor: Some(init_pid), work_dir_in_target: work_dir.clone() }) {
                    // The app never starts: its container goes with the target, its gate now.
                    let _ = std::fs::remove_file(tmp.join(GATE_FILE));
                    return Err(e);
                }
                gate = Some(open_gate(&tmp.join(GATE_FILE))?);
                true
            }
            _ => false,
        };
        let host_pid = if wrapped {
            match child_of(init_pid, Duration::from_secs(10)) {
                Ok(pid) => pid,
                Err(e) => {
                    // An app that ended at once (a dll the container cannot see, a crash at
                    // start): its exit code, from the init shell, and what it printed.
                    let code = std::fs::read_to_string(tmp.join(APP_EXIT_FILE)).ok().map(|c| c.trim().to_string());
                    let mut lines = Vec::new();
                    while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
                        lines.push(line);
                    }
                    let start = lines.len().saturating_sub(15);
                    let read_only = match &app.cwd {
                        Some(cwd) if !app.cwd_writable && !cwd.starts_with(&work_dir) => format!(
                            " (its `cwd` {} is mounted read-only: `cwd_writable = true` lets it write there)",
                            cwd.display()
                        ),
                        _ => String::new(),
                    };
                    let e = match code {
                        Some(code) => e.context(format!(
                            "the app exited at once with exit code {code}{read_only}; its last lines:\n{}",
                            lines[start..].join("\n")
                        )),
                        None => e,
                    };
                    // Like an app that never becomes ready: nothing was measured (exit 5).
                    return Err(crate::host::errors::Infrastructure::wrap(
                        e.context(format!("the app did not start in container {}", crate::host::docker::short(&id))),
                    ));
                }
            }
        } else {
            init_pid
        };
        if gate.take().is_some() {
            // The shell read its line: the app runs.
            let _ = std::fs::remove_file(tmp.join(GATE_FILE));
        }
        let target_pid = pid_in_own_namespace(host_pid)?;
        // The app's own file system, for files a recording names (a user image's runtime is not
        // on the host): kept open, it stays readable after the app exits.
        self.app_root = std::fs::File::open(format!("/proc/{host_pid}/root")).ok();
        self.user_image = !wrapped;
        self.init_pid = init_pid;
        self.binds = binds;
        self.tmp_dir_host = Some(tmp.clone());
        self.work_dir = Some(work_dir.clone());
        let running = RunningApp {
            host_pid,
            target_pid,
            tmp_dir_host: tmp,
            work_dir_in_target: work_dir,
            container_id: Some(id),
            output: rx,
            child: None,
            transcript: Vec::new(),
            held_at_start: false,
        };
        Ok((running, prepared))
    }
}

impl Drop for ContainerTarget {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            // (`say`: a Drop may run during an unwind, where a panic on a closed stderr aborts.)
            crate::host::owner::say(&format!("tracelab: {e:#}"));
        }
    }
}
