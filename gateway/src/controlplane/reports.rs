//! What a session sends besides ACKs: runtime counts and per-Routing usage bound to
//! the last ACKed snapshot, and outcome observations in bounded batches.

use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use std::time::Duration;
use tonic::transport::Channel;
use tracing::debug;

use super::{AgentError, Bound, Ids, answered};
use crate::clock::{now_ms, to_model_ms, unix_ms};
use crate::outcome::{Outcome, OutcomeReceiver, Stage};
use crate::snapshot::{ProxyId, SnapshotHandle};
use crate::usage::{UsageRecorder, UsageReport};

/// Most outcomes per batch when the controller does not say.
pub(super) const DEFAULT_OUTCOME_BATCH: usize = 500;
/// How often outcomes are flushed when the batch is not full.
const OUTCOME_FLUSH: Duration = Duration::from_secs(1);
/// Once the first observation of a batch is in, how long the shipper lets more queue up
/// before sending a batch that is not full. While it waits, connection tasks queue
/// observations without waking it, so under steady traffic the shipper wakes (and sends
/// an RPC) about 1 / `OUTCOME_LINGER` times a second instead of once per few requests.
/// 20 ms at 100,000 observations/s is 2,000 queued, under the default queue of 4,096;
/// a full batch is sent without waiting.
const OUTCOME_LINGER: Duration = Duration::from_millis(20);

/// While a draining proxy is still in use, how often the reporter looks whether it
/// became idle (a report is sent only when one did).
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// Sends runtime counts (and the interval's per-client usage) every `interval`,
/// bound to the last ACKed snapshot; also right after each accepted snapshot and as
/// soon as a draining proxy becomes idle, so a drain completes within a pass of the
/// controller rather than a report interval. Usage waits in the recorder until a report can
/// be sent; a report the controller refuses with FAILED_PRECONDITION (it counted
/// nothing) has its usage resent with the next report, possibly in the next session;
/// any other failure may or may not have been counted, so its usage is dropped and
/// counted as lost rather than risk counting it twice.
pub(super) async fn report_runtime(
    channel: Channel,
    ids: Ids,
    handle: SnapshotHandle,
    bound: &Bound,
    interval: Duration,
    recorder: Option<&UsageRecorder>,
    pending: &mut UsageReport,
) -> Result<(), AgentError> {
    let mut rpc = WorkerControlPlaneClient::new(channel);
    let mut acked = bound.acked.subscribe();
    let mut sequence = 0u64;
    let mut tick = tokio::time::interval(interval);
    let mut acked_open = true;
    // Draining proxies in use at the last report.
    let mut draining: Vec<ProxyId> = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = acked.changed(), if acked_open => {
                acked_open = changed.is_ok();
            }
            () = drained(&handle, &draining), if !draining.is_empty() => {}
        }
        // Until this report is answered, no ACK moves the session's bound.
        let _bound = bound.lock.lock().await;
        let Some((version, epoch)) = *acked.borrow_and_update() else {
            continue;
        };
        draining = handle.busy_draining();
        let counts = handle
            .runtime_report()
            .into_iter()
            .filter(|c| c.active > 0 || c.reserved > 0)
            .map(|c| pb::RuntimeCount {
                proxy_id: c.id.to_string(),
                assignment_epoch: c.assignment_epoch,
                active: c.active,
                reserved: c.reserved,
                draining: c.draining,
            })
            .collect();
        let mut usage = std::mem::take(pending);
        if let Some(recorder) = recorder {
            recorder.count_dropped(usage.merge(recorder.take()));
        }
        sequence += 1;
        let sent = answered(
            ids.call_timeout,
            rpc.report_runtime(pb::ReportRuntimeRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                report_sequence: sequence,
                snapshot_version: version,
                ownership_epoch: epoch,
                counts,
                observed_at_ms: to_model_ms(now_ms()),
                usage: usage.to_wire(),
            }),
        )
        .await;
        let resp = match sent {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                if status.code() == tonic::Code::FailedPrecondition {
                    *pending = usage;
                } else if let Some(recorder) = recorder.filter(|_| !usage.is_empty()) {
                    recorder.lost(&usage);
                }
                return Err(status.into());
            }
        };
        // The controller accepted a report bound to our snapshot: it is still current.
        handle.confirm_fresh();
        // The clients' budgets: the group's gateway count and who is out of quota.
        handle.clients().apply(resp.client_budgets.as_ref());
        if !resp.revoke_proxy_ids.is_empty() {
            let ids: Vec<ProxyId> = resp
                .revoke_proxy_ids
                .iter()
                .map(|s| ProxyId::from(s.as_str()))
                .collect();
            handle.revoke(&ids);
        }
    }
}

/// Resolves once one of `draining` (busy at the last report) is no longer busy.
async fn drained(handle: &SnapshotHandle, draining: &[ProxyId]) {
    loop {
        tokio::time::sleep(DRAIN_POLL).await;
        let busy = handle.busy_draining();
        if draining.iter().any(|id| !busy.contains(id)) {
            return;
        }
    }
}

/// Ships outcome observations in batches; a failed batch is dropped (observations
/// are hints) rather than held.
pub(super) async fn ship_outcomes(
    channel: Channel,
    ids: Ids,
    outcomes: &mut OutcomeReceiver,
    batch: usize,
) -> Result<(), AgentError> {
    let mut rpc = WorkerControlPlaneClient::new(channel);
    let mut sequence = 0u64;
    let mut buf: Vec<Outcome> = Vec::with_capacity(batch);
    loop {
        let got = tokio::time::timeout(OUTCOME_FLUSH, outcomes.rx.recv_many(&mut buf, batch)).await;
        if matches!(got, Ok(0)) {
            // The gateway dropped its sink: nothing more will come.
            std::future::pending::<()>().await;
        }
        if buf.is_empty() {
            continue;
        }
        if buf.len() < batch {
            tokio::time::sleep(OUTCOME_LINGER).await;
            while buf.len() < batch {
                match outcomes.rx.try_recv() {
                    Ok(outcome) => buf.push(outcome),
                    Err(_) => break,
                }
            }
        }
        sequence += 1;
        let items = buf.drain(..).map(outcome_to_wire).collect();
        let resp = answered(
            ids.call_timeout,
            rpc.report_outcomes(pb::ReportOutcomesRequest {
                worker_id: ids.worker_id.clone(),
                session_id: ids.session_id.clone(),
                batch_sequence: sequence,
                outcomes: items,
            }),
        )
        .await?
        .into_inner();
        debug!(
            sequence,
            accepted = resp.highest_accepted_sequence,
            dropped = resp.dropped,
            "outcomes shipped"
        );
    }
}

fn outcome_to_wire(o: Outcome) -> pb::Outcome {
    let stage = match o.stage {
        Stage::Dial => pb::OutcomeStage::Dial,
        Stage::ProxyHandshake => pb::OutcomeStage::ProxyHandshake,
        Stage::ResponseHeaders => pb::OutcomeStage::ResponseHeaders,
        Stage::Tunnel => pb::OutcomeStage::Tunnel,
    };
    pb::Outcome {
        proxy_id: o.proxy.to_string(),
        routing: o.routing.as_deref().unwrap_or_default().to_owned(),
        stage: stage as i32,
        success: o.error.is_none(),
        latency_ms: u64::try_from(o.latency.as_millis()).unwrap_or(u64::MAX),
        failure_code: o.error.unwrap_or_default().to_owned(),
        observed_at_ms: to_model_ms(unix_ms(o.at)),
    }
}
