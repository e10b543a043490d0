//! Managed-stack symbolization from method ranges: EventPipe stacks hold instruction pointers
//! of managed frames only, and the trace itself says what code lies where — MethodLoadVerbose
//! (runtime provider, id 143) for methods jitted during the session, and the rundown's
//! MethodDCStartVerbose / MethodDCEndVerbose (ids 143 / 144) for everything alive at its start /
//! end, including precompiled (ReadyToRun) code that is never "loaded" as an event.
//!
//! A generic method's code is named by its definition (`Work::Step(!!0,int32)` for `Step<bool>`,
//! `Step<int>` and `Step<string>` alike, in these events and in perf maps); its instantiation is
//! in MethodDetails (runtime provider, id 72, keyword MethodDiagnostic `0x4000000000`), which the
//! runtime writes beside each method load with the method's type arguments as type handles, and
//! the BulkType events (id 15, keyword Type `0x80000`) it writes with it name those handles. Both
//! carry arrays the generated layouts do not describe, so they are read from their bytes here.
//! A method whose details the trace lacks (loaded before the session began, or a session without
//! the keyword) keeps its definition's name.

use std::collections::HashMap;

use crate::payload::{Fields, Value};

pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
pub const RUNDOWN_PROVIDER: &str = "Microsoft-Windows-DotNETRuntimeRundown";

/// MethodFlags bit: the code was written by the JIT (clear for ReadyToRun code).
const METHOD_FLAG_JITTED: u64 = 0x8;

/// The runtime provider's MethodDetails event: a method's type arguments.
const METHOD_DETAILS: u32 = 72;
/// The runtime provider's BulkType event: type handles and their names.
const BULK_TYPE: u32 = 15;
/// The runtime keyword that turns MethodDetails on (MethodDiagnostic).
pub const METHOD_DIAGNOSTIC_KEYWORD: u64 = 0x40_0000_0000;

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
    /// A generic method's type arguments, `<System.Boolean>`, from the trace's MethodDetails;
    /// empty for other methods and where the trace holds no details.
    pub instantiation: String,
}

impl Method {
    /// The parameter list of the signature, `(int64)`; empty when the signature has none.
    pub fn parameters(&self) -> &str {
        self.signature.find('(').map(|i| &self.signature[i..]).unwrap_or("")
    }

    /// `Namespace.Type::Method<Args>(params)`, the perf-map spelling without module and
    /// code-version tag, with the method's instantiation where the trace gave it.
    pub fn qualified_name(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}{}{}", self.name, self.instantiation, self.parameters())
        } else {
            format!("{}::{}{}{}", self.namespace, self.name, self.instantiation, self.parameters())
        }
    }

    /// `Namespace.Type.Method(params)`, TraceEvent's `FullMethodName` (which has no instantiation).
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
    /// MethodDetails: method id → its type arguments (type handles).
    details: HashMap<u64, Vec<u64>>,
    /// BulkType: type handle → its name and type arguments.
    types: HashMap<u64, TypeName>,
    /// MethodDetails / BulkType payloads whose bytes did not hold what their layout says.
    malformed_details: u64,
}

/// A type as BulkType names it: `System.Collections.Generic.List`1` with its arguments' handles.
#[derive(Clone, Debug)]
struct TypeName {
    name: String,
    arguments: Vec<u64>,
}

/// Little-endian reads from an event payload; `None` past its end.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.0 = self.0.get(n..)?;
        Some(())
    }
    /// A NUL-terminated UTF-16 string.
    fn utf16z(&mut self) -> Option<String> {
        let mut units = Vec::new();
        loop {
            match u16::from_le_bytes(self.take()?) {
                0 => return Some(String::from_utf16_lossy(&units)),
                u => units.push(u),
            }
        }
    }
    /// `n` u64s, `n` as the payload says (bounded by what is left, so a bad count cannot allocate).
    fn u64s(&mut self, n: u32) -> Option<Vec<u64>> {
        if (n as usize).saturating_mul(8) > self.0.len() {
            return None;
        }
        (0..n).map(|_| self.u64()).collect()
    }
}

/// MethodDetails v0: MethodID, TypeID, MethodToken, TypeParameterCount, LoaderModuleID,
/// TypeParameters[TypeParameterCount]. Returns (method id, type arguments).
fn method_details(payload: &[u8]) -> Option<(u64, Vec<u64>)> {
    let mut b = Bytes(payload);
    let method_id = b.u64()?;
    let _type_id = b.u64()?;
    let _token = b.u32()?;
    let count = b.u32()?;
    let _loader_module = b.u64()?;
    let arguments = b.u64s(count)?;
    b.0.is_empty().then_some((method_id, arguments))
}

