//! A [`BearerVerifier`] backed by Kubernetes `TokenReview`: a bearer token names a
//! Kubernetes user (e.g. `system:serviceaccount:<ns>:<name>`), and a configured mapping
//! says which DistributionClient that user is.
//!
//! The review itself — the port, the Kubernetes adapter and the one reading of the API
//! server's answer (a status-less answer is unavailable: 503, never cached) — and the
//! cache rule are `proxy_pool_token_review`, shared with the operator.
//!
//! Only the review — *who the token names* — goes through the read-through cache
//! (`proxy-pool-cache`, namespace `token_review`): keyed by a digest of audience and
//! token (the token never reaches Redis), kept at most 120 s and never past the token's
//! own `exp` (`proxy_pool_token_review::cache_ttl`). A rejected token never reaches Redis and a failed
//! review is never cached. The mapping to a client, and every permission check after
//! it, happen on every request: no authorisation decision is cached.
//!
//! Garbage tokens cannot buy one review each ([`ReviewGuard`]): a token that could never
//! pass (not a JWT, expired by its own `exp`, for another audience: `token::precheck`)
//! is refused without a review; a rejected token is remembered in a bounded in-process
//! negative cache keyed by a digest; and at most [`MAX_CONCURRENT_REVIEWS`] reviews run
//! at once — past that the caller gets 503 at once instead of queueing (other
//! credentials, API keys included, are never slowed by a flood of bad tokens).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use async_trait::async_trait;
use proxy_pool_cache::{Answer, Cache, CacheError, CacheStore, Loader, Namespace, TokenKey};
use serde::{Deserialize, Serialize};

use super::auth::{AuthError, BearerVerifier, StaticBearerVerifier, Verified};

pub use proxy_pool_token_review::{
    KubeTokenReviewer, Review, ReviewUnavailable, ReviewedToken, TokenReviewer, jwt_expiry,
};
use proxy_pool_token_review::{MAX_CACHE_TTL, cache_ttl, digest};

/// The cached fact: who a token names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewedUser {
    /// The authenticated user.
    pub username: String,
}

/// Reviews running at once at most; more are refused (503) rather than queued.
pub const MAX_CONCURRENT_REVIEWS: usize = 8;
/// Rejected-token digests remembered at most.
pub const NEGATIVE_CAPACITY: usize = 8_192;
/// How long a rejected token is answered from the negative cache.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(30);

/// What keeps bad tokens from turning into API-server load: the negative cache and
/// the review slots.
#[derive(Debug)]
pub struct ReviewGuard {
    permits: Arc<Semaphore>,
    // One short critical section per lookup or insert, never held across an await.
    negative: Mutex<Negative>,
    capacity: usize,
    ttl: Duration,
}

#[derive(Debug, Default)]
struct Negative {
    until: HashMap<[u8; 32], Instant>,
    order: VecDeque<[u8; 32]>,
}

impl ReviewGuard {
    /// `concurrency` reviews at once; `capacity` negative entries for `ttl` each.
    pub fn new(concurrency: usize, capacity: usize, ttl: Duration) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            negative: Mutex::new(Negative::default()),
            capacity: capacity.max(1),
            ttl,
        }
    }

    fn rejected_recently(&self, key: &[u8; 32]) -> bool {
        let mut n = self.negative.lock();
        match n.until.get(key) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                n.until.remove(key);
                false
            }
            None => false,
        }
    }

    fn remember_rejected(&self, key: [u8; 32]) {
        let mut n = self.negative.lock();
        // Oldest first out: memory stays bounded whatever the flood.
        while n.until.len() >= self.capacity {
            let Some(old) = n.order.pop_front() else {
                n.until.clear();
                break;
            };
            n.until.remove(&old);
        }
        if n.until.insert(key, Instant::now() + self.ttl).is_none() {
            n.order.push_back(key);
        }
        // Keys dropped on expiry stay in `order` until their turn: bound it too.
        while n.order.len() > 2 * self.capacity {
            if let Some(old) = n.order.pop_front() {
                n.until.remove(&old);
            }
        }
    }

    /// Negative entries held now.
    pub fn negative_len(&self) -> usize {
        self.negative.lock().until.len()
    }
}

