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
    pub const ALL: [DsoClass; 7] = [
        DsoClass::Jit,
        DsoClass::R2r,
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
            DsoClass::RuntimeNative => "runtime_native",
            DsoClass::Libc => "libc",
            DsoClass::OtherNative => "other_native",
            DsoClass::Kernel => "kernel",
            DsoClass::Unknown => "unknown",
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
    /// The name used in folded stacks and frame checks: the symbol, else `[unknown] (dso)`.
    pub fn display_name(&self) -> String {
        match (&self.name, &self.dso) {
            (Some(n), _) => n.clone(),
            (None, Some(d)) => format!("[unknown] ({d})"),
            (None, None) => "[unknown]".to_string(),
        }
    }
}

/// One stack sample. Frames are leaf first. `weight` is 1 for a timer sample and the blocked
/// nanoseconds for an off-CPU sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub weight: u64,
    pub frames: Vec<Frame>,
    /// Collector-specific sample kind, e.g. EventPipe ThreadSample `managed` / `external`.
    pub kind: Option<String>,
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
}

impl Collection {
    pub fn new(collector: impl Into<String>) -> Self {
        Collection { collector: collector.into(), ..Default::default() }
    }
}

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
}
