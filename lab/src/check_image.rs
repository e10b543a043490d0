//! `cargo xtask check-image IMAGE`: does tracing work for a user's own image, and how? Answered
//! from the image itself and from real runs of it, never from assumptions:
//! - its file system (`docker export` of a created, never started container: an image needs no
//!   shell for this) tells the .NET runtime(s) it carries, whether the app is self-contained, and
//!   whether LTTng can work (the runtime's tracepoint provider and the liblttng-ust soname it needs);
//! - its config tells the entrypoint, the cmd and the environment (a `DOTNET_EnableDiagnostics=0`
//!   removes the diagnostics socket; W^X and perf-map settings matter to perf);
//! - each collector then runs against the image through the engine, as a scenario with an
//!   `image` workload would, with the least capabilities the committed capability table names:
//!   the table's row says whether it recorded data, and the error when it did not.
//!
//! The table ends with the `docker run` flags that made the working collectors work.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use harness::collect::CollectorKind;
use harness::run::TargetKind;
use harness::scenario::{Scenario, WorkloadRef};

/// What the image holds, read off its exported file system.
#[derive(Debug, Default, PartialEq)]
pub struct ImageFiles {
    /// Versions of `Microsoft.NETCore.App` in a shared install (`…/shared/Microsoft.NETCore.App/X/`).
    pub shared_runtimes: BTreeSet<String>,
    /// Folders holding a `libcoreclr.so` outside a shared install: self-contained apps.
    pub self_contained: BTreeSet<String>,
    /// Paths of the runtime's LTTng tracepoint provider.
    pub lttng_providers: BTreeSet<String>,
    /// `liblttng-ust.so.N` files present.
    pub lttng_ust: BTreeSet<String>,
}

impl ImageFiles {
    /// Reads the paths of a tar stream (what `docker export` writes).
    pub fn from_tar(reader: impl Read) -> Result<ImageFiles> {
        let mut files = ImageFiles::default();
        let mut archive = tar::Archive::new(reader);
        for entry in archive.entries().context("reading the exported file system")? {
            let entry = entry.context("reading the exported file system")?;
            let path = entry.path()?.to_string_lossy().trim_start_matches("./").to_string();
            files.note(&path);
        }
        Ok(files)
    }

    fn note(&mut self, path: &str) {
        let name = path.rsplit('/').next().unwrap_or(path);
        if name == "libcoreclr.so" {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            match dir.split_once("shared/Microsoft.NETCore.App/") {
                Some((_, version)) if !version.contains('/') => {
                    self.shared_runtimes.insert(version.to_string());
                }
                _ => {
                    self.self_contained.insert(format!("/{dir}"));
                }
            }
        } else if name == "libcoreclrtraceptprovider.so" {
            self.lttng_providers.insert(format!("/{path}"));
        } else if name.starts_with("liblttng-ust.so.") && name.matches('.').count() == 2 {
            self.lttng_ust.insert(name.to_string());
        }
    }
}

/// One collector tried against the image.
#[derive(Debug)]
pub struct CollectorRow {
    pub collector: String,
    pub target: String,
    pub capabilities: String,
    pub works: bool,
    pub detail: String,
}

/// The answer for one image.
#[derive(Debug)]
pub struct ImageReport {
    pub image: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub files: ImageFiles,
    /// Settings in the image's environment that matter, with what they mean.
    pub settings: Vec<(String, String)>,
    pub rows: Vec<CollectorRow>,
    /// Pod shapes where perf-cpu or EventPipe worked, with the Pod YAML that ran (`--pod`) and
    /// the collectors that worked there.
    pub pod_yamls: Vec<(String, PathBuf, Vec<String>)>,
}

