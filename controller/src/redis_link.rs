//! The controller's own Redis connection (rate limiter, readiness), separate from the
//! activity pool's: a direct address or a Sentinel-resolved master, one multiplexed
//! connection re-made after any error, every call bounded by a timeout.
//!
//! Owns no pool key; never prints the password.

use std::fmt;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo};
use tokio::sync::Mutex;

/// Why a Redis call failed (no Redis text is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Bad address in the config.
    #[error("invalid redis address")]
    InvalidAddress,
    /// Could not connect or the call failed / timed out.
    #[error("redis unavailable")]
    Unavailable,
}

/// Where the master is.
#[derive(Clone)]
enum Target {
    Direct(redis::ConnectionInfo),
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

/// One lazily (re)connected multiplexed connection.
pub struct RedisLink {
    target: Target,
    username: Option<String>,
    password: Option<String>,
    timeout: Duration,
    conn: Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    conn: Option<MultiplexedConnection>,
    /// After a failed connect, calls fail fast for [`RETRY_AFTER_FAILURE`] instead of
    /// queueing behind the mutex for a connect timeout each.
    failed_at: Option<Instant>,
}

/// How long a failed connect makes calls fail fast.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(250);

impl fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLink")
            .field("timeout", &self.timeout)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl RedisLink {
    /// A single Redis at `url`.
    pub fn direct(url: &str, timeout: Duration) -> Result<Self, LinkError> {
        let info = url
            .into_connection_info()
            .map_err(|_| LinkError::InvalidAddress)?;
        Ok(Self::with_target(Target::Direct(info), timeout))
    }

    /// A Sentinel-monitored master.
    pub fn sentinel(master: &str, sentinels: &[String], timeout: Duration) -> Self {
        let sentinels = sentinels
            .iter()
            .map(|s| {
                if s.contains("://") {
                    s.clone()
                } else {
                    format!("redis://{s}/")
                }
            })
            .collect();
        Self::with_target(
            Target::Sentinel {
                master: master.to_owned(),
                sentinels,
            },
            timeout,
        )
    }

    fn with_target(target: Target, timeout: Duration) -> Self {
        Self {
            target,
            username: None,
            password: None,
            timeout,
            conn: Mutex::new(LinkState::default()),
        }
    }

    /// Authenticates with these credentials.
    pub fn with_auth(mut self, username: Option<String>, password: Option<String>) -> Self {
        self.username = username;
        self.password = password;
        self
    }

    async fn connection(&self) -> Result<MultiplexedConnection, LinkError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.conn.as_ref() {
            return Ok(c.clone());
        }
        if guard
            .failed_at
            .is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE)
        {
            return Err(LinkError::Unavailable);
        }
        match self.open().await {
            Ok(conn) => {
                guard.conn = Some(conn.clone());
                guard.failed_at = None;
                Ok(conn)
            }
            Err(e) => {
                guard.failed_at = Some(Instant::now());
                Err(e)
            }
        }
    }

    async fn open(&self) -> Result<MultiplexedConnection, LinkError> {
        let info = match &self.target {
            Target::Direct(info) => info.clone(),
            Target::Sentinel { master, sentinels } => self.resolve(master, sentinels).await?,
        };
        let mut settings = info.redis_settings().clone();
        if let Some(p) = &self.password {
            settings = settings.set_password(p);
        }
        if let Some(u) = &self.username {
            settings = settings.set_username(u);
        }
        let client =
            Client::open(info.set_redis_settings(settings)).map_err(|_| LinkError::Unavailable)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        tokio::time::timeout(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| LinkError::Unavailable)?
        .map_err(|_| LinkError::Unavailable)
    }

    async fn resolve(
        &self,
        master: &str,
        sentinels: &[String],
    ) -> Result<redis::ConnectionInfo, LinkError> {
        for url in sentinels {
            let Ok(client) = Client::open(url.as_str()) else {
                continue;
            };
            let config = AsyncConnectionConfig::new().set_connection_timeout(Some(self.timeout));
            let Ok(Ok(mut conn)) = tokio::time::timeout(
                self.timeout,
                client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
            else {
                continue;
            };
            let reply: Result<Result<Option<(String, u16)>, _>, _> = tokio::time::timeout(
                self.timeout,
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .query_async(&mut conn),
            )
            .await;
            if let Ok(Ok(Some((host, port)))) = reply
                && let Ok(info) = ConnectionAddr::Tcp(host, port).into_connection_info()
            {
                return Ok(info);
            }
        }
        Err(LinkError::Unavailable)
    }

    async fn forget(&self) {
        self.conn.lock().await.conn = None;
    }

    /// Runs a prepared script (EVALSHA, loading it on NOSCRIPT).
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
    ) -> Result<T, LinkError> {
        let mut conn = self.connection().await?;
        match tokio::time::timeout(self.timeout, inv.invoke_async::<T>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            _ => {
                self.forget().await;
                Err(LinkError::Unavailable)
            }
        }
    }

    /// `PING`.
    pub async fn ping(&self) -> Result<(), LinkError> {
        let mut conn = self.connection().await?;
        let r: Result<Result<String, _>, _> =
            tokio::time::timeout(self.timeout, redis::cmd("PING").query_async(&mut conn)).await;
        match r {
            Ok(Ok(_)) => Ok(()),
            _ => {
                self.forget().await;
                Err(LinkError::Unavailable)
            }
        }
    }
}
