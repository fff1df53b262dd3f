//! The activity pool: the short-lived state of every proxy Proxy Pool manages.
//!
//! One deep module behind narrow ports ([`ports`]): provider upsert, health, exclusive
//! extraction, worker ownership, worker sessions and runtime, inventory, maintenance.
//! Two implementations hold the same semantics, proven by one contract suite:
//! [`MemoryPool`] (the reference, and the embedded default) and [`RedisPool`]
//! (production; every Redis detail is private to it).
//!
//! The pool never logs, stores in a key, or returns in an error a proxy password or a
//! credential reference.

pub mod clock;
mod combo;
pub mod error;
pub mod fence;
mod memory;
pub mod model;
pub mod options;
pub mod ports;
mod redis;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod validate;

pub use crate::redis::{
    Connect, LeaderGrant, RedisConn, RedisConnector, RedisOptions, RedisPool, SCRIPT_BUCKETS,
    ScriptTiming, ScriptTimings,
};
pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use error::{ConflictReason, PoolError, PoolResult};
pub use fence::Fence;
pub use memory::MemoryPool;
pub use options::PoolOptions;
pub use validate::{key_digest, unique_key};
