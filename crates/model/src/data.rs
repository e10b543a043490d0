//! The one data model every collector decodes into (shared/DESIGN.md §2): samples with resolved
//! frames and events with named fields. Stages after `decode` only ever see these types, so an
//! assertion does not care whether a stack came from perf, EventPipe or LTTng.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a frame's code lives. Resolution ratios are reported per class, because each class is
/// named by a different mechanism (perf map, ReadyToRun metadata, ELF symbols, kallsyms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DsoClass {
    /// Code the JIT wrote (anonymous executable memory, described by perf-PID.map / jitdump; with
    /// W^X on, its `/memfd:doublemapper` alias, which no perf map describes).
    Jit,
    /// Precompiled (ReadyToRun) code running from a file-mapped managed `*.dll`.
    R2r,
    /// Code the runtime generates that is no method: precode, virtual stub dispatch, delegate
    /// shuffle thunks, copied write barriers, dynamic helpers. It sits in the JIT's anonymous
    /// memory; the perf map names each block `stub OWNER<KIND>` ([`crate::stub_kind`]).
    Stub,
    /// The native runtime: libcoreclr.so, libclrjit.so and the other lib*.so of the shared framework.
    RuntimeNative,
    /// libc, libm, libpthread, ld.so, vdso.
    Libc,
    /// Any other ELF object.
    OtherNative,
    Kernel,
    /// An address in no known mapping.
    Unknown,
}

impl DsoClass {
    pub const ALL: [DsoClass; 8] = [
        DsoClass::Jit,
        DsoClass::R2r,
        DsoClass::Stub,
        DsoClass::RuntimeNative,
        DsoClass::Libc,
        DsoClass::OtherNative,
        DsoClass::Kernel,
        DsoClass::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DsoClass::Jit => "jit",
            DsoClass::R2r => "r2r",
            DsoClass::Stub => "stub",
            DsoClass::RuntimeNative => "runtime_native",
            DsoClass::Libc => "libc",
            DsoClass::OtherNative => "other_native",
            DsoClass::Kernel => "kernel",
            DsoClass::Unknown => "unknown",
        }
    }

    /// The class of a frame of this mapping class named `name`: code in the JIT's memory that the
    /// perf map names as a runtime stub is [`DsoClass::Stub`]; everything else keeps its class.
    pub fn refined(self, name: Option<&str>) -> DsoClass {
        match (self, name) {
            (DsoClass::Jit | DsoClass::Unknown, Some(n)) if crate::stub_kind(n).is_some() => DsoClass::Stub,
            _ => self,
        }
    }

    pub fn parse(s: &str) -> Option<DsoClass> {
        DsoClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Classifies a mapping by its path, as perf's MMAP records spell it.
    pub fn of_mapping(path: &str) -> DsoClass {
        let file = path.rsplit('/').next().unwrap_or(path);
        if path.starts_with("[kernel") || path.starts_with("[guest.kernel") {
            return DsoClass::Kernel;
        }
        if path == "[vdso]" || file.starts_with("libc.so") || file.starts_with("libc-")
            || file.starts_with("ld-linux") || file.starts_with("libm.so")
            || file.starts_with("libpthread") || file.starts_with("libdl.so")
            || file.starts_with("librt.so")
        {
            return DsoClass::Libc;
        }
        // W^X maps JIT code a second time from a memfd; it is JIT code the perf map cannot name.
        if path.contains("memfd:doublemapper") {
            return DsoClass::Jit;
        }
        if path.ends_with(".dll") || path.ends_with(".exe") {
            return DsoClass::R2r;
        }
        if file.starts_with("libcoreclr") || file.starts_with("libclrjit")
            || file.starts_with("libSystem.") || file.starts_with("libhostfxr")
            || file.starts_with("libhostpolicy") || file.starts_with("libclrgc")
            || file.starts_with("libcoreclrtraceptprovider") || file == "dotnet"
        {
            return DsoClass::RuntimeNative;
        }
        if path.starts_with("//anon") || path.starts_with("/tmp/perf-") || path.starts_with("[anon") {
            return DsoClass::Jit;
        }
        if path.starts_with('/') {
            return DsoClass::OtherNative;
        }
        DsoClass::Unknown
    }
}