/// Environment settings of an image that change what tracing can do.
pub fn settings_of(env: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for kv in env {
        let Some((k, v)) = kv.split_once('=') else { continue };
        let meaning = match (k, v) {
            ("DOTNET_EnableDiagnostics" | "COMPlus_EnableDiagnostics", "0") => {
                "no diagnostics socket: EventPipe and dotnet-trace cannot attach; drop it or set DOTNET_EnableDiagnostics_IPC=1"
            }
            ("DOTNET_EnableWriteXorExecute" | "COMPlus_EnableWriteXorExecute", "0") => "W^X off: perf maps name JIT frames directly",
            ("DOTNET_PerfMapEnabled" | "COMPlus_PerfMapEnabled", _) => "perf map setting baked into the image (tracelab sets it per run)",
            ("TMPDIR", _) => "the runtime puts its diagnostics socket and perf map under TMPDIR: share that folder, not /tmp",
            ("DOTNET_LTTng" | "DOTNET_EnableEventLog", _) => "LTTng setting baked into the image",
            _ => continue,
        };
        out.push((kv.clone(), meaning.to_string()));
    }
    out
}

/// Exports `image`'s file system (a created, never started container) and reads its paths.
pub fn image_files(image: &str) -> Result<ImageFiles> {
    let created = Command::new("docker").args(["create", "--label", "tracelab=1", image]).output().context("cannot run `docker`")?;
    if !created.status.success() {
        bail!("docker create {image}: {}", String::from_utf8_lossy(&created.stderr).trim());
    }
    let id = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let result = (|| {
        let mut export = Command::new("docker").args(["export", &id]).stdout(Stdio::piped()).spawn()?;
        let files = ImageFiles::from_tar(export.stdout.take().unwrap());
        let status = export.wait()?;
        if !status.success() {
            bail!("docker export {image} failed ({status})");
        }
        files
    })();
    let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    result
}

