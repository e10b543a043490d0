//! The on-CPU collector `perf-cpu` (`perf record -g -e cpu-clock`), and decoding a perf.data
//! recording into the model ([`decode_recording`], [`samples_to_model`], shared with the off-CPU
//! collector).
//!
//! Reading perf.data itself (header checks, record layout, decode) is the `perfdata` crate; its
//! types are re-exported here, where callers found them before it was a crate.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Collector, DecodeContext};
use crate::host::errors::Unsupported;
use model::Collection;
use crate::run::{RunningApp, Target, ToolProcess};

use perfdata::{PerfRecording, SampleOrder};
use stacks::decode_recording;

// ---------------------------------------------------------------------------------------------
// The perf-cpu collector
// ---------------------------------------------------------------------------------------------

/// Finds a perf binary: `perf`, else a versioned `perf_X.Y` (Debian bullseye ships only those).
pub fn detect_perf_binary() -> Option<PathBuf> {
    if let Some(p) = crate::host::environment::which("perf") {
        return Some(p);
    }
    let path = std::env::var_os("PATH")?;
    let mut found: Vec<PathBuf> = std::env::split_paths(&path)
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("perf_") && n[5..].starts_with(|c: char| c.is_ascii_digit())))
        .collect();
    found.sort();
    found.pop()
}

/// `call_graph` option: frame pointers or DWARF with a stack size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallGraph {
    FramePointer,
    Dwarf(u32),
}

impl CallGraph {
    pub(crate) fn parse(s: &str) -> Result<CallGraph> {
        if s == "fp" {
            return Ok(CallGraph::FramePointer);
        }
        if s == "dwarf" {
            return Ok(CallGraph::Dwarf(8192));
        }
        if let Some(n) = s.strip_prefix("dwarf,") {
            let size: u32 = n.parse().with_context(|| format!("call_graph `{s}`: `{n}` is not a stack size in bytes"))?;
            if size == 0 || size > 65528 || size % 8 != 0 {
                bail!("call_graph `{s}`: the stack size must be a multiple of 8 between 8 and 65528");
            }
            return Ok(CallGraph::Dwarf(size));
        }
        bail!("call_graph `{s}`: expected `fp`, `dwarf` or `dwarf,SIZE`")
    }

    /// Where stacks recorded this way are cut: a frame-pointer callchain at `max_stack` entries
    /// (`kernel.perf_event_max_stack` when perf started; the kernel's user and kernel frames
    /// together), a DWARF stack at the end of its stack dump.
    pub(crate) fn depth_limit(&self, max_stack: Option<u32>) -> model::DepthLimit {
        match self {
            CallGraph::FramePointer => model::DepthLimit {
                frames: max_stack,
                cause: format!(
                    "perf's frame-pointer callchain holds at most `kernel.perf_event_max_stack` = {} entries; raise it as \
                     root on the host (`sysctl -w kernel.perf_event_max_stack=1024`; a container shares the host's)",
                    max_stack.map_or("?".into(), |n| n.to_string())
                ),
            },
            CallGraph::Dwarf(n) => model::DepthLimit {
                frames: None,
                cause: format!(
                    "`--call-graph dwarf,{n}` copies {n} bytes of each thread's stack, and unwinding stops where they end; \
                     raise the size (`call_graph = \"dwarf,65528\"`, perf's maximum) or use `call_graph = \"fp\"`"
                ),
            },
        }
    }

    pub(crate) fn perf_args(&self) -> Vec<String> {
        match self {
            CallGraph::FramePointer => vec!["-g".into()],
            CallGraph::Dwarf(n) => vec!["--call-graph".into(), format!("dwarf,{n}")],
        }
    }
}

pub(crate) struct PerfCpuCollector {
    name: String,
    pub frequency: u64,
    pub call_graph: CallGraph,
    pub wx: bool,
    pub perf_binary: Option<String>,
    /// Name JIT frames in the W^X alias from the perf map (perf itself leaves them unnamed).
    pub name_doublemapped: bool,
    artifacts: Option<PathBuf>,
    target_pid: u32,
    tmp_dir_host: Option<PathBuf>,
    tool: Option<ToolProcess>,
    commands: Vec<String>,
    perf_stderr: Option<std::thread::JoinHandle<String>>,
    /// perf's control FIFOs, removed when the recording ends.
    control: Option<super::perf_record::PerfControl>,
    /// `kernel.perf_event_max_stack` when the recording started: the callchain's depth limit.
    max_stack: Option<u32>,
}

