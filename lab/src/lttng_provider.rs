//! What the runtime's LTTng provider (`libcoreclrtraceptprovider.so`) declares: every tracepoint
//! and its fields, as `lttng list -u -f` prints them while a .NET app runs. The LTTng event table
//! (`events.rs`) is generated from a committed recording of this list
//! (`harness/data/runtime-events/lttng-provider.txt`), not from an event manifest: the runtime's
//! tracepoints are what an LTTng session can enable, and an older manifest silently lacks the
//! versions .NET 10 fires (ContentionStart_V2, GCHeapStats_V2 …; enabling an older name records
//! nothing). An integration test records the list again in the bullseye image and fails when it
//! differs from the committed one.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// The committed recording, relative to the project root.
pub const RECORDING: &str = "harness/data/runtime-events/lttng-provider.txt";

/// One tracepoint: `provider:symbol` and its fields (name, LTTng type class) in payload order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    pub provider: String,
    pub symbol: String,
    pub fields: Vec<(String, String)>,
}

impl Tracepoint {
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.provider, self.symbol)
    }
}

/// Reads `lttng list -u -f` output: the union of the tracepoints of every listed process whose
/// provider starts with `DotNETRuntime`, sorted by name. A tracepoint listed twice (two
/// processes) with different fields is an error.
pub fn parse_lttng_list(text: &str) -> Result<Vec<Tracepoint>> {
    let mut listed: Vec<Tracepoint> = Vec::new();
    let mut in_tracepoint = false;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("field: ") {
            if !in_tracepoint {
                continue;
            }
            // `field: Name (integer)`
            let (name, class) = rest
                .rsplit_once(" (")
                .and_then(|(n, c)| c.strip_suffix(')').map(|c| (n, c)))
                .with_context(|| format!("line {}: `{trimmed}` is not `field: NAME (TYPE)`", n + 1))?;
            listed.last_mut().expect("a tracepoint precedes its fields").fields.push((name.to_string(), class.to_string()));
            continue;
        }
        in_tracepoint = false;
        let Some(name) = trimmed.split_whitespace().next() else { continue };
        let Some((provider, symbol)) = name.split_once(':') else { continue };
        if !provider.starts_with("DotNETRuntime") || !trimmed.contains("(type: tracepoint)") {
            continue;
        }
        listed.push(Tracepoint { provider: provider.to_string(), symbol: symbol.to_string(), fields: Vec::new() });
        in_tracepoint = true;
    }
    let mut out: BTreeMap<String, Tracepoint> = BTreeMap::new();
    for mut tp in listed {
        // LTTng 2.12's `list -f` prints a tracepoint's fields last-first (the CTF metadata of a
        // recorded trace has GCStart_V2 as Count, Depth, Reason, Type, ClrInstanceID,
        // ClientSequenceNumber; the listing the reverse): keep payload order.
        tp.fields.reverse();
        match out.get(&tp.full_name()) {
            Some(seen) if seen.fields != tp.fields => {
                bail!("{} is listed twice with different fields: {:?} and {:?}", tp.full_name(), seen.fields, tp.fields)
            }
            Some(_) => {}
            None => {
                out.insert(tp.full_name(), tp);
            }
        }
    }
    if out.is_empty() {
        bail!("no DotNETRuntime tracepoint in the listing: did the app register its provider (DOTNET_EnableEventLog=1)?");
    }
    Ok(out.into_values().collect())
}

/// The recording's text: a header of `#` lines (where and how it was recorded), then one line per
/// tracepoint: `provider:symbol` and its `name:class` fields, separated by single spaces.
pub fn render(header: &[String], tracepoints: &[Tracepoint]) -> String {
    let mut s = String::new();
    for h in header {
        s.push_str(&format!("# {h}\n"));
    }
    for tp in tracepoints {
        s.push_str(&tp.full_name());
        for (name, class) in &tp.fields {
            s.push_str(&format!(" {name}:{class}"));
        }
        s.push('\n');
    }
    s
}