/// Runs every collector against the image (each in its own run, tools in a sidecar, the least
/// capabilities of the committed table) and reads the image; `app_args` replace its cmd. With
/// `pod_shapes`, the EventPipe, dotnet-trace and perf-cpu collectors run against it in a real pod
/// of each shape too.
pub fn check(image: &str, app_args: &[String], results_root: &Path, pod_shapes: &[harness::run::pod::PodShape]) -> Result<ImageReport> {
    let docker = harness::host::docker::Docker::connect()?;
    let info = docker
        .inspect_image(image)?
        .with_context(|| format!("image {image} does not exist here: build it or `docker load` it; tracelab never pulls"))?;
    harness::host::progress::note("check-image", &format!("reading the file system of {image}"));
    let files = image_files(image)?;
    let settings = settings_of(&info.env);
    let mut rows = Vec::new();
    for kind in [CollectorKind::PerfCpu, CollectorKind::PerfOffcpu, CollectorKind::EventPipe, CollectorKind::DotnetTrace, CollectorKind::Lttng] {
        let caps = harness::collect::caps::least_working(kind).unwrap_or_default();
        let caps_text = if caps.is_empty() { "none".to_string() } else { caps.join("+") };
        if kind == CollectorKind::Lttng && (files.lttng_providers.is_empty() || files.lttng_ust.is_empty()) {
            rows.push(CollectorRow {
                collector: kind.as_str().into(),
                target: "sidecar".into(),
                capabilities: caps_text,
                works: false,
                detail: format!(
                    "not tried: the image lacks {}",
                    if files.lttng_providers.is_empty() { "the runtime's libcoreclrtraceptprovider.so" } else { "liblttng-ust.so.N (the provider's dependency)" }
                ),
            });
            continue;
        }
        harness::host::progress::note("check-image", &format!("{kind} in a sidecar with capabilities {caps_text}"));
        let mut scenario = Scenario::new(&format!("check-image-{kind}"), WorkloadRef::Image { image: image.to_string() });
        scenario.args = app_args.to_vec();
        scenario.seconds = Some(3.0);
        scenario.target = Some(TargetKind::Sidecar);
        scenario.capabilities = Some(caps.clone());
        scenario.collectors = vec![kind.probe_spec()];
        let opts = harness::engine::RunOptions { results_root: Some(results_root.to_path_buf()), ..Default::default() };
        let (works, detail) = match harness::engine::run(&scenario, &opts) {
            Ok(o) => {
                let m = &o.manifest.metrics;
                let n = |k: &str| m.get(&format!("{kind}.{k}")).copied().unwrap_or(0.0);
                let seen = format!("{} samples, {} events", n("samples_total"), n("events_total"));
                // Attached and recorded, but an idle app gave it nothing to see: that still works.
                let only_empty = !o.manifest.checks.is_empty()
                    && o.manifest.checks.iter().filter(|c| c.verdict != judge::Verdict::Pass).all(|c| c.name.ends_with("collected data"));
                match o.verdict {
                    judge::Verdict::Pass => (true, seen),
                    judge::Verdict::Fail if only_empty => {
                        (true, format!("attached and stopped cleanly, but {seen}: the app was idle (give --app-cmd a busier command)"))
                    }
                    _ => (false, o.reason.unwrap_or(seen)),
                }
            }
            Err(e) => (false, format!("{e:#}")),
        };
        rows.push(CollectorRow { collector: kind.as_str().into(), target: "sidecar".into(), capabilities: caps_text, works, detail });
    }
    let mut pod_yamls = Vec::new();
    for shape in pod_shapes {
        let mut working = Vec::new();
        let mut yaml = None;
        for kind in [CollectorKind::PerfCpu, CollectorKind::EventPipe, CollectorKind::DotnetTrace] {
            harness::host::progress::note("check-image", &format!("{kind} in a pod of shape {}", shape.as_str()));
            let mut scenario = Scenario::new(&format!("check-image-pod-{kind}"), WorkloadRef::Image { image: image.to_string() });
            scenario.args = app_args.to_vec();
            scenario.seconds = Some(3.0);
            scenario.target = Some(TargetKind::Pod);
            scenario.shape = Some(*shape);
            scenario.collectors = vec![kind.probe_spec()];
            let opts = harness::engine::RunOptions { results_root: Some(results_root.to_path_buf()), ..Default::default() };
            let (works, detail, caps) = match harness::engine::run(&scenario, &opts) {
                Ok(o) => {
                    let caps = o.manifest.environment.target_capabilities.join("+");
                    let played = o.dir.join("artifacts").join(harness::run::pod::POD_YAML);
                    if played.is_file() && yaml.is_none() {
                        yaml = Some(played);
                    }
                    match o.verdict {
                        judge::Verdict::Pass => (true, "recorded".to_string(), caps),
                        _ => (false, o.reason.unwrap_or_else(|| o.verdict.as_str().to_string()), caps),
                    }
                }
                Err(e) => (false, format!("{e:#}"), String::new()),
            };
            if works {
                working.push(kind.as_str().to_string());
            }
            let caps = if caps.is_empty() { "none".to_string() } else { caps };
            rows.push(CollectorRow { collector: kind.as_str().into(), target: format!("pod/{}", shape.as_str()), capabilities: caps, works, detail });
        }
        if !working.is_empty() && let Some(yaml) = yaml {
            let kept = results_root.join(format!("pod-{}.yaml", shape.as_str()));
            std::fs::copy(&yaml, &kept).with_context(|| format!("cannot copy {} to {}", yaml.display(), kept.display()))?;
            pod_yamls.push((shape.as_str().to_string(), kept, working));
        }
    }
    Ok(ImageReport { image: image.to_string(), entrypoint: info.entrypoint, cmd: info.cmd, files, settings, rows, pod_yamls })
}