/// BulkType: Count, ClrInstanceID, then Count × (TypeID, ModuleID, TypeNameID, Flags,
/// CorElementType, Name, TypeParameterCount, TypeParameters[TypeParameterCount]).
fn bulk_types(payload: &[u8]) -> Option<Vec<(u64, TypeName)>> {
    let mut b = Bytes(payload);
    let count = b.u32()?;
    b.skip(2)?;
    let mut out = Vec::new();
    for _ in 0..count {
        let id = b.u64()?;
        b.skip(8 + 4 + 4 + 1)?;
        let name = b.utf16z()?;
        let n = b.u32()?;
        let arguments = b.u64s(n)?;
        out.push((id, TypeName { name, arguments }));
    }
    Some(out)
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

    /// Whether an event with this provider and id names instantiations (pass its payload's bytes
    /// to [`MethodMap::observe_bytes`]).
    pub fn wants_bytes(provider: &str, event_id: u32) -> bool {
        provider == RUNTIME_PROVIDER && matches!(event_id, METHOD_DETAILS | BULK_TYPE)
    }

    /// A MethodDetails or BulkType event's payload.
    pub fn observe_bytes(&mut self, provider: &str, event_id: u32, payload: &[u8]) {
        if provider != RUNTIME_PROVIDER {
            return;
        }
        match event_id {
            METHOD_DETAILS => match method_details(payload) {
                Some((method, arguments)) if !arguments.is_empty() => {
                    self.details.insert(method, arguments);
                }
                Some(_) => {}
                None => self.malformed_details += 1,
            },
            BULK_TYPE => match bulk_types(payload) {
                Some(types) => self.types.extend(types),
                None => self.malformed_details += 1,
            },
            _ => {}
        }
    }

    /// MethodDetails / BulkType payloads that did not read as their layout says.
    pub fn malformed_details(&self) -> u64 {
        self.malformed_details
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
                    instantiation: String::new(),
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
        if !self.details.is_empty() {
            for i in 0..self.methods.len() {
                if let Some(arguments) = self.details.get(&self.methods[i].method_id)
                    && let Some(names) = arguments.iter().map(|&t| self.type_name(t, 0)).collect::<Option<Vec<_>>>()
                {
                    self.methods[i].instantiation = format!("<{}>", names.join(","));
                }
            }
        }
    }

    /// A type handle's name with its arguments in brackets, as perf maps write an instantiated
    /// type (`System.Collections.Generic.List`1[System.Int32]`); `System.__Canon` is the runtime's
    /// stand-in for any reference type in shared code. `None` for a handle no BulkType named.
    fn type_name(&self, handle: u64, depth: u32) -> Option<String> {
        let t = self.types.get(&handle)?;
        // A name that already spells its arguments (arrays), or nesting past sense: as given.
        if t.arguments.is_empty() || depth > 8 || t.name.contains('[') {
            return Some(t.name.clone());
        }
        let arguments = t.arguments.iter().map(|&a| self.type_name(a, depth + 1)).collect::<Option<Vec<_>>>()?;
        Some(format!("{}[{}]", t.name, arguments.join(",")))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16z(s: &str) -> Vec<u8> {
        s.encode_utf16()
            .chain([0])
            .flat_map(u16::to_le_bytes)
            .collect()
    }

    /// Payloads laid out as the runtime writes them (checked against a real trace of the
    /// `generics` workload, whose five `Spin<T>` frames PASS the `generics` scenario).
    #[test]
    fn method_details_and_bulk_types_name_an_instantiation() {
        let mut details = Vec::new();
        for v in [0x10u64, 0x20] {
            details.extend(v.to_le_bytes());
        }
        details.extend(0x0600_0001u32.to_le_bytes());
        details.extend(2u32.to_le_bytes());
        details.extend(0x30u64.to_le_bytes());
        details.extend(0x100u64.to_le_bytes());
        details.extend(0x200u64.to_le_bytes());
        let mut types = Vec::new();
        types.extend(3u32.to_le_bytes());
        types.extend(0u16.to_le_bytes());
        for (id, name, args) in [
            (0x100u64, "System.Boolean", vec![]),
            (0x200, "System.Collections.Generic.List`1", vec![0x300u64]),
            (0x300, "System.__Canon", vec![]),
        ] {
            types.extend(id.to_le_bytes());
            types.extend([0u8; 17]);
            types.extend(utf16z(name));
            types.extend((args.len() as u32).to_le_bytes());
            args.iter().for_each(|a| types.extend(a.to_le_bytes()));
        }
        let mut map = MethodMap::default();
        map.observe_bytes(RUNTIME_PROVIDER, METHOD_DETAILS, &details);
        map.observe_bytes(RUNTIME_PROVIDER, BULK_TYPE, &types);
        map.methods.push(Method {
            start: 0x1000,
            size: 0x40,
            method_id: 0x10,
            module_id: 0x30,
            namespace: "App.Work".into(),
            name: "Pair".into(),
            signature: "void  (!!0,!!1)".into(),
            flags: METHOD_FLAG_JITTED,
            from_rundown: false,
            instantiation: String::new(),
        });
        map.finish();
        assert_eq!(map.malformed_details(), 0);
        assert_eq!(
            map.resolve(0x1010).unwrap().qualified_name(),
            "App.Work::Pair<System.Boolean,System.Collections.Generic.List`1[System.__Canon]>(!!0,!!1)"
        );
        // A payload cut short is counted, not read.
        map.observe_bytes(
            RUNTIME_PROVIDER,
            METHOD_DETAILS,
            &details[..details.len() - 3],
        );
        assert_eq!(map.malformed_details(), 1);
    }
}