/// What a container needs for perf_event_open (shared/DESIGN.md §6: PERFMON is unknown to
/// Debian's docker.io 20.10, no capability fails).
pub(crate) const DEFAULT_CAPABILITIES: &[&str] = &["SYS_ADMIN"];

/// `[[collector]] kind = "perf-cpu"` options.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PerfCpuOptions {
    /// Samples per second (cpu-clock), 1..=100000.
    #[serde(default = "default_frequency")]
    pub frequency: u64,
    /// `fp` (default) or `dwarf,BYTES`.
    #[serde(default)]
    pub call_graph: Option<String>,
    /// Leave .NET's W^X on (the JIT then runs code from a memfd alias).
    #[serde(default)]
    pub wx: bool,
    #[serde(default)]
    pub perf_binary: Option<String>,
    /// Name JIT frames in the W^X alias from the perf map (perf itself leaves them unnamed).
    #[serde(default)]
    pub name_doublemapped: bool,
}

fn default_frequency() -> u64 {
    999
}

impl Default for PerfCpuOptions {
    fn default() -> Self {
        PerfCpuOptions { frequency: default_frequency(), call_graph: None, wx: false, perf_binary: None, name_doublemapped: false }
    }
}

/// The capability probe: the defaults a scenario gets (999 Hz, frame pointers).
pub(crate) fn probe_options() -> PerfCpuOptions {
    PerfCpuOptions::default()
}

pub fn from_spec(name: &str, options: &PerfCpuOptions) -> Result<Box<dyn Collector>> {
    Ok(Box::new(PerfCpuCollector::new(name, options)?))
}

impl PerfCpuCollector {
    pub(crate) fn new(name: &str, options: &PerfCpuOptions) -> Result<PerfCpuCollector> {
        let frequency = options.frequency;
        if frequency == 0 || frequency > 100_000 {
            return Err(super::bad_option("frequency", format!("collector `{name}`: frequency {frequency} Hz is out of range (1..100000)")));
        }
        Ok(PerfCpuCollector {
            name: name.to_string(),
            frequency,
            call_graph: CallGraph::parse(options.call_graph.as_deref().unwrap_or("fp"))
                .map_err(|e| super::bad_option("call_graph", format!("collector `{name}`: {e:#}")))?,
            wx: options.wx,
            perf_binary: options.perf_binary.clone(),
            name_doublemapped: options.name_doublemapped,
            artifacts: None,
            target_pid: 0,
            tmp_dir_host: None,
            tool: None,
            commands: Vec::new(),
            perf_stderr: None,
            control: None,
            max_stack: None,
        })
    }

    fn data_path(&self) -> Option<PathBuf> {
        self.artifacts.as_ref().map(|a| a.join(format!("{}.data", self.name)))
    }
}

/// Explains a failed perf start from its stderr: what is wrong and what to do.
pub fn explain_perf_failure(stderr: &str) -> String {
    let mut advice = String::new();
    if stderr.contains("Permission error mapping pages") {
        advice = "perf could not map its ring buffer: the locked-memory budget it shares with every perf session of \
                  uid 0 is used up"
            .into();
    } else if stderr.contains("perf_event_paranoid") || stderr.contains("Permission") || stderr.contains("EACCES") {
        advice = "perf may not observe this process: run as root, or lower /proc/sys/kernel/perf_event_paranoid \
                  (`sysctl kernel.perf_event_paranoid=1`), or in a container grant CAP_SYS_ADMIN \
                  (CAP_PERFMON where the engine knows it)"
            .into();
    } else if stderr.contains("No such process") || stderr.contains("ESRCH") {
        advice = "the app exited before perf attached".into();
    } else if stderr.contains("not supported") || stderr.contains("EOPNOTSUPP") {
        advice = "the kernel or VM does not support this event".into();
    }
    if advice.is_empty() { stderr.trim().to_string() } else { format!("{advice}. perf said: {}", stderr.trim()) }
}

impl Collector for PerfCpuCollector {
    fn name(&self) -> &str {
        &self.name
    }

    fn app_env(&self) -> Vec<(String, String)> {
        let mut env = vec![("DOTNET_PerfMapEnabled".to_string(), "1".to_string())];
        if !self.wx {
            // With W^X on, JIT code runs from a memfd alias the perf map does not describe.
            env.push(("DOTNET_EnableWriteXorExecute".into(), "0".into()));
        }
        env
    }