impl ImageReport {
    /// The answer as markdown: what the image holds, each collector's row, the docker flags.
    pub fn markdown(&self) -> String {
        let mut s = format!("# {}\n\n", self.image);
        s.push_str(&format!("- entrypoint {:?}, cmd {:?}\n", self.entrypoint, self.cmd));
        let runtimes = if self.files.shared_runtimes.is_empty() {
            "none in a shared install".to_string()
        } else {
            self.files.shared_runtimes.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        s.push_str(&format!("- .NET runtime: {runtimes}"));
        if !self.files.self_contained.is_empty() {
            s.push_str(&format!("; self-contained app in {}", self.files.self_contained.iter().cloned().collect::<Vec<_>>().join(", ")));
        }
        s.push('\n');
        s.push_str(&format!(
            "- LTTng: provider {}; liblttng-ust {}\n",
            if self.files.lttng_providers.is_empty() { "absent".into() } else { self.files.lttng_providers.iter().cloned().collect::<Vec<_>>().join(", ") },
            if self.files.lttng_ust.is_empty() { "absent".into() } else { self.files.lttng_ust.iter().cloned().collect::<Vec<_>>().join(", ") },
        ));
        for (kv, meaning) in &self.settings {
            s.push_str(&format!("- `{kv}`: {meaning}\n"));
        }
        s.push_str("\n| collector | where | capabilities | works | detail |\n|---|---|---|---|---|\n");
        for r in &self.rows {
            let detail = r.detail.lines().next().unwrap_or("").replace('|', "\\|");
            s.push_str(&format!("| {} | {} | {} | {} | {} |\n", r.collector, r.target, r.capabilities, if r.works { "yes" } else { "no" }, detail));
        }
        s.push_str("\nTo trace it yourself (the flags the working rows ran with):\n\n```sh\n");
        s.push_str(&format!(
            "docker run -d --name app --ipc=shareable -v /srv/trace-tmp:/tmp -e DOTNET_PerfMapEnabled=1 -e DOTNET_EnableWriteXorExecute=0 {}\n",
            self.image
        ));
        let perf = self.rows.iter().find(|r| r.collector == "perf-cpu" && r.works);
        if let Some(p) = perf {
            let caps: String = p.capabilities.split('+').filter(|c| *c != "none").map(|c| format!(" --cap-add {c}")).collect();
            s.push_str(&format!(
                "docker run --rm --pid=container:app -v /srv/trace-tmp:/tmp{caps} tracelab/runtime:bullseye perf record -k 1 -F 499 -g -p 1 -o /tmp/perf.data\n"
            ));
        }
        if self.rows.iter().any(|r| r.collector == "eventpipe" && r.works) {
            s.push_str("# EventPipe / dotnet-trace: the diagnostics socket is /srv/trace-tmp/dotnet-diagnostic-1-*-socket on the host\n");
        }
        s.push_str("```\n");
        for (shape, yaml, working) in &self.pod_yamls {
            s.push_str(&format!(
                "\nIn a pod of shape `{shape}` {} worked: the Pod it ran is {} (hostPath volumes aside, which held tracelab's run folder, it is the pod to deploy; the `tools` container's securityContext is what the tools need)\n",
                working.join(", "),
                yaml.display()
            ));
        }
        s
    }
}

/// Where check-image keeps its runs: a folder of the results root.
pub fn results_root(root: Option<PathBuf>) -> PathBuf {
    root.unwrap_or_else(|| harness::project_root().join("results")).join(format!("check-image-{}", harness::report::utc_stamp()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_tell_runtimes_self_contained_apps_and_lttng() {
        let mut f = ImageFiles::default();
        for p in [
            "usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.1/libcoreclr.so",
            "usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.1/libcoreclrtraceptprovider.so",
            "app/libcoreclr.so",
            "usr/lib/x86_64-linux-gnu/liblttng-ust.so.0",
            "usr/lib/x86_64-linux-gnu/liblttng-ust.so.0.0.0",
            "usr/share/dotnet/shared/Microsoft.AspNetCore.App/10.0.1/Microsoft.AspNetCore.dll",
        ] {
            f.note(p);
        }
        assert_eq!(f.shared_runtimes, ["10.0.1".to_string()].into());
        assert_eq!(f.self_contained, ["/app".to_string()].into());
        assert_eq!(f.lttng_providers.len(), 1);
        assert_eq!(f.lttng_ust, ["liblttng-ust.so.0".to_string()].into());
    }

    #[test]
    fn settings_that_matter_are_named_with_their_meaning() {
        let s = settings_of(&["PATH=/usr/bin".into(), "DOTNET_EnableDiagnostics=0".into(), "TMPDIR=/var/tmp".into()]);
        assert_eq!(s.len(), 2);
        assert!(s[0].1.contains("no diagnostics socket"));
        assert!(s[1].1.contains("share that folder"));
    }
}
