//! Simulated vendor proxies: each is a listener on its own loopback port with its own
//! credentials, egress address, TTL and failure mode. Owns the proxy lifecycle
//! (spawn → accept → expire); never outlives its TTL or the simulator's shutdown.

mod http;
mod socks5;
mod upstream;

use rand::Rng;
use rand::distr::Alphanumeric;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, instrument};

use super::audit::UseGuard;
use super::core::SimCore;
use super::error::{ConfigError, SimError};
use super::failure::{FailureMode, Switch};
use super::model::{MAX_PROXY_TTL, Protocol, ProxySpec, SimProxy, rfc3339};
use super::registry::ProxyState;

/// Everything one client connection needs; shared with the tunnel task it may spawn.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    core: Arc<SimCore>,
    proxy: Arc<ProxyState>,
    /// The mode read at accept time; a later change affects only new connections.
    failure: FailureMode,
    peer: SocketAddr,
    /// Released when the last holder (connection or tunnel task) ends.
    _permit: OwnedSemaphorePermit,
}

impl ConnCtx {
    /// Relays between `client` and the dialled `upstream` until either side ends,
    /// cutting the connection after this mode's byte budget; the bytes count on `used`.
    /// `what` names the tunnel in the logs.
    async fn relay<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        client: &mut C,
        upstream: TcpStream,
        used: &UseGuard,
        what: &'static str,
    ) {
        let mut upstream = upstream::Budgeted::new(upstream, self.failure.byte_budget());
        match tokio::io::copy_bidirectional(client, &mut upstream).await {
            Ok((up, down)) => {
                used.relayed(up + down);
                debug!(tunnel = what, up, down, "tunnel closed");
            }
            Err(err) => debug!(tunnel = what, error = %err, "tunnel ended with an error"),
        }
    }

    /// Source address outbound connections bind to.
    fn egress_ip(&self) -> Ipv4Addr {
        match self.failure {
            FailureMode::WrongEgress => self.core.settings.shared_egress_ip,
            _ => self.proxy.egress_ip,
        }
    }

    /// Whether a request for `target` is answered in-process (`inlineEcho`): the
    /// target is the plain-HTTP echo server and no byte budget applies.
    fn echoes_inline(&self, target: &upstream::Target) -> bool {
        self.core.settings.inline_echo
            && self.failure.byte_budget().is_none()
            && matches!(target, upstream::Target::Ip(addr) if *addr == self.core.echo.http)
    }

    /// What an inline echo reports as the connection's source: the egress address a
    /// dialled connection would have had (port 0).
    fn inline_peer(&self) -> SocketAddr {
        SocketAddr::from((self.egress_ip(), 0))
    }

    /// Whether the presented credentials open this proxy.
    fn credentials_ok(&self, username: &[u8], password: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        let user_ok = username.ct_eq(self.proxy.info.username.as_bytes());
        let pass_ok = password.ct_eq(self.proxy.info.password.as_bytes());
        self.failure != FailureMode::BadAuth && bool::from(user_ok & pass_ok)
    }
}

/// Creates a proxy: admits it, binds its listener, registers it and starts its task.
#[instrument(level = "debug", skip_all, fields(protocol = %spec.protocol, ttl_ms = spec.ttl.as_millis() as u64))]
pub(crate) async fn spawn(core: &Arc<SimCore>, spec: ProxySpec) -> Result<SimProxy, SimError> {
    if spec.ttl.is_zero() || spec.ttl > MAX_PROXY_TTL {
        return Err(SimError::Config(ConfigError {
            problems: vec![format!(
                "ttl: must be between 1 ns and {} s",
                MAX_PROXY_TTL.as_secs()
            )],
        }));
    }
    let settings = &core.settings;
    let egress_ip = core.registry.admit()?;
    let listener = match TcpListener::bind((settings.proxy_listen_ip, 0)).await {
        Ok(listener) => listener,
        Err(source) => {
            core.registry.abandon(egress_ip);
            return Err(SimError::Bind {
                what: "proxy listener",
                source,
            });
        }
    };
    let port = match listener.local_addr() {
        Ok(addr) => addr.port(),
        Err(source) => {
            core.registry.abandon(egress_ip);
            return Err(SimError::Bind {
                what: "proxy listener address",
                source,
            });
        }
    };
    let deadline = tokio::time::Instant::now() + spec.ttl;
    let info = describe(core, &spec, port);
    let state = Arc::new(ProxyState {
        info: info.clone(),
        egress_ip,
        failure: Switch::new(spec.failure),
        conn_limit: Arc::new(Semaphore::new(settings.max_connections_per_proxy)),
        max_connections: settings.max_connections_per_proxy,
        token: core.token.child_token(),
    });
    core.registry.insert(state.clone());
    debug!(id = %info.id, port, %egress_ip, "proxy started");
    core.tracker
        .spawn(run(core.clone(), state, listener, deadline));
    Ok(info)
}

