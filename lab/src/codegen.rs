//! The committed tables generated from the .NET runtime's event manifest (dotnet/runtime
//! src/coreclr/vm/ClrEtwAll.man, MIT; a copy in ../shared/reference): written by
//! `cargo xtask codegen`, and a test fails when a committed file differs from what this module
//! writes, so the tables never drift from their source.
//!
//! - `crates/eventpipe/src/manifest.rs`: names and payload templates of the runtime's events.
//!   Runtime providers send EventPipe metadata without field names or event names, so a reader
//!   has to know them. Only fixed-layout fields are described: a template stops at its first
//!   `struct` or counted array, and the decoder keeps the rest of such a payload as bytes
//!   (`__rest__`).
//! - `harness/src/collect/lttng/events.rs`: every tracepoint the runtime's LTTng provider declares
//!   (a committed recording of `lttng list -u -f`, harness/data/runtime-events, see
//!   [`crate::lttng_provider`]) with its event's EventPipe id, keywords and level — from
//!   the manifest where it knows the event, else from `beyond-manifest.txt` beside the recording.
//!
//! The manifest is read into a small element tree and walked the way the Python generators this
//! replaced walked it with ElementTree (elements in document order, by local name: the manifest
//! puts every element these tables read in the events namespace).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use quick_xml::events::{BytesStart, Event};

use crate::lttng_provider;

/// The command that rewrites every generated file.
pub const REGENERATE: &str = "cargo xtask codegen";

/// One generated file: its path under the project root and its whole text.
pub struct Generated {
    pub path: &'static str,
    pub text: String,
}

/// The manifest the tables come from.
pub fn manifest_path() -> PathBuf {
    harness::shared_dir().join("reference/ClrEtwAll.man")
}

/// Every generated file, from the manifest at `manifest` and the committed recordings of what
/// the runtime declares (harness/data/runtime-events).
pub fn generate(manifest: &Path) -> Result<Vec<Generated>> {
    let text = std::fs::read_to_string(manifest).with_context(|| format!("cannot read {}", manifest.display()))?;
    let root = Element::parse(&text).with_context(|| format!("{} is not well-formed XML", manifest.display()))?;
    let recording = lttng_provider::committed()?;
    let beyond_path = harness::project_root().join(BEYOND_MANIFEST);
    let beyond_text = std::fs::read_to_string(&beyond_path).with_context(|| format!("cannot read {}", beyond_path.display()))?;
    let beyond = beyond_manifest(&beyond_text, &beyond_path)?;
    Ok(vec![
        Generated { path: "crates/eventpipe/src/manifest.rs", text: eventpipe_manifest(&root)? },
        Generated { path: "harness/src/collect/lttng/events.rs", text: lttng_events(&root, &recording, &beyond)? },
        Generated { path: crate::features::MANIFEST, text: crate::features::generate(&harness::project_root())? },
    ])
}

/// Records again what the runtime's LTTng provider declares in the bullseye image (Docker and the
/// image needed) into the committed recording; `run` then regenerates the tables from it.
pub fn record(root: &Path) -> Result<()> {
    let text = lttng_provider::record("bullseye")?;
    let path = root.join(lttng_provider::RECORDING);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", lttng_provider::RECORDING);
    Ok(())
}

/// Writes every generated file under `root` or, with `check`, fails naming those that differ.
pub fn run(root: &Path, check: bool) -> Result<()> {
    let mut stale = Vec::new();
    for g in generate(&manifest_path())? {
        let path = root.join(g.path);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == g.text {
            continue;
        }
        if check {
            stale.push(g.path);
        } else {
            std::fs::write(&path, &g.text).with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", g.path);
        }
    }
    if !stale.is_empty() {
        bail!("generated files differ from what the generator writes: {}; regenerate with `{REGENERATE}`", stale.join(", "));
    }
    Ok(())
}

/// An XML element with what the generators read: local name, attributes, children.
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Element>,
}

