//! The Redis leader lease of the controller replicas and its fencing token (keys
//! `leader-lease` and `leader-fence` under the pool's hash tag, scripts
//! `lua/leader_*.lua`, the token rule once in `lua/leader.lua`; `leader_token` alone
//! when a Kubernetes Lease elects the leader). The controller's leadership port drives it; the pool's
//! leader-only scripts check the same fence key ([`RedisPool::fenced`]).

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::RedisPool;
use super::codec;
use super::scripts::Script;
use crate::error::{PoolError, PoolResult};

/// The answer to a lease request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderGrant {
    /// This holder leads under this fencing token.
    Granted(u64),
    /// Another holder has a live lease.
    Held,
}

#[derive(Deserialize)]
struct AcquireReply {
    t: Option<String>,
    held: Option<bool>,
}

#[derive(Deserialize)]
struct OkReply {
    ok: bool,
}

/// Holder names: 1..=128 of `[A-Za-z0-9._-]` (they go into a stored value beside `|`).
fn check_holder(holder: &str) -> PoolResult<()> {
    let ok = !holder.is_empty()
        && holder.len() <= 128
        && holder
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(PoolError::invalid(
            "holder",
            "1..=128 characters of [A-Za-z0-9._-]",
        ))
    }
}

fn ttl_ms(ttl: Duration) -> PoolResult<u64> {
    match u64::try_from(ttl.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(PoolError::invalid("ttl", "must be positive")),
    }
}

impl RedisPool {
    /// Takes the leader lease for `ttl` when it is free (a new, greater fencing token),
    /// or extends it when `holder` already has it (the same token).
    pub async fn leader_acquire(&self, holder: &str, ttl: Duration) -> PoolResult<LeaderGrant> {
        check_holder(holder)?;
        let payload = json!({ "h": holder, "ttl": ttl_ms(ttl)? });
        let r: AcquireReply = self
            .run_plain(Script::LeaderAcquire, payload, "leader_acquire")
            .await?;
        match (r.t, r.held) {
            (Some(t), _) => t
                .parse()
                .map(LeaderGrant::Granted)
                .map_err(|_| codec::corrupt("leader_acquire")),
            (None, Some(true)) => Ok(LeaderGrant::Held),
            _ => Err(codec::corrupt("leader_acquire")),
        }
    }

    /// Extends `holder`'s lease under `token` by `ttl`; `false` when it no longer
    /// leads (the lease ran out and someone else took it, or a newer token exists).
    pub async fn leader_renew(&self, holder: &str, token: u64, ttl: Duration) -> PoolResult<bool> {
        check_holder(holder)?;
        let payload = json!({ "h": holder, "t": token.to_string(), "ttl": ttl_ms(ttl)? });
        let r: OkReply = self
            .run_plain(Script::LeaderRenew, payload, "leader_renew")
            .await?;
        Ok(r.ok)
    }

    /// A new fencing token for a leader another lease store (a Kubernetes Lease) has
    /// just elected: greater than every earlier token, by the rule of
    /// [`RedisPool::leader_acquire`]. From here on every leader-only write carrying an
    /// older token is refused. It does not touch the Redis lease.
    pub async fn leader_token(&self) -> PoolResult<u64> {
        let r: AcquireReply = self
            .run_plain(Script::LeaderToken, json!({}), "leader_token")
            .await?;
        r.t.and_then(|t| t.parse().ok())
            .ok_or_else(|| codec::corrupt("leader_token"))
    }

    /// Gives the lease up when `holder` still has it under `token`.
    pub async fn leader_release(&self, holder: &str, token: u64) -> PoolResult<bool> {
        check_holder(holder)?;
        let payload = json!({ "h": holder, "t": token.to_string() });
        let r: OkReply = self
            .run_plain(Script::LeaderRelease, payload, "leader_release")
            .await?;
        Ok(r.ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_checked() {
        assert!(check_holder("controller-0.abc_1").is_ok());
        assert!(check_holder("").is_err());
        assert!(check_holder("a|b").is_err());
        assert!(check_holder(&"a".repeat(129)).is_err());
        assert!(ttl_ms(Duration::ZERO).is_err());
    }
}
