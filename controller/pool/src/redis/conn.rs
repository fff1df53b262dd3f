//! The connection handle: one multiplexed connection shared by every call, replaced
//! after I/O errors and `READONLY` (re-resolving a Sentinel master), with every script
//! loaded on each (re)connect.
//!
//! Lock choice: a `std::sync::Mutex` around an `Option<(generation, connection)>` held
//! only to clone the handle (never across `.await`), and a `tokio::sync::Mutex` that
//! serialises reconnects so a burst of failures makes one new connection, not many.
//! Redis error text never leaves this module: errors become short codes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::redis::aio::MultiplexedConnection;
use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use super::connector::RedisConnector;
use super::scripts::Script;
use super::timings::ScriptTimings;
use crate::error::{PoolError, PoolResult};

#[derive(Debug)]
enum Fail {
    NoScript,
    Reconnect(&'static str),
    Timeout,
    Unavailable(&'static str),
    Internal(&'static str),
}

pub(crate) struct Conn {
    connector: RedisConnector,
    timeout: Duration,
    slot: Mutex<Option<(u64, MultiplexedConnection)>>,
    connecting: tokio::sync::Mutex<u64>,
    /// When the last connect attempt failed: callers that queued behind that attempt
    /// share its failure instead of trying one after another (each up to the timeout).
    last_failure: Mutex<Option<Instant>>,
    /// Latency of every script call, per operation.
    timings: std::sync::Arc<ScriptTimings>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("connector", &self.connector)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn classify(e: &RedisError) -> Fail {
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::NoScript) => Fail::NoScript,
        ErrorKind::Server(ServerErrorKind::ReadOnly) => Fail::Reconnect("read_only"),
        ErrorKind::Server(ServerErrorKind::BusyLoading) => Fail::Unavailable("loading"),
        ErrorKind::Server(ServerErrorKind::MasterDown) => Fail::Reconnect("master_down"),
        ErrorKind::Server(ServerErrorKind::TryAgain) => Fail::Unavailable("try_again"),
        _ if e.is_timeout() => Fail::Timeout,
        _ if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error() =>
        {
            Fail::Reconnect("io_error")
        }
        ErrorKind::Server(_) => Fail::Internal("script_error"),
        _ => Fail::Internal("redis_error"),
    }
}

impl Conn {
    pub(crate) fn new(connector: RedisConnector, timeout: Duration) -> Self {
        Self {
            connector,
            timeout,
            slot: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(0),
            last_failure: Mutex::new(None),
            timings: std::sync::Arc::default(),
        }
    }

    /// The latency histograms of this connection's script calls.
    pub(crate) fn timings(&self) -> std::sync::Arc<ScriptTimings> {
        self.timings.clone()
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.slot.lock().ok().and_then(|s| s.clone())
    }

    fn forget(&self, generation: u64) {
        if let Ok(mut s) = self.slot.lock()
            && matches!(&*s, Some((g, _)) if *g == generation)
        {
            *s = None;
        }
    }

    /// A connection newer than `failed` (connecting if needed).
    pub(crate) async fn connection(
        &self,
        failed: Option<u64>,
    ) -> PoolResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.current()
            && Some(c.0) != failed
        {
            return Ok(c);
        }
        let waiting_since = Instant::now();
        let mut generation = self.connecting.lock().await;
        if let Some(c) = self.current()
            && Some(c.0) != failed
        {
            return Ok(c);
        }
        let failed_meanwhile = self
            .last_failure
            .lock()
            .ok()
            .and_then(|f| *f)
            .is_some_and(|t| t >= waiting_since);
        if failed_meanwhile {
            return Err(PoolError::Unavailable("connect_failed".into()));
        }
        let connected = match self.connector.connect(self.timeout).await {
            Ok(mut conn) => self
                .load_scripts(&mut conn)
                .await
                .map(|()| conn)
                .map_err(|f| unavailable(&f)),
            Err(e) => Err(e),
        };
        let conn = match connected {
            Ok(conn) => conn,
            Err(e) => {
                if let Ok(mut f) = self.last_failure.lock() {
                    *f = Some(Instant::now());
                }
                return Err(e);
            }
        };
        *generation += 1;
        if let Ok(mut s) = self.slot.lock() {
            *s = Some((*generation, conn.clone()));
        }
        tracing::debug!(generation = *generation, "redis connection ready");
        Ok((*generation, conn))
    }

    async fn load_scripts(&self, conn: &mut MultiplexedConnection) -> Result<(), Fail> {
        let mut pipe = ::redis::pipe();
        for s in Script::ALL {
            pipe.cmd("SCRIPT").arg("LOAD").arg(s.code());
        }
        let shas: Vec<String> = tokio::time::timeout(self.timeout, pipe.query_async(conn))
            .await
            .map_err(|_| Fail::Timeout)?
            .map_err(|e| classify(&e))?;
        if shas.len() != Script::ALL.len()
            || Script::ALL.iter().zip(&shas).any(|(s, h)| s.sha() != h)
        {
            return Err(Fail::Internal("script_hash_mismatch"));
        }
        Ok(())
    }

    async fn evalsha(
        &self,
        conn: &mut MultiplexedConnection,
        script: Script,
        keys: &[String],
        args: &[String],
    ) -> Result<String, Fail> {
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
        tokio::time::timeout(self.timeout, cmd.query_async::<String>(conn))
            .await
            .map_err(|_| Fail::Timeout)?
            .map_err(|e| classify(&e))
    }

    /// Runs a preloaded script. `NOSCRIPT` reloads every script and retries once; an
    /// I/O error, `READONLY` or a reply that did not come within the timeout
    /// reconnects (re-resolving the master), reloads, and retries once with the same
    /// arguments: the operation ID inside them makes the retry return the first
    /// attempt's result if that one committed (a slow reply must not turn a committed
    /// extraction into an error while its proxies are gone).
    pub(crate) async fn eval(
        &self,
        script: Script,
        keys: &[String],
        args: &[String],
    ) -> PoolResult<String> {
        let started = Instant::now();
        let result = self.eval_once(script, keys, args).await;
        self.timings.record(script, started.elapsed());
        result
    }

    /// [`Conn::eval`] without the timing.
    async fn eval_once(
        &self,
        script: Script,
        keys: &[String],
        args: &[String],
    ) -> PoolResult<String> {
        let (generation, mut conn) = self.connection(None).await?;
        let first = self.evalsha(&mut conn, script, keys, args).await;
        let fail = match first {
            Ok(v) => return Ok(v),
            Err(f) => f,
        };
        tracing::debug!(script = script.name(), failure = ?fail, "redis call failed");
        match fail {
            Fail::NoScript => {
                if let Err(f) = self.load_scripts(&mut conn).await {
                    self.forget(generation);
                    return Err(unavailable(&f));
                }
                self.evalsha(&mut conn, script, keys, args)
                    .await
                    .map_err(|f| self.finish(generation, f))
            }
            Fail::Reconnect(_) | Fail::Timeout => {
                self.forget(generation);
                let (g2, mut c2) = self.connection(Some(generation)).await?;
                self.evalsha(&mut c2, script, keys, args)
                    .await
                    .map_err(|f| self.finish(g2, f))
            }
            f => Err(self.finish(generation, f)),
        }
    }

    fn finish(&self, generation: u64, f: Fail) -> PoolError {
        if matches!(f, Fail::Reconnect(_) | Fail::Timeout) {
            self.forget(generation);
        }
        unavailable(&f)
    }
}

fn unavailable(f: &Fail) -> PoolError {
    match f {
        Fail::NoScript => PoolError::Unavailable("noscript".into()),
        Fail::Reconnect(code) | Fail::Unavailable(code) => PoolError::Unavailable((*code).into()),
        Fail::Timeout => PoolError::Unavailable("timeout".into()),
        Fail::Internal(code) => PoolError::Internal((*code).into()),
    }
}
