//! Where the Redis master is: a direct URL, or a Sentinel-monitored master resolved at
//! every (re)connect — over TLS (`rediss://`, or `with_tls` for Sentinel, with an
//! optional private trust bundle) and with ACL users on the master and the sentinels.
//! Owns the passwords; never prints them. The one way the controller connects to Redis
//! (the pool, the rate limiter's link, analytics and the cache all use it).
//!
//! [`RedisConn`] is the one reconnecting connection outside the pool's own script
//! connection: a multiplexed connection made through a connect function (normally
//! [`RedisConnector::relinking`]) on first use and again after a transport error — a
//! restarted Redis or a Sentinel failover is picked up on the next call — with a failed
//! connect making calls fail fast for a short while instead of piling up. The
//! controller's link (rate limiter, readiness), the analytics working set and the
//! TokenReview cache use it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::error::{PoolError, PoolResult};
use crate::model::Secret;

/// How to reach the Redis master. Cheap to clone.
#[derive(Clone)]
pub struct RedisConnector {
    target: Target,
    password: Option<Secret>,
    username: Option<String>,
    /// TLS to the master (and the sentinels); the PEM trust bundle when not the
    /// system's roots.
    tls: Option<Option<Vec<u8>>>,
    sentinel_username: Option<String>,
    sentinel_password: Option<Secret>,
}

#[derive(Clone)]
enum Target {
    Direct(::redis::ConnectionInfo),
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

impl fmt::Debug for RedisConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match &self.target {
            Target::Direct(info) => format!("direct({})", info.addr()),
            Target::Sentinel { master, sentinels } => {
                format!("sentinel({master} via {})", sentinels.len())
            }
        };
        f.debug_struct("RedisConnector")
            .field("target", &target)
            .field("tls", &self.tls.is_some())
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

impl RedisConnector {
    /// A single Redis at `url` (`redis://[:password@]host:port/[db]`, or `rediss://`
    /// for TLS with the system's roots; see [`RedisConnector::with_tls`]).
    pub fn direct(url: &str) -> PoolResult<Self> {
        let info = url
            .into_connection_info()
            .map_err(|_| PoolError::invalid("redis.url", "not a valid redis:// URL"))?;
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. }).then_some(None);
        Ok(Self {
            target: Target::Direct(info),
            password: None,
            username: None,
            tls,
            sentinel_username: None,
            sentinel_password: None,
        })
    }

    /// A Sentinel-monitored master named `master`; `sentinels` are `host:port` (or
    /// `redis://host:port`) addresses. The master is resolved at every (re)connect.
    pub fn sentinel(master: &str, sentinels: Vec<String>) -> PoolResult<Self> {
        if master.is_empty() {
            return Err(PoolError::invalid(
                "redis.sentinel.master",
                "must not be empty",
            ));
        }
        if sentinels.is_empty() {
            return Err(PoolError::invalid(
                "redis.sentinel.addresses",
                "at least one sentinel",
            ));
        }
        let mut parsed = Vec::with_capacity(sentinels.len());
        for (i, s) in sentinels.into_iter().enumerate() {
            let url = if s.contains("://") {
                s
            } else {
                format!("redis://{s}/")
            };
            url.as_str().into_connection_info().map_err(|_| {
                PoolError::invalid(format!("redis.sentinel.addresses[{i}]"), "not host:port")
            })?;
            parsed.push(url);
        }
        Ok(Self {
            target: Target::Sentinel {
                master: master.to_owned(),
                sentinels: parsed,
            },
            password: None,
            username: None,
            tls: None,
            sentinel_username: None,
            sentinel_password: None,
        })
    }

    /// Talks TLS to the master (and the sentinels), verifying their certificates
    /// against `ca_pem` (a PEM bundle) or, with `None`, the system's roots.
    pub fn with_tls(mut self, ca_pem: Option<Vec<u8>>) -> Self {
        self.tls = Some(ca_pem);
        self
    }

    /// Authenticates to the sentinels (an ACL user, or `default` with `None`).
    pub fn with_sentinel_auth(
        mut self,
        username: Option<String>,
        password: Option<Secret>,
    ) -> Self {
        self.sentinel_username = username;
        self.sentinel_password = password;
        self
    }

    /// A client for `info`: over TLS when configured (with the private trust bundle).
    fn client(&self, info: ConnectionInfo) -> Result<Client, ::redis::RedisError> {
        let info = match (&self.tls, info.addr().clone()) {
            (Some(_), ConnectionAddr::Tcp(host, port)) => {
                let settings = info.redis_settings().clone();
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                }
                .into_connection_info()?
                .set_redis_settings(settings)
            }
            _ => info,
        };
        match &self.tls {
            Some(Some(ca)) => Client::build_with_tls(
                info,
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            ),
            _ => Client::open(info),
        }
    }

    /// Authenticates to the master with `password` (overrides one in the URL).
    pub fn with_password(mut self, password: Secret) -> Self {
        self.password = Some(password);
        self
    }

    /// Authenticates with an ACL user as well.
    pub fn with_username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    /// Opens a multiplexed connection to the current master.
    pub async fn connect(&self, timeout: Duration) -> PoolResult<MultiplexedConnection> {
        let info = match &self.target {
            Target::Direct(info) => info.clone(),
            Target::Sentinel { master, sentinels } => {
                self.resolve_master(master, sentinels, timeout).await?
            }
        };
        let mut settings = info.redis_settings().clone();
        if let Some(p) = &self.password {
            settings = settings.set_password(p.expose());
        }
        if let Some(u) = &self.username {
            settings = settings.set_username(u);
        }
        let info = info.set_redis_settings(settings);
        let client = self
            .client(info)
            .map_err(|_| PoolError::Unavailable("connect_failed".into()))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(None);
        let mut conn = tokio::time::timeout(
            timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| PoolError::Unavailable("connect_timeout".into()))?
        .map_err(|e| PoolError::Unavailable(connect_code(&e).into()))?;
        if matches!(self.target, Target::Sentinel { .. }) {
            // The sentinels may lag a failover; a replica must never be written to.
            let role: Vec<::redis::Value> =
                tokio::time::timeout(timeout, ::redis::cmd("ROLE").query_async(&mut conn))
                    .await
                    .map_err(|_| PoolError::Unavailable("connect_timeout".into()))?
                    .map_err(|_| PoolError::Unavailable("role_failed".into()))?;
            let is_master = matches!(role.first(), Some(::redis::Value::BulkString(b)) if b.as_slice() == b"master");
            if !is_master {
                return Err(PoolError::Unavailable("not_master".into()));
            }
        }
        Ok(conn)
    }
}

