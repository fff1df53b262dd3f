//! Tests of `auth.rs`.

use super::*;
use proxy_pool_api::config::load_yaml;
use std::num::NonZeroU32;

fn auth(yaml: &str) -> Authenticator {
    let c = load_yaml(yaml).expect("config");
    Authenticator::new(&c.distribution.auth, &c.clients)
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, v.parse().expect("value"));
    }
    h
}

/// `a` identifies the caller with `headers` from `ip` as `client`; its identity.
async fn accepted(a: &Authenticator, headers: &HeaderMap, ip: IpAddr, client: &str) -> Identity {
    let id = a.authenticate(headers, ip).await.expect(client);
    assert_eq!(id.client_id.as_str(), client);
    id
}

/// `a` refuses the caller with `headers` from `ip` with the error `code`.
async fn refused(a: &Authenticator, headers: &HeaderMap, ip: IpAddr, code: &str, why: &str) {
    let e = a.authenticate(headers, ip).await.expect_err(why);
    assert_eq!(e.code(), code, "{why}");
}

/// The `Authorization` value of a basic login as `user_password` (`user:password`).
fn basic(user_password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
    format!("Basic {encoded}")
}

/// One attempt per method: no credential at all, the API key `key`, the basic login
/// `user_password`, the bearer token `token`.
fn attempts(key: &str, user_password: &str, token: &str) -> Vec<HeaderMap> {
    vec![
        headers(&[]),
        headers(&[("x-api-key", key)]),
        headers(&[("authorization", &basic(user_password))]),
        headers(&[("authorization", &format!("Bearer {token}"))]),
    ]
}

fn config() -> String {
    format!(
        "clients:\n- name: a\n  apiKeys: [{{sha256: {}}}]\n  basic: {{username: alice, passwordHash: '{}'}}\n  permissions: [gateway:connect]\n- name: b\n  bearerTokens: [{{sha256: {}}}]\n  maxExtractCount: 3\n",
        hash_secret("key-a"),
        hash_password("pw-a"),
        hash_secret("token-b")
    )
}

#[tokio::test]
async fn each_method_identifies_its_client() {
    let a = auth(&config());
    let ip: IpAddr = "127.0.0.1".parse().expect("ip");
    let id = accepted(&a, &headers(&[("x-api-key", "key-a")]), ip, "client:a").await;
    assert!(!id.permissions.contains(&Permission::DistributionExtract));
    let login = headers(&[("authorization", &basic("alice:pw-a"))]);
    accepted(&a, &login, ip, "client:a").await;
    let bearer = headers(&[("authorization", "bearer token-b")]);
    let id = accepted(&a, &bearer, ip, "client:b").await;
    assert!(id.permissions.contains(&Permission::DistributionExtract));
    assert_eq!(id.grants.max_extract_count.map(NonZeroU32::get), Some(3));
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_401() {
    let a = auth(&config());
    let ip: IpAddr = "127.0.0.1".parse().expect("ip");
    let mut wrong = attempts("nope", "alice:wrong", "nope");
    wrong.push(headers(&[("authorization", "Digest x")]));
    for h in wrong {
        refused(&a, &h, ip, "UNAUTHENTICATED", "wrong or missing").await;
    }
}

#[derive(Debug)]
struct Review;

#[async_trait]
impl BearerVerifier for Review {
    async fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        match token {
            "reviewed" => Ok(Verified {
                client: 1,
                subject: Some("system:serviceaccount:ns:sa".into()),
            }),
            "down" => Err(AuthError::Unavailable),
            _ => Err(AuthError::Invalid),
        }
    }
}

#[tokio::test]
async fn another_bearer_verifier_plugs_in() {
    let c = load_yaml(&config()).expect("config");
    let a = Authenticator::with_bearer(&c.distribution.auth, &c.clients, Arc::new(Review));
    let ip: IpAddr = "127.0.0.1".parse().expect("ip");
    let reviewed = headers(&[("authorization", "Bearer reviewed")]);
    let id = accepted(&a, &reviewed, ip, "client:b").await;
    assert_eq!(
        id.credential, "bearer:system:serviceaccount:ns:sa",
        "a reviewed caller is counted by its user name, not by a digest of its token"
    );
    for (token, code, why) in [
        ("Bearer down", "AUTH_UNAVAILABLE", "verifier down"),
        (
            "Bearer token-b",
            "UNAUTHENTICATED",
            "the static hashes are not consulted",
        ),
    ] {
        refused(&a, &headers(&[("authorization", token)]), ip, code, why).await;
    }
}

#[tokio::test]
async fn without_a_usable_client_every_caller_is_refused() {
    // A fresh install: no client, no `auth.mode`. Fail closed.
    let a = auth("{}");
    let ip: IpAddr = "192.0.2.7".parse().expect("ip");
    for h in attempts("anything", "alice:pw-a", "x.y.z") {
        refused(&a, &h, ip, "UNAUTHENTICATED", "no client").await;
    }
}

#[tokio::test]
async fn failed_basic_logins_are_throttled_per_source_and_per_user() {
    let a = auth(&config()).with_throttle(Arc::new(AuthThrottle::new(ThrottleConfig {
        burst: 3,
        refill: std::time::Duration::from_secs(600),
        capacity: 1024,
        trust_for: std::time::Duration::from_secs(600),
    })));
    let login = |user_password: &str| headers(&[("authorization", &basic(user_password))]);
    let key_a = headers(&[("x-api-key", "key-a")]);
    let guesser: IpAddr = "198.51.100.1".parse().expect("ip");
    // Requests without any credential are no guesses: never throttled.
    for _ in 0..10 {
        refused(&a, &headers(&[]), guesser, "UNAUTHENTICATED", "none").await;
    }
    for i in 0..4 {
        let why = format!("wrong: attempt {i}");
        let guess = login(&format!("alice:guess-{i}"));
        refused(&a, &guess, guesser, "UNAUTHENTICATED", &why).await;
    }
    // The right password is not even judged now: no oracle for the guesser.
    let e = a
        .authenticate(&login("alice:pw-a"), guesser)
        .await
        .expect_err("throttled");
    assert_eq!(e.code(), "AUTH_THROTTLED");
    assert_eq!(e.into_problem("r").status(), 429);
    // The same user from elsewhere is throttled too (per user)...
    let other: IpAddr = "203.0.113.9".parse().expect("ip");
    let right = login("alice:pw-a");
    refused(&a, &right, other, "AUTH_THROTTLED", "user throttled").await;
    // ...while another client's credential from that source still works.
    accepted(&a, &key_a, other, "client:a").await;
    // The guesser's address is throttled for every method.
    refused(&a, &key_a, guesser, "AUTH_THROTTLED", "source throttled").await;
}

#[tokio::test]
async fn anonymous_clients_are_their_source_address() {
    let a = auth("distribution: {auth: {mode: none}}");
    let ip: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
    let id = accepted(&a, &headers(&[]), ip, "anon:192.0.2.7").await;
    assert!(id.permissions.contains(&Permission::DistributionExtract));
}
