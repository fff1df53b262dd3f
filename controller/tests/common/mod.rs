//! Test harness: a real controller on `127.0.0.1:0` (memory or a private
//! `redis-server`), a pool seeder, and an HTTP client whose every response is checked
//! against the OpenAPI file.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod kube;
pub mod openapi;
pub mod usage;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use activity_pool::model::{
    Candidate, Credentials, Dial, FetchedBatch, Label, Labels, OperationId, Protocol, ProxyId,
    Secret, UpstreamId,
};
use activity_pool::testkit::RedisServer;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use proxy_pool_controller::static_upstreams::available;
use proxy_pool_controller::store::{self, Ports, Store};
use proxy_pool_controller::{Controller, Listeners};
use serde_json::Value;

pub const KEY_FULL: &str = "key-full-7d1c";
pub const KEY_LIMITED: &str = "key-limited-93aa";
pub const KEY_GATEWAY: &str = "key-gateway-51e0";
pub const KEY_SLOW: &str = "key-slow-0c3b";
pub const BASIC_USER: &str = "alice";
pub const BASIC_PASSWORD: &str = "alice-pw-88f1";
pub const BEARER: &str = "bearer-token-4b2e";

/// Which pool the controller runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Redis,
}

fn sha(s: &str) -> String {
    proxy_pool_controller::distribution::hash_secret(s)
}

/// The standard test config; `store` is the `store:` section, `extra_distribution` is
/// appended inside `distribution:`.
pub fn config_yaml(store: &str, extra_distribution: &str) -> String {
    format!(
        r#"
store: {store}
distribution:
  listen: 127.0.0.1:0
  maxCountPerRequest: 200
  minRemainingTtl: 1s
  limits: {{maxBodyBytes: 1024, requestTimeout: 5s}}
  auth: {{mode: any}}
{extra_distribution}
admin: {{listen: 127.0.0.1:0}}
upstreams:
  - {{name: up-a, ttl: 10m, maxSize: 100000, source: {{vendorApi: {{url: "http://127.0.0.1:9/", format: json}}}}}}
  - {{name: up-b, ttl: 10m, maxSize: 100000, source: {{vendorApi: {{url: "http://127.0.0.1:9/", format: json}}}}}}
clients:
  - name: full
    apiKeys: [{{sha256: {full}}}]
    basic: {{username: {BASIC_USER}, passwordHash: "{basic}"}}
    bearerTokens: [{{sha256: {bearer}}}]
  - name: limited
    maxExtractCount: 2
    allowedUpstreams: [up-a]
    allowedRegions: [shanghai]
    apiKeys: [{{sha256: {limited}}}]
  - name: gateway-only
    permissions: [gateway:connect]
    apiKeys: [{{sha256: {gateway}}}]
  - name: slow
    rateLimit: {{requestsPerSecond: 1, burst: 1}}
    apiKeys: [{{sha256: {slow}}}]
shutdown: {{gracePeriod: 5s, drainDelay: 300ms}}
"#,
        full = sha(KEY_FULL),
        basic = proxy_pool_controller::distribution::hash_password(BASIC_PASSWORD),
        bearer = sha(BEARER),
        limited = sha(KEY_LIMITED),
        gateway = sha(KEY_GATEWAY),
        slow = sha(KEY_SLOW),
    )
}