fn connect_code(e: &::redis::RedisError) -> &'static str {
    match e.kind() {
        ::redis::ErrorKind::AuthenticationFailed => "auth_failed",
        _ if e.is_timeout() => "connect_timeout",
        _ if e.is_connection_refusal() => "connection_refused",
        _ if e.is_io_error() => "io_error",
        _ => "connect_failed",
    }
}

impl RedisConnector {
    /// Asks the sentinels (over TLS and with their ACL user when configured) where the
    /// master is.
    async fn resolve_master(
        &self,
        master: &str,
        sentinels: &[String],
        timeout: Duration,
    ) -> PoolResult<ConnectionInfo> {
        for url in sentinels {
            let Ok(info) = url.as_str().into_connection_info() else {
                continue;
            };
            let mut settings = info.redis_settings().clone();
            if let Some(p) = &self.sentinel_password {
                settings = settings.set_password(p.expose());
            }
            if let Some(u) = &self.sentinel_username {
                settings = settings.set_username(u);
            }
            let Ok(client) = self.client(info.set_redis_settings(settings)) else {
                continue;
            };
            let config = AsyncConnectionConfig::new().set_connection_timeout(Some(timeout));
            let Ok(Ok(mut conn)) = tokio::time::timeout(
                timeout,
                client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
            else {
                continue;
            };
            let reply: Result<Result<Option<(String, u16)>, _>, _> = tokio::time::timeout(
                timeout,
                ::redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query_async(&mut conn),
            )
            .await;
            if let Ok(Ok(Some((host, port)))) = reply
                && let Ok(info) = ConnectionAddr::Tcp(host, port).into_connection_info()
            {
                tracing::debug!(master, "resolved master through sentinel");
                return Ok(info);
            }
        }
        Err(PoolError::Unavailable("no_master".into()))
    }
}

impl RedisConnector {
    /// A [`RedisConn`] through this connector, each connect bounded by `timeout`; a
    /// failed connect makes calls fail fast for [`RETRY_AFTER_FAILURE`].
    pub fn relinking(&self, timeout: Duration) -> RedisConn {
        RedisConn::relink(self.connect_fn(timeout))
    }

