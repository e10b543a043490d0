//! `cargo xtask init mine.toml --dll app.dll [--web]`: a scenario for a user's app with the
//! defaults written out and a comment on each, so the file teaches its own keys. The checks are
//! the ones that need no truth: each collector saw the process (always added by the engine),
//! JIT/R2R frames named, and perf and EventPipe naming the same hot methods.

use std::path::Path;

use anyhow::{Result, bail};

/// The app a starter scenario points at.
pub enum StarterApp<'a> {
    Dll(&'a Path),
    Project(&'a Path),
    Image(&'a str),
}

/// The text of a starter scenario written to `toml_path`; paths in it are relative to its folder.
pub fn starter_toml(toml_path: &Path, app: StarterApp, web: bool) -> Result<String> {
    let folder = std::path::absolute(toml_path)?.parent().map(Path::to_path_buf).unwrap_or_default();
    let relative = |p: &Path| -> Result<String> {
        let abs = std::path::absolute(p)?;
        if !abs.exists() {
            bail!("{} does not exist", abs.display());
        }
        Ok(pathdiff(&abs, &folder))
    };
    let (name, workload, web) = match app {
        StarterApp::Dll(dll) => {
            let web = web || super::is_aspnetcore(&std::path::absolute(dll)?);
            (stem(dll), format!("{{ dll = {:?} }}", relative(dll)?), web)
        }
        StarterApp::Project(p) => (stem(p), format!("{{ project = {:?} }}", relative(p)?), web),
        StarterApp::Image(image) => {
            let name = image.rsplit('/').next().unwrap_or(image).split(':').next().unwrap_or(image).to_string();
            (name, format!("{{ image = {image:?} }}"), web)
        }
    };
    let image_form = workload.starts_with("{ image");
    // The app's own code (its assembly is named as its dll or project), where the app is known;
    // an image's app is not, so every assembly.
    let (assembly, what, why) = if image_form {
        (".".to_string(), "any assembly", "on an app that waits much, rank only its own code: `assembly = \"^MyApp$\"`")
    } else {
        (format!("^{}$", regex::escape(&name)), "the app's own code", "the app's own code, where both see the same work, is compared")
    };
    let mut t = String::new();
    t.push_str(&format!(
        "# A tracelab scenario for `{name}`, written by `cargo xtask init`. Run it with\n\
         #   cargo xtask scenario {}\n\
         # Relative paths in this file are relative to this file's folder.\n\n",
        toml_path.display()
    ));
    t.push_str(&format!("name = {name:?}\n"));
    t.push_str(&format!("workload = {workload}\n"));
    t.push_str("# The app's own arguments, passed exactly as written (nothing is added to them).\n");
    if web {
        t.push_str("# 127.0.0.1:0 lets the app pick a free port; its `Now listening on:` line tells tracelab which.\n");
        t.push_str("args = [\"--urls\", \"http://127.0.0.1:0\"]\n");
    } else {
        t.push_str("args = []\n");
    }
    t.push_str("# env = { DOTNET_gcServer = \"1\" }\n");
    if !image_form {
        t.push_str("# The app's working folder; default: its run folder (results/…/artifacts).\n# cwd = \".\"\n");
    }
    t.push_str("\n# When the app is ready to be measured: { line = \"regex\" } (a capture named `url` feeds [load]),\n");
    t.push_str("# { port = N }, { diagnostic_socket = true } or { delay_s = N }.\n");
    if web {
        t.push_str("ready = { line = \"Now listening on: (?P<url>https?://\\\\S+)\" }\n");
    } else {
        t.push_str("ready = { diagnostic_socket = true }\n");
    }
    t.push_str(
        "# The app starts held in the runtime until every collector records, so its start-up is recorded;\n\
         # samples are judged from readiness + warmup_s to its stop.\n",
    );
    if web {
        t.push_str("# Seconds between readiness and measurement (start-up and first JIT stay out).\nwarmup_s = 1\n");
        t.push_str("# How the app stops after the load: \"sigint\", \"sigterm\", \"exit\" (it ends by itself) or { http = \"/path\" }.\n");
        t.push_str("stop = \"sigterm\"\n");
    } else {
        t.push_str("# A console app is judged over its whole run (what it measures of itself covers all of it).\nwarmup_s = 0\n");
        t.push_str(
            "# It ends by itself; tracelab waits up to timeout_s, and a run it had to stop is inconclusive, never a PASS.\n\
             # An app that runs until stopped: stop = \"sigterm\" (or \"sigint\", { http = \"/path\" }) and seconds = N.\n",
        );
        t.push_str("stop = \"exit\"\ntimeout_s = 60\n");
    }
    t.push_str("# A truth file the app writes in its own format, and tracelab keys derived from it:\n");
    t.push_str("# truth = { path = \"out.json\", map = { \"shares.cpu.Alpha\" = \"{/alpha_s} / ({/alpha_s} + {/beta_s})\" } }\n");
    t.push_str("# A key is split at its dots; a part with dots of its own goes in double quotes, the key in single ones:\n");
    t.push_str("# map = { 'exceptions.\"App.Errors.BadInput: no name\"' = \"{/bad_inputs}\" } (with an `exceptions` check, truth = \"exceptions\")\n");
    t.push_str("# (and a check holding a share to it; `truth_clock` says what the app timed: \"cpu\" time or \"wall\" time)\n");
    t.push_str("# [[expect]]\n# kind = \"share\"\n# method = \"::Alpha\\\\b\"\n# among = [\"::Alpha\\\\b\", \"::Beta\\\\b\"]\n# truth = \"shares.cpu.Alpha\"\n# truth_clock = \"wall\"\n");
    if web {
        t.push_str("\n# Loopback load on the URL the ready line captured (or `url = \"http://127.0.0.1:PORT\"`).\n[load]\nroutes = [\"/\"]\nconnections_per_route = 4\nseconds = 10\n");
    }
    t.push_str(
        "\n# perf cpu-clock (CPU time per stack, JIT frames named from the runtime's perf map) and\n\
         # EventPipe's SampleProfiler (what dotnet-trace records), watching the same run.\n\
         [[collector]]\nkind = \"perf-cpu\"\nfrequency = 499\n\n[[collector]]\nkind = \"eventpipe\"\nprofile = \"thread-time\"\n",
    );
    t.push_str(&format!(
        "\n# Checks that need no truth. (The engine also checks that each collector saw the process.)\n\
         # Each check decides only on enough samples (min_samples): fewer make it inconclusive, not a FAIL.\n\
         [[expect]]\nkind = \"resolved\"\nname = \"perf names the app's managed frames\"\ncollector = \"perf-cpu\"\nclass = \"managed\"\nmin = 0.9\n\
         min_samples = 100\n\n\
         # perf and EventPipe name the same hot methods of {what} (EventPipe's samples in managed code only).\n\
         # SampleProfiler samples every thread, waiting ones too — a thread pool's idle workers spin and\n\
         # wait in framework code that on-CPU perf barely sees — so {why}.\n\
         [[expect]]\nkind = \"agree_frames\"\ncollectors = [\"perf-cpu\", \"eventpipe\"]\nassembly = {assembly:?}\nnames = \"method_and_arity\"\n\
         top = 5\nmin_common = 2\nsample_kinds = {{ eventpipe = \"managed\" }}\nmin_samples = 200\n\n\
         # With a known hot method, its share in both (on CPU-bound code they measure the same thing):\n\
         # [[expect]]\n# kind = \"agree_share\"\n# method = \"::Alpha\\\\b\"\n# among = [\"::Alpha\\\\b\", \"::Beta\\\\b\"]\n\
         # collectors = [\"perf-cpu\", \"eventpipe\"]\n# tolerance_pts = 10\n",
    ));
    Ok(t)
}

fn stem(p: &Path) -> String {
    p.file_stem().map_or_else(|| "app".to_string(), |s| s.to_string_lossy().into_owned())
}

/// `path` relative to `base` (both absolute), with `..` where needed.
fn pathdiff(path: &Path, base: &Path) -> String {
    let (p, b): (Vec<_>, Vec<_>) = (path.components().collect(), base.components().collect());
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c);
    }
    out.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starter_parses_as_a_scenario_with_paths_next_to_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/app.dll"), b"").unwrap();
        std::fs::create_dir_all(dir.path().join("conf")).unwrap();
        let toml = dir.path().join("conf/mine.toml");
        for web in [false, true] {
            let text = starter_toml(&toml, StarterApp::Dll(&dir.path().join("bin/app.dll")), web).unwrap();
            assert!(text.contains("workload = { dll = \"../bin/app.dll\" }"), "{text}");
            std::fs::write(&toml, &text).unwrap();
            let s = crate::scenario::Scenario::load(&toml).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
            // Loaded without `..`: a container mounts the folder at that very path.
            assert_eq!(s.workload, crate::scenario::WorkloadRef::Dll { dll: dir.path().join("bin/app.dll") });
            assert_eq!(s.protocol(), crate::scenario::Protocol::None);
            assert_eq!(s.load.is_some(), web);
            assert_eq!(s.expectations.len(), 2);
        }
        let missing = starter_toml(&toml, StarterApp::Dll(Path::new("/nope/x.dll")), false).unwrap_err();
        assert!(missing.to_string().contains("/nope/x.dll does not exist"));
        let image = starter_toml(&toml, StarterApp::Image("me/app:1"), true).unwrap();
        std::fs::write(&toml, &image).unwrap();
        assert!(crate::scenario::Scenario::load(&toml).is_ok(), "{image}");
    }
}
