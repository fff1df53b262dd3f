//! The shutdown protocol shared by every listener: signal → not ready (new requests
//! get 503) → stop accepting → in-flight requests finish → forced exit at the grace
//! deadline.
//!
//! Owns the phase only; it never exits the process (main does).

use std::time::Duration;

use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio::time::Instant;

/// Where the controller is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Serving.
    Running,
    /// Not ready: new requests are refused with 503, in-flight ones finish.
    Draining,
    /// Listeners stop accepting and close connections once their requests finish.
    Stopping,
}

/// A cheap, cloneable view of (and handle on) the shutdown phase.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: watch::Sender<Phase>,
    deadline: Arc<OnceLock<Instant>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A controller that is running.
    pub fn new() -> Self {
        Self {
            tx: watch::Sender::new(Phase::Running),
            deadline: Arc::new(OnceLock::new()),
        }
    }

    /// When everything must have stopped (set when draining begins).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.get().copied()
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.tx.borrow()
    }

    /// Whether new work is still accepted.
    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    /// Moves forward to `phase` (never backwards).
    pub fn advance(&self, phase: Phase) {
        self.tx.send_if_modified(|p| {
            if phase > *p {
                *p = phase;
                true
            } else {
                false
            }
        });
    }

    /// Resolves once the phase is at least `phase`.
    pub async fn reached(&self, phase: Phase) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we wait.
        let _ = rx.wait_for(|p| *p >= phase).await;
    }
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT): the one handler, `proxy_pool_runtime`.
pub use proxy_pool_runtime::shutdown_signal as signal;

/// The instant by which the listeners and loops must have stopped so that `reserved`
/// (the final analytics flush, which runs last) still fits before `deadline`.
///
/// Ordering at shutdown: draining → listeners stop accepting → in-flight requests
/// finish (until `reserve(deadline, reserved)`) → background loops stop → analytics
/// stops collecting, applies its queue and makes its final flush (until `deadline`).
pub fn reserve(deadline: Instant, reserved: Duration) -> Instant {
    let now = Instant::now();
    deadline
        .checked_sub(reserved)
        .filter(|t| *t > now)
        .unwrap_or(now.min(deadline))
}

/// Drives the phases after `trigger` resolves: Draining for `drain_delay`, then
/// Stopping. Returns the instant by which everything must have stopped.
pub async fn drive(
    shutdown: Shutdown,
    trigger: impl std::future::Future<Output = ()>,
    drain_delay: Duration,
    grace: Duration,
) -> Instant {
    trigger.await;
    let deadline = *shutdown.deadline.get_or_init(|| Instant::now() + grace);
    tracing::info!(
        drain_delay_ms = drain_delay.as_millis() as u64,
        grace_ms = grace.as_millis() as u64,
        "shutdown: draining"
    );
    shutdown.advance(Phase::Draining);
    tokio::time::sleep(drain_delay).await;
    tracing::info!("shutdown: listeners stop accepting");
    shutdown.advance(Phase::Stopping);
    deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reserve_keeps_the_tail_of_the_grace_period() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        assert_eq!(reserve(deadline, Duration::ZERO), deadline);
        assert_eq!(
            reserve(deadline, Duration::from_secs(3)),
            now + Duration::from_secs(7)
        );
        // More than is left: the listeners get no extra time, never past the deadline.
        assert_eq!(reserve(deadline, Duration::from_secs(30)), now);
        let past = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        assert!(reserve(past, Duration::from_secs(1)) <= past);
    }

    #[tokio::test(start_paused = true)]
    async fn phases_advance_in_order_and_never_back() {
        let s = Shutdown::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(drive(
            s.clone(),
            async move {
                let _ = rx.await;
            },
            Duration::from_secs(2),
            Duration::from_secs(10),
        ));
        assert!(s.is_running());
        tx.send(()).ok();
        s.reached(Phase::Draining).await;
        assert_eq!(s.phase(), Phase::Draining);
        s.reached(Phase::Stopping).await;
        let _ = task.await;
        s.advance(Phase::Running);
        assert_eq!(s.phase(), Phase::Stopping);
    }
}
