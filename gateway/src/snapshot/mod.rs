//! Snapshots as the gateway serves them: the control-plane snapshot in the `api`
//! model ([`proxy_pool_api::controlplane::model::Snapshot`], checked where the wire
//! was converted, or by [`file`] for a local snapshot file) together with the clients
//! allowed to authenticate ([`SnapshotInput`]); the compiled [`LiveSnapshot`] the hot
//! path reads (per-routing candidate lists precomputed); and the [`SnapshotHandle`]
//! that publishes it with one atomic pointer swap. Protobuf never reaches this module.

pub mod file;
mod handle;
pub mod live;
pub mod selection;

#[cfg(test)]
pub(crate) mod fixture;

pub use crate::proxy_id::ProxyId;
pub use handle::{ChannelSource, SnapshotHandle, SnapshotSource, run_source};
pub use live::{Candidate, CompiledRouting, LiveSnapshot, ProxyEntry, SnapshotError, UpstreamAddr};
pub use selection::{CandidateSet, Candidates, Narrowing, SelectionKey};

use proxy_pool_api::controlplane::model::{Dial, Labels, Protocol, Snapshot, SnapshotProxy};
use proxy_pool_api::secret::SaltedHash;
use std::fmt;
use std::time::Duration;

/// How long before its lease end the gateway stops using a proxy: room for clock
/// skew between this host and the pool's clock (Redis `TIME`), so a proxy the pool
/// releases at the lease end is no longer in use by then.
pub const LEASE_SAFETY: Duration = Duration::from_secs(1);

/// A proxy of a snapshot made without a controller (a local snapshot file, tests,
/// benchmarks): `max` concurrent uses of `protocol` at `host:port`, usable until
/// `until_ms` and owned outright — no assignment epoch or lease, not draining,
/// excluded from no routing — with no upstream name, credentials, region or carrier
/// (set them with struct update syntax).
pub fn standalone_proxy(
    id: impl Into<String>,
    protocol: Protocol,
    host: impl Into<String>,
    port: u16,
    max: u32,
    until_ms: i64,
) -> SnapshotProxy {
    SnapshotProxy {
        id: id.into(),
        upstream: String::new(),
        dial: Dial {
            protocol,
            host: host.into(),
            port,
            credentials: None,
        },
        labels: Labels::default(),
        max_concurrency: max,
        expires_at_ms: until_ms,
        usable_until_ms: until_ms,
        assignment_epoch: 0,
        draining: false,
        lease_expires_at_ms: 0,
        excluded_routings: Vec::new(),
    }
}

/// A client allowed to use the gateway: the base username it presents and its
/// password salted and hashed (never the password itself, never an unsalted digest).
/// Not part of the control-plane contract: it comes from the clients file.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredential {
    /// Client name (what a routing's `matcher.clients` lists).
    pub client: String,
    /// Base username (before any `-key-value` parameters).
    pub username: String,
    /// The password, salted and hashed.
    pub password: SaltedHash,
    /// The client's fleet-wide limits (validated), if any.
    pub limits: Option<proxy_pool_api::client_limits::GatewayLimits>,
}

impl ClientCredential {
    /// Builds a credential from a clear password (tests and static configs).
    pub fn from_password(client: &str, username: &str, password: &str) -> Self {
        Self {
            client: client.to_owned(),
            username: username.to_owned(),
            password: SaltedHash::new(password.as_bytes()),
            limits: None,
        }
    }

    /// The same credential with the client's fleet-wide `limits`.
    pub fn with_limits(mut self, limits: proxy_pool_api::client_limits::GatewayLimits) -> Self {
        self.limits = (!limits.is_empty()).then_some(limits);
        self
    }
}

impl fmt::Debug for ClientCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredential")
            .field("client", &self.client)
            .field("username", &self.username)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What a [`SnapshotSource`] delivers and [`SnapshotHandle::install`] compiles: a
/// control-plane snapshot and the clients allowed to authenticate against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInput {
    /// The snapshot (routings, this worker's proxies, validity).
    pub snapshot: Snapshot,
    /// Clients allowed to authenticate.
    pub clients: Vec<ClientCredential>,
}

impl SnapshotInput {
    /// `snapshot` served to `clients`.
    pub fn new(snapshot: Snapshot, clients: Vec<ClientCredential>) -> Self {
        Self { snapshot, clients }
    }
}