/// One frame of a stack. `name` is `None` when nothing could name it; the DSO still says where it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub name: Option<String>,
    /// Path or short name of the mapping (`libcoreclr.so`, `[kernel.kallsyms]`, `[jit]`).
    pub dso: Option<String>,
    pub class: DsoClass,
    pub addr: u64,
}

impl Frame {
    /// The name frame checks match: the symbol, else `[unknown] (dso)` (folded stacks and other
    /// displays label frames with [`crate::naming::frame_label`]). A function known only by its start (`fn@0x…`, see [`crate::naming`]) has no symbol, so
    /// checks see it as `[unknown] (dso)`, as before such names existed.
    pub fn display_name(&self) -> String {
        match (&self.name, &self.dso) {
            (Some(n), _) if crate::naming::anonymous_function_start(n).is_none() => n.clone(),
            (Some(n), None) => n.clone(),
            (_, Some(d)) => format!("[unknown] ({d})"),
            (None, None) => "[unknown]".to_string(),
        }
    }
}

/// One stack sample. Frames are leaf first. `weight` is 1 for a timer sample and the blocked
/// nanoseconds for an off-CPU sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub weight: u64,
    pub frames: Vec<Frame>,
    /// Collector-specific sample kind, e.g. EventPipe ThreadSample `managed` / `external`.
    pub kind: Option<String>,
    /// The CPU the sample was taken on, when the recording kept it (perf's PERF_SAMPLE_CPU,
    /// `perf record --sample-cpu`); EventPipe's thread samples carry none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
}

impl Sample {
    /// A timer sample (weight 1) of no particular kind, on no known CPU: set the rest with
    /// struct update syntax (`Sample { weight, ..Sample::new(…) }`).
    pub fn new(pid: u32, tid: u32, time_ns: u64, frames: Vec<Frame>) -> Self {
        Sample { pid, tid, time_ns, weight: 1, frames, kind: None, cpu: None }
    }
}

/// A field value of a decoded event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Bytes(Vec<u8>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(v) => Some(*v),
            Value::I64(v) if *v >= 0 => Some(*v as u64),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One runtime event. `name` is the event's name without a version suffix (`GCStart`, not
/// `GCStart_V2`) so EventPipe and LTTng events compare by the same key; `version` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub provider: String,
    pub name: String,
    pub id: Option<u32>,
    pub version: Option<u32>,
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub fields: BTreeMap<String, Value>,
    /// The stack the transport recorded with the event, leaf first (EventPipe's managed frames,
    /// named from the trace's method load and rundown events); empty when it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<Frame>,
}

/// Everything one collector produced in one run, decoded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Collection {
    /// `perf-cpu`, `perf-offcpu`, `eventpipe`, `dotnet-trace`, `lttng` …
    pub collector: String,
    pub samples: Vec<Sample>,
    pub events: Vec<Event>,
    /// Events the collector reports it lost (EventPipe dropped, perf LOST, LTTng discarded).
    pub lost_events: u64,
    /// Extra numbers the collector measured (sampling interval, bytes written …), name → value.
    pub metrics: BTreeMap<String, f64>,
    /// Every method name the collector's symbol source listed for the app, sampled or not (the
    /// run's perf map; EventPipe's method load and rundown events), code versions merged: what a
    /// name found in another collector's stacks can be looked up in.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub method_names: std::collections::BTreeSet<String>,
    /// Sample weights are nanoseconds (off-CPU time), not counts: checks print them as time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weight_ns: bool,
    /// Thread names by tid, as the collector saw them (perf's COMM records: the name a thread
    /// last gave itself); viewers show them instead of bare ids.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub thread_names: BTreeMap<u32, String>,
    /// How the samples were taken: what a share of them estimates.
    #[serde(default, skip_serializing_if = "Sampling::is_other")]
    pub sampling: Sampling,
    /// Where the collector cuts a stack, when it has such a limit: a stack that deep may be cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth_limit: Option<DepthLimit>,
    /// When the collector recorded, CLOCK_MONOTONIC ns: from when its session surely recorded
    /// to its stop (set by the run). Collectors compared count what they all saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_ns: Option<(u64, u64)>,
    /// The measured window of the launch the collector watched, CLOCK_MONOTONIC ns (set by the
    /// run): what a workload's truth counts. A collector set up before the launch (LTTng)
    /// recorded the app's startup too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_ns: Option<(u64, u64)>,
}

