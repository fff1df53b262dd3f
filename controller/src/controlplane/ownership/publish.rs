//! Publishing each live worker's snapshot from its owned proxies' records.

use std::collections::HashSet;

use activity_pool::PoolResult;
use activity_pool::model::{Assignment, ProxyId, ProxyRecord, ProxyState};
use proxy_pool_api::controlplane::model::SnapshotProxy;

use super::{OwnershipManager, Pass, RECORD_CHUNK};

impl OwnershipManager {
    pub(super) async fn publish(&self, pass: &mut Pass<'_>) -> PoolResult<()> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
        let validity = activity_pool::clock::duration_millis(self.config.snapshot_validity);
        for (worker, info, _) in live {
            let m = owners.entry(worker.clone()).or_default();
            let ids: Vec<ProxyId> = m.keys().cloned().collect();
            let mut proxies = Vec::with_capacity(ids.len());
            let mut gone = HashSet::new();
            for chunk in ids.chunks(RECORD_CHUNK) {
                let records = self.ports.catalog.records(chunk).await?;
                for (id, rec) in chunk.iter().zip(records) {
                    let Some(o) = m.get_mut(id) else { continue };
                    match rec {
                        Some(rec)
                            if rec.owner.as_ref().is_some_and(|a| {
                                a.worker_id == *worker && a.epoch == o.assignment.epoch
                            }) && rec.expires_at > now =>
                        {
                            o.refresh(&rec);
                            if matches!(rec.state, ProxyState::Available | ProxyState::Draining) {
                                let excluded = self
                                    .exclusions
                                    .get()
                                    .map(|e| e.excluded(&rec.id))
                                    .unwrap_or_default();
                                proxies.push(snapshot_proxy(&rec, &o.assignment, excluded));
                            }
                        }
                        _ => {
                            gone.insert(id.clone());
                        }
                    }
                }
            }
            for id in &gone {
                m.remove(id);
            }
            let version = self.publisher.publish(
                worker,
                self.routings_for(&info.group),
                proxies,
                now.millis(),
                validity,
                validity / 2,
            );
            for o in m.values_mut() {
                if o.assignment.draining && o.drain_version.is_none() {
                    o.drain_version = Some(version);
                }
            }
        }
        Ok(())
    }
}

/// A pool record as a worker's snapshot entry: its lease end (the worker stops using
/// the proxy there) and the routings it must not serve.
pub fn snapshot_proxy(
    rec: &ProxyRecord,
    a: &Assignment,
    excluded_routings: Vec<String>,
) -> SnapshotProxy {
    SnapshotProxy {
        id: rec.id.to_string(),
        upstream: rec.upstream.to_string(),
        dial: rec.dial.clone(),
        labels: rec.labels.map(ToString::to_string),
        max_concurrency: rec.max_concurrency,
        expires_at_ms: rec.expires_at.millis(),
        usable_until_ms: rec.usable_until.millis(),
        assignment_epoch: a.epoch,
        draining: a.draining,
        lease_expires_at_ms: a.lease_expires_at.millis(),
        excluded_routings,
    }
}