impl Element {
    fn parse(text: &str) -> Result<Element> {
        let mut reader = quick_xml::Reader::from_str(text);
        let mut open: Vec<Element> = Vec::new();
        loop {
            let pos = reader.buffer_position();
            let done = match reader.read_event().with_context(|| format!("at byte {pos}"))? {
                Event::Start(start) => {
                    open.push(Element::from_start(&start)?);
                    None
                }
                Event::Empty(start) => Element::from_start(&start)?.close(&mut open),
                Event::End(_) => open.pop().context("unbalanced end tag")?.close(&mut open),
                Event::Eof => bail!("the document ends before its root element closes"),
                _ => None,
            };
            if let Some(root) = done {
                return Ok(root);
            }
        }
    }

    fn from_start(start: &BytesStart) -> Result<Element> {
        let mut attrs = Vec::new();
        for a in start.attributes() {
            let a = a?;
            attrs.push((String::from_utf8_lossy(a.key.as_ref()).into_owned(), a.normalized_value(quick_xml::XmlVersion::Implicit1_0)?.into_owned()));
        }
        let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
        Ok(Element { name, attrs, children: Vec::new() })
    }

    /// Attaches a finished element to its parent; the root is returned.
    fn close(self, open: &mut [Element]) -> Option<Element> {
        match open.last_mut() {
            Some(parent) => {
                parent.children.push(self);
                None
            }
            None => Some(self),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn attr(&self, key: &str) -> Result<&str> {
        self.get(key).with_context(|| format!("<{}> without `{key}`", self.name))
    }

    /// This element and its descendants named `name`, in document order (ElementTree's `iter`).
    fn iter<'a>(&'a self, name: &str) -> Vec<&'a Element> {
        let mut out = Vec::new();
        self.collect(name, &mut out);
        out
    }

    fn collect<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
        if self.name == name {
            out.push(self);
        }
        for c in &self.children {
            c.collect(name, out);
        }
    }
}

fn int(e: &Element, key: &str) -> Result<i64> {
    let v = e.attr(key)?;
    v.trim().parse().with_context(|| format!("<{}> {key}=\"{v}\" is not a number", e.name))
}

/// The providers whose events EventPipe sessions carry.
const EVENTPIPE_PROVIDERS: [&str; 3] =
    ["Microsoft-Windows-DotNETRuntime", "Microsoft-Windows-DotNETRuntimeRundown", "Microsoft-Windows-DotNETRuntimePrivate"];

/// Manifest `inType` → the eventpipe crate's `FieldType` variant.
fn field_type(in_type: &str) -> Option<&'static str> {
    Some(match in_type {
        "win:UInt8" => "U8",
        "win:UInt16" => "U16",
        "win:UInt32" => "U32",
        "win:UInt64" => "U64",
        "win:Int32" => "I32",
        "win:Int64" => "I64",
        "win:Pointer" => "Ptr",
        "win:Boolean" => "Bool",
        "win:Double" => "F64",
        "win:Float" => "F32",
        "win:GUID" => "Guid",
        "win:UnicodeString" => "Utf16",
        "win:AnsiString" => "Ansi",
        _ => return None,
    })
}

