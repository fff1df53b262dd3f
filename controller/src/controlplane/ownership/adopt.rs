//! Adoption: a (re)started manager takes over the live leases it finds in the pool
//! before it assigns or publishes anything, so a worker that re-registers gets the
//! same proxies (same epochs) back and keeps using them, instead of a lease that
//! nobody renews while the worker still holds the proxy.

use std::collections::HashMap;

use activity_pool::PoolResult;
use activity_pool::model::{Assignment, ProxyId};

use super::{Owned, Owners, OwnershipManager, RECORD_CHUNK};

/// Leases asked for per page.
const PAGE: u32 = 1_000;
/// Most pages walked; a pool with more live leases than this fails the pass (nothing
/// is assigned until adoption completes).
const MAX_PAGES: usize = 10_000;

impl OwnershipManager {
    /// Walks every live lease of the pool into `owners`; returns how many were adopted.
    pub(super) async fn adopt(&self, owners: &mut Owners) -> PoolResult<usize> {
        let mut found: HashMap<ProxyId, Assignment> = HashMap::new();
        let mut cursor: Option<String> = None;
        let mut complete = false;
        for _ in 0..MAX_PAGES {
            let page = self.ports.ownership.leases(cursor.as_deref(), PAGE).await?;
            for a in page.leases {
                found.insert(a.proxy_id.clone(), a);
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => {
                    complete = true;
                    break;
                }
            }
        }
        if !complete {
            return Err(activity_pool::PoolError::Unavailable(
                "too_many_leases_to_adopt".into(),
            ));
        }
        let leases: Vec<Assignment> = found.into_values().collect();
        let mut adopted = 0;
        for chunk in leases.chunks(RECORD_CHUNK) {
            let ids: Vec<ProxyId> = chunk.iter().map(|a| a.proxy_id.clone()).collect();
            let records = self.ports.catalog.records(&ids).await?;
            for (a, rec) in chunk.iter().zip(records) {
                // Only what is still exactly this assignment (it may have changed
                // between the two reads).
                let Some(rec) = rec.filter(|r| r.owner.as_ref() == Some(a)) else {
                    continue;
                };
                let m = owners.entry(a.worker_id.clone()).or_default();
                if !m.contains_key(&a.proxy_id) {
                    m.insert(a.proxy_id.clone(), Owned::new(&rec, a.clone()));
                    adopted += 1;
                }
            }
        }
        if adopted > 0 {
            tracing::info!(leases = adopted, "adopted the live leases of the pool");
        }
        Ok(adopted)
    }
}
