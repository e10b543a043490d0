//! The kernel axis: run scenarios inside each kernel's guest with the very engine the host uses.
//!
//! One boot per kernel runs every chosen scenario in turn: the guest runs the `xtask` binary
//! (`scenario NAME --target host`), so collection, decoding, checks and the results folder are
//! exactly those of a host run, and the environment block (kernel, perf, LTTng, paranoia …) is
//! read inside the guest. The host binary needs glibc ≥ 2.34 and the guest's bullseye has 2.31,
//! so the binary travels with the host's own loader and libc and runs through that loader; the
//! tools it starts (perf, dotnet, lttng) use the guest's libraries as usual.
//!
//! Project files travel to the same absolute paths as on the host (scenarios, workload sources
//! and their built outputs with build stamps, .NET), so the guest finds its workloads up to date
//! instead of rebuilding them under emulation.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::vm::{BootOptions, GuestJob, KernelSpec};

#[derive(Clone, Debug)]
pub struct KernelMatrixOptions {
    /// Kernel labels (`5.10`, `6.1`, `6.12`, `6.12-user-events`) or suites; empty = Debian's own
    /// kernels ([`crate::vm::default_kernels`]).
    pub kernels: Vec<String>,
    /// Scenario names (`scenarios/NAME.toml`); empty = every scenario.
    pub scenarios: Vec<String>,
    /// Where result folders go (default `results/`).
    pub results_root: Option<PathBuf>,
    /// The `xtask` binary run inside the guest (default: the running executable when it is
    /// xtask, else `target/debug/xtask`).
    pub runner: Option<PathBuf>,
    /// Fresh boots for scenarios that failed (not skipped): a flaky start in emulation is
    /// reported as such rather than as the kernel's verdict.
    pub retries: u32,
    pub boot: BootOptions,
}

impl Default for KernelMatrixOptions {
    fn default() -> Self {
        KernelMatrixOptions {
            kernels: Vec::new(),
            scenarios: Vec::new(),
            results_root: None,
            runner: None,
            retries: 1,
            boot: BootOptions::default(),
        }
    }
}

/// One (kernel, scenario) cell.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCell {
    pub kernel: String,
    /// `uname -r` in the guest.
    pub release: String,
    pub package: String,
    pub scenario: String,
    /// `pass` | `fail` | `skip`.
    pub verdict: String,
    pub reason: Option<String>,
    /// The results folder brought back (None when the guest produced none).
    pub results_dir: Option<PathBuf>,
    /// Boots used (1 + retries taken).
    pub attempts: u32,
    /// Why earlier attempts failed, when a retry was needed.
    pub earlier_failures: Vec<String>,
    /// Wall time of the boot that produced the verdict (all its scenarios).
    pub boot_s: f64,
}

/// The cells of a default run (`kernel × scenario`).
pub fn cells() -> Result<Vec<String>> {
    Ok(list_cells(&KernelMatrixOptions::default())?.into_iter().map(|(k, s)| format!("{} ({}) / {s}", k.label, k.suite)).collect())
}

/// A run with default options, written to `results/`.
pub fn run_default() -> Result<PathBuf> {
    write(&run_kernel_matrix(&KernelMatrixOptions::default())?, &super::results_root())
}

/// One row per cell, the reason of each failure or skip in its row.
pub fn markdown(cells: &[KernelCell]) -> String {
    let mut s = String::from("# Kernel matrix\n\n| kernel | release | scenario | verdict | reason |\n|---|---|---|---|---|\n");
    for c in cells {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.kernel,
            c.release,
            c.scenario,
            c.verdict.to_uppercase(),
            c.reason.as_deref().unwrap_or("").replace('|', "\\|").replace('\n', " ")
        ));
    }
    s
}

/// Writes `kernels.md` and `kernels.json` into `results/<utc>-matrix-kernels/`.
pub fn write(cells: &[KernelCell], results: &Path) -> Result<PathBuf> {
    super::write_result("kernels", results, &markdown(cells), &cells)
}

