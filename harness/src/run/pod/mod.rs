//! The pod target: the app and a tools container in a real pod, played from Pod YAML with
//! `podman kube play` (no Kubernetes cluster runs on these machines; podman runs the same Pod
//! API: shareProcessNamespace, emptyDir, hostPath, securityContext, resources).
//!
//! Invariants shared with the container targets, so collectors need no pod knowledge: the run's
//! folder is at the same path inside as outside (a hostPath volume), the app's /tmp is readable on
//! the host (`/proc/PID/root/tmp` of the app container's init, which outlives the app), and tools
//! are addressed by the app's pid in the pod's pid namespace. Collectors are exec'd into the tools
//! container (`podman exec`, as `kubectl exec` would), with the capabilities its
//! securityContext adds; the app's container has none. A control folder in the run's folder
//! carries the app's exit code and each tool's pid (both containers mount the run's folder).

mod shape;
mod yaml;

pub use shape::{APP_UID, PodShape};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{AppLaunch, Program, RunningApp, Target, TargetKind, ToolProcess};
use crate::host::podman;
use super::wrapped::{child_of, is_system_dir, start_tool, wait_for_exit};
use crate::host::proc::pid_in_own_namespace;
use shape::{HostPath, PodPlan};

/// The control folder's name in the run's folder (removed at cleanup).
const CONTROL_DIR: &str = "pod-control";
const APP_EXIT_FILE: &str = "app-exit";
/// The Pod as played, kept in the run's folder.
pub const POD_YAML: &str = "pod.yaml";
/// The listen shape's folder in the pod and its socket.
const LISTEN_IN_POD: &str = "/diag";
const LISTEN_SOCKET: &str = "port.sock";
/// What the listen shape's monitor saw (in the run's folder).
pub const LISTEN_RECORD: &str = "pod-listen.txt";

static POD_SEQ: AtomicU32 = AtomicU32::new(0);

/// Options of the pod target.
#[derive(Clone, Debug)]
pub struct PodOptions {
    pub shape: PodShape,
    pub suite: &'static crate::host::image::Suite,
    /// Capabilities of the tools container.
    pub tool_caps: Vec<String>,
    /// The host's network (a loopback load generator on the host needs it).
    pub host_network: bool,
    /// `resources.limits.cpu` of the app (the limited shape: "1" unless set).
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
}

impl PodOptions {
    pub fn new(shape: PodShape, suite_name: &str, tool_caps: Vec<String>) -> Result<PodOptions> {
        Ok(PodOptions {
            shape,
            suite: crate::host::image::suite(suite_name)?,
            tool_caps,
            host_network: false,
            cpu_limit: None,
            memory_limit: None,
        })
    }
}

pub struct PodTarget {
    options: PodOptions,
    image: String,
    dotnet_root_host: PathBuf,
    pod: Option<String>,
    control: Option<PathBuf>,
    /// Host pid of a process in the pod's pid namespace that lives until cleanup (the tools
    /// container's).
    init_pid: u32,
    /// The app runs from a user's image: its files are its own, not tracelab's runtime image's.
    user_image: bool,
    app_root: Option<std::fs::File>,
    host_paths: Vec<PathBuf>,
    logs: Option<std::process::Child>,
    /// The listen shape's socket folder (in this process's scratch folder), removed at cleanup.
    listen_dir: Option<PathBuf>,
}

impl PodTarget {
    /// Checks podman's set-up, and makes sure the suite's runtime image is in podman (built
    /// through Docker on first use, then moved over).
    pub fn new(options: PodOptions) -> Result<PodTarget> {
        if let Some(problem) = podman::setup_problem() {
            return Err(anyhow::Error::new(crate::host::errors::Unsupported { reason: format!("the pod target cannot run here: {problem}") }));
        }
        crate::host::owner::install();
        let docker = crate::host::docker::Docker::connect()?;
        let dotnet = crate::host::dotnet::Dotnet::locate_or_install()?;
        let tag = crate::host::image::build(&docker, options.suite, &dotnet.root)?.runtime.tag;
        let image = podman::image_from_docker(&tag)?;
        Ok(PodTarget {
            options,
            image,
            dotnet_root_host: dotnet.root,
            pod: None,
            control: None,
            init_pid: 0,
            user_image: false,
            app_root: None,
            host_paths: Vec::new(),
            logs: None,
            listen_dir: None,
        })
    }

