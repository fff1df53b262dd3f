//! Test doubles of the TokenReview verifier, shared by its unit tests and the flood
//! test (`controller/tests/token_flood.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;

use super::{Review, ReviewUnavailable, TokenReviewer};

/// Rejects every token; while `hold` is set, holds each review until `release` is
/// notified (an API server that answers slowly). Counts reviews.
#[derive(Debug, Default)]
pub struct HeldReviewer {
    /// Reviews started.
    pub calls: AtomicUsize,
    /// Reviews running now (a review given up by its caller no longer counts).
    pub active: Arc<AtomicUsize>,
    /// Wakes the held reviews.
    pub release: tokio::sync::Notify,
    /// Whether reviews are held.
    pub hold: AtomicBool,
}

impl HeldReviewer {
    /// A reviewer that holds every review until released.
    pub fn holding() -> Self {
        let reviewer = Self::default();
        reviewer.hold.store(true, Ordering::SeqCst);
        reviewer
    }
}

/// Counts a review as running until dropped.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl TokenReviewer for HeldReviewer {
    async fn review(&self, _token: &str, _audience: &str) -> Result<Review, ReviewUnavailable> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.active.fetch_add(1, Ordering::SeqCst);
        let _running = Running(self.active.clone());
        if self.hold.load(Ordering::SeqCst) {
            self.release.notified().await;
        }
        Ok(Review::Rejected)
    }
}

/// A JWT-shaped token for `audience` that passes the cheap checks, a fresh one for
/// each `i`.
pub fn jwt(audience: &str, i: usize) -> String {
    let b = |s: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    format!(
        "{}.{}.c2ln",
        b(r#"{"alg":"RS256"}"#.into()),
        b(format!(
            r#"{{"aud":["{audience}"],"exp":4102444800,"jti":"{i}"}}"#
        ))
    )
}

/// The next `n` answers of `flood`, each due within `within` of the previous one
/// (answered without waiting for a held review); panics on a late or failed task.
pub async fn answered_at_once<T: 'static>(
    flood: &mut tokio::task::JoinSet<T>,
    n: usize,
    within: Duration,
) -> Vec<T> {
    let mut answers = Vec::with_capacity(n);
    for _ in 0..n {
        let answer = tokio::time::timeout(within, flood.join_next())
            .await
            .expect("answered without waiting for a review")
            .expect("task")
            .expect("joined");
        answers.push(answer);
    }
    answers
}