/// The matrix cells as `kernel × scenario` without running anything (for `--list`).
pub fn list_cells(opts: &KernelMatrixOptions) -> Result<Vec<(KernelSpec, String)>> {
    let kernels = selected_kernels(&opts.kernels)?;
    let scenarios = selected_scenarios(&opts.scenarios)?;
    Ok(kernels.iter().flat_map(|k| scenarios.iter().map(move |s| (k.clone(), s.clone()))).collect())
}

fn selected_kernels(names: &[String]) -> Result<Vec<KernelSpec>> {
    if names.is_empty() {
        return Ok(crate::vm::default_kernels());
    }
    names.iter().flat_map(|n| n.split(',')).filter(|n| !n.is_empty()).map(crate::vm::kernel_spec).collect()
}

fn selected_scenarios(names: &[String]) -> Result<Vec<String>> {
    let names: Vec<String> = if names.is_empty() {
        harness::scenario::list_names()?
    } else {
        names.iter().flat_map(|n| n.split(',')).filter(|n| !n.is_empty()).map(str::to_string).collect()
    };
    for n in &names {
        harness::scenario::Scenario::find(n)?;
    }
    Ok(names)
}

/// Runs the chosen scenarios in each chosen kernel's guest; one cell per (kernel, scenario).
/// Results folders land in `results_root` named `…-qemu-<kernel>`, their manifest's
/// `environment.target` set to `qemu` and a `vm` block added (kernel package, boot time, TCG).
pub fn run_kernel_matrix(opts: &KernelMatrixOptions) -> Result<Vec<KernelCell>> {
    crate::vm::boot_prerequisites().map_err(|e| anyhow::anyhow!("cannot boot guests: {e}"))?;
    let kernels = selected_kernels(&opts.kernels)?;
    let scenarios = selected_scenarios(&opts.scenarios)?;
    let runner = runner_binary(opts.runner.as_deref())?;
    let results_root = opts.results_root.clone().unwrap_or_else(|| harness::project_root().join("results"));
    // Build every workload on the host first: the guest then finds them up to date.
    for s in &scenarios {
        let scenario = harness::scenario::Scenario::find(s)?;
        harness::workload::build(&scenario.workload)
            .with_context(|| format!("building the workload of `{s}` for the guests"))?;
        // Tools installed from the offline feed travel with the job (.build/tools): the guest
        // has no feed to install from.
        if scenario.collectors.iter().any(|c| {
            matches!(c.kind(), harness::collect::CollectorKind::DotnetTrace | harness::collect::CollectorKind::CollectLinux)
        }) {
            harness::collect::dotnet_trace::ensure_installed().context("installing dotnet-trace for the guests")?;
        }
    }
    let mut cells = Vec::new();
    for kernel in &kernels {
        let mut pending: Vec<String> = scenarios.clone();
        let mut history: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut attempt = 0;
        while !pending.is_empty() {
            attempt += 1;
            harness::host::progress::note("launch", &format!("kernel {} ({}): booting for {} (attempt {attempt})", kernel.label, kernel.suite, pending.join(", ")));
            let found = boot_and_run(kernel, &pending, &runner, &results_root, opts, attempt);
            let mut retry = Vec::new();
            for s in &pending {
                let cell = match &found {
                    Ok(run) => run.cell(kernel, s),
                    Err(e) => KernelCell {
                        kernel: kernel.label.to_string(),
                        release: String::new(),
                        package: String::new(),
                        scenario: s.clone(),
                        verdict: "fail".into(),
                        reason: Some(format!("the guest did not complete: {e:#}")),
                        results_dir: None,
                        attempts: attempt,
                        earlier_failures: Vec::new(),
                        boot_s: 0.0,
                    },
                };
                if cell.verdict == "fail" && attempt <= opts.retries {
                    eprintln!("    {s} FAILED on {} ({}); retrying in a fresh boot", kernel.label, cell.reason.as_deref().unwrap_or(""));
                    history.entry(s.clone()).or_default().push(cell.reason.clone().unwrap_or_default());
                    retry.push(s.clone());
                } else {
                    let mut cell = cell;
                    cell.attempts = attempt;
                    cell.earlier_failures = history.remove(s).unwrap_or_default();
                    eprintln!(
                        "    {s} on {}: {}{}",
                        kernel.label,
                        cell.verdict.to_uppercase(),
                        cell.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
                    );
                    cells.push(cell);
                }
            }
            pending = retry;
        }
    }
    Ok(cells)
}

