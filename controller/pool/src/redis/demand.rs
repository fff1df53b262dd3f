//! Extraction demand relayed from replicas that do not lead to the leader (key
//! `demands` under the pool's hash tag): a bounded list with a short life. The
//! payload is opaque here (the controller's encoding of its demand).

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::codec::lua_vec;
use super::keys::CallKeys;
use super::scripts::Script;
use super::{Call, RedisPool};
use crate::error::{PoolError, PoolResult};

/// Longest relayed demand, bytes.
pub const MAX_DEMAND_BYTES: usize = 16 * 1024;

#[derive(Deserialize)]
struct Taken {
    #[serde(deserialize_with = "lua_vec")]
    d: Vec<String>,
}

impl RedisPool {
    /// Appends a demand for the leader; the list keeps the newest `max` and lives
    /// `ttl` after the last push. Not fenced: any replica relays.
    pub async fn push_demand(&self, demand: &str, max: u32, ttl: Duration) -> PoolResult<()> {
        if demand.is_empty() || demand.len() > MAX_DEMAND_BYTES {
            return Err(PoolError::invalid(
                "demand",
                format!("1..={MAX_DEMAND_BYTES} bytes"),
            ));
        }
        let ttl = u64::try_from(ttl.as_millis())
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| PoolError::invalid("ttl", "must be positive"))?;
        let payload = json!({ "d": demand, "max": max.max(1), "ttl": ttl });
        self.run(Call::new(
            Script::DemandPush,
            CallKeys::new(None, None),
            payload,
        ))
        .await?;
        Ok(())
    }

    /// Takes up to `n` relayed demands, oldest first (a leader-only write: fenced).
    pub async fn take_demands(&self, n: u32) -> PoolResult<Vec<String>> {
        let payload = json!({ "n": n.clamp(1, 1_024) });
        let t: Taken = self
            .run_plain(Script::DemandTake, payload, "demand_take")
            .await?;
        Ok(t.d)
    }
}
