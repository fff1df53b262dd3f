//! Snapshot values for unit tests: an HTTP proxy on loopback, a catch-all routing, a
//! snapshot valid for ten minutes.

use proxy_pool_api::controlplane::model::{
    Checksum, Header, Labels, Protocol, Routing, Snapshot, SnapshotProxy,
};

use super::{SnapshotInput, standalone_proxy};
use crate::clock::{now_ms, to_model_ms};

/// How long fixtures stay valid and usable.
const TEN_MINUTES_MS: i64 = 600_000;

/// Unix milliseconds `offset_ms` from now.
pub(crate) fn unix_ms_in(offset_ms: i64) -> i64 {
    to_model_ms(now_ms()) + offset_ms
}

/// Proxy `id` (HTTP, `127.0.0.1:1`, upstream `u`, region `r`, carrier `c`, no city) taking
/// `max` concurrent uses, usable for ten minutes.
pub(crate) fn proxy(id: &str, max: u32) -> SnapshotProxy {
    let far = unix_ms_in(TEN_MINUTES_MS);
    SnapshotProxy {
        upstream: "u".into(),
        labels: Labels {
            region: Some("r".into()),
            carrier: Some("c".into()),
            city: None,
        },
        ..standalone_proxy(id, Protocol::Http, "127.0.0.1", 1, max, far)
    }
}

/// A routing named `name` that matches everything and allows every proxy.
pub(crate) fn routing(name: &str) -> Routing {
    Routing {
        name: name.into(),
        ..Routing::default()
    }
}

/// Snapshot `version` (epoch 1, valid for ten minutes) without clients.
pub(crate) fn input(
    version: u64,
    routings: Vec<Routing>,
    proxies: Vec<SnapshotProxy>,
) -> SnapshotInput {
    SnapshotInput::new(
        Snapshot {
            header: Header {
                version,
                ownership_epoch: 1,
                generated_at_ms: unix_ms_in(0),
                valid_until_ms: unix_ms_in(TEN_MINUTES_MS),
            },
            routings,
            proxies,
            checksum: Checksum::default(),
        },
        Vec::new(),
    )
}