struct BootRun {
    release: String,
    package: String,
    boot_s: f64,
    /// scenario → (results folder, manifest)
    found: std::collections::BTreeMap<String, (PathBuf, serde_json::Value)>,
    job_log_tail: String,
}

impl BootRun {
    fn cell(&self, kernel: &KernelSpec, scenario: &str) -> KernelCell {
        let (verdict, reason, dir) = match self.found.get(scenario) {
            Some((dir, m)) => (
                m["verdict"].as_str().unwrap_or("fail").to_string(),
                m["reason"].as_str().map(str::to_string),
                Some(dir.clone()),
            ),
            None => (
                "fail".to_string(),
                Some(format!("the guest wrote no results folder for it; job output:\n{}", self.job_log_tail)),
                None,
            ),
        };
        KernelCell {
            kernel: kernel.label.to_string(),
            release: self.release.clone(),
            package: self.package.clone(),
            scenario: scenario.to_string(),
            verdict,
            reason,
            results_dir: dir,
            attempts: 1,
            earlier_failures: Vec::new(),
            boot_s: self.boot_s,
        }
    }
}

fn boot_and_run(
    kernel: &KernelSpec,
    scenarios: &[String],
    runner: &Path,
    results_root: &Path,
    opts: &KernelMatrixOptions,
    attempt: u32,
) -> Result<BootRun> {
    let job = scenario_job(scenarios, runner)?;
    let work = crate::vm::image::cache_dir().join("runs").join(format!("{}-{}", kernel.label, harness::report::utc_stamp()));
    let started = Instant::now();
    // Under emulation a scenario takes minutes (decoding and flame graphs included): the boot's
    // limit grows with the scenarios it runs.
    let mut boot = opts.boot.clone();
    boot.timeout = boot.timeout.max(std::time::Duration::from_secs(300 + 900 * scenarios.len() as u64));
    let (prepared, outcome) = crate::vm::run_job(kernel, &job, &boot, &work)?;
    let boot_s = started.elapsed().as_secs_f64();
    let Some(code) = outcome.exit_code else {
        bail!(
            "the guest ({}) ended without reporting; console {}:\n{}",
            prepared.release,
            outcome.console_log.display(),
            outcome.console_tail(25)
        );
    };
    let log = outcome.job_log();
    let tail: Vec<&str> = log.lines().collect();
    let job_log_tail = tail[tail.len().saturating_sub(25)..].join("\n");
    if code == 125 {
        bail!("the guest could not unpack its job; console:\n{}", outcome.console_tail(25));
    }
    std::fs::create_dir_all(results_root).with_context(|| format!("cannot create {}", results_root.display()))?;
    let mut found = std::collections::BTreeMap::new();
    let came_back = outcome.out_dir.join("results");
    if let Ok(entries) = std::fs::read_dir(&came_back) {
        for entry in entries.flatten() {
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest_path = dir.join("manifest.json");
            // The guest's `latest` link points at a run folder found on its own.
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if name.starts_with('.') || is_link || !manifest_path.is_file() {
                continue;
            }
            let mut manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest_path)?)
                .with_context(|| format!("{} from the guest is not JSON", manifest_path.display()))?;
            let label = crate::vm::environment_label(kernel);
            manifest["environment"]["target"] = "qemu".into();
            manifest["vm"] = serde_json::json!({
                "kernel": kernel.label,
                "suite": kernel.suite,
                "cmdline": kernel.cmdline,
                "release": prepared.release,
                "package": prepared.package,
                "accel": opts.boot.accel,
                "cpu": opts.boot.cpu,
                "boot_s": boot_s,
                "attempt": attempt,
                "guest_exit_code": code,
            });
            let new_name = format!("{}-{label}", name.strip_suffix(&host_suffix(&name)).unwrap_or(&name));
            manifest["run_id"] = new_name.clone().into();
            std::fs::write(&manifest_path, serde_json::to_string_pretty(&manifest)?)?;
            // The guest wrote its junit.xml as a host run: rewritten, its test ids name the kernel cell.
            std::fs::write(dir.join("junit.xml"), harness::report::junit::document(&manifest))?;
            let dest = results_root.join(&new_name);
            if dest.exists() {
                std::fs::remove_dir_all(&dest)?;
            }
            move_dir(&dir, &dest)?;
            // The guest's job log beside the run, for reading a failure without rebooting.
            let _ = std::fs::copy(outcome.out_dir.join("job.log"), dest.join("guest-job.log"));
            let _ = std::fs::copy(&outcome.console_log, dest.join("guest-console.log"));
            let scenario = manifest["scenario"].as_str().unwrap_or("").to_string();
            found.insert(scenario, (dest, manifest));
        }
    }
    Ok(BootRun { release: prepared.release, package: prepared.package, boot_s, found, job_log_tail })
}

