//! Managed-stack symbolization from method ranges: EventPipe stacks hold instruction pointers
//! of managed frames only, and the trace itself says what code lies where — MethodLoadVerbose
//! (runtime provider, id 143) for methods jitted during the session, and the rundown's
//! MethodDCStartVerbose / MethodDCEndVerbose (ids 143 / 144) for everything alive at its start /
//! end, including precompiled (ReadyToRun) code that is never "loaded" as an event.

use std::collections::HashMap;

use crate::payload::{Fields, Value};

pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
pub const RUNDOWN_PROVIDER: &str = "Microsoft-Windows-DotNETRuntimeRundown";

/// MethodFlags bit: the code was written by the JIT (clear for ReadyToRun code).
const METHOD_FLAG_JITTED: u64 = 0x8;

/// A method's native code range and names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Method {
    pub start: u64,
    pub size: u32,
    pub method_id: u64,
    pub module_id: u64,
    /// The runtime's "namespace": namespace and type, e.g. `Fixture.Phases`.
    pub namespace: String,
    pub name: String,
    /// The full signature, e.g. `int64  (int64)`.
    pub signature: String,
    pub flags: u64,
    /// Known from a rundown event rather than a load event.
    pub from_rundown: bool,
}

impl Method {
    /// The parameter list of the signature, `(int64)`; empty when the signature has none.
    pub fn parameters(&self) -> &str {
        self.signature.find('(').map(|i| &self.signature[i..]).unwrap_or("")
    }

    /// `Namespace.Type::Method(params)`, the perf-map spelling without module and code-version tag.
    pub fn qualified_name(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}{}", self.name, self.parameters())
        } else {
            format!("{}::{}{}", self.namespace, self.name, self.parameters())
        }
    }

    /// `Namespace.Type.Method(params)`, TraceEvent's `FullMethodName`.
    pub fn traceevent_name(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}{}", self.name, self.parameters())
        } else {
            format!("{}.{}{}", self.namespace, self.name, self.parameters())
        }
    }

    /// Code written by the JIT during the process's life (vs. precompiled ReadyToRun code).
    pub fn is_jitted(&self) -> bool {
        self.flags & METHOD_FLAG_JITTED != 0
    }

    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < u64::from(self.size)
    }
}

/// A loaded module (assembly file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub module_id: u64,
    pub il_path: String,
    pub native_path: String,
}

impl Module {
    /// File name without directory and extension (`System.Private.CoreLib`).
    pub fn short_name(&self) -> &str {
        let path = if self.il_path.is_empty() { &self.native_path } else { &self.il_path };
        let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
        file.strip_suffix(".dll").or_else(|| file.strip_suffix(".exe")).unwrap_or(file)
    }
}

/// Method ranges and modules, filled from events and then queried by address.
#[derive(Clone, Debug, Default)]
pub struct MethodMap {
    methods: Vec<Method>,
    sorted: bool,
    modules: HashMap<u64, Module>,
}

fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}
fn num(fields: &Fields, name: &str) -> u64 {
    field(fields, name).and_then(Value::as_u64).unwrap_or(0)
}
fn text(fields: &Fields, name: &str) -> String {
    field(fields, name).and_then(Value::as_str).unwrap_or("").to_string()
}

impl MethodMap {
    /// Whether an event with this provider and id describes methods or modules (decode its
    /// payload and pass it to [`MethodMap::observe`]).
    pub fn wants(provider: &str, event_id: u32) -> bool {
        match provider {
            RUNTIME_PROVIDER => matches!(event_id, 143 | 152),
            RUNDOWN_PROVIDER => matches!(event_id, 143 | 144 | 153 | 154),
            _ => false,
        }
    }

    pub fn observe(&mut self, provider: &str, event_id: u32, fields: &Fields) {
        let rundown = provider == RUNDOWN_PROVIDER;
        match (rundown, event_id) {
            (false, 143) | (true, 143) | (true, 144) => {
                let size = num(fields, "MethodSize") as u32;
                if size == 0 {
                    return;
                }
                self.methods.push(Method {
                    start: num(fields, "MethodStartAddress"),
                    size,
                    method_id: num(fields, "MethodID"),
                    module_id: num(fields, "ModuleID"),
                    namespace: text(fields, "MethodNamespace"),
                    name: text(fields, "MethodName"),
                    signature: text(fields, "MethodSignature"),
                    flags: num(fields, "MethodFlags"),
                    from_rundown: rundown,
                });
                self.sorted = false;
            }
            (false, 152) | (true, 153) | (true, 154) => {
                let module_id = num(fields, "ModuleID");
                self.modules.insert(
                    module_id,
                    Module { module_id, il_path: text(fields, "ModuleILPath"), native_path: text(fields, "ModuleNativePath") },
                );
            }
            _ => {}
        }
    }

    pub fn len(&self) -> usize {
        self.methods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.methods.is_empty()
    }

    /// Sorts the ranges; call once all events are in (rundown comes at the end of a trace).
    pub fn finish(&mut self) {
        if !self.sorted {
            // Same start: keep one (load and rundown describe the same code); the load event's
            // copy comes first and wins, as its flags are the original ones.
            self.methods.sort_by_key(|m| (m.start, m.from_rundown));
            self.methods.dedup_by_key(|m| m.start);
            self.sorted = true;
        }
    }

    /// The method whose code contains `addr`. Call [`MethodMap::finish`] first.
    pub fn resolve(&self, addr: u64) -> Option<&Method> {
        debug_assert!(self.sorted || self.methods.is_empty(), "MethodMap::finish not called");
        let i = self.methods.partition_point(|m| m.start <= addr);
        // Ranges may nest when code was freed and reused; look back a few for a match.
        self.methods[..i].iter().rev().take(4).find(|m| m.contains(addr))
    }

    pub fn module(&self, module_id: u64) -> Option<&Module> {
        self.modules.get(&module_id)
    }

    pub fn methods(&self) -> &[Method] {
        &self.methods
    }
}