/// A collector's limit on stack depth, and what sets it (the truncation check names it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepthLimit {
    /// The most frames a stack can have, when the limit is a frame count (EventPipe's 100,
    /// `kernel.perf_event_max_stack`); `None` when it is in bytes (a DWARF stack dump).
    pub frames: Option<u32>,
    /// What sets it and how to raise it, in words a stranger can act on.
    pub cause: String,
}

/// How a collector took its samples, which decides what a share of them estimates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// One sample per period of a thread's own CPU time (perf `cpu-clock` on a process): sample
    /// counts are CPU time, whatever else the machine runs.
    CpuTime,
    /// Every thread at each tick of a wall-clock timer (EventPipe's SampleProfiler, about 1 ms):
    /// the tick rate follows the machine's load, so a sample stands for the time since its
    /// thread's previous one, and shares weighted so estimate wall time.
    WallClock,
    /// Anything else: events with weights of their own (off-CPU intervals in ns, system calls).
    #[default]
    Other,
}

impl Sampling {
    pub fn is_other(&self) -> bool {
        *self == Sampling::Other
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Sampling::CpuTime => "cpu_time",
            Sampling::WallClock => "wall_clock",
            Sampling::Other => "other",
        }
    }
}

impl Collection {
    pub fn new(collector: impl Into<String>) -> Self {
        Collection { collector: collector.into(), ..Default::default() }
    }
}

/// The frame that stands where a frame-pointer walk lost a caller to on-stack replacement (see
/// the stacks crate's `complete_osr_callers`, where no whole stack of the thread names it).
pub const LOST_CALLER: &str = "[caller lost to on-stack replacement]";

/// Strips the code-version suffix the runtime writes into perf maps (`[OptimizedTier1]`,
/// `[QuickJitted]`, `[OptimizedTier1OSR]`, `[PreJIT]` …), so one method's versions score together.
pub fn merge_code_version(name: &str) -> &str {
    let trimmed = name.trim_end();
    if let Some(open) = trimmed.rfind('[') {
        if trimmed.ends_with(']') && open > 0 {
            let tag = &trimmed[open + 1..trimmed.len() - 1];
            if !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric()) {
                return trimmed[..open].trim_end();
            }
        }
    }
    trimmed
}

/// The parts of a managed method's name, in either spelling tracelab produces:
/// the perf-map spelling `[instance ]RET [Assembly] Namespace.Type::Method(PARAMS)` (perf maps and
/// our ReadyToRun resolver) or EventPipe's `Namespace.Type::Method(PARAMS)` (module in the frame's
/// dso). Code-version tags must already be merged away ([`merge_code_version`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodName<'a> {
    /// The assembly from the `[Assembly]` token, when the spelling carries one.
    pub assembly: Option<&'a str>,
    /// `Namespace.Type::Method` (nested types with `+`, instantiations in `[…]`).
    pub qualified: &'a str,
    /// The parameter list without its parentheses, as spelled.
    pub params: &'a str,
}