impl Default for ReviewGuard {
    fn default() -> Self {
        Self::new(MAX_CONCURRENT_REVIEWS, NEGATIVE_CAPACITY, NEGATIVE_TTL)
    }
}

fn negative_key(audience: &str, token: &str) -> [u8; 32] {
    digest(audience, token)
}

/// The loader: one review per key, a positive answer cached until
/// `min(120 s, exp − now)`; a token without a readable `exp` is reviewed every time.
/// A review needs a free slot of the guard, else the load fails at once.
struct ReviewLoader {
    reviewer: Arc<dyn TokenReviewer>,
    guard: Arc<ReviewGuard>,
}

#[async_trait]
impl Loader<TokenKey, ReviewedUser> for ReviewLoader {
    async fn load(
        &self,
        keys: &[TokenKey],
    ) -> Result<HashMap<TokenKey, Answer<ReviewedUser>>, CacheError> {
        let mut out = HashMap::with_capacity(keys.len());
        for k in keys {
            let Ok(_slot) = self.guard.permits.clone().try_acquire_owned() else {
                return Err(CacheError::Source("token reviews at their limit".into()));
            };
            let review = self
                .reviewer
                .review(&k.token, &k.audience)
                .await
                .map_err(|e| CacheError::Source(e.0.into()))?;
            let answer = match review {
                Review::Authenticated(reviewed) => {
                    let cap = cache_ttl(jwt_expiry(&k.token), MAX_CACHE_TTL, SystemTime::now());
                    Answer::Found(
                        ReviewedUser {
                            username: reviewed.username,
                        },
                        Some(cap),
                    )
                }
                Review::Rejected => Answer::Absent,
            };
            out.insert(k.clone(), answer);
        }
        Ok(out)
    }
}

/// Bearer tokens reviewed by Kubernetes, mapped to configured clients by user name.
pub struct TokenReviewBearerVerifier {
    audience: String,
    cache: Cache<TokenKey, ReviewedUser>,
    clients_by_user: HashMap<String, usize>,
    static_tokens: Option<StaticBearerVerifier>,
    guard: Arc<ReviewGuard>,
}

impl fmt::Debug for TokenReviewBearerVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenReviewBearerVerifier")
            .field("audience", &self.audience)
            .field("users", &self.clients_by_user.len())
            .finish_non_exhaustive()
    }
}

impl TokenReviewBearerVerifier {
    /// Reviews tokens for `audience` through `reviewer`, caching reviews in `store`
    /// (`None`: no cache, every request is reviewed) with the `token_review`
    /// namespace settings `ns` under `<key_prefix>:cache:v1:token_review:`.
    /// `clients_by_user` maps a reviewed user name to the index of its client.
    pub fn new(
        audience: impl Into<String>,
        reviewer: Arc<dyn TokenReviewer>,
        ns: Namespace,
        key_prefix: &str,
        store: Option<Arc<dyn CacheStore>>,
        clients_by_user: HashMap<String, usize>,
    ) -> Self {
        let guard = Arc::new(ReviewGuard::default());
        let ns = Namespace {
            // The rule of the namespace, whatever the settings say.
            ttl: ns.ttl.min(MAX_CACHE_TTL),
            negative_ttl: None,
            ..ns
        };
        let loader = Arc::new(ReviewLoader {
            reviewer,
            guard: guard.clone(),
        });
        Self {
            audience: audience.into(),
            cache: Cache::new(ns, key_prefix, store, loader),
            clients_by_user,
            static_tokens: None,
            guard,
        }
    }

    /// Checks the configured `bearerTokens` hashes first (no review for them); only a
    /// token matching none is reviewed.
    pub fn with_static_tokens(mut self, tokens: StaticBearerVerifier) -> Self {
        self.static_tokens = Some(tokens);
        self
    }

    /// The cache's counters (hits, misses, loader calls, …).
    pub fn cache_metrics(&self) -> Arc<proxy_pool_cache::NamespaceMetrics> {
        self.cache.metrics_handle()
    }
}

