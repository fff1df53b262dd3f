//! Snapshot publisher cost at 100,000 proxies for one worker: a full snapshot (build:
//! per-proxy encoding + digest + checksum, then the encoded `SnapshotUpdate` as the
//! publisher sends it) and a delta of 1,000 changes (apply with checksum update, encode);
//! also the O(n) diff that finds the changes, re-encoding a cached full snapshot, and a
//! worker applying the delta. Prints the bytes on the wire.
//!
//! Run: `cargo bench -p proxy-pool-controller --bench snapshot`
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use prost::Message;
use proxy_pool_api::controlplane::model::{
    Credentials, Dial, Labels, Protocol, Routing, Secret, SnapshotProxy,
};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::state::{Header, SnapshotState};

const PROXIES: usize = 100_000;
const CHANGES: usize = 1_000;

fn proxy(i: usize, epoch: u64) -> SnapshotProxy {
    SnapshotProxy {
        id: format!("vendor-a:{i:08}"),
        upstream: "vendor-a".into(),
        dial: Dial {
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
        },
        labels: Labels {
            region: Some("shanghai".into()),
            carrier: Some("telecom".into()),
            city: None,
        },
        max_concurrency: 16,
        expires_at_ms: 1_800_000_000_000 + i as i64,
        usable_until_ms: 1_799_999_990_000 + i as i64,
        assignment_epoch: epoch,
        draining: false,
        lease_expires_at_ms: 0,
        excluded_routings: Vec::new(),
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

fn bench(c: &mut Criterion) {
    let base = SnapshotState::build(header(1), routings(), desired()).expect("build");
    let full_bytes = base.encode_full_update().len();
    assert_eq!(
        full_bytes,
        pb::SnapshotUpdate::new(pb::snapshot_update::Update::Full(base.to_message()))
            .encode_to_vec()
            .len()
    );
    let target = changed();
    let changes = base.diff(Some(routings()), &target);
    assert_eq!(changes.upserts.len() + changes.removals.len(), CHANGES);
    let mut next = base.clone();
    let delta = next.apply(header(2), changes.clone()).expect("delta");
    let delta_bytes = pb::SnapshotUpdate::new(pb::snapshot_update::Update::Delta(
        pb::SnapshotDelta::from(&delta),
    ))
    .encode_to_vec()
    .len();
    println!(
        "snapshot: full {PROXIES} proxies = {full_bytes} bytes; delta {CHANGES} changes = {delta_bytes} bytes ({:.2} % of full)",
        100.0 * delta_bytes as f64 / full_bytes as f64
    );

    let mut g = c.benchmark_group("snapshot");
    g.sample_size(20);
    // Inputs are made and outputs dropped outside the timed routine.
    g.bench_function("full_build_encode_100k", |b| {
        b.iter_batched(
            desired,
            |d| {
                let s = SnapshotState::build(header(1), routings(), d).expect("build");
                let bytes = s.encode_full_update();
                (s, black_box(bytes))
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("full_encode_cached_100k", |b| {
        b.iter_with_large_drop(|| base.encode_full_update())
    });
    g.bench_function("delta_1k_apply_encode", |b| {
        b.iter_batched(
            || (base.clone(), changes.clone()),
            |(mut s, ch)| {
                let d = s.apply(header(2), ch).expect("apply");
                let msg = pb::SnapshotUpdate::new(pb::snapshot_update::Update::Delta(
                    pb::SnapshotDelta::from(&d),
                ));
                let bytes = msg.encode_to_vec();
                (s, d, black_box(bytes))
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("diff_100k_find_1k_changes", |b| {
        b.iter_with_large_drop(|| base.diff(Some(routings()), &target))
    });
    g.bench_function("worker_apply_delta_1k", |b| {
        b.iter_batched(
            || (base.clone(), delta.clone()),
            |(mut s, d)| {
                s.apply_delta(d).expect("apply");
                s
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