    fn container(&self, which: &str) -> Result<String> {
        Ok(format!("{}-{which}", self.pod.as_ref().context("no pod was played")?))
    }
}

impl Target for PodTarget {
    fn kind(&self) -> TargetKind {
        TargetKind::Pod
    }

    fn label(&self) -> String {
        format!("pod-{}-{}", self.options.shape.as_str(), self.options.suite.name)
    }

    fn capabilities(&self) -> Vec<String> {
        self.options.tool_caps.clone()
    }

    fn shares_tmp_with_tools(&self) -> bool {
        self.options.shape.shares_tmp()
    }

    fn launch(&mut self, app: &AppLaunch) -> Result<RunningApp> {
        if self.pod.is_some() {
            bail!("this target already runs a pod; make a new target per run");
        }
        let work_dir = std::path::absolute(&app.work_dir)?;
        let control = work_dir.join(CONTROL_DIR);
        std::fs::create_dir_all(&control).with_context(|| format!("cannot create {}", control.display()))?;
        {
            // The hardened app (UID 1654) writes its exit code here, and reads the run folder.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o1777))?;
            if self.options.shape == PodShape::Hardened {
                std::fs::set_permissions(&work_dir, std::fs::Permissions::from_mode(0o1777))?;
            }
        }
        let mut host_paths = vec![HostPath::both(&work_dir, false)];
        let mut add_folder_of = |file: &Path, what: &str| -> Result<()> {
            let file = std::path::absolute(file)?;
            if !file.is_file() {
                bail!("{what} {} does not exist", file.display());
            }
            let dir = file.parent().context("the app has no folder")?;
            if !dir.starts_with(&work_dir) && !is_system_dir(dir) {
                host_paths.push(HostPath { path: dir.to_path_buf(), read_only: true, in_app: true, in_tools: true });
            }
            Ok(())
        };
        // A user's image keeps its entrypoint (its args, when given, replace its cmd, as
        // Kubernetes' `args` do); the tools come from tracelab's image beside it.
        let user_image = match &app.program {
            Program::Image(image) => Some(podman::image_from_docker(image)?),
            _ => None,
        };
        let mut app_argv = match &app.program {
            Program::Dll(dll) => {
                add_folder_of(dll, "the app dll")?;
                vec!["dotnet".to_string(), std::path::absolute(dll)?.display().to_string()]
            }
            Program::Command(argv) => {
                if argv[0].starts_with('/') {
                    add_folder_of(Path::new(&argv[0]), "the app command")?;
                }
                argv.clone()
            }
            Program::Image(_) => Vec::new(),
        };
        if user_image.is_none() {
            app_argv.extend(app.args.iter().cloned());
        }
        if let Some(cwd) = &app.cwd
            && !cwd.starts_with(&work_dir)
        {
            host_paths.push(HostPath { path: cwd.clone(), read_only: !app.cwd_writable, in_app: true, in_tools: false });
        }
        let tools = crate::project_root().join(".build").join("tools");
        if tools.is_dir() {
            host_paths.push(HostPath { path: tools, read_only: true, in_app: false, in_tools: true });
        }
        // The init shell outlives the app (tools must flush after it exits, and its /tmp stays
        // readable), and writes the app's exit code where the host reads it.
        let mut command = Vec::new();
        if user_image.is_none() {
            command.extend([
                "sh".to_string(),
                "-c".to_string(),
                format!("\"$@\"; echo $? > {}/{APP_EXIT_FILE}; exec sleep 86400", control.display()),
                "sh".to_string(),
            ]);
            command.extend(app_argv);
        }
        let mut env: Vec<(String, String)> = app.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if user_image.is_none() && !app.env.contains_key("DOTNET_ROOT") {
            env.push(("DOTNET_ROOT".into(), "/usr/share/dotnet".into()));
        }
        let seq = POD_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("tracelab-{}-{seq}", std::process::id());
        // The listen shape: a monitor's socket in a folder both containers mount at /diag (short:
        // a socket path has at most 108 bytes), bound before the app starts, as dotnet-monitor's.
        let mut mounted_at = Vec::new();
        let mut listener = None;
        if self.options.shape == PodShape::Listen {
            let dir = crate::host::owner::scratch_dir()?.join(format!("diag-{seq}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
            let bound = eventpipe::ipc::ReverseListener::bind(dir.join(LISTEN_SOCKET))
                .with_context(|| format!("cannot listen on {}", dir.join(LISTEN_SOCKET).display()))?;
            env.push(("DOTNET_DiagnosticPorts".into(), format!("{LISTEN_IN_POD}/{LISTEN_SOCKET},suspend")));
            mounted_at.push((dir.clone(), LISTEN_IN_POD.to_string()));
            self.listen_dir = Some(dir);
            listener = Some(bound);
        }
        let labels = vec![("tracelab".to_string(), "1".to_string()), (podman::LABEL_OWNER.to_string(), podman::owner_label())];
        let (cpu_limit, memory_limit) = match self.options.shape {
            PodShape::Limited => (
                Some(self.options.cpu_limit.clone().unwrap_or_else(|| "1".into())),
                Some(self.options.memory_limit.clone().unwrap_or_else(|| "1Gi".into())),
            ),
            _ => (self.options.cpu_limit.clone(), self.options.memory_limit.clone()),
        };
        let plan = PodPlan {
            name: name.clone(),
            shape: self.options.shape,
            image: self.image.clone(),
            app_image: user_image.clone().unwrap_or_else(|| self.image.clone()),
            app_command: command,
            app_args: if user_image.is_some() { app.args.clone() } else { Vec::new() },
            app_env: env,
            app_workdir: match (&app.cwd, &user_image) {
                (Some(cwd), _) => Some(cwd.display().to_string()),
                (None, None) => Some(work_dir.display().to_string()),
                (None, Some(_)) => None,
            },
            tool_caps: self.options.tool_caps.clone(),
            host_paths: host_paths.clone(),
            mounted_at,
            host_network: self.options.host_network,
            cpu_limit,
            memory_limit,
            labels,
        };
        let yaml_path = work_dir.join(POD_YAML);
        std::fs::write(&yaml_path, plan.yaml()).with_context(|| format!("cannot write {}", yaml_path.display()))?;
        podman::register(&name)?;
        self.pod = Some(name.clone());
        self.control = Some(control.clone());
        self.host_paths = host_paths.into_iter().map(|h| h.path).collect();
        crate::host::progress::note("launch", &format!("pod {name} ({}) from {}", self.options.shape.as_str(), yaml_path.display()));
        podman::play(&yaml_path, self.options.host_network).map_err(crate::host::errors::Infrastructure::wrap)?;
        if let Some(listener) = listener {
            // The monitor: the runtime connects, advertises itself and waits for ResumeRuntime.
            let record = work_dir.join(LISTEN_RECORD);
            std::thread::spawn(move || {
                let line = match listener.resume_next(Duration::from_secs(60)) {
                    Ok(adv) => format!(
                        "runtime pid {} (cookie {}) connected to {LISTEN_IN_POD}/{LISTEN_SOCKET} and was resumed (ResumeRuntime)\n",
                        adv.pid,
                        adv.runtime_cookie.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    ),
                    Err(e) => format!("no runtime was resumed on {LISTEN_IN_POD}/{LISTEN_SOCKET}: {e}\n"),
                };
                let _ = std::fs::write(record, line);
            });
        }
        let app_container = self.container("app")?;
        let mut logs = podman::follow_logs(&app_container)?;
        let (tx, rx) = mpsc::channel();
        super::forward_lines(logs.stdout.take().unwrap(), tx.clone());
        super::forward_lines(logs.stderr.take().unwrap(), tx);
        self.logs = Some(logs);
        let init_pid = podman::container_pid(&app_container)?;
        if init_pid == 0 {
            let code = podman::exit_code(&app_container).unwrap_or(-1);
            return Err(crate::host::errors::Infrastructure::wrap(anyhow::anyhow!(
                "the app's container {app_container} exited right after its start (exit code {code})"
            )));
        }
        // The tools container lives until cleanup: its pid names the pod's pid namespace, and
        // its root shows the shared /tmp after the app (and a user image's container) ended.
        let tools_pid = podman::container_pid(&self.container("tools")?)?;
        let found = if user_image.is_some() { Ok(init_pid) } else { child_of(init_pid, Duration::from_secs(10)) };
        let host_pid = match found {
            Ok(pid) => pid,
            Err(e) => {
                let code = std::fs::read_to_string(control.join(APP_EXIT_FILE)).ok().map(|c| c.trim().to_string());
                let mut lines = Vec::new();
                while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
                    lines.push(line);
                }
                let start = lines.len().saturating_sub(15);
                let e = match code {
                    Some(code) => e.context(format!("the app exited at once with exit code {code}; its last lines:\n{}", lines[start..].join("\n"))),
                    None => e,
                };
                return Err(crate::host::errors::Infrastructure::wrap(e.context(format!("the app did not start in pod {name}"))));
            }
        };
        let target_pid = pid_in_own_namespace(host_pid)?;
        self.app_root = std::fs::File::open(format!("/proc/{init_pid}/root")).ok();
        self.init_pid = if tools_pid != 0 { tools_pid } else { init_pid };
        self.user_image = user_image.is_some();
        let tmp_root = if self.options.shape.shares_tmp() && tools_pid != 0 { tools_pid } else { init_pid };
        Ok(RunningApp {
            host_pid,
            target_pid,
            // The app's /tmp (an emptyDir) through its container's init, which outlives the app.
            tmp_dir_host: PathBuf::from(format!("/proc/{tmp_root}/root/tmp")),
            work_dir_in_target: work_dir,
            container_id: Some(app_container),
            output: rx,
            child: None,
            transcript: Vec::new(),
            held_at_start: false,
        })
    }

    fn spawn_tool(&mut self, app: &RunningApp, argv: &[String], env: &[(String, String)]) -> Result<ToolProcess> {
        if argv.is_empty() {
            bail!("no tool to start");
        }
        let tools = self.container("tools")?;
        let control = self.control.clone().context("no pod was played")?;
        static TOOL_SEQ: AtomicU32 = AtomicU32::new(0);
        let pid_name = format!("tool-{}.pid", TOOL_SEQ.fetch_add(1, Ordering::Relaxed));
        let pid_file = control.join(&pid_name);
        let _ = std::fs::remove_file(&pid_file);
        let mut c = Command::new("podman");
        c.arg("exec").arg("-w").arg(&app.work_dir_in_target);
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        c.arg(&tools).args(["sh", "-c", &format!("echo $$ > {}; exec \"$@\"", pid_file.display()), "sh"]).args(argv);
        let description = format!("`{}` in pod container {tools}", argv[0]);
        start_tool(c, self.init_pid, &pid_file, description, "cannot run `podman exec`")
    }

    fn wait_app(&mut self, app: &mut RunningApp, timeout: Duration) -> Result<i32> {
        let exit_file = self.control.clone().context("no pod was played")?.join(APP_EXIT_FILE);
        let container = self.container("app")?;
        // The whole container ended (killed, out of memory at its limit, a user image's app
        // exited): its own exit code.
        wait_for_exit(app, &exit_file, timeout, || {
            Ok(if podman::container_pid(&container)? == 0 { Some(podman::exit_code(&container)?) } else { None })
        })
    }

    fn cleanup(&mut self) -> Result<()> {
        let Some(name) = self.pod.take() else { return Ok(()) };
        let removed = podman::remove_pod(&name);
        podman::forget(&name);
        if let Some(mut logs) = self.logs.take() {
            let _ = logs.kill();
            let _ = logs.wait();
        }
        if let Some(control) = self.control.take() {
            let _ = std::fs::remove_dir_all(control);
        }
        if let Some(dir) = self.listen_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        removed
    }

    fn path_map(&self, path: &Path) -> Option<PathBuf> {
        if !self.user_image
            && let Ok(rest) = path.strip_prefix("/usr/share/dotnet")
        {
            return Some(self.dotnet_root_host.join(rest));
        }
        if self.host_paths.iter().any(|p| path.starts_with(p)) {
            return Some(path.to_path_buf());
        }
        let rel = path.strip_prefix("/").ok()?;
        let in_rootfs = crate::host::image::rootfs_dir(self.options.suite).join(rel);
        if !self.user_image && in_rootfs.exists() {
            return Some(in_rootfs);
        }
        use std::os::fd::AsRawFd;
        let through_root = PathBuf::from(format!("/proc/self/fd/{}", self.app_root.as_ref()?.as_raw_fd())).join(rel);
        through_root.exists().then_some(through_root)
    }
}

impl Drop for PodTarget {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            crate::host::owner::say(&format!("tracelab: {e:#}"));
        }
    }
}
