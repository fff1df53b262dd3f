//! SPIFFE-style worker identities (see `docs/identity.md`): the operator's CA (kept in a
//! Secret, its trust bundle published in ConfigMaps, rotated with an overlap window)
//! and the HTTPS issuance endpoint that turns a worker's CSR plus projected
//! ServiceAccount token into a short-lived leaf certificate.
//!
//! The SPIFFE ID comes from the authenticated caller (TokenReview → Pod → ReplicaSet →
//! managed gateway Deployment: `…/worker/<pod>`, or the configured checker Deployment:
//! `…/checker/<pod>`), never from the CSR. This module never logs tokens,
//! private keys or certificates, and never caches an authorisation decision: only
//! TokenReview results are cached, briefly ([`review::CachedReviewer`]).
//!
//! Outside dependencies sit behind small ports with in-memory adapters for tests:
//! [`store::CaStore`], [`review::TokenReviewer`], [`authz::Workloads`] and
//! [`clock::Clock`]; [`kube_adapters`] holds the Kubernetes implementations.

pub mod authority;
pub mod authz;
pub mod ca;
pub mod clock;
pub mod csr;
pub mod error;
#[cfg(test)]
mod fixtures;
pub mod http;
pub mod issuer;
pub mod kube_adapters;
pub mod metrics;
pub mod review;
pub mod service;
pub mod serving;
pub mod store;

pub use authority::Authority;
pub use ca::{CaParams, CaSet};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::IssueError;
pub use issuer::{Issuer, IssuerConfig};
pub use metrics::IdentityMetrics;
pub use proxy_pool_api::identity as wire;
pub use service::{IdentityOptions, IdentityService};

/// Field manager of every object the operator writes with server-side apply.
pub const FIELD_MANAGER: &str = "proxy-pool-operator";
/// Label naming the operator as the manager of an object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on objects the operator manages.
pub const MANAGED_BY_VALUE: &str = "proxy-pool-operator";
/// Label naming the component an object belongs to.
pub const COMPONENT_LABEL: &str = "proxypool.io/component";
/// Value of [`COMPONENT_LABEL`] on gateway Deployments.
pub const GATEWAY_COMPONENT: &str = "gateway";
/// Token extras naming the pod a bound ServiceAccount token was issued for, and its UID.
pub use proxy_pool_token_review::{POD_NAME_EXTRA, POD_UID_EXTRA};
