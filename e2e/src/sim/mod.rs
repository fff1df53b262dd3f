//! The vendor simulator: a vendor API that sells short-lived proxies, the proxies
//! themselves (real HTTP CONNECT / SOCKS5 forward proxies on loopback, each leaving
//! through its own 127.0.0.x source address), and an HTTP/HTTPS echo server that
//! reports the source address it saw. For tests, the local stack and benchmarks.
//!
//! Everything binds loopback only, every task stops on [`Simulator::shutdown`] or
//! drop, and no proxy forwards beyond loopback.

mod api;
pub mod audit;
mod config;
mod core;
mod echo;
mod egress;
mod error;
mod failure;
mod model;
mod proxy;
mod registry;
mod tls;

pub use config::{FailureShare, MAX_LIVE_PROXIES, SimConfig, VendorCredentials};
pub use echo::{EchoReply, MAX_ECHO_BYTES};
pub use error::{ConfigError, SimError};
pub use failure::{FailureMode, MAX_SLOW_DELAY, VendorFault};
pub use model::{MAX_PROXY_TTL, Protocol, ProxySpec, ProxyStatus, SimProxy};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use self::core::{EchoInfo, SimCore};
use self::egress::EgressPool;
use self::registry::Registry;

/// How long [`Simulator::shutdown`] waits for tasks before giving up on them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The three listeners the simulator serves, bound by the caller.
#[derive(Debug)]
pub struct SimListeners {
    /// Vendor and control API.
    pub vendor_api: TcpListener,
    /// Plain-HTTP echo server.
    pub echo_http: TcpListener,
    /// HTTPS echo server.
    pub echo_https: TcpListener,
}

impl SimListeners {
    /// Binds all three on `127.0.0.1:0`.
    pub async fn loopback() -> Result<Self, SimError> {
        let bind = |what: &'static str| async move {
            TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|source| SimError::Bind { what, source })
        };
        Ok(Self {
            vendor_api: bind("vendor api").await?,
            echo_http: bind("echo http").await?,
            echo_https: bind("echo https").await?,
        })
    }
}

/// A running simulator. Dropping it stops every task (without waiting);
/// [`Simulator::shutdown`] stops them and waits, bounded by [`SHUTDOWN_GRACE`].
#[derive(Debug)]
pub struct Simulator {
    core: Arc<SimCore>,
    vendor_addr: SocketAddr,
}

