//! Fixtures are the SDK's own assemblies (not checked in): the offline SDK beside the project
//! (../shared/toolchains/install-dotnet.sh, idempotent) provides them.

use std::path::PathBuf;

/// System.Private.CoreLib.dll of the installed .NET 10 runtime.
pub fn corelib() -> PathBuf {
    let script = tracelab_fixtures::shared_dir().join("toolchains/install-dotnet.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(out.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let base = root.join("shared/Microsoft.NETCore.App");
    let mut versions: Vec<PathBuf> = std::fs::read_dir(&base).unwrap().flatten().map(|e| e.path()).collect();
    versions.sort();
    versions.pop().expect("a runtime under shared/Microsoft.NETCore.App").join("System.Private.CoreLib.dll")
}

/// The few ReadyToRun tables the tests check the reader against, read here on their own (straight
/// from the PE headers, without the crate's code) so a mistake in the crate cannot agree with itself.
#[allow(dead_code)]
pub struct Tables {
    /// (begin, end) RVA of each amd64 RUNTIME_FUNCTION, in file order.
    pub runtime_functions: Vec<(u32, u32)>,
    /// Method start RVA → the start RVAs of its handler and filter funclets (ExceptionInfo section).
    pub funclets: std::collections::HashMap<u32, Vec<u32>>,
}

#[allow(dead_code)]
pub fn tables(data: &[u8]) -> Tables {
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
    let nt = u32_at(0x3c) as usize;
    assert_eq!(u16_at(nt + 4) ^ 0x7b79, 0x8664, "a Linux amd64 ReadyToRun image");
    let optional = nt + 24;
    let sections_at = optional + u16_at(nt + 20) as usize;
    let sections: Vec<(u32, u32, u32)> = (0..u16_at(nt + 6) as usize)
        .map(|i| {
            let s = sections_at + i * 40;
            (u32_at(s + 12), u32_at(s + 8).max(u32_at(s + 16)), u32_at(s + 20)) // (rva, size, raw)
        })
        .collect();
    let offset = |rva: u32| -> usize {
        let &(start, _, raw) = sections.iter().find(|&&(start, size, _)| rva >= start && rva - start < size).expect("RVA in a section");
        (raw + rva - start) as usize
    };
    assert_eq!(u16_at(optional), 0x20b, "PE32+");
    let cli = offset(u32_at(optional + 112 + 14 * 8));
    let header = offset(u32_at(cli + 64));
    assert_eq!(u32_at(header), 0x0052_5452);
    let mut section = std::collections::HashMap::new();
    for i in 0..u32_at(header + 12) as usize {
        let s = header + 16 + i * 12;
        section.insert(u32_at(s), (offset(u32_at(s + 4)), u32_at(s + 8) as usize));
    }
    let (rf, rf_len) = section[&102];
    let runtime_functions = (0..rf_len / 12).map(|i| (u32_at(rf + i * 12), u32_at(rf + i * 12 + 4))).collect();
    let mut funclets = std::collections::HashMap::<u32, Vec<u32>>::new();
    if let Some(&(eh, eh_len)) = section.get(&104) {
        // Rows of (method start, clauses RVA); the last row only ends the clauses of the one before.
        for i in 0..eh_len / 8 - 1 {
            let (method, clauses, next) = (u32_at(eh + i * 8), u32_at(eh + i * 8 + 4), u32_at(eh + i * 8 + 12));
            for c in 0..((next - clauses) / 24) as usize {
                let clause = offset(clauses) + c * 24;
                let starts = funclets.entry(method).or_default();
                starts.push(method + u32_at(clause + 12));
                if u32_at(clause) & 1 != 0 {
                    starts.push(method + u32_at(clause + 20)); // the filter's own funclet
                }
            }
        }
    }
    Tables { runtime_functions, funclets }
}