/// The `-host-k5.10` style suffix the guest's engine gave the folder (the label of a host run).
fn host_suffix(name: &str) -> String {
    match name.rfind("-host") {
        Some(i) => name[i..].to_string(),
        None => String::new(),
    }
}

fn move_dir(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    let status = std::process::Command::new("cp").arg("-a").arg(from).arg(to).status()?;
    if !status.success() {
        bail!("cannot copy {} to {}", from.display(), to.display());
    }
    std::fs::remove_dir_all(from)?;
    Ok(())
}

fn runner_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Ok(exe) = std::env::current_exe()
        && exe.file_name().is_some_and(|n| n == "xtask")
    {
        return Ok(exe);
    }
    let built = harness::project_root().join("target/debug/xtask");
    if built.is_file() {
        return Ok(built);
    }
    bail!("no xtask binary to run in the guests: `cargo build -p xtask` (or run through `cargo xtask matrix kernels`)")
}

/// Shared libraries a host binary needs (from `ldd`), to run it through their own loader.
fn host_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = std::process::Command::new("ldd").arg(binary).output().context("`ldd` is needed")?;
    if !out.status.success() {
        bail!("ldd {} failed: {}", binary.display(), String::from_utf8_lossy(&out.stderr));
    }
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let path = line.split("=>").last().unwrap_or("").split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            libs.push(std::fs::canonicalize(path).unwrap_or_else(|_| path.into()));
        }
    }
    if !libs.iter().any(|l| l.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ld-linux"))) {
        bail!("ldd {} named no ld-linux loader", binary.display());
    }
    Ok(libs)
}

/// Project paths the guest needs, relative to the project root, when they exist.
const PROJECT_PATHS: &[&str] =
    &["scenarios", "workloads", "nuget.config", ".build/workloads", ".build/tools", ".build/dotnet-cli-home"];

const GUEST_LIB: &str = "/opt/tracelab/hostlib";
const GUEST_RUNNER: &str = "/opt/tracelab/bin/xtask";

fn scenario_job(scenarios: &[String], runner: &Path) -> Result<GuestJob> {
    let dotnet = crate::vm::image::dotnet_root()?;
    let root = harness::project_root();
    let mut script = String::new();
    script.push_str(&format!(
        "export DOTNET_ROOT={d} PATH={d}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         export HOME=/root DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 TRACELAB_IN_GUEST=1\n\
         R=/opt/tracelab/out/results\nmkdir -p $R\ncd {root}\n",
        d = dotnet.display(),
        root = root.display()
    ));
    let mut job = GuestJob::default();
    job = job.with(runner, GUEST_RUNNER);
    let mut loader = String::new();
    for lib in host_libraries(runner)? {
        let soname = soname_of(&lib).context("library without a file name")?;
        if soname.starts_with("ld-linux") {
            loader = format!("{GUEST_LIB}/{soname}");
        }
        job = job.with(&lib, format!("{GUEST_LIB}/{soname}"));
    }
    for rel in PROJECT_PATHS {
        let p = root.join(rel);
        if p.exists() {
            job = job.with(&p, &p);
        }
    }
    for s in scenarios {
        script.push_str(&scenario_lines(&loader, s));
    }
    job.script = script;
    Ok(job)
}

