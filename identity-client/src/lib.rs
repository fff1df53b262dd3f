//! Worker side of Proxy Pool's SPIFFE-style identities (see `docs/identity.md`).
//!
//! A worker (gateway or checker) generates its private key in memory, sends a CSR and
//! its projected ServiceAccount token to the operator's issuance endpoint over
//! server-authenticated TLS (trusting the operator's CA bundle file), keeps the issued
//! certificate and key in memory behind an [`IdentityHandle`] that rustls can use on
//! both sides of a connection, and renews at about half-life with jitter.
//!
//! The wire contract of `POST /v1/identity/issue` ([`wire`]) is `proxy_pool_api::identity`,
//! which the operator's issuer also uses. With the feature `args`, `IdentityArgs` are the
//! bootstrap flags the gateway and the checker share; with `metrics`,
//! `CertificateExpiry` exports the current certificate's expiry as a gauge. It never writes the key to disk,
//! never logs the token, the key or the certificate, and does not depend on `kube`.

#[cfg(feature = "args")]
mod args;
mod client;
mod error;
mod handle;
#[cfg(feature = "metrics")]
mod metrics;
mod renew;
pub mod wire;
mod worker;

#[cfg(feature = "args")]
pub use args::{IdentityArgs, IdentityArgsError};
pub use client::{ClientConfig, IdentityClient};
pub use error::ClientError;
pub use handle::{Identity, IdentityHandle};
#[cfg(feature = "metrics")]
pub use metrics::CertificateExpiry;
pub use renew::{Backoff, RenewalPolicy, run_renewal};
pub use worker::{MaterialError, TlsMaterial, WorkerTls, obtain_first, start_issued};
