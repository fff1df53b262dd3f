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

/// `a` refuses the caller with `headers` from `ip` with the error `code`.
async fn refused(a: &Authenticator, headers: &HeaderMap, ip: IpAddr, code: &str, why: &str) {
    let e = a.authenticate(headers, ip).await.expect_err(why);
    assert_eq!(e.code(), code, "{why}");
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
    let id = a
        .authenticate(&headers(&[("x-api-key", "key-a")]), ip)
        .await
        .expect("api key");
    assert_eq!(id.client_id.as_str(), "client:a");
    assert!(!id.permissions.contains(&Permission::DistributionExtract));
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:pw-a");
    let id = a
        .authenticate(
            &headers(&[("authorization", &format!("Basic {basic}"))]),
            ip,
        )
        .await
        .expect("basic");
    assert_eq!(id.client_id.as_str(), "client:a");
    let id = a
        .authenticate(&headers(&[("authorization", "bearer token-b")]), ip)
        .await
        .expect("bearer");
    assert_eq!(id.client_id.as_str(), "client:b");
    assert!(id.permissions.contains(&Permission::DistributionExtract));
    assert_eq!(id.grants.max_extract_count.map(NonZeroU32::get), Some(3));
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_401() {
    let a = auth(&config());
    let ip: IpAddr = "127.0.0.1".parse().expect("ip");
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:wrong");
    for h in [
        headers(&[]),
        headers(&[("x-api-key", "nope")]),
        headers(&[("authorization", &format!("Basic {basic}"))]),
        headers(&[("authorization", "Bearer nope")]),
        headers(&[("authorization", "Digest x")]),
    ] {
        let e = a.authenticate(&h, ip).await.expect_err("refused");
        assert_eq!(e.code(), "UNAUTHENTICATED");
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
    let id = a
        .authenticate(&headers(&[("authorization", "Bearer reviewed")]), ip)
        .await
        .expect("reviewed");
    assert_eq!(id.client_id.as_str(), "client:b");
    assert_eq!(
        id.credential, "bearer:system:serviceaccount:ns:sa",
        "a reviewed caller is counted by its user name, not by a digest of its token"
    );
    refused(
        &a,
        &headers(&[("authorization", "Bearer down")]),
        ip,
        "AUTH_UNAVAILABLE",
        "verifier down",
    )
    .await;
    refused(
        &a,
        &headers(&[("authorization", "Bearer token-b")]),
        ip,
        "UNAUTHENTICATED",
        "the static hashes are not consulted",
    )
    .await;
}

#[tokio::test]
async fn without_a_usable_client_every_caller_is_refused() {
    // A fresh install: no client, no `auth.mode`. Fail closed.
    let a = auth("{}");
    let ip: IpAddr = "192.0.2.7".parse().expect("ip");
    let basic = base64::engine::general_purpose::STANDARD.encode("alice:pw-a");
    for h in [
        headers(&[]),
        headers(&[("x-api-key", "anything")]),
        headers(&[("authorization", &format!("Basic {basic}"))]),
        headers(&[("authorization", "Bearer x.y.z")]),
    ] {
        let e = a.authenticate(&h, ip).await.expect_err("refused");
        assert_eq!(e.code(), "UNAUTHENTICATED");
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
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let login = |pw: &str| headers(&[("authorization", &format!("Basic {}", b64(pw)))]);
    let guesser: IpAddr = "198.51.100.1".parse().expect("ip");
    // Requests without any credential are no guesses: never throttled.
    for _ in 0..10 {
        refused(&a, &headers(&[]), guesser, "UNAUTHENTICATED", "none").await;
    }
    for i in 0..4 {
        refused(
            &a,
            &login(&format!("alice:guess-{i}")),
            guesser,
            "UNAUTHENTICATED",
            &format!("wrong: attempt {i}"),
        )
        .await;
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
    refused(
        &a,
        &login("alice:pw-a"),
        other,
        "AUTH_THROTTLED",
        "user throttled",
    )
    .await;
    // ...while another client's credential from that source still works.
    let id = a
        .authenticate(&headers(&[("x-api-key", "key-a")]), other)
        .await
        .expect("api key");
    assert_eq!(id.client_id.as_str(), "client:a");
    // The guesser's address is throttled for every method.
    refused(
        &a,
        &headers(&[("x-api-key", "key-a")]),
        guesser,
        "AUTH_THROTTLED",
        "source throttled",
    )
    .await;
}

#[tokio::test]
async fn anonymous_clients_are_their_source_address() {
    let a = auth("distribution: {auth: {mode: none}}");
    let id = a
        .authenticate(&headers(&[]), "::ffff:192.0.2.7".parse().expect("ip"))
        .await
        .expect("anonymous");
    assert_eq!(id.client_id.as_str(), "anon:192.0.2.7");
    assert!(id.permissions.contains(&Permission::DistributionExtract));
}
