//! State shared by every simulator task: settings, the live-proxy registry and the
//! shutdown token plus task tracker every spawned task is registered with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::audit::AuditLog;
use super::config::Settings;
use super::failure::{Switch, VendorFault};
use super::registry::Registry;

/// Where the echo servers listen and the PEM a client must trust for HTTPS.
#[derive(Debug, Clone)]
pub(crate) struct EchoInfo {
    pub(crate) http: SocketAddr,
    pub(crate) https: SocketAddr,
    pub(crate) ca_pem: String,
}

#[derive(Debug)]
pub(crate) struct SimCore {
    pub(crate) settings: Settings,
    pub(crate) registry: Registry,
    pub(crate) echo: EchoInfo,
    /// Fault the vendor API currently simulates.
    pub(crate) vendor_fault: Switch<VendorFault>,
    /// Root of every cancellation: proxies hold child tokens.
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// Every use of every proxy (the exclusivity auditor).
    pub(crate) audit: std::sync::Arc<AuditLog>,
    seq: AtomicU64,
}

impl SimCore {
    pub(crate) fn new(settings: Settings, registry: Registry, echo: EchoInfo) -> Self {
        Self {
            settings,
            registry,
            echo,
            vendor_fault: Switch::new(VendorFault::None),
            token: CancellationToken::new(),
            tracker: TaskTracker::new(),
            audit: std::sync::Arc::default(),
            seq: AtomicU64::new(0),
        }
    }

    /// Next proxy sequence number (IDs sort in creation order).
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }
}
