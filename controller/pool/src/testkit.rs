//! Test fixtures for the Redis adapter: a private `redis-server` (and `redis-sentinel`)
//! per test, and a fault-injecting TCP proxy.
//!
//! Public only so integration tests, benches and other crates' tests can use it, behind
//! the `testkit` feature that only dev-dependencies enable; never in production builds. A missing binary panics with a clear message: tests that
//! need Redis fail, they are never skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

fn binary(env: &str, default: &str) -> String {
    let bin = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if found.is_err() {
        panic!(
            "`{bin}` not found: install Redis (Debian: `apt-get install redis-server redis-sentinel`) \
             or set {env} to the binary; Redis tests never skip"
        );
    }
    bin
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free loopback port");
    l.local_addr().expect("local addr").port()
}

fn temp_dir(tag: &str) -> PathBuf {
    let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("pp-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Sends `PING` and waits for `+PONG`.
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if n >= 5 && (buf.starts_with(b"+PONG") || buf.starts_with(b"-NOAUTH")))
}

/// A private `redis-server` on a free loopback port, without persistence; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server (binary from `PROXY_POOL_REDIS_SERVER`, else `redis-server`).
    pub fn start() -> Self {
        Self::start_with(Vec::new())
    }

    /// Starts a server as a replica of the server on `master_port`.
    pub fn start_replica_of(master_port: u16) -> Self {
        Self::start_with(vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master_port.to_string(),
        ])
    }

    /// Starts a server with extra command-line arguments.
    pub fn start_with(extra: Vec<String>) -> Self {
        let mut last = String::new();
        for _ in 0..5 {
            let mut s = Self {
                port: free_port(),
                dir: temp_dir("redis"),
                extra: extra.clone(),
                child: None,
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!("redis-server did not start: {last}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let bin = binary("PROXY_POOL_REDIS_SERVER", "redis-server");
        let mut cmd = Command::new(bin);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited early with {status}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err("no PONG within 10 s".into())
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A pool on this server with default options.
    pub async fn pool(&self) -> crate::RedisPool {
        self.pool_with(crate::RedisOptions::default()).await
    }

    /// A pool on this server with `options`.
    pub async fn pool_with(&self, options: crate::RedisOptions) -> crate::RedisPool {
        let connector = crate::RedisConnector::direct(&self.url()).expect("test server URL");
        crate::RedisPool::new(connector, options)
            .await
            .expect("a pool on the test server")
    }

    /// Kills the server (data is lost; it has no persistence).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts again on the same port (empty).
    pub fn restart(&mut self) {
        self.stop();
        let mut last = String::new();
        for _ in 0..50 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart on port {}: {last}", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private `redis-sentinel` monitoring one master; killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisSentinel {
    /// Starts a sentinel (binary from `PROXY_POOL_REDIS_SENTINEL`, else `redis-sentinel`)
    /// monitoring `master_name` at `127.0.0.1:master_port` with quorum 1.
    pub fn start(master_name: &str, master_port: u16) -> Self {
        Self::start_with(master_name, master_port, "")
    }

    /// Like [`RedisSentinel::start`], with more lines in its configuration (an ACL
    /// user, `requirepass`, `sentinel auth-pass …`).
    pub fn start_with(master_name: &str, master_port: u16, extra_conf: &str) -> Self {
        let bin = binary("PROXY_POOL_REDIS_SENTINEL", "redis-sentinel");
        let port = free_port();
        let dir = temp_dir("sentinel");
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n\
             sentinel monitor {master_name} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {master_name} 1000\n\
             sentinel failover-timeout {master_name} 5000\n\
             sentinel parallel-syncs {master_name} 1\n{extra_conf}\n",
            dir.display()
        );
        std::fs::write(&conf, text).expect("write sentinel.conf");
        let child = Command::new(bin)
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-sentinel");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ping(port) {
            assert!(
                Instant::now() < deadline,
                "redis-sentinel did not answer PING on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            port,
            dir,
            child: Some(child),
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback TCP proxy in front of Redis that can drop a connection right after Redis
/// executed a request (the reply is swallowed and the client connection closed), or
/// hold one reply back for a while (Redis executed the request; the answer is late).
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    armed: Arc<AtomicBool>,
    blackhole: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    delayed: Arc<AtomicU64>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl FaultProxy {
    /// Starts the proxy forwarding to `127.0.0.1:target_port`. Needs a tokio runtime.
    pub async fn start(target_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fault proxy");
        let port = listener.local_addr().expect("local addr").port();
        let armed = Arc::new(AtomicBool::new(false));
        let blackhole = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delayed = Arc::new(AtomicU64::new(0));
        let (shutdown, rx) = tokio::sync::watch::channel(false);
        let (a, b, d) = (armed.clone(), blackhole.clone(), dropped.clone());
        let (dm, dd) = (delay_ms.clone(), delayed.clone());
        tokio::spawn(async move {
            let mut stop = rx.clone();
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    accepted = listener.accept() => {
                        let Ok((client, _)) = accepted else { continue };
                        tokio::spawn(pump(
                            client,
                            target_port,
                            Faults {
                                armed: a.clone(),
                                blackhole: b.clone(),
                                dropped: d.clone(),
                                delay_ms: dm.clone(),
                                delayed: dd.clone(),
                            },
                            rx.clone(),
                        ));
                    }
                }
            }
        });
        Self {
            port,
            armed,
            blackhole,
            dropped,
            delay_ms,
            delayed,
            shutdown,
        }
    }

    /// The next reply coming back from Redis (on any connection) reaches the client
    /// only after `delay`; later replies of that connection queue behind it.
    pub fn arm_delay_next_reply(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX).max(1);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// How many replies were held back so far.
    pub fn delayed_replies(&self) -> u64 {
        self.delayed.load(Ordering::SeqCst)
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next reply coming back from Redis (on any connection) is swallowed and that
    /// client connection closed.
    pub fn arm_drop_next_reply(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// While on, every request (on new and existing connections) is swallowed: Redis
    /// looks alive at the TCP level but never answers.
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }

    /// Whether an armed drop is still pending.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    /// How many replies were swallowed so far.
    pub fn dropped_replies(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

struct Faults {
    armed: Arc<AtomicBool>,
    blackhole: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    delay_ms: Arc<AtomicU64>,
    delayed: Arc<AtomicU64>,
}

async fn pump(
    mut client: tokio::net::TcpStream,
    target_port: u16,
    faults: Faults,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await else {
        return;
    };
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let mut up = [0u8; 16 * 1024];
    let mut down = [0u8; 16 * 1024];
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            n = cr.read(&mut up) => match n {
                Ok(0) | Err(_) => return,
                Ok(_) if faults.blackhole.load(Ordering::SeqCst) => {}
                Ok(n) => if sw.write_all(&up[..n]).await.is_err() { return },
            },
            n = sr.read(&mut down) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if faults.armed.swap(false, Ordering::SeqCst) {
                        faults.dropped.fetch_add(1, Ordering::SeqCst);
                        return; // both sockets close: the reply never reaches the client
                    }
                    let delay = faults.delay_ms.swap(0, Ordering::SeqCst);
                    if delay > 0 {
                        faults.delayed.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                    }
                    if cw.write_all(&down[..n]).await.is_err() { return }
                }
            },
        }
    }
}

/// Which pool implementation a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// [`crate::MemoryPool`].
    Memory,
    /// [`crate::RedisPool`] on a private `redis-server`.
    Redis,
}

/// A pool of `kind` with `options` on `clock`, and (Redis) the server it runs on, which
/// must outlive it.
pub async fn pool_of(
    kind: PoolKind,
    options: crate::PoolOptions,
    clock: Arc<dyn crate::Clock>,
) -> (Arc<dyn crate::ports::ActivityPool>, Option<RedisServer>) {
    match kind {
        PoolKind::Memory => (
            Arc::new(crate::MemoryPool::with_clock(options, clock)),
            None,
        ),
        PoolKind::Redis => {
            let server = RedisServer::start();
            let redis_options = crate::RedisOptions {
                pool: options,
                clock_override: Some(clock),
                ..crate::RedisOptions::default()
            };
            let pool = server.pool_with(redis_options).await;
            (Arc::new(pool), Some(server))
        }
    }
}

/// An HTTP candidate `id` at `<id>.vendor.test:8080` with credentials (`user-<id>`),
/// region `eu`, carrier `c1`, capacity 4 and `ttl` to live.
pub fn candidate(id: &str, ttl: Duration) -> crate::model::Candidate {
    use crate::model::*;
    Candidate {
        id: ProxyId::new(id).unwrap(),
        dial: Dial {
            protocol: Protocol::Http,
            host: format!("{id}.vendor.test"),
            port: 8080,
            credentials: Some(Credentials {
                username: format!("user-{id}"),
                password: Secret::new("s3cr3t-pass"),
            }),
        },
        labels: Labels {
            region: Some(Label::new("eu").unwrap()),
            carrier: Some(Label::new("c1").unwrap()),
            city: None,
        },
        ttl,
        max_concurrency: 4,
    }
}

/// The benchmarks' proxy number `i` (pool and Distribution API alike): `protocol` at
/// One figure of `command`'s line in Redis's `INFO commandstats` text
/// (`cmdstat_<command>:calls=…,usec=…,…`), e.g. `commandstat(&info, "evalsha", "usec")`;
/// 0 when the command has not run since the last `CONFIG RESETSTAT`.
pub fn commandstat(info: &str, command: &str, field: &str) -> f64 {
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|figures| {
            figures
                .split(',')
                .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `10.<i's low three bytes>:<8000 + i % 1000>`, user `u<i>` with password `bench-pass`.
pub fn bench_dial(i: usize, protocol: crate::model::Protocol) -> crate::model::Dial {
    use crate::model::*;
    Dial {
        protocol,
        host: format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
        port: 8000 + (i % 1000) as u16,
        credentials: Some(Credentials {
            username: format!("u{i}"),
            password: Secret::new("bench-pass"),
        }),
    }
}

/// A partial extraction of `count` proxies for `client`: no filters, no idempotency key,
/// a request ID (and digest) of its own each call, its result kept for a minute.
pub fn extract_request(client: &str, count: u32) -> crate::model::ExtractRequest {
    use crate::model::*;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let request = format!(
        "r-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    ExtractRequest {
        client_id: ClientId::new(client).unwrap(),
        request_digest: RequestDigest::of(request.as_bytes()),
        request_id: RequestId::new(request).unwrap(),
        idempotency_key: None,
        count: std::num::NonZeroU32::new(count).unwrap(),
        fulfillment: Fulfillment::Partial,
        filters: Filters::default(),
        min_remaining_ttl: Duration::ZERO,
        max_health_check_age: None,
        reserve_for_gateway: 0,
        idempotency_ttl: Duration::from_secs(60),
    }
}

#[cfg(test)]
mod tests {
    use super::commandstat;

    #[test]
    fn commandstat_reads_one_figure_of_one_command() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:usec_per_call=28.75,calls=12,usec=345\r\n\
            cmdstat_eval:calls=2,usec=9,usec_per_call=4.50\r\n";
        assert_eq!(commandstat(info, "evalsha", "usec"), 345.0);
        assert_eq!(commandstat(info, "evalsha", "calls"), 12.0);
        // `eval` is not read from `evalsha`'s line, nor `usec` from `usec_per_call`.
        assert_eq!(commandstat(info, "eval", "calls"), 2.0);
        assert_eq!(commandstat(info, "eval", "usec"), 9.0);
        assert_eq!(commandstat(info, "ping", "calls"), 0.0);
    }
}
