//! `controlPlane`, validated: the gRPC control-plane listener and its tunables.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The gRPC control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneConfig {
    /// Listen address.
    pub listen: SocketAddr,
    /// How the listener is secured.
    pub transport: ControlPlaneTransport,
    /// Assignable proxies of each upstream left unassigned for extraction.
    pub extraction_reserve: u32,
    /// Capacity (sum of `maxConcurrency`) the ownership manager aims to give each
    /// gateway.
    pub target_slots_per_worker: u64,
    /// Most drains begun per ownership pass for extraction demand.
    pub drain_batch: u32,
    /// How long an extraction the unowned pool cannot serve waits for drains (zero:
    /// an allOrNothing request answers 409 at once, a partial one what it got).
    pub drain_wait: Duration,
    /// Lease of one assignment.
    pub lease: Duration,
    /// Renew a lease when less than this is left.
    pub renew_before: Duration,
    /// Validity of a published snapshot.
    pub snapshot_validity: Duration,
    /// A gateway refuses new traffic past this age without a valid snapshot.
    pub max_stale_age: Duration,
    /// Interval of the gateways' runtime reports.
    pub report_interval: Duration,
}

/// How the control-plane listener is secured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlPlaneTransport {
    /// Neither `tls` nor `loopbackPlaintext` given: the controller does not serve the
    /// control plane (and says so in its log).
    Unconfigured,
    /// Plaintext on a loopback listener, explicitly configured as a test fixture.
    LoopbackPlaintext,
    /// mTLS with SPIFFE identities.
    Mtls(ControlPlaneTls),
}

/// mTLS material of the control-plane listener (files read at start-up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneTls {
    /// Server certificate chain (PEM).
    pub cert_file: PathBuf,
    /// Server private key (PEM).
    pub key_file: PathBuf,
    /// Trust bundle of client certificates (PEM).
    pub client_ca_file: PathBuf,
    /// SPIFFE trust domain of accepted clients.
    pub trust_domain: String,
    /// Environment segment of accepted SPIFFE IDs.
    pub environment: String,
}