impl<'a> MethodName<'a> {
    /// Parses a method name; `None` for anything that is not `…Type::Method(…)` (stubs, native
    /// symbols, `[unknown]`).
    pub fn parse(name: &'a str) -> Option<MethodName<'a>> {
        let open = name.find('(')?;
        let close = name.rfind(')')?;
        if close < open {
            return None;
        }
        let head = &name[..open];
        let sep = head.find("::")?;
        // Type names carry no spaces (instantiations are `[A,B]`), so the type starts after the
        // last space before `::`; what precedes it is `[instance ]RET [Assembly]` or nothing.
        let type_start = head[..sep].rfind(' ').map_or(0, |i| i + 1);
        let prefix = head[..type_start].trim_end();
        let assembly = prefix
            .strip_suffix(']')
            .and_then(|p| p.rfind(" [").map(|i| &p[i + 2..]).or_else(|| p.strip_prefix('[')))
            .filter(|a| !a.is_empty() && !a.contains(['[', ']', ' ']));
        Some(MethodName { assembly, qualified: &head[type_start..], params: &name[open + 1..close] })
    }

    /// How many parameters the list holds (commas inside `<…>`, `[…]` and `(…)` do not separate).
    pub fn arity(&self) -> usize {
        if self.params.trim().is_empty() {
            return 0;
        }
        let mut depth = 0i32;
        let mut n = 1;
        for c in self.params.chars() {
            match c {
                '<' | '[' | '(' => depth += 1,
                '>' | ']' | ')' => depth -= 1,
                ',' if depth == 0 => n += 1,
                _ => {}
            }
        }
        n
    }

    /// The runtime's GC-suspension poll (`Thread.PollGC` and its worker, .NET 9+): a thread that
    /// is asked to stop for a GC or for EventPipe's SampleProfiler parks there, so its frames
    /// say where the thread was stopped, not what it was doing.
    pub fn is_gc_suspension_poll(&self) -> bool {
        match self.qualified.strip_prefix("System.Threading.Thread::") {
            Some(m) => m == "PollGC" || m == "FastPollGC" || m.starts_with("<PollGC>"),
            None => false,
        }
    }

    /// `Namespace.Type::Method/ARITY`: the same method in the perf-map spelling and in EventPipe's,
    /// whose parameter spellings differ (`valuetype [System.Runtime]System.ReadOnlySpan`1<char>`
    /// vs `value class System.ReadOnlySpan`1<wchar>`). Overloads of equal arity share a key.
    pub fn spelling_free_key(&self) -> String {
        format!("{}/{}", self.qualified, self.arity())
    }
}

/// The assembly a managed frame's code belongs to: the `[Assembly]` of a perf-map-spelled name,
/// else the file stem of the frame's dso (EventPipe names the module there; perf names the file).
pub fn frame_assembly(frame: &Frame) -> Option<String> {
    if !matches!(frame.class, DsoClass::Jit | DsoClass::R2r) {
        return None;
    }
    let name = frame.name.as_deref()?;
    if let Some(a) = MethodName::parse(merge_code_version(name)).and_then(|m| m.assembly) {
        return Some(a.to_string());
    }
    let dso = frame.dso.as_deref()?;
    let file = dso.rsplit('/').next().unwrap_or(dso);
    if file.starts_with('[') || file.starts_with("perf-") || file.contains("memfd:") {
        return None;
    }
    Some(file.strip_suffix(".dll").or_else(|| file.strip_suffix(".exe")).unwrap_or(file).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_versions_merge() {
        assert_eq!(
            merge_code_version("[FixtureApp] Fixture.Phases::CpuHot(int64)[OptimizedTier1]"),
            "[FixtureApp] Fixture.Phases::CpuHot(int64)"
        );
        assert_eq!(merge_code_version("Foo::Bar()[QuickJitted]"), "Foo::Bar()");
        assert_eq!(merge_code_version("Foo::Bar(int32[])"), "Foo::Bar(int32[])");
        assert_eq!(merge_code_version("plain"), "plain");
    }

    #[test]
    fn mappings_classify() {
        assert_eq!(DsoClass::of_mapping("/usr/lib/x86_64-linux-gnu/libc.so.6"), DsoClass::Libc);
        assert_eq!(
            DsoClass::of_mapping("/opt/d/shared/Microsoft.NETCore.App/10.0.12/libcoreclr.so"),
            DsoClass::RuntimeNative
        );
        assert_eq!(
            DsoClass::of_mapping("/opt/d/shared/Microsoft.NETCore.App/10.0.12/System.Private.CoreLib.dll"),
            DsoClass::R2r
        );
        assert_eq!(DsoClass::of_mapping("/memfd:doublemapper (deleted)"), DsoClass::Jit);
        assert_eq!(DsoClass::of_mapping("[kernel.kallsyms]"), DsoClass::Kernel);
        assert_eq!(DsoClass::of_mapping("/usr/lib/libfoo.so"), DsoClass::OtherNative);
    }
    #[test]
    fn method_names_parse_in_both_spellings() {
        let perf = "instance bool [System.Text.RegularExpressions] System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(valuetype [System.Runtime]System.ReadOnlySpan`1<char>)";
        let ep = "System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition(value class System.ReadOnlySpan`1<wchar>)";
        let (a, b) = (MethodName::parse(perf).unwrap(), MethodName::parse(ep).unwrap());
        assert_eq!(a.assembly, Some("System.Text.RegularExpressions"));
        assert_eq!(b.assembly, None);
        assert_eq!(a.spelling_free_key(), b.spelling_free_key());
        assert_eq!(a.spelling_free_key(), "System.Text.RegularExpressions.RegexInterpreter::TryMatchAtCurrentPosition/1");
        // A return type with its own assembly token, generic instantiations and nested commas.
        let sum = "int32 [System.Linq] System.Linq.Enumerable::Sum(class [System.Runtime]System.Collections.Generic.IEnumerable`1<!!0>,class [System.Runtime]System.Func`2<!!0,int32>)";
        let m = MethodName::parse(sum).unwrap();
        assert_eq!((m.assembly, m.qualified, m.arity()), (Some("System.Linq"), "System.Linq.Enumerable::Sum", 2));
        let ret = "valuetype [System.Runtime]System.ReadOnlySpan`1<char> [System.Private.CoreLib] System.Collections.Generic.ArraySortHelper`1[System.Int32,System.Int64]::Get()";
        let m = MethodName::parse(ret).unwrap();
        assert_eq!((m.assembly, m.qualified, m.arity()), (Some("System.Private.CoreLib"), "System.Collections.Generic.ArraySortHelper`1[System.Int32,System.Int64]::Get", 0));
        assert_eq!(MethodName::parse("stub InitThreadManagerPerfMapData<JIT_CopiedWriteBarriers>"), None);
        let poll = MethodName::parse("System.Threading.Thread::<PollGC>g__PollGCWorker|67_0()").unwrap();
        assert!(poll.is_gc_suspension_poll());
        assert!(!m.is_gc_suspension_poll());
        assert_eq!(MethodName::parse("[unknown] (/usr/lib/libc.so.6)"), None);
    }

    #[test]
    fn frame_assembly_from_name_or_module() {
        let f = |name: &str, dso: &str, class| Frame { name: Some(name.into()), dso: Some(dso.into()), class, addr: 0 };
        let perf = f("int64 [framework] Tracelab.Workloads.Framework::LinqPhase(float64)[OptimizedTier1]", "//anon", DsoClass::Jit);
        assert_eq!(frame_assembly(&perf).as_deref(), Some("framework"));
        let ep = f("System.Number::FormatFloat(!!0)", "System.Private.CoreLib", DsoClass::R2r);
        assert_eq!(frame_assembly(&ep).as_deref(), Some("System.Private.CoreLib"));
        let native = f("malloc", "/usr/lib/x86_64-linux-gnu/libc.so.6", DsoClass::Libc);
        assert_eq!(frame_assembly(&native), None);
    }
}
