//! R2R symbolization cost: lookups of file offsets inside System.Private.CoreLib's precompiled
//! code, as the perf decoder does for each frame in a file-mapped assembly.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use r2r::{ModuleCache, R2rImage};

fn corelib() -> PathBuf {
    let script = tracelab_fixtures::shared_dir().join("toolchains/install-dotnet.sh");
    let out = std::process::Command::new("bash").arg(&script).output().expect("install-dotnet.sh");
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let base = root.join("shared/Microsoft.NETCore.App");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&base).unwrap().flatten().map(|e| e.path()).collect();
    v.sort();
    v.pop().unwrap().join("System.Private.CoreLib.dll")
}

fn bench(c: &mut Criterion) {
    let path = corelib();
    let image = R2rImage::open(&path, Arc::new(ModuleCache::default())).unwrap().unwrap();
    // Addresses inside real methods, spread over the image, as a profile's frames are.
    let rvas: Vec<u32> = image.methods().step_by(3).map(|m| m.rva + m.len / 2).take(100_000).collect();
    // Names are built once per method and then shared: warm them as a long profile would.
    for &rva in &rvas {
        let _ = image.method_at_rva(rva);
    }
    let mut group = c.benchmark_group("r2r");
    group.throughput(Throughput::Elements(rvas.len() as u64));
    group.bench_function("method_at_rva (warm names)", |b| {
        b.iter(|| rvas.iter().filter(|&&rva| image.method_at_rva(rva).is_some()).count())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
