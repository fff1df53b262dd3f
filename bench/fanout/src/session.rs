//! One simulated gateway: what `gateway/src/controlplane` does, minus the data plane.
//!
//! Register (worker ID, instance, group), watch snapshots, apply each update to a
//! `SnapshotState` exactly as a gateway does (full snapshot, or a delta onto its base,
//! verified by checksum), ACK it (NACK and re-open without a base on a mismatch), send
//! a runtime report right after each accepted snapshot and every `report_interval`
//! (empty counts: no traffic), never an ACK and a report in flight together (one task
//! does both in turn, which is what the gateway's `Bound` lock achieves). Reconnects
//! after a second on any failure, keeping its state, like the gateway's backoff.
//! Skipped: building the gateway's `LiveSnapshot` and outcome batches (no traffic).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Result, anyhow, bail};
use prost::Message;
use proxy_pool_api::controlplane::client::ClientOptions;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_api::controlplane::state::SnapshotState;
use proxy_pool_api::controlplane::{PROTOCOL_VERSION, limits, model, pb};
use tokio::sync::watch;
use tonic::transport::Endpoint;

use crate::track::{Seen, Tracker};

/// Counters every session adds to (the measured window's are reset at its start).
#[derive(Debug, Default)]
pub struct Counters {
    /// Full snapshots received, and their encoded bytes.
    pub full_msgs: AtomicU64,
    /// Bytes of full snapshots.
    pub full_bytes: AtomicU64,
    /// Deltas received.
    pub delta_msgs: AtomicU64,
    /// Bytes of deltas.
    pub delta_bytes: AtomicU64,
    /// Deltas with no upsert and no removal (re-publications of an unchanged snapshot).
    pub empty_deltas: AtomicU64,
    /// Proxy entries received in deltas (upserts + removals).
    pub delta_entries: AtomicU64,
    /// Positive ACKs answered.
    pub acks: AtomicU64,
    /// Negative ACKs sent.
    pub nacks: AtomicU64,
    /// Runtime reports answered.
    pub reports: AtomicU64,
    /// Sessions that failed (and reconnected).
    pub failures: AtomicU64,
}

