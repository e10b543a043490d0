//! Display names: what a frame's label shows, made in one place for every writer — folded
//! stacks, flame graphs, speedscope and whatever else draws stacks (Firefox profiles, pprof).
//!
//! A managed method gets one label whichever collector saw it: `Namespace.Type::Method(params)`.
//! perf maps spell it `[instance ]RET [Assembly] Namespace.Type::Method(PARAMS)[CodeVersion]`,
//! sometimes with a `/* MT: 0x… */` comment after an instantiated type; EventPipe's method events
//! spell it `Namespace.Type::Method(PARAMS)` with other parameter spellings (`value class
//! System.ReadOnlySpan`1<wchar>` for perf's `valuetype [System.Runtime]System.ReadOnlySpan`1<char>`).
//! Return type, `instance`, assembly, code version and comments are dropped; parameters are
//! written one way (no `class`/`valuetype`, no assembly references, `string`, `object`, `char`,
//! `uint8`, `nint`, nested types with `+`).
//!
//! Native code without a symbol but inside a function that `.eh_frame` describes (see
//! [`stacks::symbolize::fde`]) is named by the function's start: `libcoreclr.so!fn@0x1a2b30`, one box
//! per function instead of one `[unknown] (libcoreclr.so)` heap. It still counts as unnamed in
//! resolution figures ([`has_symbol`]).
//!
//! What the symbolizer finds (which symbol, which file) is `symbolize`'s; how it reads is here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use regex::Regex;

use crate::data::{Collection, DsoClass, Frame, MethodName, merge_code_version};

/// Label of a sample with no frames at all.
pub const NO_STACK: &str = "[no stack]";

/// The frame's label: [`label`] of its name and dso.
pub fn frame_label(frame: &Frame) -> String {
    label(frame.name.as_deref(), frame.dso.as_deref())
}

/// The label of a frame given as (symbol name, dso path): the one function every writer takes
/// labels from. Managed methods as [`method_label`]; a function known only by its start
/// (`fn@0x…` from the symbolizer) as `FILE!fn@0x…`; a frame without a name as
/// `[unknown] (FILE)`; anything else (native and kernel symbols, runtime stubs) as named.
/// The folded format's separators (`;`, line breaks) never appear in a label.
pub fn label(name: Option<&str>, dso: Option<&str>) -> String {
    let text = match (name, dso) {
        (Some(n), dso) if anonymous_function_start(n).is_some() => match dso {
            Some(d) => format!("{}!{n}", dso_file(d)),
            None => n.to_string(),
        },
        (Some(n), _) => method_label(n).into_owned(),
        (None, Some(d)) => format!("[unknown] ({})", dso_file(d)),
        (None, None) => "[unknown]".to_string(),
    };
    sanitize(text)
}

/// The file name of a dso path (`/usr/share/dotnet/…/libcoreclr.so` → `libcoreclr.so`); names
/// in brackets (`[vdso]`, `[kernel.kallsyms]`) as they are.
pub fn dso_file(dso: &str) -> &str {
    if dso.starts_with('[') {
        return dso;
    }
    dso.rsplit('/').find(|p| !p.is_empty()).unwrap_or(dso)
}

fn sanitize(mut s: String) -> String {
    if s.contains([';', '\n', '\r']) {
        s = s.replace(';', ",").replace(['\n', '\r'], " ");
    }
    s
}

/// The name the symbolizer gives code it knows only as a function starting at `start` (an
/// `.eh_frame` FDE, no symbol): `fn@0x1a2b30`, the start as the file's own address (what `nm`,
/// `objdump` and `addr2line -e FILE` take).
pub fn anonymous_function(start: u64) -> String {
    format!("fn@{start:#x}")
}

/// The start of a function named by [`anonymous_function`].
pub fn anonymous_function_start(name: &str) -> Option<u64> {
    u64::from_str_radix(name.strip_prefix("fn@0x")?, 16).ok()
}

/// Whether the frame has a real symbol (a function known only by its start does not): what
/// resolution figures and checks count as named.
pub fn has_symbol(frame: &Frame) -> bool {
    frame.name.as_deref().is_some_and(|n| anonymous_function_start(n).is_none())
}

