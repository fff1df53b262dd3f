//! `MemoryPool`: the reference semantics of every pool port, and the embedded default
//! store for local runs. `docs/pool.md` is its specification.
//!
//! One `parking_lot::Mutex` guards all state: every operation is one short critical
//! section with no `.await` inside, which is exactly the atomicity a Redis script gives,
//! and keeps the reference obviously correct. It is not built for the gateway's hot path
//! (the gateway never touches the pool).

mod extract;
mod ownership;
mod runtime;
mod state;
mod upsert;

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::options::PoolOptions;
use state::State;

/// The in-memory activity pool.
#[derive(Debug, Clone)]
pub struct MemoryPool {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    options: PoolOptions,
}

impl MemoryPool {
    /// A pool on the wall clock.
    pub fn new(options: PoolOptions) -> Self {
        Self::with_clock(options, Arc::new(SystemClock))
    }

    /// A pool on the given clock (tests drive time with a `ManualClock`).
    pub fn with_clock(options: PoolOptions, clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            clock,
            options,
        }
    }

    /// What `f` reads from the state at the pool's now (one atomic step).
    fn read<T>(&self, f: impl FnOnce(&State, Timestamp) -> T) -> T {
        let (st, now) = self.locked();
        f(&st, now)
    }

    /// The state, locked for one atomic step, and the pool's now.
    fn locked(&self) -> (MutexGuard<'_, State>, Timestamp) {
        let now = self.clock.now();
        (self.state.lock(), now)
    }
}

impl crate::ports::ActivityPool for MemoryPool {}
