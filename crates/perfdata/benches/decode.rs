//! Decode throughput on fixed recorded fixtures (../shared/fixtures/perf, README there), with
//! `Throughput::Bytes`: a speed claim comes with the input it was measured on. `perf-cpu.data` is
//! a cpu-clock recording with frame-pointer chains (the common case); `perf-offcpu-dwarf.data`
//! carries user stack bytes and registers per sample (the heavy case). `cargo bench -p perfdata`.

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use perfdata::{ChainCounts, PerfRecording, SampleOrder};

fn benches(c: &mut Criterion) {
    for name in ["perf-cpu.data", "perf-offcpu-dwarf.data"] {
        let path = tracelab_fixtures::fixture(&format!("perf/{name}"));
        let bytes = std::fs::read(&path).unwrap();
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("decode_time_order", |b| {
            b.iter(|| PerfRecording::from_bytes_in(&bytes, Path::new(name), SampleOrder::Time).unwrap().samples.len())
        });
        group.bench_function("decode_file_order", |b| {
            b.iter(|| PerfRecording::from_bytes_in(&bytes, Path::new(name), SampleOrder::File).unwrap().samples.len())
        });
        group.bench_function("count_chains", |b| {
            b.iter(|| ChainCounts::from_bytes_with(&bytes, Path::new(name), |_, _| None).unwrap().chains.len())
        });
        group.finish();
    }
}

criterion_group!(decode_benches, benches);
criterion_main!(decode_benches);
