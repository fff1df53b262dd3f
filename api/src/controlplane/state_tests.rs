//! Tests of `state.rs`.

use super::*;
use crate::controlplane::model::{Credentials, Dial, Labels, Protocol, Secret};

pub(crate) fn proxy(id: &str, epoch: u64) -> SnapshotProxy {
    SnapshotProxy {
        id: id.into(),
        upstream: "u".into(),
        dial: Dial {
            protocol: Protocol::Http,
            host: "127.0.0.1".into(),
            port: 8080,
            credentials: Some(Credentials {
                username: "user".into(),
                password: Secret::new("pw"),
            }),
        },
        labels: Labels {
            region: Some("sh".into()),
            carrier: None,
            city: Some("pudong".into()),
        },
        max_concurrency: 4,
        expires_at_ms: 100_000,
        usable_until_ms: 95_000,
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
        generated_at_ms: 1,
        valid_until_ms: 2,
    }
}

#[test]
fn controller_deltas_apply_on_a_worker_and_checksums_agree() {
    let mut server = SnapshotState::new();
    server
        .advance(header(1), Some(vec![]), &[proxy("a", 1), proxy("b", 1)])
        .unwrap();
    let mut worker = SnapshotState::from_snapshot(server.to_snapshot()).unwrap();
    let mut changed = proxy("b", 2);
    changed.draining = true;
    let d = server
        .advance(header(2), None, &[changed, proxy("c", 1)])
        .unwrap();
    assert_eq!(d.removals, vec!["a".to_string()]);
    assert_eq!(d.upserts.len(), 2);
    worker.apply_delta(d).unwrap();
    assert_eq!(worker.checksum(), server.checksum());
    let shown = format!("{server:?}");
    assert!(
        !shown.contains("pw\"") && !shown.contains("112, 119"),
        "{shown}"
    );
    assert_eq!(worker.to_snapshot(), server.to_snapshot());
}

#[test]
fn delta_on_wrong_base_or_checksum_is_refused_and_changes_nothing() {
    let mut server = SnapshotState::new();
    server.advance(header(1), None, &[proxy("a", 1)]).unwrap();
    let mut worker = SnapshotState::from_snapshot(server.to_snapshot()).unwrap();
    let d2 = server.advance(header(2), None, &[proxy("b", 1)]).unwrap();
    let d3 = server.advance(header(3), None, &[proxy("c", 1)]).unwrap();
    let before = worker.checksum();
    assert!(matches!(
        worker.apply_delta(d3),
        Err(StateError::BaseMismatch { .. })
    ));
    let mut bad = d2.clone();
    bad.checksum.0[0] ^= 1;
    assert_eq!(worker.apply_delta(bad), Err(StateError::ChecksumMismatch));
    assert_eq!(worker.checksum(), before);
    worker.apply_delta(d2).unwrap();
}

#[test]
fn tampered_full_snapshot_is_refused() {
    let mut server = SnapshotState::new();
    server.advance(header(1), None, &[proxy("a", 1)]).unwrap();
    let mut s = server.to_snapshot();
    s.proxies[0].dial.port = 1;
    assert_eq!(
        SnapshotState::from_snapshot(s).unwrap_err(),
        StateError::ChecksumMismatch
    );
}
