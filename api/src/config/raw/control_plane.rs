//! `controlPlane`: the gRPC control-plane listener and its tunables, as written.

use serde::{Deserialize, Serialize};

/// `controlPlane`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawControlPlane {
    /// Serve the gRPC control plane.
    #[serde(default)]
    pub enabled: bool,
    /// Listen address.
    #[serde(default)]
    pub listen: Option<String>,
    /// Serve plaintext: a test fixture, allowed only on a loopback listener.
    #[serde(default)]
    pub loopback_plaintext: bool,
    /// mTLS material (required to serve anything but the loopback fixture).
    #[serde(default)]
    pub tls: Option<RawControlPlaneTls>,
    /// Assignable proxies of each upstream the ownership manager leaves unassigned,
    /// for the Distribution API (default 0).
    #[serde(default)]
    pub extraction_reserve: Option<u32>,
    /// Capacity (sum of `maxConcurrency`) the ownership manager aims to give each
    /// gateway (default 10000).
    #[serde(default)]
    pub target_slots_per_worker: Option<u64>,
    /// Most drains begun per ownership pass for extraction demand (default 64).
    #[serde(default)]
    pub drain_batch: Option<u32>,
    /// How long an extraction the unowned pool cannot serve waits for drains
    /// (default 5s; `0s`: an allOrNothing request answers 409 at once).
    #[serde(default)]
    pub drain_wait: Option<String>,
    /// Lease of one assignment (default 30s).
    #[serde(default)]
    pub lease: Option<String>,
    /// Renew a lease when less than this is left (default 15s).
    #[serde(default)]
    pub renew_before: Option<String>,
    /// Validity of a published snapshot (default 30s).
    #[serde(default)]
    pub snapshot_validity: Option<String>,
    /// A gateway refuses new traffic past this age without a valid snapshot
    /// (default 60s).
    #[serde(default)]
    pub max_stale_age: Option<String>,
    /// Interval of the gateways' runtime reports (default 5s).
    #[serde(default)]
    pub report_interval: Option<String>,
}

/// `controlPlane.tls`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawControlPlaneTls {
    /// Server certificate chain (PEM file).
    #[serde(default)]
    pub cert_file: String,
    /// Server private key (PEM file).
    #[serde(default)]
    pub key_file: String,
    /// Trust bundle of worker / checker certificates (PEM file).
    #[serde(default)]
    pub client_ca_file: String,
    /// SPIFFE trust domain of accepted clients.
    #[serde(default)]
    pub trust_domain: Option<String>,
    /// Environment segment of accepted SPIFFE IDs.
    #[serde(default)]
    pub environment: Option<String>,
}
