//! Runtime events newer than the manifest the generated table comes from (exception
//! catch/finally events, tiered compilation, assembly loader, later versions of GC and
//! contention events), written from the runtime's current ClrEtwAll.man and checked against
//! real .NET 8 and 10 traces (tests/fixtures.rs decodes every payload of the fixtures). Names and
//! field order are what the .NET 10 runtime's LTTng provider declares for the same event
//! (harness/data/runtime-events/lttng-provider.txt; a harness test compares every layout here
//! with it), so both transports name an event and its fields alike.

use crate::manifest::{self, Template};
use crate::payload::FieldType::*;

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

static EMPTY: Template = Template { fields: &[], complete: true };
static CLR_ONLY: Template = Template { fields: &[("ClrInstanceID", U16)], complete: true };
static EXCEPTION_CLAUSE: Template = Template {
    fields: &[("EntryEIP", U64), ("MethodID", U64), ("MethodName", Utf16), ("ClrInstanceID", U16)],
    complete: true,
};
static GC_HEAP_STATS_V2: Template = Template {
    fields: &[
        ("GenerationSize0", U64), ("TotalPromotedSize0", U64), ("GenerationSize1", U64), ("TotalPromotedSize1", U64),
        ("GenerationSize2", U64), ("TotalPromotedSize2", U64), ("GenerationSize3", U64), ("TotalPromotedSize3", U64),
        ("FinalizationPromotedSize", U64), ("FinalizationPromotedCount", U64), ("PinnedObjectCount", U32),
        ("SinkBlockCount", U32), ("GCHandleCount", U32), ("ClrInstanceID", U16), ("GenerationSize4", U64),
        ("TotalPromotedSize4", U64),
    ],
    complete: true,
};
static GC_ALLOCATION_TICK_V3: Template = Template {
    fields: &[
        ("AllocationAmount", U32), ("AllocationKind", U32), ("ClrInstanceID", U16), ("AllocationAmount64", U64),
        ("TypeID", Ptr), ("TypeName", Utf16), ("HeapIndex", U32), ("Address", Ptr),
    ],
    complete: true,
};
static GC_ALLOCATION_TICK_V4: Template = Template {
    fields: &[
        ("AllocationAmount", U32), ("AllocationKind", U32), ("ClrInstanceID", U16), ("AllocationAmount64", U64),
        ("TypeID", Ptr), ("TypeName", Utf16), ("HeapIndex", U32), ("Address", Ptr), ("ObjectSize", U64),
    ],
    complete: true,
};
static CONTENTION_START_V2: Template = Template {
    fields: &[("ContentionFlags", U8), ("ClrInstanceID", U16), ("LockID", Ptr), ("AssociatedObjectID", Ptr), ("LockOwnerThreadID", U64)],
    complete: true,
};
static CONTENTION_LOCK_CREATED: Template =
    Template { fields: &[("LockID", Ptr), ("AssociatedObjectID", Ptr), ("ClrInstanceID", U16)], complete: true };
static METHOD_JIT_MEMORY_ALLOCATED_FOR_CODE: Template = Template {
    fields: &[
        ("MethodID", U64), ("ModuleID", U64), ("JitHotCodeRequestSize", U64), ("JitRODataRequestSize", U64),
        ("AllocatedSizeForJitCode", U64), ("JitAllocFlag", U32), ("ClrInstanceID", U16),
    ],
    complete: true,
};
static CONTENTION_STOP_V1: Template =
    Template { fields: &[("ContentionFlags", U8), ("ClrInstanceID", U16), ("DurationNs", F64)], complete: true };
static GC_DYNAMIC: Template = Template { fields: &[("Name", Utf16), ("DataSize", U32)], complete: false };
static YIELD_MEASUREMENT: Template =
    Template { fields: &[("ClrInstanceID", U16), ("NsPerYield", F64), ("EstablishedNsPerYield", F64)], complete: true };
static GC_MARK_WITH_TYPE: Template =
    Template { fields: &[("HeapNum", U32), ("ClrInstanceID", U16), ("Type", U32), ("Bytes", U64)], complete: true };
static TC_SETTINGS: Template = Template { fields: &[("ClrInstanceID", U16), ("Flags", U32)], complete: true };
static TC_RESUME: Template = Template { fields: &[("ClrInstanceID", U16), ("NewMethodCount", U32)], complete: true };
static TC_JIT_START: Template = Template { fields: &[("ClrInstanceID", U16), ("PendingMethodCount", U32)], complete: true };
static TC_JIT_STOP: Template =
    Template { fields: &[("ClrInstanceID", U16), ("PendingMethodCount", U32), ("JittedMethodCount", U32)], complete: true };