impl Counters {
    /// Zeroes every counter.
    pub fn reset(&self) {
        for c in [
            &self.full_msgs,
            &self.full_bytes,
            &self.delta_msgs,
            &self.delta_bytes,
            &self.empty_deltas,
            &self.delta_entries,
            &self.acks,
            &self.nacks,
            &self.reports,
            &self.failures,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// What every session shares.
#[derive(Debug)]
pub struct Shared {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Gateway group every session registers with.
    pub group: String,
    /// Change bookkeeping.
    pub tracker: Arc<Tracker>,
    /// Counters.
    pub counters: Counters,
    /// Proxies held by all sessions (sum of their applied snapshots' sizes).
    pub proxies: AtomicI64,
    /// Sessions that applied at least one snapshot.
    pub ready: AtomicI64,
    /// Set: print the first failure of each session.
    pub verbose: AtomicBool,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

async fn answered<T>(
    deadline: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(deadline, call).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("call unanswered for {deadline:?}"),
    }
}

/// One session's local state across reconnects.
struct Local {
    worker_id: String,
    instance_id: String,
    /// Loopback source address of its connections, one per session.
    source: IpAddr,
    state: Option<SnapshotState>,
    counted: bool,
}

/// Runs simulated gateway `index` until `stop` turns true.
pub async fn run(index: usize, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut local = Local {
        worker_id: format!("fanout-gw-{index:04}"),
        instance_id: format!("fanout-gw-{index:04}-{}", std::process::id()),
        source: IpAddr::V4(Ipv4Addr::new(
            127,
            200,
            u8::try_from(index / 250).unwrap_or(u8::MAX),
            u8::try_from(index % 250 + 1).unwrap_or(u8::MAX),
        )),
        state: None,
        counted: false,
    };
    let mut failures = 0u32;
    loop {
        let res = tokio::select! {
            r = session(&mut local, &shared) => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        if let Err(e) = res {
            shared.counters.failures.fetch_add(1, Ordering::Relaxed);
            if failures == 0 && shared.verbose.load(Ordering::Relaxed) {
                eprintln!("session {}: {e:#}", local.worker_id);
            }
            failures += 1;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn session(local: &mut Local, shared: &Shared) -> Result<()> {
    let options = ClientOptions::default();
    let timeout = options.call_timeout;
    // `api::controlplane::client::connect`'s settings, plus a source address of its
    // own: real gateways connect from distinct pod addresses, and the controller
    // allows 64 connections per source address.
    let channel = Endpoint::from_shared(shared.endpoint.clone())?
        .connect_timeout(options.connect_timeout)
        .http2_keep_alive_interval(options.keepalive_interval)
        .keep_alive_timeout(options.keepalive_timeout)
        .keep_alive_while_idle(true)
        .local_address(Some(local.source))
        .connect()
        .await?;
    let mut rpc = WorkerControlPlaneClient::new(channel)
        .max_decoding_message_size(limits::SNAPSHOT)
        .max_encoding_message_size(limits::REPORT_RUNTIME);
    let reg = answered(
        timeout,
        rpc.register_worker(pb::RegisterWorkerRequest {
            worker_id: local.worker_id.clone(),
            instance_id: local.instance_id.clone(),
            zone: "bench".into(),
            gateway_group: shared.group.clone(),
            supported_protocol_versions: vec![PROTOCOL_VERSION],
            build_version: "fanout-bench".into(),
        }),
    )
    .await?
    .into_inner();
    let session_id = reg.session_id;
    let (last_version, last_checksum) = local
        .state
        .as_ref()
        .map_or((0, Vec::new()), |s| (s.version(), s.checksum().0.to_vec()));
    let mut stream = answered(
        timeout,
        rpc.watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: local.worker_id.clone(),
            session_id: session_id.clone(),
            last_version,
            last_checksum,
        }),
    )
    .await?
    .into_inner();
    let mut tick = tokio::time::interval(Duration::from_millis(reg.report_interval_ms.max(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut acked: Option<(u64, u64)> = None;
    let mut sequence = 0u64;
    loop {
        let report_now = tokio::select! {
            msg = stream.message() => {
                let Some(update) = msg? else { bail!("snapshot stream ended") };
                let ack = apply(local, shared, update);
                answered(
                    timeout,
                    rpc.acknowledge_snapshot(pb::AcknowledgeSnapshotRequest {
                        worker_id: local.worker_id.clone(),
                        session_id: session_id.clone(),
                        version: ack.version,
                        ownership_epoch: ack.epoch,
                        checksum: ack.checksum,
                        accepted: ack.error.is_none(),
                        reason: ack.error.clone().unwrap_or_default(),
                    }),
                )
                .await?;
                if let Some(e) = ack.error {
                    shared.counters.nacks.fetch_add(1, Ordering::Relaxed);
                    let dropped = local.state.take().map_or(0, |s| s.len());
                    shared.proxies.fetch_sub(len_i64(dropped), Ordering::Relaxed);
                    return Err(anyhow!("snapshot refused: {e}"));
                }
                shared.counters.acks.fetch_add(1, Ordering::Relaxed);
                shared.tracker.acked(ack.seen);
                acked = Some((ack.version, ack.epoch));
                true
            }
            _ = tick.tick() => true,
        };
        let Some((version, epoch)) = acked.filter(|_| report_now) else {
            continue;
        };
        sequence += 1;
        answered(
            timeout,
            rpc.report_runtime(pb::ReportRuntimeRequest {
                worker_id: local.worker_id.clone(),
                session_id: session_id.clone(),
                report_sequence: sequence,
                snapshot_version: version,
                ownership_epoch: epoch,
                counts: Vec::new(),
                observed_at_ms: unix_ms(),
                usage: Vec::new(),
            }),
        )
        .await?;
        shared.counters.reports.fetch_add(1, Ordering::Relaxed);
    }
}

/// What to ACK after applying one update.
struct Ack {
    version: u64,
    epoch: u64,
    checksum: Vec<u8>,
    error: Option<String>,
    seen: Vec<Seen>,
}

impl Ack {
    /// The update applied: ACK it, with the changes it showed.
    fn applied(version: u64, epoch: u64, checksum: Vec<u8>, seen: Vec<Seen>) -> Self {
        Self {
            version,
            epoch,
            checksum,
            error: None,
            seen,
        }
    }

    /// The update refused (NACK) for `error`.
    fn refused(version: u64, epoch: u64, checksum: Vec<u8>, error: String) -> Self {
        Self {
            version,
            epoch,
            checksum,
            error: Some(error),
            seen: Vec::new(),
        }
    }
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Applies `update` to the local state (unchanged on error), as the gateway does.
fn apply(local: &mut Local, shared: &Shared, update: pb::SnapshotUpdate) -> Ack {
    let bytes = update.encoded_len() as u64;
    let c = &shared.counters;
    let before = local.state.as_ref().map_or(0, SnapshotState::len);
    let refuse = Ack::refused;
    let ack = match update.update {
        Some(pb::snapshot_update::Update::Full(msg)) => {
            c.full_msgs.fetch_add(1, Ordering::Relaxed);
            c.full_bytes.fetch_add(bytes, Ordering::Relaxed);
            let (v, e, sum) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let snap = match model::Snapshot::try_from(msg) {
                Ok(s) => s,
                Err(err) => return refuse(v, e, sum, format!("invalid: {err}")),
            };
            let prev = local.state.as_ref();
            let seen = shared.tracker.seen(
                snap.proxies.iter().map(|p| {
                    let new = prev.is_none_or(|s| s.proxy(&p.id).is_none());
                    (p.id.as_str(), p.expires_at_ms, new)
                }),
                std::iter::empty(),
            );
            match SnapshotState::from_snapshot(snap) {
                Ok(st) => {
                    local.state = Some(st);
                    Ack::applied(v, e, sum, seen)
                }
                Err(err) => return refuse(v, e, sum, err.to_string()),
            }
        }
        Some(pb::snapshot_update::Update::Delta(msg)) => {
            c.delta_msgs.fetch_add(1, Ordering::Relaxed);
            c.delta_bytes.fetch_add(bytes, Ordering::Relaxed);
            let entries = (msg.upserts.len() + msg.removals.len()) as u64;
            c.delta_entries.fetch_add(entries, Ordering::Relaxed);
            if entries == 0 {
                c.empty_deltas.fetch_add(1, Ordering::Relaxed);
            }
            let (v, e, sum) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let delta = match model::Delta::try_from(msg) {
                Ok(d) => d,
                Err(err) => return refuse(v, e, sum, format!("invalid: {err}")),
            };
            let Some(st) = local.state.as_mut() else {
                return refuse(v, e, sum, "delta without a base".into());
            };
            let seen = shared.tracker.seen(
                delta.upserts.iter().map(|p| {
                    let new = st.proxy(&p.id).is_none();
                    (p.id.as_str(), p.expires_at_ms, new)
                }),
                delta.removals.iter().map(String::as_str),
            );
            match st.apply_delta(delta) {
                Ok(()) => Ack::applied(v, e, sum, seen),
                Err(err) => return refuse(v, e, sum, err.to_string()),
            }
        }
        None => return refuse(0, 0, Vec::new(), "empty update".into()),
    };
    let after = local.state.as_ref().map_or(0, SnapshotState::len);
    shared
        .proxies
        .fetch_add(len_i64(after) - len_i64(before), Ordering::Relaxed);
    if !local.counted {
        local.counted = true;
        shared.ready.fetch_add(1, Ordering::Relaxed);
    }
    ack
}
