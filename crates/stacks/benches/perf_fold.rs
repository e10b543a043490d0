//! perf.data → folded stacks (decode with linux-perf-data, symbolize from the perf map, fold),
//! on the largest perf fixture (perf-container: 3010 samples of a .NET app in a container), or on
//! the big recording `cargo xtask bench perf` caches (target/bench/perf/perf.data) when present.
//! Throughput is in samples.

use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stacks::decode_recording;
use stacks::{fold_perf_file, fold_recording};
use stacks::{DecodeContext, Symbolizer};
use perfdata::PerfRecording;

struct Input {
    data: Vec<u8>,
    artifacts: PathBuf,
    host_pid: u32,
    target_pid: u32,
    _dir: Option<tempfile::TempDir>,
}

fn input() -> Input {
    let big = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join("target/bench/perf");
    if let Ok(meta) = std::fs::read_to_string(big.join("pid.txt")) {
        let pid: u32 = meta.trim().parse().unwrap();
        return Input { data: std::fs::read(big.join("perf.data")).unwrap(), artifacts: big, host_pid: pid, target_pid: pid, _dir: None };
    }
    let fixtures = tracelab_fixtures::fixture("perf");
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixtures.join("perf-container.perf-1.map"), dir.path().join("perf-1.map")).unwrap();
    std::fs::copy(fixtures.join("perf-container.data"), dir.path().join("perf.data")).unwrap();
    let pids = std::fs::read_to_string(fixtures.join("perf-container.pids.txt")).unwrap();
    let host_pid = pids.split_whitespace().find_map(|w| w.strip_prefix("host_pid=")).unwrap().parse().unwrap();
    Input {
        data: std::fs::read(fixtures.join("perf-container.data")).unwrap(),
        artifacts: dir.path().to_path_buf(),
        host_pid,
        target_pid: 1,
        _dir: Some(dir),
    }
}

fn bench(c: &mut Criterion) {
    let input = input();
    let no_files = |_: &Path| -> Option<PathBuf> { None };
    let ctx = DecodeContext {
        artifacts: &input.artifacts,
        app_tmp_dir: &input.artifacts,
        host_pid: input.host_pid,
        target_pid: input.target_pid,
        path_map: &no_files,
        symbol_dirs: &[],
    };
    let path = input.artifacts.join("perf.data");
    let samples = PerfRecording::from_bytes(&input.data, &path).unwrap().samples.len() as u64;
    let mut group = c.benchmark_group("perf_fold");
    group.throughput(Throughput::Elements(samples));
    group.bench_function("decode", |b| b.iter(|| PerfRecording::from_bytes(&input.data, &path).unwrap()));
    group.bench_function("decode+fold", |b| {
        b.iter(|| {
            let rec = PerfRecording::from_bytes(&input.data, &path).unwrap();
            let mut sym = Symbolizer::new(&ctx, &rec).unwrap();
            fold_recording(&rec, &mut sym)
        })
    });
    // What `cargo xtask trace fold` and `cargo xtask bench perf` run: streaming, no samples built.
    group.bench_function("fold_perf_file", |b| b.iter(|| fold_perf_file(&path, &ctx).unwrap()));
    group.bench_function("decode+model+fold", |b| {
        b.iter(|| {
            let rec = PerfRecording::from_bytes(&input.data, &path).unwrap();
            let coll = decode_recording(&rec, &ctx, "perf-cpu", false).unwrap();
            stacks::fold(&coll)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
