//! An in-memory [`LeaseStore`] (tests of the elector; the contract's reference). Time
//! is tokio's, so paused-time tests drive it.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{LeaseError, LeaseStore};

/// In-memory lease: one holder with an expiry, and the newest token.
#[derive(Debug, Default)]
pub struct MemoryLease {
    // A plain mutex: every critical section is a few comparisons, never held across
    // an await.
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holder: Option<(String, u64, Instant)>,
    newest: u64,
}

impl MemoryLease {
    /// A free lease.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>, LeaseError> {
        self.state.lock().map_err(|_| LeaseError("poisoned".into()))
    }
}

#[async_trait]
impl LeaseStore for MemoryLease {
    async fn acquire(&self, holder: &str, ttl: Duration) -> Result<Option<u64>, LeaseError> {
        let now = Instant::now();
        let mut s = self.state()?;
        let newest = s.newest;
        if let Some((h, t, until)) = &mut s.holder
            && *until > now
        {
            if h == holder && *t == newest {
                *until = now + ttl;
                return Ok(Some(*t));
            }
            return Ok(None);
        }
        s.newest += 1;
        let t = s.newest;
        s.holder = Some((holder.to_owned(), t, now + ttl));
        Ok(Some(t))
    }

    async fn renew(&self, holder: &str, token: u64, ttl: Duration) -> Result<bool, LeaseError> {
        let now = Instant::now();
        let mut s = self.state()?;
        let newest = s.newest;
        match &mut s.holder {
            Some((h, t, until))
                if h == holder && *t == token && token == newest && *until > now =>
            {
                *until = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, holder: &str, token: u64) -> Result<(), LeaseError> {
        let mut s = self.state()?;
        if matches!(&s.holder, Some((h, t, _)) if h == holder && *t == token) {
            s.holder = None;
        }
        Ok(())
    }
}
