//! Where a mistake in a scenario file is: every error found while a scenario loads names
//! `file:line:column`. Type errors come from the TOML deserializer with a byte span; the checks
//! that need the whole scenario (collector references, `runs`, ranges, regexes) say which key they
//! judged ([`at`]), and [`locate`] finds that key's line in the text.

use std::fmt;
use std::path::Path;

use toml::de::{DeTable, DeValue};

/// One step of a key path: a table key or an index into an array (`[[expect]]` number 2 is
/// `["expect", 1]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

impl From<&str> for Seg {
    fn from(k: &str) -> Seg {
        Seg::Key(k.to_string())
    }
}

impl From<usize> for Seg {
    fn from(i: usize) -> Seg {
        Seg::Index(i)
    }
}

/// A mistake and the key it is about.
#[derive(Debug)]
pub(crate) struct Misplaced {
    pub path: Vec<Seg>,
    pub error: anyhow::Error,
}

impl fmt::Display for Misplaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Misplaced {}

/// `error`, about the key at `path`.
pub(crate) fn at(path: Vec<Seg>, error: anyhow::Error) -> anyhow::Error {
    // Keep the innermost place: a check deeper down knows better than its caller.
    if error.downcast_ref::<Misplaced>().is_some() {
        return error;
    }
    anyhow::Error::new(Misplaced { path, error })
}

/// Shorthand: `path!("expect", 2, "collector")`.
#[macro_export]
#[doc(hidden)]
macro_rules! scenario_path {
    ($($seg:expr),* $(,)?) => { vec![$($crate::scenario::place::Seg::from($seg)),*] };
}

/// Byte offset of the deepest part of `path` found in `text` (the key's value, or its table).
pub(crate) fn locate(text: &str, path: &[Seg]) -> Option<usize> {
    let root = DeTable::parse(text).ok()?;
    let mut best = None;
    let mut here: Option<&DeValue<'_>> = None;
    let mut table: Option<&DeTable<'_>> = Some(root.get_ref());
    for seg in path {
        match seg {
            Seg::Key(k) => {
                let t = match (table, here) {
                    (Some(t), _) => t,
                    (None, Some(DeValue::Table(t))) => t,
                    _ => break,
                };
                let Some((key, value)) = t.iter().find(|(key, _)| key.get_ref().as_ref() == k.as_str()) else { break };
                best = Some(key.span().start);
                here = Some(value.get_ref());
                table = None;
            }
            Seg::Index(i) => {
                let Some(DeValue::Array(items)) = here else { break };
                let Some(item) = items.get(*i) else { break };
                best = Some(item.span().start);
                here = Some(item.get_ref());
                table = None;
            }
        }
    }
    best
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Offset of the first `key = …` at or after `at` whose value starts with `value` (when given).
/// serde reports a mistake inside an array of tables (`[[collector]]`, `[[expect]]`) at the
/// array, not at the table holding it: the key (and its value) tell which of them it is.
fn key_after(text: &str, at: usize, key: &str, value: Option<&str>) -> Option<usize> {
    let mut offset = at.min(text.len());
    for line in text[offset..].split_inclusive('\n') {
        for (pos, _) in line.match_indices(key) {
            let before = &line[..pos];
            let after = line[pos + key.len()..].trim_start();
            let starts_key = before.trim_end().is_empty() || before.trim_end().ends_with(['{', ',']);
            let value_matches = value.is_none_or(|v| after.strip_prefix('=').is_some_and(|rest| rest.trim_start().starts_with(v)));
            if starts_key && after.starts_with('=') && value_matches {
                return Some(offset + pos);
            }
        }
        offset += line.len();
    }
    None
}

/// The key an error message of a tagged table names, with its value when the message gives it:
/// `unknown field `K``, `` `K = V`: … `` (see `collect::name_the_key`), or `kind = "V"` for an
/// unknown variant `V`.
fn named_key(message: &str) -> Option<(&str, Option<String>)> {
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        return Some(("kind", rest.split('`').next().map(|v| format!("\"{v}\""))));
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        return rest.split('`').next().filter(|k| !k.is_empty()).map(|k| (k, None));
    }
    let named = message.strip_prefix('`')?.split('`').next()?;
    let (key, value) = named.split_once(" = ").map_or((named, None), |(k, v)| (k, Some(v.to_string())));
    (!key.is_empty()).then_some((key, value))
}

