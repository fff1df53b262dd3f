//! Publishing each live worker's snapshot from its owned proxies' records.

use std::collections::HashSet;

use activity_pool::PoolResult;
use activity_pool::model::{Assignment, ProxyId, ProxyRecord, ProxyState, WorkerId};
use proxy_pool_api::controlplane::model::SnapshotProxy;

use super::{OwnershipManager, Pass, RECORD_CHUNK};

/// Change-feed entries read per call.
const FEED_PAGE: u32 = 10_000;
/// Most feed pages read per pass; past them the pass re-reads every owned record.
const MAX_FEED_PAGES: usize = 64;

impl OwnershipManager {
    /// The proxies whose records changed since the last publish (`None`: unknown, read
    /// them all) and the feed cursor past them. Read before the records, so a change
    /// made after the read is in the next pass's feed; the cursor is kept only once
    /// the records it covers were read (a failed pass reads the same changes again).
    async fn changed_records(&self) -> PoolResult<(Option<HashSet<ProxyId>>, Option<u64>)> {
        let mut cursor = *self.feed.lock();
        let mut changed = HashSet::new();
        let mut complete = cursor.is_some();
        for _ in 0..MAX_FEED_PAGES {
            let page = self.ports.catalog.changes(cursor, FEED_PAGE).await?;
            cursor = Some(page.next);
            if page.lost {
                complete = false;
            }
            changed.extend(page.ids);
            if !page.more {
                break;
            }
        }
        Ok((complete.then_some(changed), cursor))
    }

    pub(super) async fn publish(&self, pass: &mut Pass<'_>) -> PoolResult<()> {
        let (owners, live, now) = (&mut *pass.owners, pass.live, pass.now);
        let validity = activity_pool::clock::duration_millis(self.config.snapshot_validity);
        let (changed, cursor) = self.changed_records().await?;
        // The owned proxies whose records must be read again (of every worker the map
        // holds: a worker that comes back must not be published stale records).
        let mut stale: Vec<(WorkerId, ProxyId)> = Vec::new();
        for (worker, m) in owners.iter() {
            stale.extend(
                m.keys()
                    .filter(|id| changed.as_ref().is_none_or(|c| c.contains(*id)))
                    .map(|id| (worker.clone(), id.clone())),
            );
        }
        for chunk in stale.chunks(RECORD_CHUNK) {
            let ids: Vec<ProxyId> = chunk.iter().map(|(_, id)| id.clone()).collect();
            let records = self.ports.catalog.records(&ids).await?;
            for ((worker, id), rec) in chunk.iter().zip(records) {
                let Some(m) = owners.get_mut(worker) else {
                    continue;
                };
                let Some(o) = m.get_mut(id) else { continue };
                self.touch(worker);
                match rec {
                    Some(rec)
                        if rec.owner.as_ref().is_some_and(|a| {
                            a.worker_id == *worker && a.epoch == o.assignment.epoch
                        }) =>
                    {
                        o.refresh(&rec);
                    }
                    _ => {
                        m.remove(id);
                    }
                }
            }
        }
        *self.feed.lock() = cursor;
        // Every live worker on the first pass and when the routings' TARGET
        // exclusions changed; otherwise only the workers whose proxies changed, new
        // ones and those due a heartbeat version.
        let exclusions = self.exclusions.get().map_or(0, |e| e.version());
        let full = {
            let mut last = self.full_publish.lock();
            let due = *last != Some(exclusions);
            *last = Some(exclusions);
            due
        };
        let dirty = std::mem::take(&mut *self.dirty.lock());
        for (worker, info, _) in live {
            let m = owners.entry(worker.clone()).or_default();
            // Past its hard expiry a record is gone whether or not it was purged yet.
            let before = m.len();
            m.retain(|_, o| o.record.expires_at > now);
            if !(full
                || m.len() != before
                || dirty.contains(worker)
                || self.publisher.due(worker, now.millis(), validity / 2))
            {
                continue;
            }
            let mut proxies = Vec::with_capacity(m.len());
            for o in m.values() {
                let rec = &o.record;
                if matches!(rec.state, ProxyState::Available | ProxyState::Draining) {
                    let excluded = self
                        .exclusions
                        .get()
                        .map(|e| e.excluded(&rec.id))
                        .unwrap_or_default();
                    proxies.push(snapshot_proxy(rec, &o.assignment, excluded));
                }
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
