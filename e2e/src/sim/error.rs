//! The simulator's one error type. Owns classification of failures; never carries
//! proxy or vendor passwords in its messages.

use std::io;

/// Everything that can go wrong when starting the simulator or creating proxies.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration was rejected; every problem is listed with its field path.
    #[error("invalid simulator configuration: {0}")]
    Config(#[from] ConfigError),
    /// The live-proxy cap (or the egress address range) is exhausted.
    #[error("the simulated pool is full ({max} live proxies)")]
    PoolFull {
        /// The configured maximum number of live proxies.
        max: usize,
    },
    /// No live proxy has this ID (it may have expired).
    #[error("no live proxy with id {0}")]
    UnknownProxy(String),
    /// A listener could not be bound or inspected.
    #[error("cannot bind {what}: {source}")]
    Bind {
        /// Which listener failed.
        what: &'static str,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },
    /// The TLS material for the echo server could not be built.
    #[error("cannot build echo TLS material: {0}")]
    Tls(String),
}

/// All problems found while validating a [`crate::sim::SimConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", problems.join("; "))]
pub struct ConfigError {
    /// One entry per problem, each starting with the field path.
    pub problems: Vec<String>,
}
