//! The TokenReview-backed bearer verifier on a real kube-apiserver (the e2e harness:
//! etcd + kube-apiserver, `PROXY_POOL_K8S_BIN_DIR`) and a real Redis cache:
//! ServiceAccount tokens map to their clients; a review is cached (the second request
//! is not reviewed again) for at most 120 s and never past the token's `exp`; the token
//! never reaches Redis; failed reviews are never cached and a rejected token only in a
//! short in-process negative cache (a token that could never pass — not a JWT, for
//! another audience — is not reviewed at all); which client a cached user is gets
//! decided on every request. And a live controller built
//! from a config with `tokenReview` (the way `main` builds it) answers ServiceAccount
//! tokens over HTTP: 200 for a mapped account, 403 for an unmapped one, 401 for garbage,
//! the second request served from the cache (its metrics and Redis keys).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use activity_pool::testkit::RedisServer;
use async_trait::async_trait;
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use proxy_pool_cache::{CacheStore, Namespace, RedisStore};
use proxy_pool_controller::distribution::{
    AuthError, BearerVerifier, KubeTokenReviewer, Review, ReviewUnavailable, ReviewedToken,
    TokenReviewBearerVerifier, TokenReviewer,
};
use proxy_pool_e2e::k8s::KubeApiServer;

const NS: &str = "clients";
const AUDIENCE: &str = "proxy-pool-distribution";
const PREFIX: &str = "pp-test";

/// Counts the reviews that reach the inner reviewer.
#[derive(Debug)]
struct Counting<R> {
    inner: R,
    calls: AtomicUsize,
}

impl<R> Counting<R> {
    fn new(inner: R) -> Arc<Self> {
        Arc::new(Self {
            inner,
            calls: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<R: TokenReviewer> TokenReviewer for Counting<R> {
    async fn review(&self, token: &str, audience: &str) -> Result<Review, ReviewUnavailable> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.review(token, audience).await
    }
}

/// Fixed answers (token → user), or unavailable.
#[derive(Debug, Default)]
struct Fixed {
    users: HashMap<String, String>,
    unavailable: bool,
}

#[async_trait]
impl TokenReviewer for Fixed {
    async fn review(&self, token: &str, _audience: &str) -> Result<Review, ReviewUnavailable> {
        if self.unavailable {
            return Err(ReviewUnavailable("switched off".into()));
        }
        Ok(match self.users.get(token) {
            Some(u) => Review::Authenticated(ReviewedToken::user(u.clone())),
            None => Review::Rejected,
        })
    }
}

fn sa_user(name: &str) -> String {
    format!("system:serviceaccount:{NS}:{name}")
}

/// A fresh etcd + kube-apiserver (and a client of it) with namespace `NS` holding
/// these ServiceAccounts.
async fn apiserver_with(service_accounts: &[&str]) -> (KubeApiServer, kube::Client) {
    common::kube::apiserver_with(NS, service_accounts).await
}

async fn token(client: &kube::Client, sa: &str, audience: &str) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec![audience.into()]),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        }),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|s| s.token)
        .expect("token")
}

async fn store(redis: &RedisServer) -> Arc<dyn CacheStore> {
    let conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Arc::new(RedisStore::new(conn))
}

fn namespace() -> Namespace {
    Namespace {
        ttl: Duration::from_secs(120),
        redis_timeout: Duration::from_millis(500),
        ..Namespace::new("token_review")
    }
}

fn verifier(
    reviewer: Arc<dyn TokenReviewer>,
    store: Arc<dyn CacheStore>,
    users: &[(&str, usize)],
) -> TokenReviewBearerVerifier {
    TokenReviewBearerVerifier::new(
        AUDIENCE,
        reviewer,
        namespace(),
        PREFIX,
        Some(store),
        users.iter().map(|(u, i)| ((*u).to_owned(), *i)).collect(),
    )
}