/// A method's label, `Namespace.Type::Method(params)`, from either spelling; anything that is no
/// managed method (native symbols, stubs) with code-version tags and comments removed.
pub fn method_label(name: &str) -> Cow<'_, str> {
    // A stub's number counts the stubs of one run: `stub<KIND>` is the same label in every run.
    if let Some(kind) = stub_kind(name) {
        return Cow::Owned(format!("stub<{kind}>"));
    }
    let name = merge_code_version(name);
    let uncommented = strip_comments(name);
    let plain = merge_code_version(&uncommented);
    match MethodName::parse(plain) {
        Some(m) => Cow::Owned(format!("{}::{}({})", type_path(qualified_type(m.qualified)), method_of(m.qualified), params(m.params))),
        None if matches!(uncommented, Cow::Borrowed(_)) => Cow::Borrowed(name),
        None => Cow::Owned(plain.to_string()),
    }
}

/// The kind of a runtime stub from the name the perf map gives it, `stub OWNER<KIND>` (.NET 10;
/// `stub<N> OWNER<KIND>` in older runtimes): `stub ReportStubBlock<VSD_DispatchStub>` →
/// `VSD_DispatchStub`; also `DynamicHelper`, `JIT_CopiedWriteBarriers`, `DelegateShuffleThunk`,
/// `MethodCallThunk`, `InstantiatingStub` …; or from the label tracelab gives it
/// (`stub<VSD_DispatchStub>`); None for anything else.
pub fn stub_kind(name: &str) -> Option<&str> {
    let owned = if let Some(owned) = name.strip_prefix("stub ") {
        owned
    } else {
        let rest = name.strip_prefix("stub<")?;
        let Some((number, owned)) = rest.split_once("> ") else {
            // Already a label: `stub<KIND>`.
            let kind = rest.strip_suffix('>')?;
            return (!kind.is_empty() && !kind.contains(['<', '>', ' '])).then_some(kind);
        };
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        owned
    };
    let owned = owned.strip_suffix('>')?;
    let kind = &owned[owned.rfind('<')? + 1..];
    (!kind.is_empty() && !owned.contains(' ')).then_some(kind)
}

fn qualified_type(qualified: &str) -> &str {
    qualified.rsplit_once("::").map_or(qualified, |(t, _)| t)
}

fn method_of(qualified: &str) -> &str {
    qualified.rsplit_once("::").map_or("", |(_, m)| m)
}

/// `/* MT: 0x7faf… */` and any other `/* … */` the runtime writes into a name (perf maps), and
/// the pointer of EventPipe's `pMT: 0x7f98…` (a type it cannot name, e.g. a dynamic method's
/// closure): pointers differ from run to run, so a label with one would never match itself.
fn strip_comments(name: &str) -> Cow<'_, str> {
    static COMMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s*/\*.*?\*/").unwrap());
    static POINTER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bpMT: 0x[0-9A-Fa-f]+").unwrap());
    // Most names carry neither: no regex search for them (labels are made per distinct frame,
    // tens of thousands in a large fold).
    if !name.contains("/*") && !name.contains("pMT: 0x") {
        return Cow::Borrowed(name);
    }
    let uncommented = COMMENT.replace_all(name, "");
    match POINTER.replace_all(&uncommented, "pMT") {
        Cow::Borrowed(_) if matches!(uncommented, Cow::Borrowed(_)) => Cow::Borrowed(name),
        other => Cow::Owned(other.trim().to_string()),
    }
}

/// Nested types: perf maps write `Outer/Inner` in parameters, EventPipe `Outer+Inner`.
fn type_path(t: &str) -> Cow<'_, str> {
    if t.contains('/') { Cow::Owned(t.replace('/', "+")) } else { Cow::Borrowed(t) }
}

/// `p` with EventPipe's words for primitive types in the common spelling: each token
/// (`[A-Za-z_][A-Za-z0-9_.]*`, leftmost first) `int` → `nint`, `wchar` → `char`,
/// `System.String` → `string`, `System.Object` → `object`, `refany` → `typedref`.
fn primitive_words(p: &str) -> Cow<'_, str> {
    let bytes = p.as_bytes();
    let (mut out, mut copied, mut i) = (String::new(), 0, 0);
    while i < bytes.len() {
        if !(bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
            i += 1;
        }
        let word = match &p[start..i] {
            "int" => "nint",
            "wchar" => "char",
            "System.String" => "string",
            "System.Object" => "object",
            "refany" => "typedref",
            _ => continue,
        };
        out.push_str(&p[copied..start]);
        out.push_str(word);
        copied = i;
    }
    if copied == 0 {
        return Cow::Borrowed(p);
    }
    out.push_str(&p[copied..]);
    Cow::Owned(out)
}