/// The error of loading `origin`, as `file:line:column: what`.
pub(crate) fn explain(text: &str, origin: &Path, error: anyhow::Error) -> anyhow::Error {
    let (offset, message) = match error.downcast::<Misplaced>() {
        Ok(m) => (locate(text, &m.path), format!("{:#}", m.error)),
        Err(e) => match e.downcast::<toml::de::Error>() {
            Ok(t) => {
                let message = t.message().trim().to_string();
                // serde reports an unknown key or a wrong value of a tagged table
                // (`[[collector]]`, `[[expect]]`) at the table: the key's own line is the place
                // to fix.
                let offset = t
                    .span()
                    .map(|s| s.start)
                    .map(|at| {
                        // A value serde placed itself (an unknown variant of a plain key such as
                        // `target` or `shape`) is the place; only a table's span is looked into.
                        if let Some(rest) = message.strip_prefix("unknown variant `")
                            && let Some(v) = rest.split('`').next()
                            && text[at..].starts_with(&format!("\"{v}\""))
                        {
                            return at;
                        }
                        named_key(&message)
                            .and_then(|(key, value)| key_after(text, at, key, value.as_deref()).or_else(|| key_after(text, at, key, None)))
                            .unwrap_or(at)
                    });
                (offset, message)
            }
            Err(e) => (None, format!("{e:#}")),
        },
    };
    let (line, col) = line_col(text, offset.unwrap_or(0));
    anyhow::anyhow!("{}:{line}:{col}: {message}", origin.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name = \"x\"\nworkload = \"cpu-bound\"\n\n[[collector]]\nkind = \"perf-cpu\"\n\n[[expect]]\nkind = \"resolved\"\n\n[[expect]]\nkind = \"share\"\ncollector = \"nope\"\n";

    #[test]
    fn keys_and_array_items_are_found_by_path() {
        let at = |path: Vec<Seg>| locate(TEXT, &path).map(|o| line_col(TEXT, o));
        assert_eq!(at(scenario_path!("workload")), Some((2, 1)));
        assert_eq!(at(scenario_path!("expect", 1, "collector")), Some((12, 1)));
        // The deepest part found: an unknown key inside expect 2 points at expect 2.
        assert_eq!(at(scenario_path!("expect", 1, "missing")).map(|(l, _)| l), Some(10));
        assert_eq!(at(scenario_path!("nothing")), None);
    }

    #[test]
    fn columns_count_characters() {
        assert_eq!(line_col("a\nπx = 1", 4), (2, 2));
        assert_eq!(line_col("", 10), (1, 1));
    }
}

/// Scenario mistakes found at load, each with the line and column to fix (19 faulty files once
/// found 6 mistakes only mid-run and let 3 wrong types through).
#[cfg(test)]
mod scenario_mistakes {
    use std::path::Path;

    use crate::scenario::Scenario;

    const BASE: &str = "name = \"x\"\nworkload = \"cpu-bound\"\n\n[[collector]]\nkind = \"perf-cpu\"\n";

    fn error_of(text: &str) -> String {
        format!("{:#}", Scenario::from_toml(text, Path::new("dir/x.toml")).err().unwrap_or_else(|| panic!("accepted:\n{text}")))
    }

    #[test]
    fn every_mistake_names_file_line_and_column() {
        let with = |extra: &str| format!("{BASE}{extra}");
        for (text, place, why) in [
            (with("frequency = \"99\"\n"), "dir/x.toml:6:1", "`frequency = \"99\"`: invalid type: string \"99\""),
            (with("frequency = 99.5\n"), "dir/x.toml:6:1", "`frequency = 99.5`: invalid type: floating point `99.5`"),
            (with("call_graph = \"fp\"\nfrequency = true\n"), "dir/x.toml:7:1", "`frequency = true`: invalid type: boolean `true`"),
            (with("\n[[expect]]\nkind = \"resolved\"\nclass = \"jit\"\nmin = \"0.9\"\n"), "dir/x.toml:10:1", "`min = \"0.9\"`: invalid type: string \"0.9\""),
            (with("\n[[expect]]\nkind = \"resolved\"\nclass = \"jit\"\nmin = 0.9\nmni = 1\n"), "dir/x.toml:11:1", "unknown field `mni`"),
            (with("\n[[collector]]\nkind = \"perf\"\n"), "dir/x.toml:8:1", "unknown variant `perf`"),
            (with("\n[[expect]]\nkind = \"resolvd\"\n"), "dir/x.toml:8:1", "unknown variant `resolvd`"),
            // In the second table of an array, the second table's line.
            (with("frequency = 99\n\n[[collector]]\nkind = \"perf-cpu\"\nname = \"b\"\nfrequency = \"99\"\n"), "dir/x.toml:11:1", "`frequency = \"99\"`"),
            (with("\n[[collector]]\nkind = \"perf-offcpu\"\nfrequncy = 9\n"), "dir/x.toml:9:1", "unknown field `frequncy`"),
            (with("frequncy = 99\n"), "dir/x.toml:6:1", "unknown field `frequncy`"),
            (with("frequency = 1000000\n"), "dir/x.toml:6:1", "frequency 1000000 Hz is out of range"),
            (with("\n[[collector]]\nkind = \"dump\"\nname = \"d\"\ntypes = [\"mini\"]\nat_s = 9000\n"), "dir/x.toml:11:1", "`at_s` is 0–3600 seconds"),
            (with("\n[[collector]]\nkind = \"perf-offcpu\"\ncall_graph = \"lbr\"\n"), "dir/x.toml:9:1", "dwarf,BYTES"),
            (with("\n[[collector]]\nkind = \"perf-syscalls\"\nmmap_pages = 0\n"), "dir/x.toml:9:1", "mmap_pages = 0"),
            (format!("tiemout_s = 5\n{BASE}"), "dir/x.toml:1:1", "unknown field `tiemout_s`"),
            (format!("timeout_s = \"5\"\n{BASE}"), "dir/x.toml:1:13", "invalid type: string \"5\""),
            (with("\n[[collector]]\nkind = \"perf-offcpu\"\nname = \"perf-cpu\"\n"), "dir/x.toml:7:1", "two collectors are named `perf-cpu`"),
            (with("\n[[expect]]\nkind = \"resolved\"\ncollector = \"eventpipe\"\nclass = \"jit\"\nmin = 0.9\n"), "dir/x.toml:9:1", "collector `eventpipe`"),
            (format!("runs = [[\"perf-cpu\"], [\"nope\"]]\n{BASE}"), "dir/x.toml:1:23", "names collector `nope`"),
            (format!("warmup_s = 900.0\nprotocol = \"none\"\n{BASE}"), "dir/x.toml:1:1", "`warmup_s` is 0–600"),
            (format!("target = \"pod\"\nshape = \"daemonset\"\n{BASE}"), "dir/x.toml:2:9", "unknown variant `daemonset`"),
            (format!("target = \"vm\"\n{BASE}"), "dir/x.toml:1:10", "unknown variant `vm`"),
            (format!("pod_resources = {{ cpu = \"half\" }}\n{BASE}"), "dir/x.toml:1:19", "`pod_resources.cpu` is a Kubernetes quantity"),
            (format!("pod_resources = {{ cpus = \"1\" }}\n{BASE}"), "dir/x.toml:1:19", "unknown field `cpus`"),
            (format!("ready = {{ line = \"([\" }}\n{BASE}"), "dir/x.toml:1:9", "not a valid regex"),
            (BASE.replace("name = \"x\"", "name = \"../../etc\""), "dir/x.toml:1:1", "`name` is letters, digits"),
            (format!("{BASE}\n[load]\nroutes = [\"/\"]\nconnections_per_route = 5000\nseconds = 2\n"), "dir/x.toml:9:1", "`[load] connections_per_route` is 1–64"),
            (format!("{BASE}\n[load]\nurl = \"http://127.0.0.1@10.255.255.1:80\"\nroutes = [\"/\"]\nseconds = 2\n"), "dir/x.toml:8:1", "a user part"),
            (format!("{BASE}\n[load]\nroutes = [\"/a b\"]\nseconds = 2\n"), "dir/x.toml:8:1", "paths starting with / without spaces"),
            (format!("env = {{ DOTNET_PerfMapJitDumpPath = \"/x\" }}\n{BASE}"), "dir/x.toml:1:1", "tracelab places the perf map and jitdump itself"),
            (format!("env = {{ BIG = \"{}\" }}\n{BASE}", "x".repeat(200_000)), "dir/x.toml:1:1", "`env` BIG is 200004 bytes with its value"),
            (format!("env = {{ {} }}\n{BASE}", (0..30_000).map(|i| format!("K{i} = \"{i:0>30}\"")).collect::<Vec<_>>().join(", ")), "dir/x.toml:1:1", "(30000 variables): more than the 1048576 bytes"),
            (format!("{BASE}\n[sufficiency]\nmax_lost_ratio = 2.0\n"), "dir/x.toml:8:1", "fractions between 0 and 1"),
            (format!("{BASE}\n[sufficiency]\nmax_lost_ratio = 0.1\nattempts = 9\n"), "dir/x.toml:9:1", "attempts is 1–5"),
            (
                format!(
                    "{}\n[[expect]]\nkind = \"share\"\nmethod = \"A\"\namong = [\"A\", \"B\"]\ntruth = \"shares.cpu.B\"\n",
                    BASE.replace("workload = \"cpu-bound\"", "workload = { dll = \"a.dll\" }\ntruth = { path = \"t.json\", map = { \"shares.cpu.A\" = \"{/a}\" } }")
                ),
                "dir/x.toml:12:1",
                "reads truth `shares.cpu.B`, which the scenario does not declare: `truth.map` declares `shares.cpu.A`",
            ),
            // A check's own mistake points at its key, not at the `[[expect]]` above it.
            (with("\n[[expect]]\nkind = \"resolved\"\nclass = \"jit\"\nmin = 95\n"), "dir/x.toml:10:1", "`min` is a ratio between 0 and 1 (0.95 for 95 %), got 95"),
            (with("\n[[expect]]\nkind = \"resolved\"\nclass = \"jitt\"\n"), "dir/x.toml:9:1", "unknown DSO class `jitt`"),
            (with("\n[[expect]]\nkind = \"share_at_least\"\nmethod = \"A\"\namong = [\"A\"]\nmin = 90\n"), "dir/x.toml:11:1", "`min` is a ratio"),
            (with("\n[[expect]]\nkind = \"share\"\nmethod = \"A\"\namong = [\"A\", \"(\"]\ntruth = \"t\"\n"), "dir/x.toml:10:1", "bad regex `(`"),
            (with("\n[[expect]]\nkind = \"event_count\"\nevent = \"GCStart\"\nfield = \"Reason\"\n"), "dir/x.toml:10:1", "`field` needs `matches`"),
            (with("\n[[expect]]\nkind = \"event_count\"\nevent = \"GCStart\"\nfield = \"Reason\"\nequals = true\n"), "dir/x.toml:11:1", "a number or a string"),
            (with("\n[[expect]]\nkind = \"event_count\"\nevent = \"GCStart\"\nequals_truth = \"gc..induced\"\n"), "dir/x.toml:10:1", "column 4: an empty key"),
            (with("\n[[expect]]\nkind = \"metric\"\nmetric = \"m\"\ntolerance = 1\n"), "dir/x.toml:10:1", "`tolerance` and `tolerance_pct` go with `equals_truth`"),
            (with("\n[[expect]]\nkind = \"waker\"\nblocked = \"A\"\nwaker = \"B\"\nmin_share = 90\n"), "dir/x.toml:11:1", "`min_share` is a ratio"),
            (with("\n[[expect]]\nkind = \"event_count\"\nevent = \"E\"\nmin = 5\nmax = 2\n"), "dir/x.toml:11:1", "`max` (2) is below `min` (5)"),
            (with("\n[[expect]]\nkind = \"frame\"\npattern = \"A\"\nmin_share = 50\n"), "dir/x.toml:10:1", "`min_share` is a ratio between 0 and 1 (0.5 for 50 %)"),
            (format!("{BASE}\n[load]\nroutes = [\"/a\"]\nseconds = 0\n"), "dir/x.toml:9:1", "`[load] seconds` is 0–3600"),
            (format!("{BASE}\n[load]\nroutes = [\"a\"]\nseconds = 1\n"), "dir/x.toml:8:1", "`[load] routes` are paths starting with /"),
            (format!("{BASE}\n[load]\nroutes = [\"/a\"]\nconnections_per_route = 0\nseconds = 1\n"), "dir/x.toml:9:1", "connections_per_route` is 1–64"),
            (
                BASE.replace("workload = \"cpu-bound\"", "workload = { command = [\"/bin/true\"] }\ntruth = { path = \"t.json\", map = { \"exceptions.App.Bad: m\" = \"{/a}\" } }")
                    + "\n[[expect]]\nkind = \"exceptions\"\ntruth = \"exceptions\"\n",
                "dir/x.toml:3:36",
                "truth.map key `exceptions.App.Bad: m` nests 2 levels below `exceptions`, whose values are counts by one key each: quote that key, 'exceptions.\"App.Bad: m\"'",
            ),
            // Every file the scenario names exists before any work, the key named.
            (BASE.replace("workload = \"cpu-bound\"", "workload = { dll = \"bin/App.dll\" }"), "dir/x.toml:2:14", "workload dll "),
            (BASE.replace("workload = \"cpu-bound\"", "workload = { project = \"src/App\" }"), "dir/x.toml:2:14", "workload project "),
            (BASE.replace("workload = \"cpu-bound\"", "workload = { command = [\"./bin/app\"] }"), "dir/x.toml:2:14", "workload program "),
            (BASE.replace("workload = \"cpu-bound\"", "workload = { command = [\"/bin/true\"] }\ncwd = \"run\""), "dir/x.toml:3:1", "`cwd` "),
            (
                BASE.replace("workload = \"cpu-bound\"", "workload = { command = [\"/bin/true\"] }\ntruth = { path = \"t.json\", map = { 'e.\"A.B' = \"{/a}\" } }"),
                "dir/x.toml:3:36",
                "truth.map key: truth path `e.\"A.B`, column 3: a quoted key is not closed",
            ),
        ] {
            let err = error_of(&text);
            assert!(err.contains(&format!("{place}: ")) && err.contains(why), "want `{place}: …{why}…`, got: {err}\n{text}");
        }
    }
}
