//! What is counted: subjects (a DistributionClient, an Upstream, a Routing) and the
//! events recorded against them.

use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Which kind of object a count belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A DistributionClient: extract requests, proxies extracted, unique caller identities,
    /// and its gateway bytes (up, down).
    Clients,
    /// An Upstream: extract requests served, proxies extracted, unique DistributionClients.
    Upstreams,
    /// A Routing: gateway requests, unique client identities, gateway bytes (up, down).
    Routings,
}

impl Kind {
    /// The path segment and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clients => "clients",
            Self::Upstreams => "upstreams",
            Self::Routings => "routings",
        }
    }
    /// Parses a path segment.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "clients" => Some(Self::Clients),
            "upstreams" => Some(Self::Upstreams),
            "routings" => Some(Self::Routings),
            _ => None,
        }
    }
}

/// A counted object: kind + configured name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subject {
    /// Kind.
    pub kind: Kind,
    /// Name (validated by [`valid_name`]).
    pub name: String,
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}|{}", self.kind.as_str(), self.name)
    }
}

/// Names that may be counted: 1..=253 of `[A-Za-z0-9._:-]` — every name the
/// controller config accepts for a client, upstream or routing (never `|`, the key
/// separator, nor `/`).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'))
}

/// One observation, stamped when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A successful extraction by `client`, of `per_upstream` proxies per Upstream.
    Extraction {
        /// When.
        at: Timestamp,
        /// DistributionClient name.
        client: String,
        /// The caller's identity (credential ID or source address); hashed before Redis.
        identity: String,
        /// (Upstream name, proxies returned) — at most 64 entries are counted.
        per_upstream: Vec<(String, u32)>,
    },
    /// `requests` gateway requests on `routing` by one client identity.
    GatewayRequests {
        /// When.
        at: Timestamp,
        /// Routing name.
        routing: String,
        /// Client identity (gateway username without routing parameters, or source IP).
        identity: String,
        /// Requests (≥ 1).
        requests: u32,
    },
    /// Gateway bytes of one subject: a Routing (every client's), or a configured client
    /// (a DistributionClient, over every Routing). Up: read from the client's
    /// connection; down: written to it.
    GatewayBytes {
        /// When.
        at: Timestamp,
        /// `Routings` or `Clients`.
        kind: Kind,
        /// Routing or client name.
        name: String,
        /// Bytes from the client.
        bytes_up: u64,
        /// Bytes to the client.
        bytes_down: u64,
    },
}

impl Event {
    /// When it happened.
    pub fn at(&self) -> Timestamp {
        match self {
            Self::Extraction { at, .. }
            | Self::GatewayRequests { at, .. }
            | Self::GatewayBytes { at, .. } => *at,
        }
    }
}
