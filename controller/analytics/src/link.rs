//! The working set's Redis connection: either a fixed multiplexed connection (tests,
//! embedders) or one re-made through a connect function after a transport error (the
//! controller: a restarted Redis or a Sentinel failover is picked up on the next call).
//! A failed connect makes calls fail fast for 500 ms instead of piling up.
//!
//! The one implementation is the store's connector's (`activity_pool::RedisConn`),
//! re-exported here at its old path.

pub use activity_pool::{Connect, RedisConn};