/// Reads a recording written by [`render`]; errors name the line.
pub fn parse_recording(text: &str, path: &Path) -> Result<Vec<Tracepoint>> {
    let mut out: Vec<Tracepoint> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut words = line.split(' ');
        let name = words.next().unwrap_or("");
        let (provider, symbol) =
            name.split_once(':').with_context(|| format!("{}:{}: `{name}` is not provider:symbol", path.display(), n + 1))?;
        let mut fields = Vec::new();
        for w in words {
            let (f, class) =
                w.rsplit_once(':').with_context(|| format!("{}:{}: field `{w}` is not name:class", path.display(), n + 1))?;
            fields.push((f.to_string(), class.to_string()));
        }
        let tp = Tracepoint { provider: provider.to_string(), symbol: symbol.to_string(), fields };
        if out.last().is_some_and(|l| l.full_name() >= tp.full_name()) {
            bail!("{}:{}: {} is out of order or repeated (the recording is sorted by name)", path.display(), n + 1, tp.full_name());
        }
        out.push(tp);
    }
    Ok(out)
}

/// The committed recording.
pub fn committed() -> Result<Vec<Tracepoint>> {
    let path = harness::project_root().join(RECORDING);
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_recording(&text, &path)
}

/// How two declarations differ, in words: tracepoints only in one, and fields that changed.
pub fn differences(committed: &[Tracepoint], live: &[Tracepoint]) -> Vec<String> {
    let a: BTreeMap<String, &Tracepoint> = committed.iter().map(|t| (t.full_name(), t)).collect();
    let b: BTreeMap<String, &Tracepoint> = live.iter().map(|t| (t.full_name(), t)).collect();
    let mut out = Vec::new();
    for (name, tp) in &b {
        match a.get(name) {
            None => out.push(format!("declared by the provider, missing from the table: {name}")),
            Some(c) if c.fields != tp.fields => out.push(format!(
                "{name}: fields {} in the table, {} declared",
                c.fields.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(","),
                tp.fields.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(",")
            )),
            Some(_) => {}
        }
    }
    for name in a.keys() {
        if !b.contains_key(name) {
            out.push(format!("in the table, not declared by the provider: {name}"));
        }
    }
    out
}

