//! Outcome observations: one per upstream attempt stage (DIAL, PROXY_HANDSHAKE,
//! RESPONSE_HEADERS, TUNNEL), pushed into a bounded queue that drops and counts
//! rather than back-pressuring traffic. The control-plane client drains it into
//! `ReportOutcomes` batches; observations are hints, never decisions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

use crate::proxy_id::ProxyId;

/// The stage an observation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// TCP connect to the vendor proxy.
    Dial,
    /// CONNECT / SOCKS5 handshake with the vendor proxy.
    ProxyHandshake,
    /// Response headers of a forwarded request.
    ResponseHeaders,
    /// A tunnel's whole life.
    Tunnel,
}

impl Stage {
    /// Label text.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Dial => "dial",
            Self::ProxyHandshake => "proxy_handshake",
            Self::ResponseHeaders => "response_headers",
            Self::Tunnel => "tunnel",
        }
    }
}

/// One observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The proxy.
    pub proxy: ProxyId,
    /// The routing the request matched.
    pub routing: Option<Arc<str>>,
    /// Stage.
    pub stage: Stage,
    /// `None` on success, else a bounded reason (see `GatewayError::reason`).
    pub error: Option<&'static str>,
    /// Time the stage took.
    pub latency: Duration,
    /// When it ended.
    pub at: SystemTime,
}

/// The sending side, cloned into every connection task.
#[derive(Debug, Clone)]
pub struct OutcomeSink {
    tx: mpsc::Sender<Outcome>,
    dropped: Arc<AtomicU64>,
    recorded: Arc<AtomicU64>,
}

/// The receiving side.
#[derive(Debug)]
pub struct OutcomeReceiver {
    /// Observations in order.
    pub rx: mpsc::Receiver<Outcome>,
}

/// A queue of `capacity` observations.
pub fn queue(capacity: usize) -> (OutcomeSink, OutcomeReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (
        OutcomeSink {
            tx,
            dropped: Arc::default(),
            recorded: Arc::default(),
        },
        OutcomeReceiver { rx },
    )
}

impl OutcomeSink {
    /// Queues an observation, or drops and counts it when the queue is full or closed.
    pub fn record(
        &self,
        proxy: &ProxyId,
        routing: Option<&Arc<str>>,
        stage: Stage,
        error: Option<&'static str>,
        latency: Duration,
    ) {
        let outcome = Outcome {
            proxy: proxy.clone(),
            routing: routing.cloned(),
            stage,
            error,
            latency,
            at: SystemTime::now(),
        };
        if self.tx.try_send(outcome).is_ok() {
            self.recorded.fetch_add(1, Ordering::Relaxed);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Observations dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Observations queued so far.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_drops_and_counts() {
        let (sink, mut rx) = queue(2);
        let id = ProxyId::from("p");
        for _ in 0..5 {
            sink.record(&id, None, Stage::Dial, None, Duration::ZERO);
        }
        assert_eq!((sink.recorded(), sink.dropped()), (2, 3));
        assert_eq!(rx.rx.try_recv().unwrap().stage, Stage::Dial);
    }
}
