//! `cargo xtask fuzz TARGET --seconds N`: one libFuzzer campaign per decoder, from the committed
//! seed corpus (crates/*/fuzz/seeds, small so a target runs thousands of inputs a second) plus
//! the corpus earlier campaigns grew (target/fuzz/NAME/corpus, outside git), with the target's
//! libFuzzer dictionary (crates/*/fuzz/dicts/BIN.dict: the format's magic numbers, tags and
//! keywords, which random mutation almost never spells). The prerequisites (cargo-fuzz, a nightly
//! toolchain) come through lab::prereq like every other tool.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::flags::Fuzz;

/// (name, fuzz workspace under crates/, cargo-fuzz binary, default largest input): the caps keep
/// each target above 1,000 inputs a second on this project's 2-core machines.
const TARGETS: &[(&str, &str, &str, usize)] = &[
    ("ctf-stream", "ctf", "stream", 65536),
    ("ctf-metadata", "ctf", "metadata", 16384),
    ("elfcore-core-file", "elfcore", "core_file", 65536),
    ("eventpipe-decode-stream", "eventpipe", "decode_stream", 16384),
    ("eventpipe-counters", "eventpipe", "counters", 16384),
    ("perfdata-decode", "perfdata", "decode", 65536),
    ("r2r-parse-image", "r2r", "parse_image", 65536),
];

pub fn run(args: Fuzz) -> Result<ExitCode> {
    let root = harness::project_root();
    if args.list {
        for (name, krate, bin, _) in TARGETS {
            println!(
                "{name:<24} crates/{krate}/fuzz/fuzz_targets/{bin}.rs  seeds crates/{krate}/fuzz/seeds/{bin}/  dictionary crates/{krate}/fuzz/dicts/{bin}.dict"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let wanted = args.target.as_deref().unwrap_or("all");
    let chosen: Vec<_> = TARGETS.iter().filter(|(n, ..)| wanted == "all" || *n == wanted).collect();
    if chosen.is_empty() {
        bail!("no fuzz target `{wanted}`: expected one of {} or all", TARGETS.iter().map(|t| t.0).collect::<Vec<_>>().join(", "));
    }
    if let Some(code) = tracelab::prepare(&lab::prereq::Plan::for_fuzzing(), false) {
        return Ok(code);
    }
    let mut crashed = false;
    for (name, krate, bin, max_len) in chosen {
        let stats = campaign(&root, name, krate, bin, args.max_len.unwrap_or(*max_len), &args)?;
        println!(
            "{name}: {} executions in {:.0} s = {} execs/s; corpus {} inputs; {}",
            stats.executions,
            stats.seconds,
            stats.per_second,
            stats.corpus,
            match &stats.crash {
                Some(path) => format!("CRASH, input kept in {}", path.display()),
                None => "0 crashes".into(),
            }
        );
        crashed |= stats.crash.is_some();
    }
    Ok(if crashed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

struct Stats {
    executions: u64,
    per_second: u64,
    seconds: f64,
    corpus: usize,
    crash: Option<PathBuf>,
}

fn campaign(root: &Path, name: &str, krate: &str, bin: &str, max_len: usize, args: &Fuzz) -> Result<Stats> {
    let fuzz_dir = root.join("crates").join(krate).join("fuzz");
    let seeds = fuzz_dir.join("seeds").join(bin);
    let dictionary = fuzz_dir.join("dicts").join(format!("{bin}.dict"));
    let work = root.join("target").join("fuzz").join(name);
    let corpus = work.join("corpus");
    let artifacts = work.join("artifacts");
    std::fs::create_dir_all(&corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
    std::fs::create_dir_all(&artifacts).with_context(|| format!("cannot create {}", artifacts.display()))?;
    let before: Vec<PathBuf> = files(&artifacts);
    harness::host::progress::note("fuzz", &format!("{name}: {} s from {} (building the target first)", args.seconds, seeds.display()));
    let log_path = work.join("last-campaign.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    harness::host::progress::note("fuzz", &format!("{name}: libFuzzer's output goes to {}", log_path.display()));
    let started = Instant::now();
    let status = Command::new("cargo")
        .current_dir(&fuzz_dir)
        // The fuzz workspaces build into the repository's target/, not next to their sources.
        .env("CARGO_TARGET_DIR", root.join("target").join("fuzz-build"))
        .args(["+nightly", "fuzz", "run", bin])
        .arg(&corpus)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={}", args.seconds))
        .arg(format!("-max_len={max_len}"))
        .arg(format!("-dict={}", dictionary.display()))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .args(["-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .context("cannot start `cargo +nightly fuzz` (cargo xtask setup installs it)")?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let stat = |key: &str| {
        text.lines().find_map(|l| l.strip_prefix(&format!("stat::{key}:")).and_then(|v| v.trim().parse::<u64>().ok()))
    };
    let crash = files(&artifacts).into_iter().find(|p| !before.contains(p));
    let Some(executions) = stat("number_of_executed_units") else {
        let tail: Vec<&str> = text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
        bail!("{name}: the campaign printed no statistics ({status}); the last lines of {}:\n{}", log_path.display(), tail.join("\n"));
    };
    if !status.success() && crash.is_none() {
        bail!("{name}: libFuzzer ended with {status} and kept no input; see {}", log_path.display());
    }
    Ok(Stats {
        executions,
        per_second: stat("average_exec_per_sec").unwrap_or(0),
        seconds: started.elapsed().as_secs_f64(),
        corpus: files(&corpus).len(),
        crash,
    })
}

fn files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    /// `cargo xtask fuzz --help` names every target.
    #[test]
    fn the_help_names_every_target() {
        use clap::CommandFactory;
        let help = crate::flags::Flags::command().find_subcommand_mut("fuzz").expect("a fuzz subcommand").render_long_help().to_string();
        for (name, ..) in super::TARGETS {
            assert!(help.contains(name), "`fuzz --help` does not name {name}:\n{help}");
        }
    }

    /// The nightly workflow fuzzes every target this task knows, by the same names.
    #[test]
    fn the_nightly_workflow_names_every_target() {
        let here: Vec<&str> = super::TARGETS.iter().map(|t| t.0).collect();
        assert_eq!(here, lab::ci::FUZZ_TARGETS);
        for (_, krate, bin, _) in super::TARGETS {
            let seeds = harness::project_root().join("crates").join(krate).join("fuzz/seeds").join(bin);
            assert!(std::fs::read_dir(&seeds).is_ok_and(|d| d.count() > 0), "{} has no seeds", seeds.display());
            // libFuzzer refuses a dictionary it cannot parse: every line a comment or a quoted token.
            let dict = harness::project_root().join("crates").join(krate).join("fuzz/dicts").join(format!("{bin}.dict"));
            let text = std::fs::read_to_string(&dict).unwrap_or_else(|e| panic!("{}: {e}", dict.display()));
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                let token = line.len() >= 2 && line.starts_with('"') && line.ends_with('"');
                assert!(line.is_empty() || line.starts_with('#') || token, "{}:{}: not a libFuzzer dictionary entry: {line}", dict.display(), i + 1);
            }
        }
    }
}
