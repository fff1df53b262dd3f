//! The control-plane contract (`proto/controlplane/v1/controlplane.proto`): generated
//! messages and services ([`pb`]), the domain values they convert to at the edge
//! ([`model`], [`convert`]), the snapshot checksum and delta rules both ends share
//! ([`state`]), SPIFFE workload identities ([`spiffe`]) and the client connection
//! helper the gateway and the checker use ([`client`]).
//!
//! It never decides policy (the controller does) and never logs a proxy password.

mod checksum;
pub mod client;
pub mod convert;
pub mod limits;
pub mod model;
pub mod spiffe;
pub mod state;
pub mod wire;

/// Generated protobuf messages, clients and servers of `proxypool.controlplane.v1`.
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations
)]
pub mod pb {
    tonic::include_proto!("proxypool.controlplane.v1");

    pub use super::wire::SnapshotUpdate;

    /// The `update` oneof of [`SnapshotUpdate`].
    pub mod snapshot_update {
        pub use super::super::wire::Update;
    }

    impl std::fmt::Debug for UpstreamCredentials {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("UpstreamCredentials")
                .field("username", &self.username)
                .field("password", &"***")
                .finish()
        }
    }
}

pub use convert::ConvertError;

/// The control-plane protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The message of `UNAVAILABLE` when a controller replica that does not lead refuses a
/// control-plane call (clients try another endpoint).
pub const NOT_LEADER: &str = "not_leader";

/// Picks the protocol version of a session: the highest version both sides speak.
/// `None` (registration fails) when the client offers none this build speaks.
pub fn negotiate_version(offered: &[u32]) -> Option<u32> {
    offered
        .iter()
        .copied()
        .filter(|v| *v == PROTOCOL_VERSION)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation_refuses_unknown_versions() {
        assert_eq!(negotiate_version(&[1]), Some(1));
        assert_eq!(negotiate_version(&[2, 1]), Some(1));
        assert_eq!(negotiate_version(&[2]), None);
        assert_eq!(negotiate_version(&[]), None);
    }

    #[test]
    fn credentials_debug_redacts_the_password() {
        let c = pb::UpstreamCredentials {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
