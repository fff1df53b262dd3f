//! Cost of recording one request's usage (Routing + client identity) on the request
//! path, on one thread with 1,000 known identities.
//!
//! `cargo bench -p proxy-pool-gateway --bench usage`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use proxy_pool_gateway::usage::UsageRecorder;
use std::hint::black_box;
use std::sync::Arc;

const IDENTITIES: usize = 1_000;

fn record(c: &mut Criterion) {
    let routing: Arc<str> = Arc::from("shanghai-crawler");
    let clients: Vec<String> = (0..IDENTITIES).map(|i| format!("client-{i}")).collect();
    let recorder = UsageRecorder::default();
    for client in &clients {
        recorder.record(&routing, client);
    }

    let mut group = c.benchmark_group("usage");
    group.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    group.bench_function("record/1-thread/1000-identities", |b| {
        b.iter(|| {
            i = (i + 1) % IDENTITIES;
            recorder.record(black_box(&routing), black_box(&clients[i]));
        })
    });
    group.finish();
    black_box(recorder.take());
}

criterion_group!(benches, record);
criterion_main!(benches);
