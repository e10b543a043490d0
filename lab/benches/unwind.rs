//! Samples unwound per second: our own unwinding of perf's sampled user stacks (DWARF CFI, PE
//! unwind info, frame pointers) over the recorded off-CPU fixture, with the images already
//! loaded (the cost per recording, not per process start). `cargo bench -p lab --bench unwind`.
//! `cargo xtask bench unwind` times the same work against `perf script` side by side.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stacks::{StackUnwinder, unwind_perf_data_with};

fn bench(c: &mut Criterion) {
    let dir = tracelab_fixtures::fixtures_dir().join("perf");
    let data = dir.join("perf-offcpu-dwarf.data");
    let Ok(dotnet) = harness::host::dotnet::Dotnet::locate_or_install() else {
        eprintln!("SKIP bench unwind: no .NET SDK (its libcoreclr.so is needed)");
        return;
    };
    if !data.is_file() {
        eprintln!("SKIP bench unwind: {} is missing", data.display());
        return;
    }
    let opts = lab::bench::unwind::fixture_options(&dir, &dotnet);
    let mut unwinder = StackUnwinder::new(opts);
    let first = unwind_perf_data_with(&data, &mut unwinder).expect("fixture decodes");
    let with_stack = first.samples.iter().filter(|s| s.user_stack_bytes > 0).count() as u64;
    let mut group = c.benchmark_group("unwind");
    group.throughput(Throughput::Elements(with_stack));
    group.sample_size(20);
    group.bench_function("perf-offcpu-dwarf (samples with user stacks)", |b| {
        b.iter(|| unwind_perf_data_with(&data, &mut unwinder).expect("decodes").samples.len())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
