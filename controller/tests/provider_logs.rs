//! No secret reaches a log line: vendor key, URL query, proxy passwords — at TRACE,
//! across successful fetches, refused credentials, and an unreachable vendor.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{Protocol, Secret, UpstreamId};
use activity_pool::{MemoryPool, PoolOptions};
use proxy_pool_controller::provider::{
    BackoffOptions, HttpVendorSource, ProviderMetrics, ProviderOptions, ProviderReconciler,
    VendorAuth, VendorFormat,
};
use proxy_pool_e2e::logs::LogCapture;
use proxy_pool_e2e::sim::{SimConfig, Simulator, VendorCredentials};
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "current_thread")]
async fn no_secret_in_any_log_line() {
    let (capture, _guard) = LogCapture::set_default(tracing::Level::TRACE);

    let creds = VendorCredentials {
        api_key: Secret::new("KEY-7f3c-vendor"),
        username: "acct".into(),
        password: Secret::new("PW-91aa-vendor"),
    };
    let sim = Simulator::start(SimConfig {
        credentials: creds,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let pool = Arc::new(MemoryPool::new(PoolOptions::default()));
    let metrics = ProviderMetrics::default();
    let mut options = ProviderOptions::new(
        UpstreamId::new("logs").unwrap(),
        Protocol::Http,
        Duration::from_secs(60),
    );
    options.backoff = BackoffOptions {
        initial: Duration::from_millis(20),
        max: Duration::from_millis(40),
    };
    options.fetch_interval = Duration::from_millis(50);
    // The simulator's proxies are on loopback: opted in explicitly.
    options.defaults.egress = proxy_pool_api::egress::EgressPolicy::allow_loopback();
    let mut passwords = Vec::new();
    for (url, key) in [
        (
            format!("{}/v1/proxies?count=3&token=QUERY-5d2e", sim.vendor_url()),
            "KEY-7f3c-vendor",
        ),
        (
            format!("{}/v1/proxies?count=1&format=lines", sim.vendor_url()),
            "WRONG-KEY-0b1d",
        ),
        (
            "http://127.0.0.1:1/v1/proxies?token=QUERY-5d2e".to_owned(),
            "KEY-7f3c-vendor",
        ),
    ] {
        let format = if url.contains("lines") {
            VendorFormat::Lines
        } else {
            VendorFormat::Json
        };
        let source =
            HttpVendorSource::new(&url, format, VendorAuth::api_key(Secret::new(key))).unwrap();
        let r = ProviderReconciler::new(
            options.clone(),
            Arc::new(source),
            pool.clone(),
            metrics.clone(),
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(r.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        shutdown.cancel();
        task.await.unwrap();
        passwords.extend(sim.live_proxies().into_iter().map(|p| p.proxy.password));
    }
    assert!(metrics.upserted("logs") >= 3, "the first source fetched");
    assert!(metrics.fetches("logs", "unauthorized") >= 1);
    assert!(metrics.fetches("logs", "transport") >= 1);
    let text = capture.text();
    assert!(
        text.contains("provider fetch failed"),
        "logs were captured:\n{text}"
    );
    for secret in [
        "KEY-7f3c-vendor",
        "WRONG-KEY-0b1d",
        "QUERY-5d2e",
        "PW-91aa-vendor",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain(passwords)
    {
        assert!(
            !text.contains(&secret),
            "{secret} leaked into the logs:\n{text}"
        );
    }
}
