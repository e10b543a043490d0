//! Soak: repeat scenarios N times, optionally beside a CPU hog on every core, and count how each
//! run and each check ended (pass / fail / inconclusive / skip / error). It is how a flake budget
//! is measured: a red cell must mean the pipeline broke, so a loaded machine may make a check
//! inconclusive but never FAIL. Runs are interleaved (A B C A B C …) so a slow drift of the
//! machine (another job starting, thermal throttling) spreads over every scenario instead of
//! landing on the last one. Verdicts are read back from each run's manifest.json, the same file
//! the reports read, so the table counts what a user would see.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use judge::Verdict;
use harness::engine::RunOptions;

/// The hog: Debian's stress-ng, one CPU stressor per online core (`--cpu 0`).
pub const HOG_PROGRAM: &str = "stress-ng";
pub const HOG_PACKAGE: &str = "stress-ng";

pub struct SoakOptions {
    pub scenarios: Vec<String>,
    pub runs: usize,
    pub hog: bool,
    /// Target, image, symbols; `results_root` is where the soak's own folder is created.
    pub run: RunOptions,
}

/// The part of a manifest.json the soak reads: kept small so manifests written by older or newer
/// versions (more fields) still count.
#[derive(Clone, Debug, Deserialize)]
pub struct RunRecord {
    pub scenario: String,
    pub verdict: Verdict,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub run_id: String,
    #[serde(default)]
    pub checks: Vec<CheckRecord>,
    /// Inconclusive attempts before the deciding one (`[sufficiency] attempts`).
    #[serde(default)]
    pub earlier_attempts: Vec<harness::report::EarlierAttempt>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CheckRecord {
    pub name: String,
    pub verdict: Verdict,
    #[serde(default)]
    pub collector: Option<String>,
}

impl RunRecord {
    pub fn read(manifest: &Path) -> Result<RunRecord> {
        let text = std::fs::read_to_string(manifest).with_context(|| format!("cannot read {}", manifest.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a manifest", manifest.display()))
    }
}

/// How often each verdict came out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub inconclusive: usize,
    pub skip: usize,
    pub error: usize,
}

impl Counts {
    fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Pass => self.pass += 1,
            Verdict::Fail => self.fail += 1,
            Verdict::Inconclusive => self.inconclusive += 1,
            Verdict::Skip => self.skip += 1,
            Verdict::Error => self.error += 1,
        }
    }
    pub fn total(&self) -> usize {
        self.pass + self.fail + self.inconclusive + self.skip + self.error
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckRow {
    pub name: String,
    pub collector: Option<String>,
    pub counts: Counts,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub verdict: Verdict,
    pub reason: Option<String>,
    /// 1-minute load average when the run ended.
    pub load1: Option<f64>,
    /// Why earlier attempts of this run were inconclusive (it collected again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioRow {
    pub scenario: String,
    pub counts: Counts,
    pub checks: Vec<CheckRow>,
    pub runs: Vec<RunRow>,
}

/// The soak's result: soak.json is this, soak.md its [`Table::markdown`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    pub runs_per_scenario: usize,
    pub hog: bool,
    pub cores: usize,
    /// Mean and maximum of the 1-minute load average sampled at the end of each run.
    pub load1_mean: Option<f64>,
    pub load1_max: Option<f64>,
    pub scenarios: Vec<ScenarioRow>,
}

impl Table {
    /// Builds the table from runs in the order they ran. `load1` is the load average at the end
    /// of each run (None when unknown, e.g. recorded fixtures).
    pub fn from_runs(runs: &[(RunRecord, Option<f64>)], runs_per_scenario: usize, hog: bool, cores: usize) -> Table {
        let mut scenarios: Vec<ScenarioRow> = Vec::new();
        for (run, load1) in runs {
            let idx = match scenarios.iter().position(|s| s.scenario == run.scenario) {
                Some(i) => i,
                None => {
                    scenarios.push(ScenarioRow {
                        scenario: run.scenario.clone(),
                        counts: Counts::default(),
                        checks: Vec::new(),
                        runs: Vec::new(),
                    });
                    scenarios.len() - 1
                }
            };
            let row = &mut scenarios[idx];
            row.counts.add(run.verdict);
            row.runs.push(RunRow {
                run_id: run.run_id.clone(),
                verdict: run.verdict,
                reason: run.reason.clone(),
                load1: *load1,
                earlier: run.earlier_attempts.iter().map(|a| a.reason.clone()).collect(),
            });
            for c in &run.checks {
                let at = match row.checks.iter().position(|r| r.name == c.name && r.collector == c.collector) {
                    Some(i) => i,
                    None => {
                        row.checks.push(CheckRow { name: c.name.clone(), collector: c.collector.clone(), counts: Counts::default() });
                        row.checks.len() - 1
                    }
                };
                row.checks[at].counts.add(c.verdict);
            }
        }
        let loads: Vec<f64> = runs.iter().filter_map(|(_, l)| *l).collect();
        Table {
            runs_per_scenario,
            hog,
            cores,
            load1_mean: (!loads.is_empty()).then(|| loads.iter().sum::<f64>() / loads.len() as f64),
            load1_max: loads.iter().copied().reduce(f64::max),
            scenarios,
        }
    }