/// Every cache entry: (key, value, PTTL ms).
async fn entries(redis: &RedisServer) -> Vec<(String, String, i64)> {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{PREFIX}:cache:v1:token_review:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let v: String = redis::cmd("GET")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((k, v, ttl));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_on_a_real_apiserver() {
    let (_cluster, client) = apiserver_with(&["team-a", "team-b", "stranger"]).await;
    let redis = RedisServer::start();
    let store = store(&redis).await;
    let reviewer = Counting::new(KubeTokenReviewer::new(client.clone()));
    let users = [(sa_user("team-a"), 0), (sa_user("team-b"), 1)];
    let users: Vec<(&str, usize)> = users.iter().map(|(u, i)| (u.as_str(), *i)).collect();
    let v = verifier(reviewer.clone(), store.clone(), &users);

    let a = token(&client, "team-a", AUDIENCE).await;
    let b = token(&client, "team-b", AUDIENCE).await;
    assert_eq!(v.verify(&a).await.map(|v| v.client), Ok(0));
    assert_eq!(reviewer.calls(), 1);
    // Cached: the second request is not reviewed again.
    assert_eq!(v.verify(&a).await.map(|v| v.client), Ok(0));
    assert_eq!(reviewer.calls(), 1);
    assert_eq!(v.verify(&b).await.map(|v| v.client), Ok(1));
    assert_eq!(reviewer.calls(), 2);

    // In Redis: one entry per token, ≤ 120 s, no token text, only the user name.
    let stored = entries(&redis).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    for (k, val, ttl) in &stored {
        assert!(*ttl > 0 && *ttl <= 120_000, "{k}: pttl {ttl}");
        for t in [&a, &b] {
            assert!(!k.contains(t.as_str()) && !val.contains(t.as_str()));
        }
        assert!(val.contains("system:serviceaccount:clients:team-"), "{val}");
    }

    // An authenticated user without a client is refused (403, not 401); its review is
    // cached, but which client it is gets decided per request: another mapping over
    // the same cache accepts it without a new review.
    let s = token(&client, "stranger", AUDIENCE).await;
    assert_eq!(v.verify(&s).await, Err(AuthError::NotAClient));
    assert_eq!(reviewer.calls(), 3);
    assert_eq!(v.verify(&s).await, Err(AuthError::NotAClient));
    assert_eq!(reviewer.calls(), 3);
    let stranger = sa_user("stranger");
    let v2 = verifier(reviewer.clone(), store.clone(), &[(&stranger, 2)]);
    assert_eq!(v2.verify(&s).await.map(|v| v.client), Ok(2));
    assert_eq!(reviewer.calls(), 3);

    // Tokens that could never pass (another audience by their own claim, garbage) are
    // refused without a review.
    let other = token(&client, "team-a", "someone-else").await;
    let garbage = "not-a-token".to_owned();
    for t in [&other, &other, &garbage, &garbage] {
        assert_eq!(v.verify(t).await, Err(AuthError::Invalid));
        assert_eq!(reviewer.calls(), 3);
    }
    // A token for our audience the API server rejects (a forged signature) is reviewed
    // once, then answered from the in-process negative cache — never from Redis.
    let forged = forge(&a);
    for _ in 0..3 {
        assert_eq!(v.verify(&forged).await, Err(AuthError::Invalid));
        assert_eq!(reviewer.calls(), 4);
    }
    assert_eq!(entries(&redis).await.len(), 3);
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn jwt(exp: SystemTime) -> String {
    let secs = exp.duration_since(UNIX_EPOCH).unwrap().as_secs();
    format!(
        "{}.{}.sig",
        b64(r#"{"alg":"RS256"}"#),
        b64(&format!("{{\"exp\":{secs},\"sub\":\"x\"}}"))
    )
}

/// `token` with another signature: same claims, never valid.
fn forge(token: &str) -> String {
    let mut parts: Vec<&str> = token.split('.').collect();
    parts[2] = "Zm9yZ2Vk";
    parts.join(".")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_never_outlive_the_token_and_failures_are_not_cached() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    let soon = jwt(SystemTime::now() + Duration::from_secs(3));
    let opaque = format!(
        "{}.{}.sig",
        b64(r#"{"alg":"RS256"}"#),
        b64(r#"{"sub":"x"}"#)
    );
    let fixed = Fixed {
        users: [
            (soon.clone(), "u".to_owned()),
            (opaque.clone(), "u".to_owned()),
        ]
        .into_iter()
        .collect(),
        unavailable: false,
    };
    let reviewer = Counting::new(fixed);
    let v = verifier(reviewer.clone(), store.clone(), &[("u", 0)]);
    assert_eq!(v.verify(&soon).await.map(|v| v.client), Ok(0));
    let stored = entries(&redis).await;
    assert_eq!(stored.len(), 1);
    assert!(
        stored[0].2 > 0 && stored[0].2 <= 3_000,
        "capped by exp: {stored:?}"
    );
    // Without a readable expiry a review is not reused.
    assert_eq!(v.verify(&opaque).await.map(|v| v.client), Ok(0));
    assert_eq!(v.verify(&opaque).await.map(|v| v.client), Ok(0));
    assert_eq!(reviewer.calls(), 3);
    assert_eq!(entries(&redis).await.len(), 1);

    // A failing review is 503-worthy and leaves nothing behind.
    let down = Counting::new(Fixed {
        unavailable: true,
        ..Fixed::default()
    });
    let v = verifier(down.clone(), store, &[("u", 0)]);
    let later = jwt(SystemTime::now() + Duration::from_secs(600));
    for n in [1, 2] {
        assert_eq!(v.verify(&later).await, Err(AuthError::Unavailable));
        assert_eq!(down.calls(), n);
    }
    assert_eq!(entries(&redis).await.len(), 1);
}

/// The value of `<family>` for the `token_review` namespace in `/metrics`.
fn cache_metric(text: &str, family: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split('{')
                .next()
                .is_some_and(|n| n.trim_end_matches("_total").ends_with(family))
                && l.contains("cache=\"token_review\"")
        })
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{family} not in /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_configured_with_token_review_serves_service_accounts() {
    use common::{Kind, store_yaml, usage::start_built};

    let (cluster, client) = apiserver_with(&["team-a", "stranger"]).await;
    let redis = RedisServer::start();
    let static_token = "static-bearer-5c1e";
    let yaml = format!(
        r#"
store: {store}
cache: {{enabled: true, keyPrefix: {PREFIX}, redisTimeout: 500ms}}
distribution:
  listen: 127.0.0.1:0
  auth:
    mode: any
    methods:
      - type: bearer
        tokenReview: {{audience: {AUDIENCE}, kubeconfigFile: "{kubeconfig}"}}
admin: {{listen: 127.0.0.1:0}}
upstreams:
  - {{name: up-a, ttl: 10m, maxSize: 1000, source: {{vendorApi: {{url: "http://127.0.0.1:9/", format: json}}}}}}
clients:
  - name: team-a
    serviceAccounts: [{NS}/team-a]
  - name: by-hash
    bearerTokens: [{{sha256: {hash}}}]
shutdown: {{gracePeriod: 5s}}
"#,
        store = store_yaml(Kind::Redis, Some(&redis)),
        kubeconfig = cluster.kubeconfig().display(),
        hash = proxy_pool_controller::distribution::hash_secret(static_token),
    );
    let h = start_built(&yaml, Some(redis)).await;
    h.seed("up-a", 10, "shanghai", "telecom").await;
    let body = r#"{"count":1}"#;
    let bearer = |t: &str| format!("Bearer {t}");
    let metrics = || async {
        let r = h.admin_get("/metrics").await;
        String::from_utf8_lossy(&r.body).to_string()
    };

    let a = token(&client, "team-a", AUDIENCE).await;
    let r = h.extract(body, &[("authorization", &bearer(&a))]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.ids().len(), 1);
    let m = metrics().await;
    assert_eq!(cache_metric(&m, "cache_loader_calls"), 1);
    assert_eq!(cache_metric(&m, "cache_hits"), 0);
    // One entry under the configured prefix, without the token.
    let stored = entries(h.redis.as_ref().unwrap()).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(!stored[0].0.contains(&a) && !stored[0].1.contains(&a));

    // The second request is answered from the cache: a hit, no second review.
    let r = h.extract(body, &[("authorization", &bearer(&a))]).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let m = metrics().await;
    assert_eq!(cache_metric(&m, "cache_hits"), 1);
    assert_eq!(cache_metric(&m, "cache_loader_calls"), 1);

    // A configured bearerTokens hash is checked first and never reviewed.
    let r = h
        .extract(body, &[("authorization", &bearer(static_token))])
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(cache_metric(&metrics().await, "cache_loader_calls"), 1);

    // A valid token of a ServiceAccount no client lists: authenticated, not a client.
    let s = token(&client, "stranger", AUDIENCE).await;
    let r = h.extract(body, &[("authorization", &bearer(&s))]).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert_eq!(r.code(), "PERMISSION_DENIED");
    // Garbage and a token for another audience: 401 without a review; a forged token
    // for our audience: one review, then the negative cache. Nothing cached in Redis.
    let other = token(&client, "team-a", "someone-else").await;
    let forged = forge(&a);
    for t in [
        "not-a-token",
        other.as_str(),
        "not-a-token",
        &forged,
        &forged,
    ] {
        let r = h.extract(body, &[("authorization", &bearer(t))]).await;
        assert_eq!(r.status, 401, "{:?}", r.body);
        assert_eq!(r.code(), "UNAUTHENTICATED");
    }
    let m = metrics().await;
    assert_eq!(cache_metric(&m, "cache_loader_calls"), 3);
    assert_eq!(cache_metric(&m, "cache_hits"), 1);
    // Two cached users (team-a, stranger); rejections left nothing behind.
    assert_eq!(entries(h.redis.as_ref().unwrap()).await.len(), 2);

    // The mapping is not cached: the controller restarted (there is no config reload)
    // without team-a's mapping, on the same Redis, answers team-a's still-cached review
    // with 403 — a cache hit, no new review.
    let mut h = h;
    let redis = h.redis.take();
    h.stop().await;
    let unmapped = yaml.replace(
        &format!("serviceAccounts: [{NS}/team-a]"),
        "serviceAccounts: []
    bearerTokens: [{sha256: 0000000000000000000000000000000000000000000000000000000000000000}]",
    );
    assert_ne!(unmapped, yaml);
    let h = start_built(&unmapped, redis).await;
    let r = h.extract(body, &[("authorization", &bearer(&a))]).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert_eq!(r.code(), "PERMISSION_DENIED");
    let m = {
        let r = h.admin_get("/metrics").await;
        String::from_utf8_lossy(&r.body).to_string()
    };
    assert_eq!(cache_metric(&m, "cache_hits"), 1);
    assert_eq!(cache_metric(&m, "cache_loader_calls"), 0);
    h.stop().await;
}
