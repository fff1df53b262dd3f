//! The working set's Redis connection: either a fixed multiplexed connection (tests,
//! embedders) or one re-made through a connect function after a transport error (the
//! controller: a restarted Redis or a Sentinel failover is picked up on the next call).
//! A failed connect makes calls fail fast for a short while instead of piling up.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::Mutex;

/// How long a failed connect makes calls fail fast.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(500);

/// Makes a new connection (resolving a Sentinel master, authenticating).
pub type Connect = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = RedisResult<MultiplexedConnection>> + Send>>
        + Send
        + Sync,
>;

#[derive(Default)]
struct State {
    conn: Option<MultiplexedConnection>,
    failed_at: Option<Instant>,
}

/// A connection the working set uses; cheap to clone.
#[derive(Clone)]
pub struct RedisConn {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Fixed(MultiplexedConnection),
    Relink {
        connect: Connect,
        state: Arc<Mutex<State>>,
    },
}

impl fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Fixed(_) => f.write_str("RedisConn::Fixed"),
            Inner::Relink { .. } => f.write_str("RedisConn::Relink"),
        }
    }
}

impl From<MultiplexedConnection> for RedisConn {
    fn from(c: MultiplexedConnection) -> Self {
        Self {
            inner: Inner::Fixed(c),
        }
    }
}

impl RedisConn {
    /// A connection made by `connect` on first use and again after a transport error.
    pub fn relink(connect: Connect) -> Self {
        Self {
            inner: Inner::Relink {
                connect,
                state: Arc::default(),
            },
        }
    }

    async fn current(&self) -> RedisResult<MultiplexedConnection> {
        match &self.inner {
            Inner::Fixed(c) => Ok(c.clone()),
            Inner::Relink { connect, state } => {
                let mut st = state.lock().await;
                if let Some(c) = &st.conn {
                    return Ok(c.clone());
                }
                if st
                    .failed_at
                    .is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE)
                {
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

    async fn after<T>(&self, r: RedisResult<T>) -> RedisResult<T> {
        if let (Err(e), Inner::Relink { state, .. }) = (&r, &self.inner)
            && (e.is_io_error()
                || e.is_connection_dropped()
                || e.is_timeout()
                || e.is_connection_refusal()
                || e.code() == Some("READONLY"))
        {
            state.lock().await.conn = None;
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
            Inner::Fixed(c) => c.get_db(),
            Inner::Relink { .. } => 0,
        }
    }
}
