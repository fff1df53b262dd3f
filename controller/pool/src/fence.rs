//! The fencing token a leader's writes carry.
//!
//! A controller replica that wins leadership is granted a token by the store (newer
//! leaders always get greater tokens); it sets it here, and every leader-only write of
//! an adapter built with [`crate::RedisPool::fenced`] carries it. The store refuses such
//! a write atomically, inside its script, when its token is not the newest one
//! ([`crate::PoolError::Fenced`]); the adapter then clears the token, so every later
//! leader-only write fails at once without reaching the store, and wakes
//! [`Fence::lost`] so the leader steps down.
//!
//! No token (0) means "not the leader": fenced writes fail closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

/// A shared, cheap-to-clone fencing token cell.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    token: AtomicU64,
    lost: Notify,
}

impl Fence {
    /// A fence holding no token (not the leader).
    pub fn new() -> Self {
        Self::default()
    }

    /// The current token; 0 when not leading.
    pub fn token(&self) -> u64 {
        self.inner.token.load(Ordering::Acquire)
    }

    /// Leadership was granted under `token`.
    pub fn grant(&self, token: u64) {
        self.inner.token.store(token, Ordering::Release);
    }

    /// Leadership ended (lease lost, or a write was fenced): clears the token and wakes
    /// [`Fence::lost`] waiters. Idempotent.
    pub fn revoke(&self) {
        if self.inner.token.swap(0, Ordering::AcqRel) != 0 {
            self.inner.lost.notify_waiters();
        }
    }

    /// Waits until the token is revoked (at once when there is none).
    pub async fn lost(&self) {
        loop {
            let notified = self.inner.lost.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.token() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn revoke_wakes_the_waiter_and_clears_the_token() {
        let f = Fence::new();
        f.grant(7);
        assert_eq!(f.token(), 7);
        let w = tokio::spawn({
            let f = f.clone();
            async move { f.lost().await }
        });
        tokio::task::yield_now().await;
        assert!(!w.is_finished());
        f.revoke();
        w.await.unwrap();
        assert_eq!(f.token(), 0);
        // No token: `lost` returns at once.
        f.lost().await;
    }
}