/// A template's fixed-layout fields, and whether they are the whole payload.
type Template = (Vec<(String, &'static str)>, bool);

fn templates_of(provider: &Element) -> Result<BTreeMap<String, Template>> {
    let mut out = BTreeMap::new();
    for t in provider.iter("template") {
        let (mut fields, mut complete) = (Vec::new(), true);
        for child in &t.children {
            if child.name == "struct" || child.get("count").is_some() || child.get("length").is_some() {
                complete = false;
                break;
            }
            if child.name != "data" {
                continue;
            }
            let Some(ty) = child.get("inType").and_then(field_type) else {
                complete = false;
                break;
            };
            fields.push((child.attr("name")?.to_string(), ty));
        }
        out.insert(t.attr("tid")?.to_string(), (fields, complete));
    }
    Ok(out)
}

/// `GCStart_V2` → `GCStart`: EventPipe names an event without its version suffix.
fn base_name(symbol: &str) -> &str {
    let digits = symbol.trim_end_matches(|c: char| c.is_ascii_digit());
    match digits.strip_suffix('V') {
        Some(stem) if digits.len() < symbol.len() => stem.strip_suffix('_').unwrap_or(stem),
        _ => symbol,
    }
}

fn eventpipe_manifest(root: &Element) -> Result<String> {
    struct Row {
        provider: String,
        id: i64,
        version: i64,
        name: String,
        template: Option<String>,
    }
    let (mut rows, mut templates) = (Vec::new(), BTreeMap::new());
    for p in root.iter("provider") {
        let provider = p.attr("name")?;
        if !EVENTPIPE_PROVIDERS.contains(&provider) {
            continue;
        }
        let tpls = templates_of(p)?;
        for e in p.iter("event") {
            let template = match e.get("template") {
                Some(tid) if !tid.is_empty() => {
                    let key = format!("{provider}/{tid}");
                    let t = tpls.get(tid).with_context(|| format!("{provider}: no template `{tid}`"))?;
                    templates.insert(key.clone(), t.clone());
                    Some(key)
                }
                _ => None,
            };
            rows.push(Row {
                provider: provider.to_string(),
                id: int(e, "value")?,
                version: int(e, "version")?,
                name: base_name(e.attr("symbol")?).to_string(),
                template,
            });
        }
    }
    let mut out = String::new();
    out.push_str("// @generated by `cargo xtask codegen` (lab/src/codegen.rs) from the runtime's ClrEtwAll.man: do not edit.\n");
    out.push_str("// Names and fixed-layout payload fields of the runtime's events, by (provider, id, version).\n");
    out.push_str("use crate::payload::FieldType::{self, *};\n\n");
    out.push_str("#[derive(Debug, PartialEq, Eq)]\n");
    out.push_str("pub(crate) struct Template { pub fields: &'static [(&'static str, FieldType)], pub complete: bool }\n\n");
    let mut index = BTreeMap::new();
    for (i, (key, (fields, complete))) in templates.iter().enumerate() {
        index.insert(key.clone(), format!("T{i}"));
        let fs: Vec<String> = fields.iter().map(|(n, t)| format!("(\"{n}\", {t})")).collect();
        out.push_str(&format!(
            "static T{i}: Template = Template {{ fields: &[{}], complete: {complete} }};\n",
            fs.join(", ")
        ));
    }
    out.push_str("\n/// (provider, event id, version, name, template), sorted by provider, id, version.\n");
    out.push_str("pub(crate) static EVENTS: &[(&str, u16, u8, &str, Option<&Template>)] = &[\n");
    rows.sort_by(|a, b| (&a.provider, a.id, a.version).cmp(&(&b.provider, b.id, b.version)));
    for r in &rows {
        let t = r.template.as_ref().map_or("None".to_string(), |k| format!("Some(&{})", index[k]));
        out.push_str(&format!("    (\"{}\", {}, {}, \"{}\", {t}),\n", r.provider, r.id, r.version, r.name));
    }
    out.push_str("];\n");
    out.push_str(LOOKUP);
    Ok(out)
}

const LOOKUP: &str = "
/// The manifest's name and template for (provider, id, version); for a version newer than the
/// manifest knows, the newest known one (later versions only append fields).
pub(crate) fn lookup(provider: &str, id: u32, version: u32) -> Option<(&'static str, Option<&'static Template>)> {
    let id = u16::try_from(id).ok()?;
    let start = EVENTS.partition_point(|e| (e.0, e.1) < (provider, id));
    let mut best = None;
    for e in &EVENTS[start..] {
        if e.0 != provider || e.1 != id {
            break;
        }
        if u32::from(e.2) <= version {
            best = Some((e.3, e.4));
        }
    }
    best
}
";

/// Manifest `level` → its number (absent or unknown: informational).
fn level(name: Option<&str>) -> u8 {
    match name {
        Some("win:LogAlways") => 0,
        Some("win:Critical") => 1,
        Some("win:Error") => 2,
        Some("win:Warning") => 3,
        Some("win:Verbose") => 5,
        _ => 4,
    }
}

/// Ids, keywords and levels of runtime events newer than ClrEtwAll.man, by (LTTng provider,
/// event name without version): see harness/data/runtime-events/README.md.
pub const BEYOND_MANIFEST: &str = "harness/data/runtime-events/beyond-manifest.txt";

/// (id, keywords, level) of an event, for every version the provider may declare.
type EventFacts = (u32, u64, u8);

/// `provider base-name id keywords level` lines of [`BEYOND_MANIFEST`].
fn beyond_manifest(text: &str, path: &Path) -> Result<BTreeMap<(String, String), EventFacts>> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), n + 1);
        let w: Vec<&str> = line.split_whitespace().collect();
        let [provider, name, id, keywords, level] = w[..] else {
            bail!("{}: expected `provider name id keywords level`, found `{line}`", at());
        };
        let id = id.parse().with_context(|| format!("{}: id `{id}` is not a number", at()))?;
        let hex = keywords.trim_start_matches("0x");
        let keywords = u64::from_str_radix(hex, 16).with_context(|| format!("{}: keywords `{keywords}` are not hex", at()))?;
        let level = level.parse().with_context(|| format!("{}: level `{level}` is not a number", at()))?;
        if out.insert((provider.to_string(), name.to_string()), (id, keywords, level)).is_some() {
            bail!("{}: {provider} {name} is listed twice", at());
        }
    }
    Ok(out)
}

