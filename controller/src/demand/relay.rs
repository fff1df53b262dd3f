//! Extraction demand on a replica that does not lead. Every replica serves the
//! Distribution API, but only the leader drains gateway-owned proxies: a follower's
//! unmet demand goes through Redis (`activity_pool::RedisPool::push_demand`, a bounded
//! list with a short life) and the leader takes it into its ownership manager every
//! [`TAKE_EVERY`]. The follower's waiting request retries on its own clock (every
//! 250 ms, `drainWait` in all), so no answer has to travel back.

use std::sync::Arc;
use std::time::Duration;

use activity_pool::RedisPool;
use activity_pool::model::{Filters, Label, Protocol, UpstreamId};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::{Demand, DrainDemand};
use crate::leadership::Leadership;

/// Demands a follower holds for relaying at most (more are dropped and counted as
/// not queued, like the leader's own queue).
const RELAY_QUEUE: usize = 256;
/// The relayed list keeps this many at most.
const RELAY_MAX: u32 = 1_024;
/// A relayed list nobody takes dies this long after the last push.
const RELAY_TTL: Duration = Duration::from_secs(15);
/// How often the leader takes relayed demand.
pub const TAKE_EVERY: Duration = Duration::from_millis(100);
/// Most demands taken per round.
const TAKE_BATCH: u32 = 64;

/// A demand on the list: the domain types' own serde (which validates on the way in).
#[derive(Serialize, Deserialize)]
struct Wire {
    #[serde(default)]
    p: Vec<Protocol>,
    #[serde(default)]
    r: Vec<Label>,
    #[serde(default)]
    c: Vec<Label>,
    /// Cities; left out when empty, so a relay without them reads as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ci: Vec<Label>,
    #[serde(default)]
    u: Vec<UpstreamId>,
    n: u32,
    ttl_ms: u64,
}

fn encode(d: &Demand) -> Option<String> {
    let f = d.filters.clone();
    serde_json::to_string(&Wire {
        p: f.protocols,
        r: f.regions,
        c: f.carriers,
        ci: f.cities,
        u: f.upstreams,
        n: d.count,
        ttl_ms: u64::try_from(d.min_remaining_ttl.as_millis()).unwrap_or(u64::MAX),
    })
    .ok()
}

/// A relayed demand back into a [`Demand`]; `None` for anything malformed.
fn decode(text: &str) -> Option<Demand> {
    let w: Wire = serde_json::from_str(text).ok()?;
    Some(Demand {
        filters: Filters {
            protocols: w.p,
            regions: w.r,
            carriers: w.c,
            cities: w.ci,
            upstreams: w.u,
        },
        count: w.n,
        min_remaining_ttl: Duration::from_millis(w.ttl_ms),
    })
}

/// The Distribution API's [`DrainDemand`] on a replicated controller: the local
/// ownership manager while this replica leads, the relay otherwise.
#[derive(Debug)]
pub struct RoutedDemand {
    leadership: Leadership,
    local: Arc<dyn DrainDemand>,
    relay: mpsc::Sender<Demand>,
}

impl RoutedDemand {
    /// Routes between `local` and a relay through `pool`; the relay task runs until
    /// `stop`.
    pub fn new(
        leadership: Leadership,
        local: Arc<dyn DrainDemand>,
        pool: RedisPool,
        stop: CancellationToken,
    ) -> Self {
        let (relay, rx) = mpsc::channel(RELAY_QUEUE);
        tokio::spawn(push(rx, pool, stop));
        Self {
            leadership,
            local,
            relay,
        }
    }
}

impl DrainDemand for RoutedDemand {
    fn request(&self, demand: Demand) -> bool {
        if self.leadership.is_leader() {
            self.local.request(demand)
        } else {
            self.relay.try_send(demand).is_ok()
        }
    }

    fn released(&self) -> watch::Receiver<u64> {
        self.local.released()
    }
}

async fn push(mut rx: mpsc::Receiver<Demand>, pool: RedisPool, stop: CancellationToken) {
    loop {
        let d = tokio::select! {
            () = stop.cancelled() => return,
            d = rx.recv() => match d { Some(d) => d, None => return },
        };
        let Some(text) = encode(&d) else { continue };
        if let Err(e) = pool.push_demand(&text, RELAY_MAX, RELAY_TTL).await {
            tracing::debug!(error = %e, "extraction demand not relayed to the leader");
        }
    }
}

/// The leader's side: takes relayed demand into `local` every [`TAKE_EVERY`] until
/// `stop` (a fenced take ends it: this replica no longer leads).
pub async fn take(pool: RedisPool, local: Arc<dyn DrainDemand>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(TAKE_EVERY) => {}
        }
        match pool.take_demands(TAKE_BATCH).await {
            Ok(list) => {
                for d in list.iter().filter_map(|t| decode(t)) {
                    local.request(d);
                }
            }
            Err(activity_pool::PoolError::Fenced) => return,
            Err(e) => tracing::debug!(error = %e, "relayed extraction demand not taken"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demand_survives_the_relay_encoding() {
        let d = Demand {
            filters: Filters {
                protocols: vec![Protocol::Http],
                regions: vec![Label::new("eu").unwrap()],
                carriers: vec![],
                cities: vec![],
                upstreams: vec![UpstreamId::new("sim-http").unwrap()],
            },
            count: 3,
            min_remaining_ttl: Duration::from_secs(10),
        };
        // The list's format (replicas of two versions share it during a rollout).
        assert_eq!(
            encode(&d).unwrap(),
            r#"{"p":["http"],"r":["eu"],"c":[],"u":["sim-http"],"n":3,"ttl_ms":10000}"#
        );
        assert_eq!(decode(&encode(&d).unwrap()), Some(d.clone()));
        let mut city = d;
        city.filters.cities = vec![Label::new("paris").unwrap()];
        assert_eq!(
            encode(&city).unwrap(),
            r#"{"p":["http"],"r":["eu"],"c":[],"ci":["paris"],"u":["sim-http"],"n":3,"ttl_ms":10000}"#
        );
        assert_eq!(decode(&encode(&city).unwrap()), Some(city));
        assert_eq!(decode("{\"n\":1,\"ttl_ms\":0,\"u\":[\"bad name!\"]}"), None);
        assert_eq!(decode("not json"), None);
    }
}