/// Records the declaration: runs the `exceptions` workload with `DOTNET_EnableEventLog=1` in the
/// runtime image of `suite` beside `lttng-sessiond --no-kernel` and lists the tracepoints it
/// registered. Returns the recording's text ([`render`]). Needs Docker and the image
/// (`cargo xtask images`); builds the workload with the offline SDK.
pub fn record(suite_name: &str) -> Result<String> {
    let dotnet = harness::host::dotnet::Dotnet::locate_or_install()?;
    let built = harness::workload::build_named(&dotnet, "exceptions", false)?;
    let app_dir = built.dll.parent().context("the workload dll has no folder")?;
    let dll = built.dll.file_name().context("the workload dll has no name")?.to_string_lossy().into_owned();
    let image = harness::host::image::runtime_tag(harness::host::image::suite(suite_name)?);
    // The app waits for a go-file that never comes, so it stays registered while we list; the
    // listing is retried until the provider's tracepoints appear (registration is asynchronous).
    let script = format!(
        "set -e; lttng-sessiond --daemonize --no-kernel; \
         DOTNET_EnableEventLog=1 dotnet /app/{dll} --go-file /tmp/never --go-timeout 60 >/dev/null 2>&1 & \
         for i in $(seq 100); do lttng list -u > /tmp/l 2>/dev/null || true; grep -q 'DotNETRuntime:' /tmp/l && break; sleep 0.2; done; \
         sleep 1; echo \"# runtime $(ls /usr/share/dotnet/shared/Microsoft.NETCore.App)\"; echo \"# $(lttng --version)\"; lttng list -u -f"
    );
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v"])
        .arg(format!("{}:/app:ro", app_dir.display()))
        .args([&image, "sh", "-c", &script])
        .output()
        .context("running docker")?;
    if !out.status.success() {
        bail!("listing the provider's tracepoints in {image} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut header = vec![format!(
        "What .NET's LTTng provider (libcoreclrtraceptprovider.so) declares: `lttng list -u -f` in {image}, recorded by \
         `cargo xtask codegen --record` (lab/src/lttng_provider.rs)"
    )];
    for line in text.lines().filter_map(|l| l.strip_prefix("# ")) {
        header.push(line.trim().to_string());
    }
    Ok(render(&header, &parse_lttng_list(&text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "UST events:\n-------------\n\nPID: 21 - Name: dotnet\n      \
        DotNETRuntime:GCStart_V2 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n        field: Count (integer)\n        field: Depth (integer)\n      \
        DotNETRuntime:GCEnd_V1 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n        field: Count (integer)\n      \
        lttng_ust_tracef:event (loglevel: TRACE_DEBUG (14)) (type: tracepoint)\n        field: msg (string)\n      \
        DotNETRuntimeStress:StressLogEvent (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n\n\
        PID: 22 - Name: dotnet\n      DotNETRuntime:GCEnd_V1 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n        field: Count (integer)\n";

    #[test]
    fn listing_parses_sorted_and_renders_back() {
        let tps = parse_lttng_list(LISTING).unwrap();
        let names: Vec<String> = tps.iter().map(Tracepoint::full_name).collect();
        assert_eq!(names, ["DotNETRuntime:GCEnd_V1", "DotNETRuntime:GCStart_V2", "DotNETRuntimeStress:StressLogEvent"]);
        // Listed last-first, kept in payload order.
        assert_eq!(tps[1].fields, [("Depth".to_string(), "integer".to_string()), ("Count".to_string(), "integer".to_string())]);
        let text = render(&["recorded here".into()], &tps);
        assert_eq!(parse_recording(&text, Path::new("r.txt")).unwrap(), tps);
    }

    #[test]
    fn differing_duplicates_and_empty_listings_are_refused() {
        let bad = LISTING.replace("PID: 22 - Name: dotnet\n      DotNETRuntime:GCEnd_V1 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n        field: Count",
            "PID: 22 - Name: dotnet\n      DotNETRuntime:GCEnd_V1 (loglevel: TRACE_DEBUG_LINE (13)) (type: tracepoint)\n        field: Other");
        assert!(format!("{:#}", parse_lttng_list(&bad).unwrap_err()).contains("listed twice"));
        assert!(format!("{:#}", parse_lttng_list("UST events:\n").unwrap_err()).contains("no DotNETRuntime tracepoint"));
        let err = parse_recording("A:b x:integer\nA:a\n", Path::new("r.txt")).unwrap_err();
        assert!(format!("{err:#}").contains("r.txt:2"), "{err:#}");
    }

    #[test]
    fn differences_name_each_tracepoint() {
        let tp = |s: &str, f: &[&str]| Tracepoint {
            provider: "DotNETRuntime".into(),
            symbol: s.into(),
            fields: f.iter().map(|f| (f.to_string(), "integer".to_string())).collect(),
        };
        let d = differences(&[tp("A", &["x"]), tp("B", &[])], &[tp("A", &["x", "y"]), tp("C", &[])]);
        assert_eq!(
            d,
            [
                "DotNETRuntime:A: fields x in the table, x,y declared",
                "declared by the provider, missing from the table: DotNETRuntime:C",
                "in the table, not declared by the provider: DotNETRuntime:B"
            ]
        );
    }

    /// The committed recording reads and is what the table is generated from.
    #[test]
    fn committed_recording_reads() {
        let tps = committed().unwrap();
        assert!(tps.iter().any(|t| t.full_name() == "DotNETRuntime:ContentionStart_V2"));
        assert!(tps.len() > 400, "{}", tps.len());
    }
}