/// A parameter list in one spelling (see the module docs).
fn params(p: &str) -> String {
    static ASSEMBLY_REF: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\[[A-Za-z0-9_.\-]+\]([A-Za-z_])").unwrap());
    static KEYWORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(?:value class|valuetype|class) ").unwrap());
    static UNSIGNED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\b(?:native unsigned int|native uint|unsigned int(8|16|32|64)?|native int)\b").unwrap());
    // A multi-dimensional array: perf maps write each rank's lower bound (`int32[0...,0...]`),
    // EventPipe only the commas (`int32[,]`).
    static BOUNDS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\[0\.\.\.(?:,0\.\.\.)+\]").unwrap());
    // Each rewrite runs only where its words occur: labels are made per distinct frame, most lists
    // hold none of them (`()`, `(int32,string)`), and a regex search per rewrite was a fifth of a
    // small recording's fold.
    let p = function_pointers(p.trim());
    let p = custom_modifiers(&p);
    // `[System.Runtime]System.Action`: the assembly before a type name (not an instantiation's
    // `[System.__Canon]`, which follows a type and precedes `,`, `]`, `>` or `)`).
    let p = if p.contains('[') { ASSEMBLY_REF.replace_all(&p, "$1") } else { p };
    let p = if p.contains("class ") || p.contains("valuetype ") { KEYWORD.replace_all(&p, "") } else { p };
    let p = if p.contains("0...") {
        Cow::Owned(BOUNDS.replace_all(&p, |c: &regex::Captures| format!("[{}]", ",".repeat(c[0].matches("0...").count() - 1))).into_owned())
    } else {
        p
    };
    let p = if !p.contains("unsigned int") && !p.contains("native ") {
        p
    } else {
        UNSIGNED.replace_all(&p, |c: &regex::Captures| match (&c[0], c.get(1)) {
            (_, Some(bits)) => format!("uint{}", bits.as_str()),
            ("native int", None) => "nint".to_string(),
            _ => "nuint".to_string(),
        })
    };
    // EventPipe's own words for the primitive types (its `int` is a native int). Checked token by
    // token without a regex: a list holds one only in EventPipe's spelling, and a replacement
    // per token allocated for every parameter of every frame's label.
    let p = primitive_words(&p);
    let p = p.replace(", ", ",");
    let p = if p.contains('/') { p.replace('/', "+") } else { p };
    // A nested type in a parameter: perf maps write its whole path
    // (`System.RuntimeType+RuntimeTypeCache+CacheType`), EventPipe its own name (`CacheType`).
    static ENCLOSING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?:[A-Za-z_][A-Za-z0-9_.`]*\+)+").unwrap());
    if p.contains('+') { ENCLOSING.replace_all(&p, "").into_owned() } else { p }
}

/// A function pointer parameter (`delegate*<…>`) in EventPipe's spelling,
/// `fnptr [unmanaged cdecl ]RET(PARAMS)`: perf maps write `method [unmanaged [cdecl ]]RET *(PARAMS)`;
/// EventPipe (.NET 10.0.12) names the four classic unmanaged conventions the same way and writes
/// nothing for plain `unmanaged` (`delegate* unmanaged<…>`).
fn function_pointers(p: &str) -> Cow<'_, str> {
    static METHOD: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(^|[(,<\[])method (?:(?:instance|explicit|vararg) )*(unmanaged (?:cdecl|stdcall|thiscall|fastcall) )?(?:unmanaged )?([^()]*?) \*\(")
            .unwrap()
    });
    if !p.contains("method ") {
        return Cow::Borrowed(p);
    }
    METHOD.replace_all(p, "${1}fnptr ${2}${3}(")
}

/// A parameter with a custom modifier in the perf map's (ILDASM's) spelling, `TYPE modreq(MODIFIER)`:
/// EventPipe writes `required_modifier MODIFIER TYPE` (and `optional_modifier` for `modopt`) —
/// an `in` parameter of a virtual or interface method carries `modreq(InAttribute)`.
fn custom_modifiers(p: &str) -> Cow<'_, str> {
    if !p.contains("_modifier ") {
        return Cow::Borrowed(p);
    }
    // Parameters split at the commas between them (not those inside `<…>`, `[…]`, `(…)`).
    let (mut params, mut depth, mut from) = (Vec::new(), 0i32, 0);
    for (i, c) in p.char_indices() {
        match c {
            '<' | '[' | '(' => depth += 1,
            '>' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                params.push(&p[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    params.push(&p[from..]);
    let respelled: Vec<String> = params
        .iter()
        .map(|param| {
            let (mut ty, mut modifiers) = (param.trim(), Vec::new());
            loop {
                let (keyword, rest) = if let Some(rest) = ty.strip_prefix("required_modifier ") {
                    ("modreq", rest)
                } else if let Some(rest) = ty.strip_prefix("optional_modifier ") {
                    ("modopt", rest)
                } else {
                    break;
                };
                let Some((modifier, rest)) = rest.split_once(' ') else { break };
                modifiers.push(format!(" {keyword}({modifier})"));
                ty = rest;
            }
            format!("{ty}{}", modifiers.concat())
        })
        .collect();
    Cow::Owned(respelled.join(","))
}

/// The kind of code a frame is, for colours and categories (Firefox profile categories use the
/// same split): managed code the JIT wrote, precompiled managed code, the runtime's native code,
/// other native code, the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FrameKind {
    Jit,
    ReadyToRun,
    Runtime,
    Native,
    Kernel,
    Unknown,
}

impl FrameKind {
    pub const ALL: [FrameKind; 6] =
        [FrameKind::Jit, FrameKind::ReadyToRun, FrameKind::Runtime, FrameKind::Native, FrameKind::Kernel, FrameKind::Unknown];

    pub fn of(frame: &Frame) -> FrameKind {
        match frame.class {
            DsoClass::Jit => FrameKind::Jit,
            DsoClass::R2r => FrameKind::ReadyToRun,
            // Code the runtime writes for itself: its own colour is the runtime's.
            DsoClass::Stub => FrameKind::Runtime,
            DsoClass::RuntimeNative => FrameKind::Runtime,
            DsoClass::Libc | DsoClass::OtherNative => FrameKind::Native,
            DsoClass::Kernel => FrameKind::Kernel,
            DsoClass::Unknown => FrameKind::Unknown,
        }
    }

    /// What a legend says.
    pub fn describe(self) -> &'static str {
        match self {
            FrameKind::Jit => "JIT (managed)",
            FrameKind::ReadyToRun => "ReadyToRun (managed, precompiled)",
            FrameKind::Runtime => "runtime native (libcoreclr, libclrjit …)",
            FrameKind::Native => "libc / other native",
            FrameKind::Kernel => "kernel",
            FrameKind::Unknown => "unknown",
        }
    }

    /// A word or two for legends.
    pub fn short_name(self) -> &'static str {
        match self {
            FrameKind::Jit => "JIT",
            FrameKind::ReadyToRun => "ReadyToRun",
            FrameKind::Runtime => "runtime",
            FrameKind::Native => "native",
            FrameKind::Kernel => "kernel",
            FrameKind::Unknown => "unknown",
        }
    }

    /// Fill colour in flame graphs (RGB).
    /// The colour's name, as legends say it (the flame graphs' subtitle, the Firefox Profiler's
    /// categories): one word per kind, so every view has one legend.
    pub fn colour(self) -> &'static str {
        match self {
            FrameKind::Jit => "green",
            FrameKind::ReadyToRun => "blue",
            FrameKind::Runtime => "orange",
            FrameKind::Native => "red",
            FrameKind::Kernel => "yellow",
            FrameKind::Unknown => "grey",
        }
    }

    pub fn rgb(self) -> (u8, u8, u8) {
        match self {
            FrameKind::Jit => (92, 184, 92),
            FrameKind::ReadyToRun => (80, 160, 200),
            FrameKind::Runtime => (230, 160, 60),
            FrameKind::Native => (205, 110, 90),
            FrameKind::Kernel => (215, 195, 70),
            FrameKind::Unknown => (170, 170, 170),
        }
    }
}

/// The short text a flame-graph box shows for a label; the full label goes into the tooltip.
/// Namespaces shrink to their initials (`System.Threading.Thread::StartCallback()` →
/// `S.T.Thread::StartCallback()`) and parameter types lose theirs (`(System.Text.Json.JsonSerializerOptions)`
/// → `(JsonSerializerOptions)`); other labels are kept.
pub fn short_label(label: &str) -> Cow<'_, str> {
    let Some(m) = MethodName::parse(label).filter(|m| m.assembly.is_none()) else { return Cow::Borrowed(label) };
    let ty = qualified_type(m.qualified);
    // Split at the dot before the type name; dots inside an instantiation's brackets are not
    // namespace separators.
    let outer = ty.find(['[', '<', '`']).map_or(ty, |i| &ty[..i]);
    let (ns, rest) = match outer.rfind('.') {
        Some(i) => (&ty[..i], &ty[i + 1..]),
        None => ("", ty),
    };
    let mut out = String::with_capacity(label.len());
    for part in ns.split('.').filter(|p| !p.is_empty()) {
        out.extend(part.chars().next());
        out.push('.');
    }
    out.push_str(&strip_namespaces(rest));
    out.push_str("::");
    out.push_str(method_of(m.qualified));
    out.push('(');
    out.push_str(&strip_namespaces(m.params));
    out.push(')');
    Cow::Owned(out)
}

/// `System.Collections.Generic.List`1<System.String>` → `List`1<String>`.
fn strip_namespaces(s: &str) -> Cow<'_, str> {
    static DOTTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(?:[A-Za-z_][A-Za-z0-9_]*\.)+([A-Za-z_<][^.,<>\[\]()&*\s]*)").unwrap());
    DOTTED.replace_all(s, "$1")
}

