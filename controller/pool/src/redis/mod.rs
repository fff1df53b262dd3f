//! The Redis adapter of the activity pool (production).
//!
//! Owns every Redis detail: key names (`keys.rs`), the Lua scripts (`lua/`, composed in
//! `scripts.rs`), the stored encodings (`codec.rs`) and the connection (`conn.rs`); one
//! file per port group (`write.rs`, `extract.rs`, `owner.rs`, `worker.rs`, `read.rs`).
//! Every state change is one `EVALSHA` of a preloaded script (per chunk for batches);
//! every script reads Redis `TIME` once (or the test clock override from `ARGV`). It must never put a password, a
//! credential reference or raw Redis error text into a key, a log line or an error.

mod codec;
mod conn;
mod connector;
mod demand;
mod extract;
mod keys;
mod leader;
mod owner;
mod read;
mod scripts;
mod timings;
mod worker;
mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;

pub use connector::{Connect, RedisConn, RedisConnector};
pub use leader::LeaderGrant;
pub use timings::{SCRIPT_BUCKETS, ScriptTiming, ScriptTimings};

use crate::clock::Clock;
use crate::error::{ConflictReason, PoolError, PoolResult};
use crate::fence::Fence;
use crate::options::PoolOptions;
use conn::Conn;
use keys::{CallKeys, KeyBook};
use scripts::Script;

/// Options of the Redis adapter.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Pool semantics shared with every implementation.
    pub pool: PoolOptions,
    /// Bound on one Redis round trip (and on connecting); past it the call is `Unavailable`.
    pub command_timeout: Duration,
    /// Tests only: take "now" from this clock instead of Redis `TIME`.
    pub clock_override: Option<Arc<dyn Clock>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            pool: PoolOptions::default(),
            command_timeout: Duration::from_millis(500),
            clock_override: None,
        }
    }
}

/// The activity pool on Redis. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RedisPool {
    inner: Arc<Inner>,
    /// Set: leader-only writes carry this fencing token (see [`RedisPool::fenced`]).
    fence: Option<Fence>,
}

#[derive(Debug)]
struct Inner {
    conn: Conn,
    keys: KeyBook,
    /// What the latest unfiltered extraction was asked for (`extract.rs`).
    asked: extract::AskedKeys,
    options: RedisOptions,
    op_seed: String,
}

/// Tries of one call when scripts ask for index keys they were not given.
const KEY_ROUNDS: usize = 4;

static NEXT_OP: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Deserialize)]
struct Envelope {
    r: Option<serde_json::Value>,
    need: Option<Vec<String>>,
    /// With `need`: the caller's combination registry was stale; `need` is every
    /// registered combination and `cv` the version they make complete.
    cv: Option<String>,
}

/// What one call came back with.
enum Reply {
    Value(serde_json::Value),
    /// The script needed every combination matching the call and the key book did not
    /// know them all; the book has now learnt them: build the call again.
    StaleCombos,
}

/// One script call: its keys, payload and (for writes) the operation result key.
struct Call {
    script: Script,
    keys: CallKeys,
    payload: String,
    extra: Option<String>,
}

impl Call {
    fn new(script: Script, keys: CallKeys, payload: serde_json::Value) -> Self {
        Self {
            script,
            keys,
            payload: payload.to_string(),
            extra: None,
        }
    }
}

impl crate::ports::ActivityPool for RedisPool {}

impl RedisPool {
    /// Connects (failing with `Unavailable` when Redis cannot be reached) and preloads
    /// every script.
    pub async fn new(connector: RedisConnector, options: RedisOptions) -> PoolResult<Self> {
        let conn = Conn::new(connector, options.command_timeout);
        conn.connection(None).await?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let op_seed = format!("{}-{started}", std::process::id());
        Ok(Self {
            inner: Arc::new(Inner {
                conn,
                keys: KeyBook::default(),
                asked: extract::AskedKeys::default(),
                options,
                op_seed,
            }),
            fence: None,
        })
    }

    /// The same pool (same connection and key book) whose leader-only writes
    /// (upserts, removals, health, ownership assign / renew / drain / expire,
    /// maintenance purges) carry `fence`'s token and are refused with
    /// [`PoolError::Fenced`] unless it is the newest one Redis granted; with no token
    /// they fail at once. Every other call is unchanged (extraction, sessions, reads).
    pub fn fenced(&self, fence: Fence) -> Self {
        Self {
            inner: self.inner.clone(),
            fence: Some(fence),
        }
    }

    /// The fencing token argument of one call (`''`: unfenced).
    fn fence_arg(&self, script: Script) -> PoolResult<String> {
        match &self.fence {
            Some(f) if script.leader_write() => match f.token() {
                0 => Err(PoolError::Fenced),
                t => Ok(t.to_string()),
            },
            _ => Ok(String::new()),
        }
    }

    fn options(&self) -> &PoolOptions {
        &self.inner.options.pool
    }

    /// Latency of this adapter's script calls per operation (shared by every clone
    /// and [`RedisPool::fenced`] view: one connection, one set of histograms).
    pub fn script_timings(&self) -> Arc<ScriptTimings> {
        self.inner.conn.timings()
    }

    /// How many index key names (label combinations and `owned:` keys) this adapter
    /// knows: the registry as last read, plus what it wrote since (tests check that
    /// names the registry dropped are forgotten).
    pub fn known_index_keys(&self) -> usize {
        self.inner.keys.len()
    }