    fn start(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path) -> Result<()> {
        let perf = match &self.perf_binary {
            Some(p) => p.clone(),
            // Inside a container the engine's target knows its own tools; on the host we detect.
            None if app.container_id.is_none() => match detect_perf_binary() {
                Some(p) => p.display().to_string(),
                None => {
                    return Err(Unsupported {
                        reason: "no `perf` (or `perf_X.Y`) on PATH: install linux-perf (Debian) / linux-tools (`cargo xtask setup` does)".into(),
                    }
                    .into());
                }
            },
            None => "perf".to_string(),
        };
        let name = self.name.clone();
        super::perf_record::waiting_for_budget(&name, || self.start_once(target, app, artifacts, perf.clone()))
    }

    fn stop(&mut self, _target: &mut dyn Target, app: &RunningApp) -> Result<()> {
        self.stop_recording(app)
    }

    fn decode(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        self.decode_data(ctx)
    }

    fn commands(&self) -> Vec<String> {
        self.commands.clone()
    }
}

/// The app's `perfinfo-PID.map` beside its perf map (what trace.zip carries to PerfView), from
/// the recording's mappings when the runtime wrote none (.NET 9 and later do not). A failure
/// costs PerfView the images' identities, not the run: it is said and the run goes on.
fn write_perfinfo(rec: &PerfRecording, ctx: &DecodeContext) {
    let runtime_wrote_one = stacks::perfcollect::runtime_files(ctx.artifacts)
        .iter()
        .any(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("perfinfo-")));
    let Some(pid) = rec.samples.first().map(|s| s.pid) else { return };
    if runtime_wrote_one {
        return;
    }
    let text = stacks::perfcollect::perfinfo_text(rec, pid, ctx.path_map);
    let path = ctx.artifacts.join(format!("perfinfo-{}.map", ctx.target_pid));
    if !text.is_empty()
        && let Err(e) = std::fs::write(&path, text)
    {
        crate::host::owner::say(&format!("warning: could not write {}: {e}", path.display()));
    }
}

