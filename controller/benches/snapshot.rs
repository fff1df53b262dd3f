//! Snapshot publisher cost: a full snapshot of 100,000 proxies (build + checksum +
//! protobuf encode) and a delta of 1,000 changes against it (diff + checksum update +
//! encode). Prints bytes on the wire next to criterion's timings.
//!
//! Run: `cargo bench -p proxy-pool-controller --bench snapshot`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use prost::Message;
use proxy_pool_api::controlplane::model::{Credentials, Protocol, Routing, Secret, SnapshotProxy};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};

const PROXIES: usize = 100_000;
const CHANGES: usize = 1_000;

fn proxy(i: usize, epoch: u64) -> SnapshotProxy {
    SnapshotProxy {
        id: format!("vendor-a:{i:08}"),
        upstream: "vendor-a".into(),
        protocol: if i.is_multiple_of(3) {
            Protocol::Socks5
        } else {
            Protocol::Http
        },
        host: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        port: 10_000 + (i % 50_000) as u16,
        credentials: Some(Credentials {
            username: format!("user-{i}"),
            password: Secret::new("p4ssw0rd-xyz"),
        }),
        region: Some("shanghai".into()),
        carrier: Some("telecom".into()),
        max_concurrency: 16,
        expires_at_ms: 1_800_000_000_000 + i as i64,
        usable_until_ms: 1_799_999_990_000 + i as i64,
        assignment_epoch: epoch,
        draining: false,
    }
}

fn header(version: u64) -> Header {
    Header {
        version,
        ownership_epoch: 7,
        generated_at_ms: 1_700_000_000_000,
        valid_until_ms: 1_700_000_030_000,
    }
}

fn routings() -> Vec<Routing> {
    vec![Routing {
        name: "default".into(),
        ..Routing::default()
    }]
}

fn desired() -> Vec<SnapshotProxy> {
    (0..PROXIES).map(|i| proxy(i, 1)).collect()
}

/// 1,000 changes: 400 updates (draining), 300 removals, 300 additions.
fn changed() -> Vec<SnapshotProxy> {
    let mut v: Vec<SnapshotProxy> = (300..PROXIES).map(|i| proxy(i, 1)).collect();
    for p in v.iter_mut().take(400) {
        p.draining = true;
    }
    v.extend((PROXIES..PROXIES + 300).map(|i| proxy(i, 2)));
    v
}

fn full(state: &SnapshotState) -> Vec<u8> {
    pb::WorkerSnapshot::from(&state.to_snapshot()).encode_to_vec()
}

fn bench(c: &mut Criterion) {
    let mut base = SnapshotState::new();
    base.advance(header(1), Some(routings()), desired())
        .expect("advance");
    let full_bytes = full(&base).len();
    let mut next = base.clone();
    let delta = next
        .advance(header(2), Some(routings()), changed())
        .expect("delta");
    let delta_bytes = pb::SnapshotDelta::from(&delta).encode_to_vec().len();
    println!(
        "snapshot: full {PROXIES} proxies = {full_bytes} bytes; delta {CHANGES} changes = {delta_bytes} bytes ({:.2} % of full)",
        100.0 * delta_bytes as f64 / full_bytes as f64
    );

    let mut g = c.benchmark_group("snapshot");
    g.sample_size(20);
    g.bench_function("full_build_encode_100k", |b| {
        b.iter_batched(
            desired,
            |d| {
                let mut s = SnapshotState::new();
                s.advance(header(1), Some(routings()), d).expect("advance");
                black_box(full(&s))
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("full_encode_only_100k", |b| {
        b.iter(|| black_box(full(&base)))
    });
    g.bench_function("delta_1k_of_100k_diff_build_encode", |b| {
        b.iter_batched(
            || (base.clone(), changed()),
            |(mut s, d)| {
                let delta = s.advance(header(2), Some(routings()), d).expect("delta");
                black_box(pb::SnapshotDelta::from(&delta).encode_to_vec())
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("delta_1k_apply_on_worker", |b| {
        b.iter_batched(
            || (base.clone(), delta.clone()),
            |(mut s, d)| {
                s.apply_delta(d).expect("apply");
                black_box(s.checksum())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