/// Short box texts for a set of labels: [`short_label`], except where two different labels would
/// show the same text (then both keep their full label).
pub fn short_labels<'a>(labels: impl IntoIterator<Item = &'a str>) -> HashMap<&'a str, String> {
    let mut by_short: HashMap<String, Vec<&'a str>> = HashMap::new();
    for l in labels {
        by_short.entry(short_label(l).into_owned()).or_default().push(l);
    }
    let mut out = HashMap::new();
    for (short, mut fulls) in by_short {
        fulls.sort_unstable();
        fulls.dedup();
        if fulls.len() == 1 {
            out.insert(fulls[0], short);
        } else {
            out.extend(fulls.into_iter().map(|f| (f, f.to_string())));
        }
    }
    out
}

/// The kind of each label's frames in a collection (a label seen with several kinds takes the
/// one it has most often).
pub fn label_kinds(coll: &Collection) -> HashMap<String, FrameKind> {
    let mut counts: HashMap<String, BTreeMap<FrameKind, u64>> = HashMap::new();
    let mut seen: HashMap<(Option<&str>, Option<&str>, DsoClass), String> = HashMap::new();
    for f in coll.samples.iter().flat_map(|s| &s.frames) {
        let l = seen.entry((f.name.as_deref(), f.dso.as_deref(), f.class)).or_insert_with(|| frame_label(f)).clone();
        *counts.entry(l).or_default().entry(FrameKind::of(f)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(l, by)| {
            let kind = by.iter().max_by_key(|(k, n)| (**n, std::cmp::Reverse(**k))).map(|(k, _)| *k).unwrap_or(FrameKind::Unknown);
            (l, kind)
        })
        .collect()
}

/// Frames of one native file in a collection: how many, how many with a symbol, how many known
/// only by their function's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DsoNaming {
    pub frames: u64,
    pub symbol: u64,
    pub function_only: u64,
    pub distinct_functions: usize,
}

