//! The pool's maintenance loop: purges expired records in bounded batches.

use std::sync::Arc;
use std::time::Duration;

use crate::shutdown::{Phase, Shutdown};

/// Purges expired records in bounded batches every `interval` until draining.
pub async fn maintenance(
    pool: Arc<dyn activity_pool::ports::Maintenance>,
    interval: Duration,
    batch: u32,
    shutdown: Shutdown,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.reached(Phase::Draining) => return,
            _ = ticker.tick() => {}
        }
        for _ in 0..16 {
            match pool.purge_expired(batch).await {
                Ok(r) if r.more => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "maintenance pass failed");
                    break;
                }
            }
        }
    }
}