/// The LTTng table: one row per tracepoint the runtime's provider declares (the committed
/// recording), with the id, keywords and level of its event from [`BEYOND_MANIFEST`] (events the
/// manifest lacks, and its corrections), else from the manifest (the exact symbol, else the
/// newest version of the same event).
fn lttng_events(root: &Element, recording: &[lttng_provider::Tracepoint], beyond: &BTreeMap<(String, String), EventFacts>) -> Result<String> {
    // (LTTng provider, symbol) and (LTTng provider, name without version) → facts.
    let mut by_symbol: BTreeMap<(String, String), EventFacts> = BTreeMap::new();
    let mut by_name: BTreeMap<(String, String), (u32, EventFacts)> = BTreeMap::new();
    for p in root.iter("provider") {
        let provider = p.attr("name")?.replace("Microsoft-Windows-", "");
        let mut masks = BTreeMap::new();
        for k in p.iter("keyword") {
            let mask = k.attr("mask")?;
            let hex = mask.trim().trim_start_matches("0x").trim_start_matches("0X");
            let value = u64::from_str_radix(hex, 16).with_context(|| format!("keyword mask `{mask}`"))?;
            masks.insert(k.attr("name")?, value);
        }
        for e in p.iter("event") {
            let keywords = e.get("keywords").unwrap_or("").split_whitespace().fold(0, |kw, k| kw | masks.get(k).copied().unwrap_or(0));
            let version = if e.get("version").is_some_and(|v| !v.is_empty()) { int(e, "version")? as u32 } else { 0 };
            let facts = (int(e, "value")? as u32, keywords, level(e.get("level")));
            let symbol = e.attr("symbol")?;
            by_symbol.insert((provider.clone(), symbol.to_string()), facts);
            let name = harness::collect::lttng::base_name(symbol).to_string();
            let newest = by_name.entry((provider.clone(), name)).or_insert((version, facts));
            if version >= newest.0 {
                *newest = (version, facts);
            }
        }
    }
    let mut out = String::new();
    out.push_str("// @generated by `cargo xtask codegen` (lab/src/codegen.rs) from what the runtime's LTTng provider\n");
    out.push_str("// declares (harness/data/runtime-events/lttng-provider.txt), with ids, keywords and levels from\n");
    out.push_str("// ClrEtwAll.man and harness/data/runtime-events/beyond-manifest.txt: do not edit.\n");
    out.push_str("// (LTTng provider, tracepoint symbol, event name, version, event id, keywords, level, fields)\n");
    out.push_str("#[rustfmt::skip]\n");
    out.push_str("pub static EVENTS: &[(&str, &str, &str, u32, Option<u32>, u64, u8, &[&str])] = &[\n");
    let mut unknown = Vec::new();
    for tp in recording {
        let (name, version) = harness::collect::lttng::split_version(&tp.symbol);
        let key = (tp.provider.clone(), name.to_string());
        // The file beside the recording also corrects the manifest where the runtime moved an
        // event to another keyword (GCGenerationRange), so it is asked first.
        let facts = beyond
            .get(&key)
            .or_else(|| by_symbol.get(&(tp.provider.clone(), tp.symbol.clone())))
            .or_else(|| by_name.get(&key).map(|(_, f)| f));
        if facts.is_none() && !tp.provider.ends_with("MonoProfiler") {
            unknown.push(tp.full_name());
        }
        let (id, keywords, lvl) = match facts {
            Some(&(id, kw, lvl)) => (format!("Some({id})"), kw, lvl),
            None => ("None".to_string(), 0, 4),
        };
        let fields: Vec<String> = tp.fields.iter().map(|(f, _)| format!("\"{f}\"")).collect();
        out.push_str(&format!(
            "    (\"{}\", \"{}\", \"{name}\", {}, {id}, {keywords:#x}, {lvl}, &[{}]),\n",
            tp.provider,
            tp.symbol,
            version.unwrap_or(0),
            fields.join(", ")
        ));
    }
    if !unknown.is_empty() {
        bail!(
            "the provider declares events that neither ClrEtwAll.man nor {BEYOND_MANIFEST} knows: {}; add their id, keywords and level there",
            unknown.join(", ")
        );
    }
    out.push_str("];\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed tables are what the generator writes from the manifest, byte for byte.
    #[test]
    fn committed_tables_are_generated() {
        let manifest = manifest_path();
        assert!(manifest.is_file(), "{} is absent: the generated tables cannot be checked", manifest.display());
        for g in generate(&manifest).unwrap() {
            let committed = std::fs::read_to_string(harness::project_root().join(g.path)).unwrap_or_default();
            let first_diff = committed.lines().zip(g.text.lines()).position(|(a, b)| a != b);
            assert!(
                committed == g.text,
                "{} differs from what the generator writes (first differing line: {}); regenerate with `{REGENERATE}`",
                g.path,
                first_diff.map_or("past the end of the shorter".to_string(), |i| (i + 1).to_string())
            );
        }
    }

    #[test]
    fn version_suffixes_and_templates() {
        assert_eq!(base_name("GCStart_V2"), "GCStart");
        assert_eq!(base_name("MethodLoadV1"), "MethodLoad");
        assert_eq!(base_name("GCPerHeapHistory_V3_1"), "GCPerHeapHistory_V3_1");
        assert_eq!(base_name("V8"), "");
        let root = Element::parse(
            r#"<e xmlns="ns"><template tid="T"><data name="A" inType="win:UInt32"/><data name="B" inType="win:UInt8" count="A"/></template>
               <template tid="U"><data name="C" inType="win:Int64"/><UserData><x/></UserData></template></e>"#,
        )
        .unwrap();
        let t = templates_of(&root).unwrap();
        assert_eq!(t["T"], (vec![("A".to_string(), "U32")], false));
        assert_eq!(t["U"], (vec![("C".to_string(), "I64")], true));
    }
}

#[cfg(test)]
mod layouts {
    use super::*;

    /// Every runtime event the EventPipe decoder has a complete layout for (the generated
    /// manifest table and its hand-kept additions) names its fields as the .NET 10 runtime's LTTng
    /// provider declares the same event and version: one description of the runtime's events
    /// cross-checks the other.
    #[test]
    fn eventpipe_layouts_match_what_the_runtime_declares() {
        let recording = lttng_provider::committed().unwrap();
        let mut checked = 0;
        let mut mismatched = vec![];
        for tp in recording.iter().filter(|t| t.provider == "DotNETRuntime") {
            let row = harness::collect::lttng::EVENTS.iter().find(|r| r.1 == tp.symbol).unwrap();
            let (Some(id), version) = (row.4, row.3) else { continue };
            let Some((name, fields)) = eventpipe::runtime_event_layout("Microsoft-Windows-DotNETRuntime", id, version) else { continue };
            // LTTng spells a counted array as `length` + `__data__`: no fixed layout to compare.
            if tp.fields.iter().any(|f| f.0 == "__data__") {
                continue;
            }
            let declared: Vec<&str> = tp.fields.iter().map(|f| f.0.as_str()).collect();
            checked += 1;
            // The defunct `MethodDCEndV2` kind of symbol: EventPipe names it without the `V2`.
            let same_name = name == row.2 || row.2.trim_end_matches(|c: char| c.is_ascii_digit()).strip_suffix('V') == Some(name);
            if !same_name || fields != declared {
                mismatched.push(format!("{} (id {id} v{version}): EventPipe decodes {name} {fields:?}, the runtime declares {declared:?}", tp.symbol));
            }
        }
        assert!(checked > 100, "only {checked} layouts compared");
        assert!(mismatched.is_empty(), "{} of {checked} layouts differ:\n{}", mismatched.len(), mismatched.join("\n"));
    }
}