/// The job script's lines that run scenario `s` in the guest through `loader`. `--no-setup`: the
/// guest has no network and its disk holds every tool the matrix uses (vm::image::ROOTFS_PACKAGES,
/// perf as bullseye's `linux-perf-5.10`); the set-up step could only fail there (apt-get asked for
/// the `linux-perf` metapackage and the run ended before collecting). A tool truly missing fails
/// in its collector's own words.
fn scenario_lines(loader: &str, s: &str) -> String {
    format!(
        "echo \"TRACELAB-SCENARIO-BEGIN {s}\"\n\
         {loader} --library-path {GUEST_LIB} {GUEST_RUNNER} scenario {s} --target host --results $R --allow-skip --no-setup\n\
         echo \"TRACELAB-SCENARIO-END {s} rc=$?\"\n"
    )
}

/// The soname a library is loaded by (`libc.so.6`), from its file name as ldd printed it:
/// Debian's files are already named by soname except the loader, which ldd prints as its link.
fn soname_of(lib: &Path) -> Option<String> {
    let name = lib.file_name()?.to_string_lossy().into_owned();
    if name.starts_with("ld-linux") || name.starts_with("ld-") {
        return Some("ld-linux-x86-64.so.2".into());
    }
    Some(name)
}

/// `cargo xtask matrix kernels`: prints the cells (`list`) or runs them, prints each verdict and
/// writes the result folder; an error when a cell failed.
pub fn run_and_print(options: &KernelMatrixOptions, list: bool) -> Result<()> {
    if list {
        for (kernel, scenario) in list_cells(options)? {
            println!("{:<6} ({:<8}) {scenario}", kernel.label, kernel.suite);
        }
        return Ok(());
    }
    let cells = run_kernel_matrix(options)?;
    for c in &cells {
        println!("{:<6} {:<24} {:<5} {}", c.kernel, c.scenario, c.verdict, c.reason.clone().unwrap_or_default());
    }
    println!("written to {}", write(&cells, &super::results_root())?.display());
    if cells.iter().any(|c| c.verdict == "fail") {
        anyhow::bail!("some cells failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_suffix_is_the_engine_label() {
        assert_eq!(host_suffix("20261122T0900Z-gc-heavy-host-k6.1"), "-host-k6.1");
        assert_eq!(host_suffix("x-container-bullseye-k6.1"), "");
    }

    #[test]
    fn kernel_selection_accepts_comma_lists() {
        let k = selected_kernels(&["5.10,6.12".into()]).unwrap();
        assert_eq!(k.iter().map(|k| k.label).collect::<Vec<_>>(), ["5.10", "6.12"]);
        assert!(selected_kernels(&["4.9".into()]).is_err());
        assert_eq!(selected_kernels(&[]).unwrap().len(), crate::vm::default_kernels().len());
        assert_eq!(selected_kernels(&["6.12-user-events".into()]).unwrap()[0].build.is_some(), true);
    }

    #[test]
    fn guest_scenarios_run_without_set_up() {
        let lines = scenario_lines("/opt/tracelab/hostlib/ld-linux-x86-64.so.2", "wakeups");
        let line = lines.lines().find(|l| l.contains("scenario wakeups")).unwrap();
        assert!(line.contains("--target host") && line.contains("--no-setup"), "{line}");
    }

    #[test]
    fn host_libraries_include_the_loader() {
        let exe = std::env::current_exe().unwrap();
        let libs = host_libraries(&exe).unwrap();
        assert!(libs.iter().any(|l| l.to_string_lossy().contains("libc.so")), "{libs:?}");
    }
}