static ASSEMBLY_LOAD_START: Template = Template {
    fields: &[
        ("ClrInstanceID", U16), ("AssemblyName", Utf16), ("AssemblyPath", Utf16), ("RequestingAssembly", Utf16),
        ("AssemblyLoadContext", Utf16), ("RequestingAssemblyLoadContext", Utf16),
    ],
    complete: true,
};
static ASSEMBLY_LOAD_STOP: Template = Template {
    fields: &[
        ("ClrInstanceID", U16), ("AssemblyName", Utf16), ("AssemblyPath", Utf16), ("RequestingAssembly", Utf16),
        ("AssemblyLoadContext", Utf16), ("RequestingAssemblyLoadContext", Utf16), ("Success", Bool),
        ("ResultAssemblyName", Utf16), ("ResultAssemblyPath", Utf16), ("Cached", Bool),
    ],
    complete: true,
};
static RESOLUTION_ATTEMPTED: Template = Template {
    fields: &[
        ("ClrInstanceID", U16), ("AssemblyName", Utf16), ("Stage", U16), ("AssemblyLoadContext", Utf16), ("Result", U16),
        ("ResultAssemblyName", Utf16), ("ResultAssemblyPath", Utf16), ("ErrorMessage", Utf16),
    ],
    complete: true,
};
static KNOWN_PATH_PROBED: Template =
    Template { fields: &[("ClrInstanceID", U16), ("FilePath", Utf16), ("Source", U16), ("Result", I32)], complete: true };

/// (id, version, name, template) of the runtime provider, sorted by id and version.
static RUNTIME_EVENTS: &[(u32, u32, &str, Option<&Template>)] = &[
    (4, 2, "GCHeapStats", Some(&GC_HEAP_STATS_V2)),
    (10, 3, "GCAllocationTick", Some(&GC_ALLOCATION_TICK_V3)),
    (10, 4, "GCAllocationTick", Some(&GC_ALLOCATION_TICK_V4)),
    (39, 0, "GCDynamicEvent", Some(&GC_DYNAMIC)),
    (58, 0, "YieldProcessorMeasurement", Some(&YIELD_MEASUREMENT)),
    (81, 2, "ContentionStart", Some(&CONTENTION_START_V2)),
    (90, 0, "ContentionLockCreated", Some(&CONTENTION_LOCK_CREATED)),
    (91, 1, "ContentionStop", Some(&CONTENTION_STOP_V1)),
    (146, 0, "MethodJitMemoryAllocatedForCode", Some(&METHOD_JIT_MEMORY_ALLOCATED_FOR_CODE)),
    (202, 0, "GCMarkWithType", Some(&GC_MARK_WITH_TYPE)),
    (204, 0, "GCPerHeapHistory", None),
    (205, 0, "GCGlobalHeapHistory", None),
    (209, 0, "GCFitBucketInfo", None),
    (250, 0, "ExceptionCatchStart", Some(&EXCEPTION_CLAUSE)),
    (251, 0, "ExceptionCatchStop", Some(&EMPTY)),
    (252, 0, "ExceptionFinallyStart", Some(&EXCEPTION_CLAUSE)),
    (253, 0, "ExceptionFinallyStop", Some(&EMPTY)),
    (254, 0, "ExceptionFilterStart", Some(&EXCEPTION_CLAUSE)),
    (255, 0, "ExceptionFilterStop", Some(&EMPTY)),
    (256, 0, "ExceptionThrownStop", Some(&EMPTY)),
    (280, 0, "TieredCompilationSettings", Some(&TC_SETTINGS)),
    (281, 0, "TieredCompilationPause", Some(&CLR_ONLY)),
    (282, 0, "TieredCompilationResume", Some(&TC_RESUME)),
    (283, 0, "TieredCompilationBackgroundJitStart", Some(&TC_JIT_START)),
    (284, 0, "TieredCompilationBackgroundJitStop", Some(&TC_JIT_STOP)),
    (290, 0, "AssemblyLoadStart", Some(&ASSEMBLY_LOAD_START)),
    (291, 0, "AssemblyLoadStop", Some(&ASSEMBLY_LOAD_STOP)),
    (292, 0, "ResolutionAttempted", Some(&RESOLUTION_ATTEMPTED)),
    (296, 0, "KnownPathProbed", Some(&KNOWN_PATH_PROBED)),
];

/// Name and layout of a runtime event: an exact match here, else the generated manifest
/// table, else the newest version known here.
pub(crate) fn lookup(provider: &str, id: u32, version: u32) -> Option<(&'static str, Option<&'static Template>)> {
    let here = |exact: bool| {
        if provider != RUNTIME {
            return None;
        }
        RUNTIME_EVENTS
            .iter()
            .rev()
            .find(|e| e.0 == id && if exact { e.1 == version } else { e.1 <= version })
            .map(|e| (e.2, e.3))
    };
    if provider == "Microsoft-Windows-DotNETRuntimeRundown" && id == 10 {
        return Some(("GCSettingsRundown", None));
    }
    here(true).or_else(|| manifest::lookup(provider, id, version)).or_else(|| here(false))
}

/// The name and field names of a runtime event's payload, as this crate decodes it: `None` for
/// an event it has no complete layout for. What a reader cross-checks against another
/// description of the runtime's events (the LTTng provider's declaration).
pub fn runtime_event_layout(provider: &str, id: u32, version: u32) -> Option<(&'static str, Vec<&'static str>)> {
    let (name, template) = lookup(provider, id, version)?;
    let t = template.filter(|t| t.complete)?;
    Some((name, t.fields.iter().map(|f| f.0).collect()))
}
