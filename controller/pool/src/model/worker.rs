//! Worker ownership and sessions: assignments (leases), session registrations and
//! the runtime reports a worker writes under its session.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ids::{InstanceId, ProxyId, SessionId, UpstreamId, WorkerId};
use crate::clock::Timestamp;

/// A worker's lease on a proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// Its upstream.
    pub upstream: UpstreamId,
    /// The owning worker.
    pub worker_id: WorkerId,
    /// Ownership epoch of this assignment (never reused).
    pub epoch: u64,
    /// End of the lease (never past `usable_until`).
    pub lease_expires_at: Timestamp,
    /// Draining was begun.
    pub draining: bool,
}

/// A request for a new lease (`OwnershipRepository::assign`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The proxy wanted.
    pub proxy_id: ProxyId,
    /// The worker it is for.
    pub worker_id: WorkerId,
    /// How long the lease lasts (capped at the proxy's `usable_until`).
    pub lease: Duration,
}

impl Assignment {
    /// This assignment as its worker names it.
    pub fn claim(&self) -> Claim {
        Claim {
            proxy_id: self.proxy_id.clone(),
            worker_id: self.worker_id.clone(),
            epoch: self.epoch,
        }
    }
}

/// An assignment as its worker names it (`renew`, `begin_drain`,
/// `acknowledge_drain`): it must still be the proxy's live assignment, to that worker,
/// under that epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The owning worker.
    pub worker_id: WorkerId,
    /// The epoch of the assignment.
    pub epoch: u64,
}

/// A worker's report that it stopped using a draining proxy
/// (`OwnershipRepository::acknowledge_drain`): the assignment, and the uses it still has
/// of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainAck {
    /// The draining assignment.
    pub claim: Claim,
    /// Requests / tunnels still in use.
    pub active: u32,
    /// Slots still reserved during upstream handshakes.
    pub reserved: u32,
}

/// One page of the live assignments (`OwnershipRepository::leases`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeasePage {
    /// Assignments with an unexpired lease on a live record.
    pub leases: Vec<Assignment>,
    /// Where the next page starts; `None` when the walk is complete.
    pub next: Option<String>,
}

/// Records changed since a cursor (`ProxyCatalog::changes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangePage {
    /// Proxies whose record was written (inserted, changed, removed or purged) after
    /// the cursor, oldest change first; a proxy may appear more than once.
    pub ids: Vec<ProxyId>,
    /// The cursor of the next call: the last change this page covers.
    pub next: u64,
    /// Changes after the cursor may be missing (no cursor was given, the feed dropped
    /// its oldest entries past its capacity, or the store was reset): read every
    /// record of interest again, then follow the feed from `next`.
    pub lost: bool,
    /// More changes follow `next` already.
    pub more: bool,
}

/// A batch of leases released by `expire`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExpiredAssignments {
    /// Released assignments.
    pub released: Vec<Assignment>,
    /// More expired leases remain.
    pub more: bool,
}

/// Registration of a worker instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRegistration {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Process.
    pub instance_id: InstanceId,
    /// Session; replaces any earlier one.
    pub session_id: SessionId,
    /// Session lifetime from now (renewed by every ACK).
    pub ttl: Duration,
}

/// A positive snapshot ACK of a worker session (`SessionWriter::acknowledge`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotAck {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Its current session.
    pub session_id: SessionId,
    /// The snapshot version applied.
    pub version: u64,
    /// The ownership epoch of that snapshot.
    pub epoch: u64,
    /// Session lifetime from now (the ACK renews it).
    pub ttl: Duration,
}

/// A negative snapshot ACK of a worker session (`SessionWriter::reject_snapshot`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotReject {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Its current session.
    pub session_id: SessionId,
    /// Session lifetime from now (the rejection renews it too).
    pub ttl: Duration,
}

/// A stored worker session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSession {
    /// Logical worker.
    pub worker_id: WorkerId,
    /// Process.
    pub instance_id: InstanceId,
    /// Session.
    pub session_id: SessionId,
    /// Last positively ACKed snapshot version.
    pub acked_version: Option<u64>,
    /// Ownership epoch of that snapshot.
    pub acked_epoch: Option<u64>,
    /// Runtime writes allowed (closed by a negative ACK until the next positive one).
    pub fence_open: bool,
    /// Session expiry.
    pub expires_at: Timestamp,
}

/// One proxy's counts in a runtime report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEntry {
    /// The proxy.
    pub proxy_id: ProxyId,
    /// The assignment epoch the worker holds it under.
    pub epoch: u64,
    /// Requests / tunnels in use.
    pub active: u32,
    /// Slots reserved during upstream handshakes.
    pub reserved: u32,
    /// No longer in the worker's snapshot but still in use.
    pub draining: bool,
}

/// Which runtime report this is: whose, under which session, its place in the
/// session's sequence, and the snapshot it is bound to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportHeader {
    /// Worker.
    pub worker_id: WorkerId,
    /// The session it is written under (the worker's current one).
    pub session_id: SessionId,
    /// Strictly increasing per worker session.
    pub sequence: u64,
    /// The snapshot version it is bound to: the session's ACKed version.
    pub snapshot_version: u64,
    /// The ownership epoch it is bound to: the session's ACKed epoch.
    pub epoch: u64,
}

/// A complete, sparse runtime report of one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeReport {
    /// Whose report, and what it is bound to.
    pub header: ReportHeader,
    /// Proxies with non-zero use (missing ones count zero).
    pub entries: Vec<RuntimeEntry>,
    /// Report lifetime from now; past it capacity fails closed.
    pub ttl: Duration,
}

/// Answer to an accepted report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportAck {
    /// Stored.
    Accepted,
    /// Same sequence, same content as the stored one: nothing changed.
    Replayed,
}

/// A worker's current runtime, as read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRuntime {
    /// The header of the report it was written from.
    #[serde(flatten)]
    pub header: ReportHeader,
    /// Entries by proxy ID order.
    pub entries: Vec<RuntimeEntry>,
    /// Expiry of the report.
    pub expires_at: Timestamp,
}