/// Per native file (runtime, libc, other ELF): [`DsoNaming`] over every frame of every sample.
pub fn dso_naming(coll: &Collection) -> BTreeMap<String, DsoNaming> {
    let mut out: BTreeMap<String, DsoNaming> = BTreeMap::new();
    let mut functions: BTreeMap<String, std::collections::BTreeSet<u64>> = BTreeMap::new();
    for f in coll.samples.iter().flat_map(|s| &s.frames) {
        if !matches!(f.class, DsoClass::RuntimeNative | DsoClass::Libc | DsoClass::OtherNative) {
            continue;
        }
        let Some(dso) = f.dso.as_deref() else { continue };
        let e = out.entry(dso.to_string()).or_default();
        e.frames += 1;
        match f.name.as_deref() {
            Some(n) => match anonymous_function_start(n) {
                Some(start) => {
                    e.function_only += 1;
                    functions.entry(dso.to_string()).or_default().insert(start);
                }
                None => e.symbol += 1,
            },
            None => {}
        }
    }
    for (dso, starts) in functions {
        if let Some(e) = out.get_mut(&dso) {
            e.distinct_functions = starts.len();
        }
    }
    out
}

/// One line per collector naming the native files whose frames mostly lack a symbol (at least 50
/// frames, under half named), how they are shown and how to get names: what summary.md prints.
pub fn unnamed_dso_hints(coll: &Collection) -> Vec<String> {
    let mut files = Vec::new();
    let mut debug_files = Vec::new();
    for (dso, n) in dso_naming(coll) {
        if n.frames < 50 || n.symbol * 2 >= n.frames {
            continue;
        }
        let file = dso_file(&dso);
        let shown = if n.function_only > 0 {
            format!(", {} by function start ({} functions)", n.function_only, n.distinct_functions)
        } else {
            String::new()
        };
        files.push(format!("`{file}` {} of {} frames unnamed{shown}", n.frames - n.symbol, n.frames));
        // `[vdso]` and the like are no files: no debug file names them.
        if !file.starts_with('[') {
            debug_files.push(format!("`{file}.dbg`"));
        }
    }
    if debug_files.is_empty() && !files.is_empty() {
        return vec![format!("`{}`: code without symbols: {}.", coll.collector, files.join("; "))];
    }
    if files.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "`{}`: stripped native code: {}. Frames with a function start show as `FILE!fn@0x…` (from .eh_frame); \
         for names pass `--symbols DIR` holding the debug files ({}, e.g. from the runtime's symbol package; found by build id).",
        coll.collector,
        files.join("; "),
        debug_files.join(", ")
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token scanner replaces what the regex `[A-Za-z_][A-Za-z0-9_.]*` matched, leftmost
    /// first: whole tokens only, a token may start after a digit.
    #[test]
    fn primitive_words_are_replaced_as_whole_tokens() {
        let re = Regex::new(r"[A-Za-z_][A-Za-z0-9_.]*").unwrap();
        let by_regex = |p: &str| {
            re.replace_all(p, |c: &regex::Captures| match &c[0] {
                "int" => "nint".to_string(),
                "wchar" => "char".to_string(),
                "System.String" => "string".to_string(),
                "System.Object" => "object".to_string(),
                "refany" => "typedref".to_string(),
                other => other.to_string(),
            })
            .into_owned()
        };
        for p in ["int,wchar*", "int32,uint", "2int", "System.String[],System.Object", "System.Strings", "", "x int y", "_int", "int_"] {
            assert_eq!(primitive_words(p), by_regex(p), "{p:?}");
        }
        assert!(matches!(primitive_words("int32,bool"), Cow::Borrowed(_)));
    }

    #[test]
    fn perf_and_eventpipe_spellings_get_one_label() {
        let pairs = [
            ("string [web-routes] Ns.Type::CpuRoute(float64)[OptimizedTier1]", "Ns.Type::CpuRoute(float64)"),
            (
                "instance void [System.Text.Json] System.Text.Json.Utf8JsonWriter::WritePropertyName(valuetype [System.Runtime]System.ReadOnlySpan`1<char>)[OptimizedTier1]",
                "System.Text.Json.Utf8JsonWriter::WritePropertyName(value class System.ReadOnlySpan`1<wchar>)",
            ),
            ("void [FixtureApp] Fixture.Program::Main(string[])[QuickJitted]", "Fixture.Program::Main(class System.String[])"),
            (
                "int32 [System.Private.CoreLib] System.Number::Parse(valuetype System.Number/NumberBuffer&,native int,uint8&)",
                "System.Number::Parse(value class System.Number+NumberBuffer&,int,unsigned int8&)",
            ),
            // One method in both spellings of a rank-3 array and a native uint (perf map: bounds and
            // `native uint`; EventPipe: commas and `nuint`).
            (
                "int64 [generic-pipeline] Pipeline.Grid::Sum(int32[0...,0...,0...],native uint)[OptimizedTier1]",
                "Pipeline.Grid::Sum(int32[,,],nuint)",
            ),
            // Nested types in parameters (perf: the whole path; EventPipe: the type's own name),
            // the method's own type keeping its path (corpus generic-pipeline, one run).
            (
                "void [System.Private.CoreLib] System.RuntimeType+RuntimeTypeCache+MemberInfoCache`1[System.__Canon]::Populate(string,valuetype System.RuntimeType/MemberListType,valuetype System.RuntimeType/RuntimeTypeCache/CacheType)[OptimizedTier1]",
                "System.RuntimeType+RuntimeTypeCache+MemberInfoCache`1[System.__Canon]::Populate(string,MemberListType,CacheType)",
            ),
            (
                "void [System.Private.CoreLib] System.Reflection.CustomAttribute::AddCustomAttributes(valuetype System.RuntimeType/ListBuilder`1<object>&,class System.Reflection.RuntimeModule,int32,class System.RuntimeType,bool,valuetype System.RuntimeType/ListBuilder`1<object>)",
                "System.Reflection.CustomAttribute::AddCustomAttributes(ListBuilder`1<object>&,System.Reflection.RuntimeModule,int32,System.RuntimeType,bool,ListBuilder`1<object>)",
            ),
            // Function pointers as a .NET 10.0.12 perf map and EventPipe wrote them (one run of an app
            // with `delegate*<int, bool>`, `delegate* unmanaged<byte*, Desc*, void>` and
            // `delegate* unmanaged[Cdecl]<long, nint>` parameters), and CoreLib's ReadyToRun code.
            ("int32 [fnprobe] P::Managed(method bool *(int32),int32)[Optimized]", "P::Managed(fnptr bool(int32),int32)"),
            ("int32 [fnprobe] P::Unmanaged(method unmanaged void *(uint8*,valuetype P/Desc*),int32)[Optimized]", "P::Unmanaged(fnptr void(uint8*,value class P+Desc*),int32)"),
            (
                "int32 [fnprobe] P::Cdecl(method unmanaged cdecl native int *(int64),method int32 *(string,object[])[])[Optimized]",
                "P::Cdecl(fnptr unmanaged cdecl int(int64),fnptr int32(class System.String,class System.Object[])[])",
            ),
            // `in` parameters of an interface and a virtual method, and a TypedReference (the same run).
            (
                "instance float64 [sigprobe] Probe.Ascii.Derived::Probe.Ascii.IShape.Area(valuetype Probe.Ascii.Vec& modreq([System.Runtime]System.Runtime.InteropServices.InAttribute))[OptimizedTier1]",
                "Probe.Ascii.Derived::Probe.Ascii.IShape.Area(required_modifier System.Runtime.InteropServices.InAttribute value class Probe.Ascii.Vec&)",
            ),
            (
                "instance int64 [sigprobe] Probe.Ascii.Derived::Virt(valuetype Probe.Ascii.Vec& modreq([System.Runtime]System.Runtime.InteropServices.InAttribute),int32& modreq([System.Runtime]System.Runtime.InteropServices.InAttribute))[Optimized]",
                "Probe.Ascii.Derived::Virt(required_modifier System.Runtime.InteropServices.InAttribute value class Probe.Ascii.Vec&,required_modifier System.Runtime.InteropServices.InAttribute int32&)",
            ),
            ("int64 [sigprobe] Probe.Ascii.Work::Typed(typedref)[Optimized]", "Probe.Ascii.Work::Typed(refany)"),
            (
                "native int [System.Private.CoreLib] System.Diagnostics.Tracing.EventPipeInternal::CreateProvider(string,method unmanaged void *(uint8*,int32,uint8,int64,int64,valuetype Interop/Advapi32/EVENT_FILTER_DESCRIPTOR*,void*),void*)",
                "System.Diagnostics.Tracing.EventPipeInternal::CreateProvider(string,fnptr void(uint8*,int32,uint8,int64,int64,EVENT_FILTER_DESCRIPTOR*,void*),void*)",
            ),
            (
                "instance void [System.Private.CoreLib] System.Collections.Generic.Dictionary`2[System.__Canon,System.__Canon] /* MT: 0x00007F2A1B2C3D40 */::Add(!0,!1)[OptimizedTier1]",
                "System.Collections.Generic.Dictionary`2[System.__Canon,System.__Canon]::Add(!0,!1)",
            ),
        ];
        for (perf, eventpipe) in pairs {
            assert_eq!(label(Some(perf), Some("[jit]")), label(Some(eventpipe), Some("System.Text.Json.dll")), "{perf}");
        }
        assert_eq!(label(Some(pairs[0].0), None), "Ns.Type::CpuRoute(float64)");
        assert_eq!(
            label(Some("class [System.Text.Json]System.Text.Json.Nodes.JsonObject [cpu-bound] Tracelab.W::CpuShares(string[])"), None),
            "Tracelab.W::CpuShares(string[])"
        );
        assert_eq!(
            method_label("void [X] A.B::Run(class [System.Runtime]System.Action`1<class Tracelab.Workloads.WorkloadContext>, System.Objective)"),
            "A.B::Run(System.Action`1<Tracelab.Workloads.WorkloadContext>,System.Objective)"
        );
    }

    /// Stub names as a .NET 10.0.12 perf map writes them (dynamic-code workload, PerfMapEnabled=1),
    /// and as older runtimes numbered them.
    #[test]
    fn stubs_are_labelled_by_their_kind() {
        let kinds = [
            ("stub InitThreadManagerPerfMapData<JIT_CopiedWriteBarriers>", "JIT_CopiedWriteBarriers"),
            ("stub ReportStubBlock<VSD_DispatchStub>", "VSD_DispatchStub"),
            ("stub CreateDictionaryLookupHelper<DynamicHelper>", "DynamicHelper"),
            ("stub Link<DelegateShuffleThunk>", "DelegateShuffleThunk"),
            ("stub<112> CreateHelper<DynamicHelper>", "DynamicHelper"),
        ];
        for (name, kind) in kinds {
            assert_eq!(stub_kind(name), Some(kind), "{name}");
            let l = label(Some(name), Some("[jit]"));
            assert_eq!(l, format!("stub<{kind}>"));
            assert_eq!(stub_kind(&l), Some(kind), "a label keeps its kind");
            assert_eq!(DsoClass::Jit.refined(Some(name)), DsoClass::Stub);
        }
        let not_stubs = ["stub<1> Foo /* MT: 0x7faf00001234 */[Optimized]", "stub<x> A<B>", "stub<>", "Ns.stub<T>::M()", "stubby", "stub A B<C>"];
        for not_a_stub in not_stubs {
            assert_eq!(stub_kind(not_a_stub), None, "{not_a_stub}");
        }
        assert_eq!(DsoClass::Jit.refined(Some("Ns.Type::M()")), DsoClass::Jit);
        assert_eq!(DsoClass::R2r.refined(Some("stub A<B>")), DsoClass::R2r, "only JIT memory holds stubs");
    }

    #[test]
    fn comments_leave_no_trace_in_any_label() {
        let l = label(Some("stub<1> Foo /* MT: 0x7faf00001234 */[Optimized]"), Some("[jit]"));
        assert!(!l.contains("MT: 0x"), "{l}");
        assert!(!label(Some("A.B`1[C] /* MT: 0x7faf */::M()"), None).contains("MT:"));
        // EventPipe, web-api's minimal-API delegate (a real run): the closure's type by pointer.
        assert_eq!(
            label(Some("dynamicClass::lambda_method1(pMT: 0x7f98078b7530,object,pMT: 0x7f9806b50000)"), None),
            "dynamicClass::lambda_method1(pMT,object,pMT)"
        );
    }

    #[test]
    fn native_frames_name_their_file_and_function() {
        let so = "/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.12/libcoreclr.so";
        assert_eq!(label(Some(&anonymous_function(0x1a2b30)), Some(so)), "libcoreclr.so!fn@0x1a2b30");
        assert_eq!(label(None, Some(so)), "[unknown] (libcoreclr.so)");
        assert_eq!(label(Some("start_thread"), Some("/lib/libc.so.6")), "start_thread");
        assert_eq!(label(None, Some("[vdso]")), "[unknown] ([vdso])");
        assert_eq!(label(Some("a;b"), None), "a,b");
        let anon = Frame { name: Some(anonymous_function(0x10)), dso: Some(so.into()), class: DsoClass::RuntimeNative, addr: 0 };
        assert!(!has_symbol(&anon));
        assert!(has_symbol(&Frame { name: Some("coreclr_execute_assembly".into()), ..anon.clone() }));
    }

    #[test]
    fn short_labels_keep_type_and_method_and_stay_distinct() {
        assert_eq!(short_label("System.Threading.Thread::StartCallback()"), "S.T.Thread::StartCallback()");
        assert_eq!(
            short_label("System.Text.Json.Nodes.JsonNode::ToJsonString(System.Text.Json.JsonSerializerOptions)"),
            "S.T.J.N.JsonNode::ToJsonString(JsonSerializerOptions)"
        );
        assert_eq!(
            short_label("System.Collections.Generic.Dictionary`2[System.__Canon,System.Int32]::Add(!0,!1)"),
            "S.C.G.Dictionary`2[__Canon,Int32]::Add(!0,!1)"
        );
        assert_eq!(short_label("start_thread"), "start_thread");
        assert_eq!(short_label("libcoreclr.so!fn@0x1a2b30"), "libcoreclr.so!fn@0x1a2b30");
        let m = short_labels(["Alpha.Work::Run()", "Atlas.Work::Run()", "Beta.Work::Run()", "Gamma.Other::Go()"]);
        assert_eq!(m["Alpha.Work::Run()"], "Alpha.Work::Run()", "Alpha.Work and Atlas.Work would both show A.Work: both stay whole");
        assert_eq!(m["Atlas.Work::Run()"], "Atlas.Work::Run()");
        assert_eq!(m["Beta.Work::Run()"], "B.Work::Run()");
        assert_eq!(m["Gamma.Other::Go()"], "G.Other::Go()");
    }
}
