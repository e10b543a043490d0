//! Decode throughput on the recorded fixtures (Throughput::Bytes: speed claims come with their
//! input). `cargo bench -p eventpipe`; the side-by-side comparison with TraceEvent is
//! `cargo xtask bench nettrace`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventpipe::{DecodeOptions, NettraceReader, decode};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(tracelab_fixtures::fixture(&format!("nettrace/{name}"))).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn benches(c: &mut Criterion) {
    for name in ["fixture-dotnet-common.nettrace", "fixture-gc-verbose.nettrace"] {
        let bytes = fixture(name);
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("events", |b| {
            b.iter(|| {
                let mut r = NettraceReader::new(&bytes[..]).unwrap();
                let mut n = 0u64;
                while let Some(ev) = r.next_event().unwrap() {
                    n += ev.payload.len() as u64;
                }
                n
            })
        });
        group.bench_function("full_decode", |b| b.iter(|| decode(&bytes[..], &DecodeOptions::default()).unwrap().stats.events));
        group.finish();
    }
}

criterion_group!(decode_benches, benches);
criterion_main!(decode_benches);
