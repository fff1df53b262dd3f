//! The snapshot side of a session: watch the controller's updates, apply each to the
//! local state (a full snapshot, or a delta onto its base, verified by checksum), build
//! and publish it off the hot path, and ACK (or NACK) exactly what was issued.

use proxy_pool_api::controlplane::client::Backoff;
use proxy_pool_api::controlplane::model;
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_api::controlplane::state::SnapshotState;
use tonic::transport::Channel;
use tracing::warn;

use super::{AgentError, Bound, Ids, answered};
use crate::snapshot::{ClientCredential, SnapshotHandle, SnapshotInput};

/// Watches snapshots until the stream fails or ends; applies, publishes and ACKs.
pub(super) async fn watch_snapshots(
    rpc: &mut WorkerControlPlaneClient<Channel>,
    ids: &Ids,
    handle: &SnapshotHandle,
    clients: &[ClientCredential],
    state: &mut Option<SnapshotState>,
    bound: &Bound,
    backoff: &mut Backoff,
) -> Result<(), AgentError> {
    let (last_version, last_checksum) = state
        .as_ref()
        .map_or((0, Vec::new()), |s| (s.version(), s.checksum().0.to_vec()));
    let mut stream = answered(
        ids.call_timeout,
        rpc.watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: ids.worker_id.clone(),
            session_id: ids.session_id.clone(),
            last_version,
            last_checksum,
        }),
    )
    .await?
    .into_inner();
    while let Some(update) = stream.message().await? {
        let applied = apply(state, update);
        let (version, epoch, checksum) = match &applied {
            Ok(st) => header(st),
            Err(Rejected {
                version,
                epoch,
                checksum,
                ..
            }) => (*version, *epoch, checksum.clone()),
        };
        let verdict = match applied {
            Ok(st) => publish(handle, st, clients).await,
            Err(rejected) => Err(rejected.reason),
        };
        let accepted = verdict.is_ok();
        let _bound = bound.lock.lock().await;
        answered(
            ids.call_timeout,
            rpc.acknowledge_snapshot(pb::AcknowledgeSnapshotRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                version,
                ownership_epoch: epoch,
                checksum,
                accepted,
                reason: verdict.err().unwrap_or_default(),
            }),
        )
        .await?;
        if accepted {
            backoff.reset();
            bound.acked.send_replace(Some((version, epoch)));
        } else {
            // Re-open without a base: the controller answers with a full snapshot.
            *state = None;
            return Err(AgentError::StreamEnded);
        }
    }
    Err(AgentError::StreamEnded)
}

struct Rejected {
    version: u64,
    epoch: u64,
    checksum: Vec<u8>,
    reason: String,
}

fn header(st: &SnapshotState) -> (u64, u64, Vec<u8>) {
    let epoch = st.header().map_or(0, |h| h.ownership_epoch);
    (st.version(), epoch, st.checksum().0.to_vec())
}

/// Applies one update to the local state (unchanged on error).
fn apply(
    state: &mut Option<SnapshotState>,
    update: pb::SnapshotUpdate,
) -> Result<&SnapshotState, Rejected> {
    let reject = |version, epoch, checksum: &[u8], reason: String| Rejected {
        version,
        epoch,
        checksum: checksum.to_vec(),
        reason,
    };
    match update.update {
        Some(pb::snapshot_update::Update::Full(msg)) => {
            let (v, e, c) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let snap = model::Snapshot::try_from(msg)
                .map_err(|err| reject(v, e, &c, format!("invalid: {err}")))?;
            let st = SnapshotState::from_snapshot(snap)
                .map_err(|err| reject(v, e, &c, err.to_string()))?;
            Ok(state.insert(st))
        }
        Some(pb::snapshot_update::Update::Delta(msg)) => {
            let (v, e, c) = (msg.version, msg.ownership_epoch, msg.checksum.clone());
            let delta = model::Delta::try_from(msg)
                .map_err(|err| reject(v, e, &c, format!("invalid: {err}")))?;
            let Some(st) = state.as_mut() else {
                return Err(reject(v, e, &c, "delta without a base".into()));
            };
            st.apply_delta(delta)
                .map_err(|err| reject(v, e, &c, err.to_string()))?;
            Ok(st)
        }
        None => Err(reject(0, 0, &[], "empty update".into())),
    }
}

/// Builds the snapshot on a blocking thread, then swaps it in.
async fn publish(
    handle: &SnapshotHandle,
    st: &SnapshotState,
    clients: &[ClientCredential],
) -> Result<(), String> {
    let input = SnapshotInput::new(st.to_snapshot(), clients.to_vec());
    let handle = handle.clone();
    let version = input.snapshot.header.version;
    let built = tokio::task::spawn_blocking(move || handle.install(input).map(|_| ()))
        .await
        .map_err(|_| "build task failed".to_owned())?;
    built.map_err(|err| {
        warn!(version, error = %err, "snapshot refused");
        "invalid snapshot".to_owned()
    })
}