    pub fn any_fail(&self) -> bool {
        self.scenarios.iter().any(|s| s.counts.fail > 0)
    }

    /// 1 when any run FAILed, else 0: inconclusive, skip and error runs are counted, not failed.
    pub fn exit_code(&self) -> u8 {
        if self.any_fail() { judge::exit::FAIL } else { judge::exit::PASS }
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let load = match (self.load1_mean, self.load1_max) {
            (Some(mean), Some(max)) => format!("load average (1 min, at the end of each run): mean {mean:.2}, max {max:.2} on {} cores", self.cores),
            _ => format!("load average: not recorded ({} cores)", self.cores),
        };
        let _ = writeln!(
            md,
            "# Soak: {} run(s) per scenario, {}\n\n{load}\n",
            self.runs_per_scenario,
            if self.hog { "beside a CPU hog on every core (stress-ng --cpu 0)" } else { "no hog" }
        );
        let header = "| pass | fail | inconclusive | skip | error |";
        let cells = |c: &Counts| format!("| {} | {} | {} | {} | {} |", c.pass, c.fail, c.inconclusive, c.skip, c.error);
        let _ = writeln!(md, "## Per scenario\n\n| scenario | runs {header}\n|---|---|---|---|---|---|---|");
        for s in &self.scenarios {
            let _ = writeln!(md, "| {} | {} {}", s.scenario, s.counts.total(), cells(&s.counts));
        }
        let _ = writeln!(md, "\n## Per check\n\n| scenario | check | collector {header}\n|---|---|---|---|---|---|---|---|");
        for s in &self.scenarios {
            for c in &s.checks {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} {}",
                    s.scenario,
                    c.name.replace('|', "\\|"),
                    c.collector.as_deref().unwrap_or("—"),
                    cells(&c.counts)
                );
            }
        }
        let odd: Vec<(&str, &RunRow)> = self
            .scenarios
            .iter()
            .flat_map(|s| s.runs.iter().filter(|r| r.verdict != Verdict::Pass).map(move |r| (s.scenario.as_str(), r)))
            .collect();
        // Counted above by their deciding attempt; what the first attempt said is listed here.
        let retried: Vec<(&str, &RunRow)> = self
            .scenarios
            .iter()
            .flat_map(|s| s.runs.iter().filter(|r| !r.earlier.is_empty()).map(move |r| (s.scenario.as_str(), r)))
            .collect();
        if !retried.is_empty() {
            let total: usize = self.scenarios.iter().map(|s| s.runs.len()).sum();
            let _ = writeln!(md, "\n## Runs that collected again\n\n{} of {total} runs were inconclusive at first and ran again (counted above by the attempt that decided them):\n", retried.len());
            for (scenario, r) in retried {
                let _ = writeln!(md, "- {scenario} `{}`: {} after {}", r.run_id, r.verdict.upper(), r.earlier.join("; then "));
            }
        }
        if !odd.is_empty() {
            let _ = writeln!(md, "\n## Runs that did not pass\n");
            for (scenario, r) in odd {
                let _ = writeln!(
                    md,
                    "- {scenario} `{}`: {}{}",
                    r.run_id,
                    r.verdict.upper(),
                    r.reason.as_deref().map(|x| format!(": {x}")).unwrap_or_default()
                );
            }
        }
        md
    }

    /// Writes soak.md and soak.json into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let md = dir.join("soak.md");
        let json = dir.join("soak.json");
        std::fs::write(&md, self.markdown()).with_context(|| format!("cannot write {}", md.display()))?;
        std::fs::write(&json, serde_json::to_string_pretty(self)?).with_context(|| format!("cannot write {}", json.display()))?;
        Ok((md, json))
    }
}