    /// A fresh internal operation key for a write that has no caller-chosen ID.
    fn fresh_op(&self, script: Script) -> String {
        let n = NEXT_OP.fetch_add(1, Ordering::Relaxed);
        keys::op_key(&[script.name(), &self.inner.op_seed, &n.to_string()])
    }

    /// Keys of a write with a fresh operation key, plus every known index key; an
    /// ownership write gets no index key (it asks for the few its records name, so its
    /// keys never grow with the number of combinations or upstreams).
    fn write_keys(&self, script: Script) -> CallKeys {
        let keys = CallKeys::new(Some(self.fresh_op(script)), None);
        if script.owner_write() {
            keys
        } else {
            keys.with_known(&self.inner.keys)
        }
    }

    /// Runs a call; retries (bounded) when the script asks for index keys it was not
    /// given. Returns the script's result value.
    /// Runs `script` with `payload` and no index or result keys (a read, or a write of
    /// fixed keys only), and decodes its reply (`what` names it when it is corrupt).
    async fn run_plain<T: serde::de::DeserializeOwned>(
        &self,
        script: Script,
        payload: serde_json::Value,
        what: &str,
    ) -> PoolResult<T> {
        let reply = self
            .run(Call::new(script, CallKeys::new(None, None), payload))
            .await?;
        codec::decode(reply, what)
    }

    async fn run(&self, call: Call) -> PoolResult<serde_json::Value> {
        match self.run_reply(call).await? {
            Reply::Value(v) => Ok(v),
            Reply::StaleCombos => Err(PoolError::Unavailable("index_keys_unsettled".into())),
        }
    }

    /// Runs a call that passes every combination matching it (built from the key book
    /// by `build`); builds it again (bounded) when the script finds the book stale.
    async fn run_combos(
        &self,
        build: impl Fn(&KeyBook) -> Call + Send + Sync,
    ) -> PoolResult<serde_json::Value> {
        for _ in 0..KEY_ROUNDS {
            match self.run_reply(build(&self.inner.keys)).await? {
                Reply::Value(v) => return Ok(v),
                Reply::StaleCombos => continue,
            }
        }
        Err(PoolError::Unavailable("index_keys_unsettled".into()))
    }

    async fn run_reply(&self, mut call: Call) -> PoolResult<Reply> {
        let pool = self.options();
        let fence = self.fence_arg(call.script)?;
        for round in 0..KEY_ROUNDS {
            let now = match &self.inner.options.clock_override {
                Some(c) => c.now().millis().to_string(),
                None => String::new(),
            };
            let mut args = vec![
                now,
                codec::ms(pool.operation_ttl).to_string(),
                pool.opportunistic_purge.to_string(),
                call.payload.clone(),
                fence.clone(),
            ];
            if let Some(extra) = &call.extra {
                args.push(extra.clone());
            }
            let reply = self
                .inner
                .conn
                .eval(call.script, call.keys.as_slice(), &args)
                .await?;
            let env: Envelope =
                serde_json::from_str(&reply).map_err(|_| codec::corrupt("reply"))?;
            if let (Some(need), Some(cv)) = (&env.need, &env.cv) {
                tracing::debug!(
                    script = call.script.name(),
                    combinations = need.len(),
                    "combination registry changed"
                );
                self.inner.keys.replace_combos(need, cv);
                return Ok(Reply::StaleCombos);
            }
            if let Some(need) = env.need {
                tracing::debug!(
                    script = call.script.name(),
                    missing = need.len(),
                    "script asked for index keys"
                );
                if call.script == Script::Extract {
                    self.inner.asked.replace(&need);
                }
                self.inner.keys.learn(&need);
                call.keys.extend(need);
                if round > 0 {
                    // Asked twice: the records it meets changed between the rounds (other
                    // callers extracted the ones it asked for), so one more key per
                    // round may never catch up. Every known index key, which the book
                    // has just learnt too, settles it unless a new combination appears.
                    call.keys.extend_known(&self.inner.keys);
                }
                continue;
            }
            let r = env.r.ok_or_else(|| codec::corrupt("reply"))?;
            if let Some(code) = r.get("err").and_then(|e| e.as_str()) {
                let e = error_code(code);
                if e == PoolError::Fenced
                    && let Some(f) = &self.fence
                {
                    tracing::warn!(
                        script = call.script.name(),
                        "leader-only write fenced: a newer leader exists"
                    );
                    f.revoke();
                }
                return Err(e);
            }
            return Ok(Reply::Value(r));
        }
        Err(PoolError::Unavailable("index_keys_unsettled".into()))
    }
}

fn error_code(code: &str) -> PoolError {
    match code {
        "not_found" => PoolError::NotFound,
        "fenced" => PoolError::Fenced,
        "scan_budget" => PoolError::ScanBudgetExhausted,
        "replay_incomplete" => PoolError::Internal("replay_incomplete".into()),
        other => match ConflictReason::parse(other) {
            Some(reason) => PoolError::Conflict(reason),
            None => PoolError::Internal("unknown_script_result".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_codes_map_to_pool_errors() {
        assert_eq!(error_code("not_found"), PoolError::NotFound);
        assert_eq!(error_code("scan_budget"), PoolError::ScanBudgetExhausted);
        assert_eq!(
            error_code("lease_expired"),
            PoolError::Conflict(ConflictReason::LeaseExpired)
        );
        assert!(matches!(
            error_code("ERR something odd"),
            PoolError::Internal(_)
        ));
    }

    #[test]
    fn default_options_are_production_values() {
        let o = RedisOptions::default();
        assert!(o.clock_override.is_none());
        assert!(o.command_timeout >= Duration::from_millis(100));
    }
}