impl PerfCpuCollector {
    /// One start of `perf record`, returning once its events are enabled.
    fn start_once(&mut self, target: &mut dyn Target, app: &RunningApp, artifacts: &Path, perf: String) -> Result<()> {
        std::fs::create_dir_all(artifacts).with_context(|| format!("cannot create {}", artifacts.display()))?;
        self.artifacts = Some(artifacts.to_path_buf());
        self.target_pid = app.target_pid;
        self.tmp_dir_host = Some(app.tmp_dir_host.clone());
        let host_out = self.data_path().unwrap();
        let _ = std::fs::remove_file(&host_out);
        // The engine makes the artifacts folder the app's work dir; the tool sees it at
        // `work_dir_in_target` (on the host, the same path).
        let out_in_target = if app.container_id.is_none() {
            host_out.clone()
        } else {
            app.work_dir_in_target.join(host_out.file_name().unwrap())
        };
        self.max_stack = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack").ok().and_then(|s| s.trim().parse().ok());
        let mut argv = vec![perf, "record".into(), "-k".into(), "1".into()];
        argv.extend(self.call_graph.perf_args());
        argv.extend([
            "--sample-cpu".into(),
            "-e".into(),
            "cpu-clock".into(),
            "-F".into(),
            self.frequency.to_string(),
            "-p".into(),
            app.tool_pid().to_string(),
            "-o".into(),
            out_in_target.display().to_string(),
        ]);
        let mut control = super::perf_record::PerfControl::beside(&host_out, app)?;
        let argv = super::perf_record::with_control(argv, &control);
        control.request_enable()?;
        self.commands.push(crate::host::proc::quoted(&argv));
        let mut tool = target.spawn_tool(app, &argv, &[])?;
        let stderr = tool.child.stderr.take();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        self.perf_stderr = stderr.map(|s| {
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut all = String::new();
                for line in std::io::BufReader::new(s).lines().map_while(Result::ok) {
                    let _ = tx.send(line.clone());
                    all.push_str(&line);
                    all.push('\n');
                }
                all
            })
        });
        // perf answers on its control FIFO once its events are enabled (see PerfControl): from
        // then on every sample of the app is recorded.
        let limit = super::perf_record::start_limit();
        let deadline = Instant::now() + limit;
        let mut early_stderr = String::new();
        loop {
            while let Ok(line) = rx.try_recv() {
                early_stderr.push_str(&line);
                early_stderr.push('\n');
            }
            if let Some(status) = tool.child.try_wait()? {
                let all = self.perf_stderr.take().and_then(|h| h.join().ok()).unwrap_or(early_stderr);
                bail!("perf exited at start ({status}): {}", explain_perf_failure(&all));
            }
            if control.acknowledged() {
                break;
            }
            if Instant::now() > deadline {
                let _ = tool.interrupt();
                let size = std::fs::metadata(&host_out).map(|m| m.len()).unwrap_or(0);
                bail!(
                    "perf did not enable its events within {} s (no `ack` on its control FIFO; {} holds {size} bytes); perf said: {}",
                    limit.as_secs(),
                    host_out.display(),
                    early_stderr.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.tool = Some(tool);
        self.control = Some(control);
        Ok(())
    }

    fn stop_recording(&mut self, app: &RunningApp) -> Result<()> {
        if let Some(mut tool) = self.tool.take() {
            // perf -p exits by itself once the process is gone; an app still running (stopped
            // after the collectors) needs no grace.
            let grace = if app.is_alive() { 0 } else { 5 };
            let deadline = Instant::now() + Duration::from_secs(grace);
            while tool.child.try_wait()?.is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if tool.child.try_wait()?.is_none() {
                tool.interrupt()?;
            }
            let status = tool.wait(Duration::from_secs(30))?;
            self.control = None;
            let stderr = self.perf_stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
            if let Some(artifacts) = &self.artifacts {
                let _ = std::fs::write(artifacts.join(format!("{}.perf-record.txt", self.name)), &stderr);
            }
            let data = self.data_path().unwrap_or_default();
            if !data.is_file() {
                bail!("perf record ended ({status}) without writing {}: {}", data.display(), explain_perf_failure(&stderr));
            }
        }
        if let (Some(artifacts), Some(tmp)) = (&self.artifacts, &self.tmp_dir_host) {
            for file in [format!("perf-{}.map", self.target_pid), format!("jit-{}.dump", self.target_pid)] {
                let from = tmp.join(&file);
                if from.is_file() && !artifacts.join(&file).is_file() {
                    std::fs::copy(&from, artifacts.join(&file))
                        .with_context(|| format!("cannot copy {} into {}", from.display(), artifacts.display()))?;
                }
            }
        }
        Ok(())
    }

    fn decode_data(&mut self, ctx: &DecodeContext) -> Result<Collection> {
        let path = ctx.artifacts.join(format!("{}.data", self.name));
        if let CallGraph::Dwarf(_) = self.call_graph {
            return self.decode_dwarf(&path, ctx);
        }
        let rec = PerfRecording::read_with(&path, SampleOrder::Time, |mmaps, os| stacks::prefetch_job(ctx, mmaps, os))?;
        let mut coll = decode_recording(&rec, ctx, &self.name, self.name_doublemapped)?;
        coll.metrics.insert("frequency_hz".into(), self.frequency as f64);
        coll.depth_limit = Some(self.call_graph.depth_limit(self.max_stack));
        write_perfinfo(&rec, ctx);
        Ok(coll)
    }

    /// A `--call-graph dwarf` recording: the kernel kept user registers and stack bytes, not a
    /// user callchain (its chains hold kernel frames only), so the user stacks are unwound by
    /// our unwinder, as the off-CPU collector's are. (Read as an fp recording, every sample
    /// once folded to its kernel frames alone.)
    fn decode_dwarf(&mut self, path: &Path, ctx: &DecodeContext) -> Result<Collection> {
        let unwound = super::offcpu::unwind_app_recording(path, ctx, None, None)?;
        let mut coll = Collection::new(&self.name);
        let ran_out = unwound.samples.iter().filter(|s| matches!(s.end, stacks::StackEnd::Truncated(_))).count();
        coll.samples = unwound
            .samples
            .into_iter()
            .map(|s| model::Sample { cpu: s.cpu, ..model::Sample::new(s.pid, s.tid, s.time_ns, s.frames) })
            .collect();
        coll.sampling = model::Sampling::CpuTime;
        coll.lost_events = unwound.lost;
        coll.thread_names = unwound.thread_names;
        coll.metrics.insert("samples_total".into(), coll.samples.len() as f64);
        coll.metrics.insert("lost_events".into(), unwound.lost as f64);
        coll.metrics.insert("frequency_hz".into(), self.frequency as f64);
        coll.metrics.insert("unwind_stopped_early_samples".into(), ran_out as f64);
        coll.depth_limit = Some(self.call_graph.depth_limit(self.max_stack));
        Ok(coll)
    }
}