/// A response, already checked against the OpenAPI file.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or("").to_owned()
    }

    pub fn ids(&self) -> Vec<String> {
        self.json()["proxies"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| p["id"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A running controller.
pub struct Harness {
    pub api: SocketAddr,
    pub admin: SocketAddr,
    pub ports: Ports,
    pub redis: Option<RedisServer>,
    pub shutdown: proxy_pool_controller::shutdown::Shutdown,
    trigger: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<proxy_pool_controller::Exit>>,
    client: Client<HttpConnector, Full<Bytes>>,
    seeded: AtomicU64,
}

pub fn store_yaml(kind: Kind, redis: Option<&RedisServer>) -> String {
    match kind {
        Kind::Memory => "{backend: memory}".to_owned(),
        Kind::Redis => format!(
            "{{backend: redis, redis: {{address: \"{}\", commandTimeout: 300ms}}}}",
            redis.expect("redis").url()
        ),
    }
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    let mut c = HttpConnector::new();
    c.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4)
        .build(c)
}

impl Harness {
    /// The standard config on `kind`.
    pub async fn start(kind: Kind) -> Self {
        Self::start_custom(kind, "", |p| p).await
    }

    /// The standard config plus `extra` in `distribution:`, with the ports wrapped.
    pub async fn start_custom(kind: Kind, extra: &str, wrap: impl FnOnce(Ports) -> Ports) -> Self {
        let redis = (kind == Kind::Redis).then(RedisServer::start);
        let yaml = config_yaml(&store_yaml(kind, redis.as_ref()), extra);
        Self::start_yaml(&yaml, redis, wrap).await
    }

    /// [`Harness::start_custom`] with the extraction store wrapped in a [`Faulty`]
    /// (which the test then delays or fails).
    pub async fn start_faulty(kind: Kind, extra: &str) -> (Self, Arc<Faulty>) {
        let redis = (kind == Kind::Redis).then(RedisServer::start);
        let yaml = config_yaml(&store_yaml(kind, redis.as_ref()), extra);
        Self::start_yaml_faulty(&yaml, redis).await
    }

    /// [`Harness::start_yaml`] with the extraction store wrapped in a [`Faulty`].
    pub async fn start_yaml_faulty(yaml: &str, redis: Option<RedisServer>) -> (Self, Arc<Faulty>) {
        let mut faulty = None;
        let h = Self::start_yaml(yaml, redis, |mut p| {
            let f = Faulty::wrap(p.extraction.clone());
            faulty = Some(f.clone());
            p.extraction = f;
            p
        })
        .await;
        (h, faulty.expect("the ports were wrapped"))
    }

    /// Any config.
    pub async fn start_yaml(
        yaml: &str,
        redis: Option<RedisServer>,
        wrap: impl FnOnce(Ports) -> Ports,
    ) -> Self {
        let config = proxy_pool_api::config::load_yaml(yaml).expect("valid test config");
        let listeners = Listeners::bind(&config).await.expect("bind");
        let built = store::build(&config).await.expect("store");
        let ports = wrap(built.ports.clone());
        let controller = Controller::from_store(
            config,
            Store {
                ports,
                redis: built.redis,
            },
        )
        .expect("controller");
        Self::run(controller, listeners, built.ports, redis)
    }

    /// Runs `controller` on `listeners` until the harness stops; the test reads and
    /// seeds the pool through `ports`.
    pub fn run(
        controller: Controller,
        listeners: Listeners,
        ports: Ports,
        redis: Option<RedisServer>,
    ) -> Self {
        let api = listeners.distribution.local_addr().unwrap();
        let admin = listeners.admin.local_addr().unwrap();
        let shutdown = controller.shutdown();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(listeners, async move {
            let _ = rx.await;
        }));
        Self {
            api,
            admin,
            ports,
            redis,
            shutdown,
            trigger: Some(tx),
            task: Some(task),
            client: client(),
            seeded: AtomicU64::new(0),
        }
    }

    /// Puts `n` AVAILABLE proxies of `upstream` into the pool; returns their IDs.
    pub async fn seed(&self, upstream: &str, n: usize, region: &str, carrier: &str) -> Vec<String> {
        self.seed_in(upstream, n, region, carrier, None).await
    }

    /// `seed`, the proxies in `city` when one is given.
    pub async fn seed_in(
        &self,
        upstream: &str,
        n: usize,
        region: &str,
        carrier: &str,
        city: Option<&str>,
    ) -> Vec<String> {
        let base = self.seeded.fetch_add(n as u64, Ordering::SeqCst);
        let candidates: Vec<Candidate> = (0..n as u64)
            .map(|i| {
                let k = base + i;
                Candidate {
                    id: ProxyId::new(format!("px-{upstream}-{k}")).unwrap(),
                    dial: Dial {
                        protocol: if k.is_multiple_of(2) {
                            Protocol::Http
                        } else {
                            Protocol::Socks5
                        },
                        host: format!("h{k}.{upstream}.secret-host.test"),
                        port: 10_000 + (k % 50_000) as u16,
                        credentials: Some(Credentials {
                            username: format!("user{k}"),
                            password: Secret::new(format!("proxy-password-{k}-zq")),
                        }),
                    },
                    labels: Labels {
                        region: Some(Label::new(region).unwrap()),
                        carrier: Some(Label::new(carrier).unwrap()),
                        city: city.map(|c| Label::new(c).unwrap()),
                    },
                    ttl: Duration::from_secs(600),
                    max_concurrency: 4,
                }
            })
            .collect();
        let ids: Vec<String> = candidates.iter().map(|c| c.id.to_string()).collect();
        for (ci, chunk) in candidates.chunks(1000).enumerate() {
            let report = self
                .ports
                .upserter
                .upsert(FetchedBatch {
                    quarantine: std::time::Duration::ZERO,
                    upstream: UpstreamId::new(upstream).unwrap(),
                    operation_id: OperationId::new(format!("seed-{upstream}-{base}-{ci}")).unwrap(),
                    safety_margin: Duration::from_secs(5),
                    max_size: NonZeroU32::new(1_000_000).unwrap(),
                    candidates: chunk.to_vec(),
                })
                .await
                .expect("seed upsert");
            assert_eq!(report.inserted as usize, chunk.len(), "{report:?}");
            self.ports
                .health
                .apply_health(&available(chunk))
                .await
                .expect("seed health");
        }
        ids
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    /// Any request to the Distribution listener; checked against the OpenAPI file when
    /// the path is documented.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Resp {
        send(
            &self.client,
            self.api,
            method,
            path,
            headers,
            body.to_owned(),
        )
        .await
    }

    /// `POST /api/v1/proxies/extract` with JSON and the full client's API key (unless
    /// `headers` carries its own credentials).
    pub async fn extract(&self, body: &str, headers: &[(&str, &str)]) -> Resp {
        let mut h: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        let has_auth = headers.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("x-api-key") || k.eq_ignore_ascii_case("authorization")
        });
        if !has_auth {
            h.push(("x-api-key", KEY_FULL));
        }
        h.extend_from_slice(headers);
        self.request("POST", "/api/v1/proxies/extract", &h, body)
            .await
    }

    /// `POST /api/v1/proxies/extract` with exactly these headers.
    pub async fn post_extract(&self, headers: &[(&str, &str)], body: &str) -> Resp {
        self.request("POST", "/api/v1/proxies/extract", headers, body)
            .await
    }

    /// `POST /api/v1/proxies/extract` of `body` with JSON and the full client's API key,
    /// on its own task (a request in flight while the test does something else).
    pub fn spawn_extract(&self, body: &'static str) -> tokio::task::JoinHandle<Resp> {
        let api = self.api;
        tokio::spawn(async move {
            send(
                &client(),
                api,
                "POST",
                "/api/v1/proxies/extract",
                &[
                    ("content-type", "application/json"),
                    ("x-api-key", KEY_FULL),
                ],
                body.to_owned(),
            )
            .await
        })
    }

    /// A GET on the admin listener.
    pub async fn admin_get(&self, path: &str) -> Resp {
        send(&self.client, self.admin, "GET", path, &[], String::new()).await
    }

    /// A GET on the admin listener with these headers (credentials of the stats API).
    pub async fn admin_get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        send(
            &self.client,
            self.admin,
            "GET",
            path,
            headers,
            String::new(),
        )
        .await
    }

    /// Triggers shutdown and waits for the controller to stop.
    pub async fn stop(mut self) {
        if let Some(t) = self.trigger.take() {
            let _ = t.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("controller stops within its grace period")
                .unwrap();
        }
    }

    /// Triggers shutdown without waiting.
    pub fn trigger_shutdown(&mut self) -> tokio::task::JoinHandle<proxy_pool_controller::Exit> {
        if let Some(t) = self.trigger.take() {
            let _ = t.send(());
        }
        self.task.take().expect("running")
    }
}

pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> Resp {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body))).unwrap();
    let resp = client.request(req).await.expect("HTTP round trip");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let documented = [
        "/api/v1/proxies/extract",
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/inventory",
    ];
    if documented.contains(&path) {
        let ct = headers.get("content-type").and_then(|v| v.to_str().ok());
        openapi::check(path, &method.to_ascii_lowercase(), status, ct, &body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// An `ExtractionStore` wrapper that can delay or fail.
pub struct Faulty {
    pub inner: Arc<dyn activity_pool::ports::ExtractionStore>,
    pub delay: parking_lot::Mutex<Duration>,
    pub fail: parking_lot::Mutex<Option<activity_pool::PoolError>>,
    /// Delay after the inner store committed (a slow answer).
    pub delay_after: parking_lot::Mutex<Duration>,
}

impl Faulty {
    pub fn wrap(inner: Arc<dyn activity_pool::ports::ExtractionStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            delay: parking_lot::Mutex::new(Duration::ZERO),
            fail: parking_lot::Mutex::new(None),
            delay_after: parking_lot::Mutex::new(Duration::ZERO),
        })
    }
}

#[async_trait::async_trait]
impl activity_pool::ports::ExtractionStore for Faulty {
    async fn extract(
        &self,
        request: &activity_pool::model::ExtractRequest,
    ) -> activity_pool::PoolResult<activity_pool::model::ExtractOutcome> {
        let delay = *self.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(e) = self.fail.lock().clone() {
            return Err(e);
        }
        let outcome = self.inner.extract(request).await;
        let after = *self.delay_after.lock();
        if !after.is_zero() {
            tokio::time::sleep(after).await;
        }
        outcome
    }
}