/// The 1-minute load average.
pub fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// A running CPU hog, stopped when dropped (also on an error or a panic of the soak); the kernel
/// stops it if this process dies (PR_SET_PDEATHSIG), so it never outlives the soak.
pub struct Hog {
    child: Child,
}

/// `Err(what to install)` when the hog cannot start here.
pub fn hog_available() -> std::result::Result<(), String> {
    match harness::host::environment::which(HOG_PROGRAM) {
        Some(_) => Ok(()),
        None => Err(format!("`{HOG_PROGRAM}` is not installed: apt-get install {HOG_PACKAGE} (needed for --hog)")),
    }
}

impl Hog {
    pub fn start() -> Result<Hog> {
        hog_available().map_err(anyhow::Error::msg)?;
        let mut cmd = Command::new(HOG_PROGRAM);
        cmd.args(["--cpu", "0", "--quiet"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches only the child being spawned.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {HOG_PROGRAM}"))?;
        Ok(Hog { child })
    }

    /// SIGTERM (stress-ng then stops its stressors) and wait.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill on our own child's pid.
            unsafe {
                libc::kill(self.child.id() as i32, libc::SIGTERM);
            }
            let _ = self.child.wait();
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Runs the soak and writes soak.md + soak.json into a fresh folder under the results root,
/// beside the runs' own result folders. Returns the table and that folder.
pub fn run(opts: &SoakOptions) -> Result<(Table, PathBuf)> {
    if opts.scenarios.is_empty() || opts.runs == 0 {
        bail!("a soak needs at least one scenario and --runs ≥ 1");
    }
    // Every scenario name resolves before anything runs.
    let scenarios = opts.scenarios.iter().map(|n| harness::scenario::Scenario::find(n)).collect::<Result<Vec<_>>>()?;
    let root = opts.run.results_root.clone().unwrap_or_else(|| harness::project_root().join("results"));
    let dir = root.join(format!("soak-{}", harness::report::utc_stamp()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut run_opts = opts.run.clone();
    run_opts.results_root = Some(dir.clone());

    let hog = if opts.hog { Some(Hog::start()?) } else { None };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total = opts.runs * scenarios.len();
    let mut records = Vec::new();
    for round in 0..opts.runs {
        for scenario in &scenarios {
            harness::host::progress::note(
                "soak",
                &format!("run {} of {total}: {} (round {} of {})", records.len() + 1, scenario.name, round + 1, opts.runs),
            );
            let record = match harness::engine::run(scenario, &run_opts) {
                Ok(outcome) => RunRecord::read(&outcome.dir.join("manifest.json"))?,
                // Not even a results folder: the infrastructure, not the scenario.
                Err(e) => RunRecord {
                    scenario: scenario.name.clone(),
                    verdict: Verdict::Error,
                    reason: Some(format!("{e:#}")),
                    run_id: String::new(),
                    checks: Vec::new(),
                    earlier_attempts: Vec::new(),
                },
            };
            harness::host::progress::note("soak", &format!("{} {}", record.scenario, record.verdict.upper()));
            records.push((record, load1()));
        }
    }
    if let Some(h) = hog {
        h.stop();
    }
    let table = Table::from_runs(&records, opts.runs, opts.hog, cores);
    table.write(&dir)?;
    Ok((table, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        harness::project_root().join("harness").join("tests").join("fixtures").join("soak")
    }

    fn recorded() -> Vec<(RunRecord, Option<f64>)> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(fixtures().join("manifests"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        assert!(names.len() >= 3, "fixtures missing in {}", fixtures().display());
        names.iter().map(|p| (RunRecord::read(p).unwrap(), None)).collect()
    }

    #[test]
    fn table_counts_runs_and_checks_from_recorded_manifests() {
        let runs = recorded();
        let table = Table::from_runs(&runs, 2, false, 2);
        // Every run is counted once under its scenario, every check once per run.
        let total: usize = table.scenarios.iter().map(|s| s.counts.total()).sum();
        assert_eq!(total, runs.len());
        for s in &table.scenarios {
            let n = runs.iter().filter(|(r, _)| r.scenario == s.scenario).count();
            assert_eq!(s.counts.total(), n, "{}", s.scenario);
            for c in &s.checks {
                let seen = runs
                    .iter()
                    .filter(|(r, _)| r.scenario == s.scenario)
                    .flat_map(|(r, _)| &r.checks)
                    .filter(|x| x.name == c.name && x.collector == c.collector)
                    .count();
                assert_eq!(c.counts.total(), seen, "{} / {}", s.scenario, c.name);
            }
        }
        let expected_fail = runs.iter().any(|(r, _)| r.verdict == Verdict::Fail);
        assert_eq!(table.exit_code(), if expected_fail { 1 } else { 0 });
        let md = table.markdown();
        for (r, _) in &runs {
            for c in &r.checks {
                assert!(md.contains(&c.name.replace('|', "\\|")), "soak.md lacks check `{}`", c.name);
            }
        }
    }

    #[test]
    fn the_recorded_soak_table_is_rebuilt_from_its_runs_manifests() {
        let recorded: Table = serde_json::from_str(&std::fs::read_to_string(fixtures().join("soak.json")).unwrap()).unwrap();
        let runs: Vec<(RunRecord, Option<f64>)> = recorded
            .scenarios
            .iter()
            .flat_map(|s| &s.runs)
            .map(|r| {
                let path = fixtures().join("manifests").join(format!("{}.json", r.run_id));
                (RunRecord::read(&path).unwrap(), r.load1)
            })
            .collect();
        let table = Table::from_runs(&runs, recorded.runs_per_scenario, recorded.hog, recorded.cores);
        assert_eq!(table.markdown(), std::fs::read_to_string(fixtures().join("soak.md")).unwrap());
        assert_eq!(table.exit_code(), 0);
    }

    #[test]
    fn a_failed_run_makes_the_soak_fail_and_is_listed() {
        let mut runs = recorded();
        let first = runs[0].0.scenario.clone();
        runs[0].0.verdict = Verdict::Fail;
        runs[0].0.reason = Some("HotLoop share: expected 70 ± 5 %, measured 50 %".into());
        runs[0].0.checks[0].verdict = Verdict::Fail;
        runs[1].0.verdict = Verdict::Inconclusive;
        let table = Table::from_runs(&runs, 2, true, 2);
        assert_eq!(table.exit_code(), 1);
        let row = table.scenarios.iter().find(|s| s.scenario == first).unwrap();
        assert_eq!(row.counts.fail, 1);
        assert_eq!(row.checks[0].counts.fail, 1);
        let md = table.markdown();
        assert!(md.contains("measured 50 %") && md.contains("stress-ng"), "{md}");
    }

    #[test]
    fn runs_that_collected_again_are_listed_with_what_the_first_attempt_said() {
        let mut runs = recorded();
        runs[0].0.earlier_attempts =
            vec![harness::report::EarlierAttempt { run_id: "first".into(), reason: "perf-offcpu lost 2.2 %".into() }];
        let table = Table::from_runs(&runs, 2, false, 2);
        let md = table.markdown();
        assert!(md.contains(&format!("1 of {} runs were inconclusive at first and ran again", runs.len())), "{md}");
        assert!(md.contains(&format!("`{}`: {} after perf-offcpu lost 2.2 %", runs[0].0.run_id, runs[0].0.verdict.upper())), "{md}");
        // Counted once, by the deciding attempt.
        assert_eq!(table.scenarios.iter().map(|s| s.counts.total()).sum::<usize>(), runs.len());
    }

    #[test]
    fn inconclusive_and_error_runs_do_not_fail_the_soak() {
        let mut runs = recorded();
        for (r, _) in &mut runs {
            r.verdict = Verdict::Pass;
            for c in &mut r.checks {
                c.verdict = Verdict::Pass;
            }
        }
        runs[0].0.verdict = Verdict::Inconclusive;
        runs[1].0.verdict = Verdict::Error;
        let runs: Vec<_> = runs.into_iter().map(|(r, _)| (r, Some(1.5))).collect();
        let table = Table::from_runs(&runs, 2, false, 2);
        assert_eq!(table.exit_code(), 0);
        assert_eq!(table.load1_mean, Some(1.5));
        let json: Table = serde_json::from_str(&serde_json::to_string(&table).unwrap()).unwrap();
        assert_eq!(json.scenarios.len(), table.scenarios.len());
    }
}