#[async_trait]
impl BearerVerifier for TokenReviewBearerVerifier {
    async fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        if token.is_empty() {
            return Err(AuthError::Invalid);
        }
        if let Some(s) = &self.static_tokens
            && let Ok(v) = s.verify(token).await
        {
            return Ok(v);
        }
        if proxy_pool_api::token::precheck(token, &self.audience, SystemTime::now()).is_err() {
            return Err(AuthError::Invalid);
        }
        let negative = negative_key(&self.audience, token);
        if self.guard.rejected_recently(&negative) {
            return Err(AuthError::Invalid);
        }
        let key = TokenKey {
            audience: self.audience.clone(),
            token: token.to_owned(),
        };
        match self.cache.get(key).await {
            // Decided now, on every request: which client this user is (an
            // authenticated user that is none of them is refused with 403).
            Ok(Some(user)) => self
                .clients_by_user
                .get(&user.username)
                .map(|&client| Verified {
                    client,
                    subject: Some(user.username.clone()),
                })
                .ok_or(AuthError::NotAClient),
            Ok(None) => {
                self.guard.remember_rejected(negative);
                Err(AuthError::Invalid)
            }
            Err(_) => Err(AuthError::Unavailable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use std::sync::atomic::Ordering;

    use crate::distribution::review_testkit::{HeldReviewer as Stuck, answered_at_once};

    fn jwt(i: usize) -> String {
        crate::distribution::review_testkit::jwt("aud", i)
    }

    fn verifier(reviewer: Arc<Stuck>) -> TokenReviewBearerVerifier {
        TokenReviewBearerVerifier::new(
            "aud",
            reviewer,
            Namespace::new("token_review"),
            "",
            None,
            HashMap::new(),
        )
    }

    #[tokio::test]
    async fn tokens_that_could_never_pass_cost_no_review() {
        let reviewer = Arc::new(Stuck::default());
        let v = verifier(reviewer.clone());
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let other_audience = format!("{}.{}.c2ln", b(r#"{"alg":"RS256"}"#), b(r#"{"aud":"x"}"#));
        let expired = format!("{}.{}.c2ln", b(r#"{"alg":"RS256"}"#), b(r#"{"exp":1}"#));
        for t in [
            "garbage",
            "a.b.c",
            &other_audience,
            &expired,
            &"x".repeat(20_000),
        ] {
            assert_eq!(v.verify(t).await, Err(AuthError::Invalid));
        }
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_rejected_token_is_reviewed_once_then_answered_from_the_negative_cache() {
        let reviewer = Arc::new(Stuck::default());
        let v = verifier(reviewer.clone());
        for _ in 0..5 {
            assert_eq!(v.verify(&jwt(1)).await, Err(AuthError::Invalid));
        }
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), 1);
        let guard = ReviewGuard::new(4, 16, Duration::from_secs(60));
        for i in 0..1_000 {
            guard.remember_rejected(negative_key("aud", &jwt(i)));
        }
        assert!(
            guard.negative_len() <= 16,
            "bounded: {}",
            guard.negative_len()
        );
        assert!(guard.rejected_recently(&negative_key("aud", &jwt(999))));
        assert!(!guard.rejected_recently(&negative_key("aud", &jwt(0))));
    }

    #[tokio::test]
    async fn reviews_in_flight_are_capped_and_the_rest_refused_at_once() {
        let reviewer = Arc::new(Stuck::holding());
        let v = Arc::new(verifier(reviewer.clone()));
        let mut flood = tokio::task::JoinSet::new();
        for i in 0..200 {
            let v = v.clone();
            flood.spawn(async move { v.verify(&jwt(i)).await });
        }
        // Everything past the review slots is answered without waiting.
        let n = 200 - MAX_CONCURRENT_REVIEWS;
        let refused = answered_at_once(&mut flood, n, Duration::from_secs(10)).await;
        assert_eq!(refused.len(), n);
        for r in refused {
            assert_eq!(r, Err(AuthError::Unavailable));
        }
        assert_eq!(
            reviewer.calls.load(Ordering::SeqCst),
            MAX_CONCURRENT_REVIEWS
        );
        reviewer.hold.store(false, Ordering::SeqCst);
        reviewer.release.notify_waiters();
        while let Some(r) = flood.join_next().await {
            assert_eq!(r.expect("joined"), Err(AuthError::Invalid));
        }
    }
}