    /// A connect function through this connector (errors keep the short code only).
    pub fn connect_fn(&self, timeout: Duration) -> Connect {
        let connector = self.clone();
        Arc::new(move || {
            let connector = connector.clone();
            Box::pin(async move {
                connector.connect(timeout).await.map_err(|e| {
                    RedisError::from((ErrorKind::Io, "redis unavailable", e.to_string()))
                })
            })
        })
    }
}

/// How long a failed connect makes calls of a [`RedisConn`] fail fast, unless set
/// with [`RedisConn::relink_with`].
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// Makes a new connection (resolving a Sentinel master, authenticating).
pub type Connect = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = RedisResult<MultiplexedConnection>> + Send>>
        + Send
        + Sync,
>;

#[derive(Default)]
struct RelinkState {
    conn: Option<MultiplexedConnection>,
    failed_at: Option<Instant>,
}

/// A Redis connection that is cheap to clone: a fixed multiplexed connection (tests,
/// embedders), or one re-made through a [`Connect`] function after a transport error.
#[derive(Clone)]
pub struct RedisConn {
    inner: ConnInner,
}

#[derive(Clone)]
enum ConnInner {
    Fixed(MultiplexedConnection),
    Relink {
        connect: Connect,
        retry_after: Duration,
        state: Arc<tokio::sync::Mutex<RelinkState>>,
    },
}

impl fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            ConnInner::Fixed(_) => f.write_str("RedisConn::Fixed"),
            ConnInner::Relink { .. } => f.write_str("RedisConn::Relink"),
        }
    }
}

impl From<MultiplexedConnection> for RedisConn {
    fn from(c: MultiplexedConnection) -> Self {
        Self {
            inner: ConnInner::Fixed(c),
        }
    }
}

impl RedisConn {
    /// A connection made by `connect` on first use and again after a transport error;
    /// a failed connect makes calls fail fast for [`RETRY_AFTER_FAILURE`].
    pub fn relink(connect: Connect) -> Self {
        Self::relink_with(connect, RETRY_AFTER_FAILURE)
    }

    /// [`RedisConn::relink`], failing fast for `retry_after` after a failed connect.
    pub fn relink_with(connect: Connect, retry_after: Duration) -> Self {
        Self {
            inner: ConnInner::Relink {
                connect,
                retry_after,
                state: Arc::default(),
            },
        }
    }

    /// The current connection, made now when there is none (or an error while a
    /// failed connect is recent).
    pub async fn current(&self) -> RedisResult<MultiplexedConnection> {
        match &self.inner {
            ConnInner::Fixed(c) => Ok(c.clone()),
            ConnInner::Relink {
                connect,
                retry_after,
                state,
            } => {
                let mut st = state.lock().await;
                if let Some(c) = &st.conn {
                    return Ok(c.clone());
                }
                if st.failed_at.is_some_and(|t| t.elapsed() < *retry_after) {
                    return Err(RedisError::from((
                        ErrorKind::Io,
                        "redis reconnect backing off",
                    )));
                }
                match connect().await {
                    Ok(c) => {
                        st.conn = Some(c.clone());
                        st.failed_at = None;
                        Ok(c)
                    }
                    Err(e) => {
                        st.failed_at = Some(Instant::now());
                        Err(e)
                    }
                }
            }
        }
    }

    /// Drops the current connection: the next call connects again (no-op when fixed).
    pub async fn reset(&self) {
        if let ConnInner::Relink { state, .. } = &self.inner {
            state.lock().await.conn = None;
        }
    }

    async fn after<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_timeout()
                || e.is_connection_refusal()
                || e.code() == Some("READONLY"))
        {
            self.reset().await;
        }
        r
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut c = self.current().await?;
            let r = c.req_packed_command(cmd).await;
            self.after(r).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut c = self.current().await?;
            let r = c.req_packed_commands(pipeline, offset, count).await;
            self.after(r).await
        })
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            ConnInner::Fixed(c) => c.get_db(),
            ConnInner::Relink { .. } => 0,
        }
    }
}