impl Simulator {
    /// Starts on fresh `127.0.0.1:0` listeners.
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
        Self::start_with(config, SimListeners::loopback().await?).await
    }

    /// Starts on listeners the caller bound.
    pub async fn start_with(config: SimConfig, listeners: SimListeners) -> Result<Self, SimError> {
        let settings = config.validate()?;
        let addr = |l: &TcpListener, what: &'static str| {
            l.local_addr()
                .map_err(|source| SimError::Bind { what, source })
        };
        let vendor_addr = addr(&listeners.vendor_api, "vendor api")?;
        let tls = tls::generate()?;
        let echo = EchoInfo {
            http: addr(&listeners.echo_http, "echo http")?,
            https: addr(&listeners.echo_https, "echo https")?,
            ca_pem: tls.ca_pem.clone(),
        };
        let egress = EgressPool::new(
            settings.egress_first,
            settings.egress_last,
            settings.shared_egress_ip,
        );
        let registry = Registry::new(settings.max_live_proxies, egress);
        let core = Arc::new(SimCore::new(settings, registry, echo));

        core.tracker
            .spawn(echo::run(core.clone(), listeners.echo_http, None));
        core.tracker
            .spawn(echo::run(core.clone(), listeners.echo_https, Some(tls)));
        let app = api::app(core.clone());
        let token = core.token.clone();
        core.tracker.spawn(async move {
            let serve = axum::serve(listeners.vendor_api, app)
                .with_graceful_shutdown(token.cancelled_owned());
            if let Err(err) = serve.await {
                warn!(error = %err, "vendor api server failed");
            }
        });
        debug!(%vendor_addr, echo_http = %core.echo.http, echo_https = %core.echo.https, "simulator started");
        Ok(Self { core, vendor_addr })
    }

    /// Vendor API address.
    pub fn vendor_addr(&self) -> SocketAddr {
        self.vendor_addr
    }

    /// Vendor API base URL, e.g. `http://127.0.0.1:40123`.
    pub fn vendor_url(&self) -> String {
        format!("http://{}", self.vendor_addr)
    }

    /// The credentials the vendor API expects.
    pub fn credentials(&self) -> &VendorCredentials {
        &self.core.settings.credentials
    }

    /// Plain-HTTP echo server address.
    pub fn echo_http_addr(&self) -> SocketAddr {
        self.core.echo.http
    }

    /// HTTPS echo server address.
    pub fn echo_https_addr(&self) -> SocketAddr {
        self.core.echo.https
    }

    /// `http://127.0.0.1:PORT` of the echo server.
    pub fn echo_http_url(&self) -> String {
        format!("http://{}", self.core.echo.http)
    }

    /// `https://127.0.0.1:PORT` of the echo server (trust [`Simulator::echo_ca_pem`]).
    pub fn echo_https_url(&self) -> String {
        format!("https://{}", self.core.echo.https)
    }

    /// PEM of the CA that signed the HTTPS echo server's certificate
    /// (valid for `localhost` and `127.0.0.1`).
    pub fn echo_ca_pem(&self) -> &str {
        &self.core.echo.ca_pem
    }

    /// Creates a proxy with default labels.
    pub async fn spawn_proxy(
        &self,
        protocol: Protocol,
        ttl: Duration,
        failure: FailureMode,
    ) -> Result<SimProxy, SimError> {
        let mut spec = ProxySpec::new(protocol, ttl);
        spec.failure = failure;
        self.spawn_proxy_with(spec).await
    }

    /// Creates a proxy from a full spec.
    pub async fn spawn_proxy_with(&self, spec: ProxySpec) -> Result<SimProxy, SimError> {
        if let Err(msg) = spec.failure.check() {
            return Err(SimError::Config(ConfigError {
                problems: vec![format!("failure: {msg}")],
            }));
        }
        proxy::spawn(&self.core, spec).await
    }

    /// Changes a live proxy's failure mode (affects connections accepted from now on).
    pub fn set_failure(&self, id: &str, failure: FailureMode) -> Result<(), SimError> {
        self.core.registry.get(id)?.failure.set(failure);
        Ok(())
    }

    /// Makes the vendor API (`GET /v1/proxies`) fail, slow down or recover.
    pub fn set_vendor_fault(&self, fault: VendorFault) -> Result<(), SimError> {
        fault.check().map_err(|msg| {
            SimError::Config(ConfigError {
                problems: vec![format!("vendorFault: {msg}")],
            })
        })?;
        self.core.vendor_fault.set(fault);
        Ok(())
    }

    /// Ends a proxy now, as if its TTL had run out.
    pub fn expire(&self, id: &str) -> Result<(), SimError> {
        self.core.registry.expire(id)
    }

    /// The exclusivity auditor's log of every proxy use.
    pub fn audit(&self) -> &audit::AuditLog {
        &self.core.audit
    }

    /// Live proxies, oldest first.
    pub fn live_proxies(&self) -> Vec<ProxyStatus> {
        self.core
            .registry
            .list()
            .iter()
            .map(|p| p.status())
            .collect()
    }

    /// Stops accepting everywhere, closes every tunnel, and waits for the tasks
    /// (at most [`SHUTDOWN_GRACE`]). Returns whether every task finished in time.
    pub async fn shutdown(self) -> bool {
        self.core.token.cancel();
        self.core.tracker.close();
        let done = tokio::time::timeout(SHUTDOWN_GRACE, self.core.tracker.wait())
            .await
            .is_ok();
        if !done {
            warn!(
                remaining = self.core.tracker.len(),
                "simulator tasks still running after the grace period"
            );
        }
        done
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.core.token.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn proxies_expire_at_their_ttl_on_the_tokio_clock() {
        let sim = Simulator::start(SimConfig::default()).await.unwrap();
        let ttl = Duration::from_secs(60);
        let short = sim
            .spawn_proxy(Protocol::Http, ttl, FailureMode::None)
            .await
            .unwrap();
        let long = sim
            .spawn_proxy(Protocol::Socks5, ttl * 2, FailureMode::None)
            .await
            .unwrap();
        tokio::time::sleep(ttl - Duration::from_secs(1)).await;
        assert_eq!(sim.live_proxies().len(), 2);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let live: Vec<_> = sim.live_proxies().into_iter().map(|p| p.proxy.id).collect();
        assert_eq!(live, vec![long.id.clone()]);
        assert!(tokio::net::TcpStream::connect(short.addr()).await.is_err());
        assert!(tokio::net::TcpStream::connect(long.addr()).await.is_ok());
        assert!(sim.shutdown().await);
    }

    #[tokio::test]
    async fn out_of_range_ttls_are_rejected() {
        let sim = Simulator::start(SimConfig::default()).await.unwrap();
        for ttl in [Duration::ZERO, Duration::MAX] {
            let err = sim
                .spawn_proxy(Protocol::Http, ttl, FailureMode::None)
                .await
                .unwrap_err();
            assert!(matches!(err, SimError::Config(_)), "{ttl:?}");
        }
        assert!(sim.live_proxies().is_empty());
    }

    #[tokio::test]
    async fn invalid_config_is_reported_before_anything_starts() {
        let config = SimConfig {
            max_live_proxies: 0,
            ..SimConfig::default()
        };
        let err = Simulator::start(config).await.unwrap_err();
        assert!(matches!(err, SimError::Config(_)));
    }
}
