//! An in-memory [`TokenReviewer`] for tests and local runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::review::{Review, ReviewUnavailable, ReviewedToken, TokenReviewer};

/// Fixed answers per (token, audience), a switch that makes it unavailable, and a call
/// counter.
#[derive(Debug, Default)]
pub struct MemoryReviewer {
    answers: Mutex<HashMap<(String, String), ReviewedToken>>,
    unavailable: Mutex<bool>,
    calls: AtomicUsize,
}

impl MemoryReviewer {
    /// Authenticates `token` for `audience` as `reviewed`.
    pub fn allow(&self, token: &str, audience: &str, reviewed: ReviewedToken) {
        self.answers
            .lock()
            .insert((token.to_owned(), audience.to_owned()), reviewed);
    }

    /// Makes every review fail as unavailable (or work again).
    pub fn set_unavailable(&self, unavailable: bool) {
        *self.unavailable.lock() = unavailable;
    }

    /// Number of reviews asked for.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl TokenReviewer for MemoryReviewer {
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if *self.unavailable.lock() {
            return Err(ReviewUnavailable("memory reviewer switched off".into()));
        }
        Ok(self
            .answers
            .lock()
            .get(&(token.to_owned(), audience.to_owned()))
            .cloned()
            .map_or(Review::Rejected, Review::Authenticated))
    }
}