fn describe(core: &SimCore, spec: &ProxySpec, port: u16) -> SimProxy {
    let settings = &core.settings;
    let mut rng = rand::rng();
    let random = |rng: &mut rand::rngs::ThreadRng, n: usize| -> String {
        rng.sample_iter(&Alphanumeric)
            .take(n)
            .map(char::from)
            .collect()
    };
    let id = format!(
        "px-{:06}-{}",
        core.next_seq(),
        random(&mut rng, 6).to_lowercase()
    );
    let username = format!("u{}", random(&mut rng, 11).to_lowercase());
    let password = random(&mut rng, 20);
    let pick = |wanted: &Option<String>, labels: &[String]| {
        wanted
            .clone()
            .or_else(|| labels.first().cloned())
            .unwrap_or_default()
    };
    SimProxy {
        id,
        protocol: spec.protocol,
        host: settings.proxy_listen_ip,
        port,
        username,
        password,
        region: pick(&spec.labels.region, &settings.regions),
        carrier: pick(&spec.labels.carrier, &settings.carriers),
        city: spec
            .labels
            .city
            .clone()
            .or_else(|| settings.cities.first().cloned()),
        expires_at: rfc3339(SystemTime::now() + spec.ttl),
        ttl_seconds: spec.ttl.as_secs() + u64::from(spec.ttl.subsec_nanos() > 0),
    }
}

/// The proxy's life: accept until the deadline or cancellation, then close the
/// listener, cancel every open connection and leave the registry.
async fn run(
    core: Arc<SimCore>,
    proxy: Arc<ProxyState>,
    listener: TcpListener,
    deadline: tokio::time::Instant,
) {
    tokio::select! {
        () = accept_loop(&core, &proxy, listener) => {}
        () = tokio::time::sleep_until(deadline) => debug!(id = %proxy.info.id, "proxy expired"),
        () = proxy.token.cancelled() => debug!(id = %proxy.info.id, "proxy cancelled"),
    }
    // The listener was dropped with the accept loop: new connections are refused.
    proxy.token.cancel();
    core.registry.remove(&proxy.info.id);
}

async fn accept_loop(core: &Arc<SimCore>, proxy: &Arc<ProxyState>, listener: TcpListener) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Typically EMFILE: back off briefly instead of spinning.
                debug!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let failure = proxy.failure.get();
        if failure == FailureMode::Refuse {
            debug!(%peer, "refusing connection (failure mode)");
            continue;
        }
        let Ok(permit) = proxy.conn_limit.clone().try_acquire_owned() else {
            debug!(%peer, "connection cap reached, closing");
            continue;
        };
        let ctx = Arc::new(ConnCtx {
            core: core.clone(),
            proxy: proxy.clone(),
            failure,
            peer,
            _permit: permit,
        });
        let token = proxy.token.clone();
        core.tracker.spawn(async move {
            tokio::select! {
                () = serve_connection(ctx, stream) => {}
                () = token.cancelled() => {}
            }
        });
    }
}

#[instrument(level = "debug", skip_all, fields(proxy = %ctx.proxy.info.id, peer = %ctx.peer))]
async fn serve_connection(ctx: Arc<ConnCtx>, stream: TcpStream) {
    if let Some(delay) = ctx.failure.delay() {
        tokio::time::sleep(delay).await;
    }
    let _ = stream.set_nodelay(true);
    match ctx.proxy.info.protocol {
        Protocol::Http => http::serve(ctx, stream).await,
        Protocol::Socks5 => socks5::serve(ctx, stream).await,
    }
}
