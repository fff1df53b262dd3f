//! Connecting to the controller's control plane, for the gateway and the checker: mTLS
//! (the workload's SPIFFE certificate) or plaintext to a loopback test fixture only, and
//! the jittered, bounded exponential backoff every reconnect loop must use (re-exported
//! from `proxy-pool-runtime`).
//!
//! It lives in the `api` crate because both clients need it and it is small; it never
//! holds a policy of its own beyond refusing plaintext to a non-loopback address.

use std::net::IpAddr;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::model::Secret;

/// How a client authenticates to the controller.
#[derive(Clone, Debug)]
pub enum ClientTransport {
    /// mTLS with the workload certificate; the controller's certificate is verified
    /// against `ca_pem` and `server_name`.
    Mtls {
        /// Trust bundle (PEM).
        ca_pem: String,
        /// Leaf certificate chain (PEM) carrying the SPIFFE URI.
        cert_pem: String,
        /// Private key (PEM).
        key_pem: Secret,
        /// Name the controller's certificate must carry.
        server_name: String,
    },
    /// Plaintext to a loopback address; for test fixtures and local runs only.
    LoopbackPlaintext,
}

/// The default [`ClientOptions::connect_timeout`]: far above a connect's round trip
/// in a cluster, far below the 13 s a leader change may take before gateways run out of
/// leases (`docs/reliability.md`, "Leader change and gateway leases").
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Connection settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Connect timeout. A connect to an address that is gone is never refused, only
    /// unanswered (a Service still pointing at a deleted leader's pod for a moment), so
    /// a short one lets a worker try again soon after a leader change.
    pub connect_timeout: Duration,
    /// HTTP/2 keepalive ping interval.
    pub keepalive_interval: Duration,
    /// Keepalive ping answer deadline.
    pub keepalive_timeout: Duration,
    /// Deadline of one unary call (register, ACK, report): a controller answers these
    /// in milliseconds, so a call unanswered this long means a dead path (a black hole
    /// sends no FIN or RST), found long before the keepalive would find it.
    pub call_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            connect_timeout: CONNECT_TIMEOUT,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(5),
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint URI is invalid.
    #[error("invalid control-plane endpoint: {0}")]
    InvalidEndpoint(String),
    /// Plaintext was asked for a non-loopback address.
    #[error("plaintext is allowed only to a loopback address")]
    PlaintextNotLoopback,
    /// TLS material or the connection failed.
    #[error("control-plane connection failed: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The controller endpoints a client rotates through: `--controller` takes one
/// endpoint or several separated by commas (one per controller replica, or one
/// Service). Only the leader answers control-plane calls; a client that meets a
/// connection failure or `UNAVAILABLE not_leader` ([`is_not_leader`]) moves to the
/// next endpoint.
#[derive(Debug)]
pub struct Endpoints {
    list: Vec<String>,
    cursor: std::sync::atomic::AtomicUsize,
}

impl Endpoints {
    /// Parses `a[,b…]`: each entry trimmed, none empty, at most 16.
    pub fn parse(text: &str) -> Result<Self, ClientError> {
        let list: Vec<String> = text.split(',').map(|e| e.trim().to_owned()).collect();
        if list.iter().any(String::is_empty) || list.len() > 16 {
            return Err(ClientError::InvalidEndpoint(text.to_owned()));
        }
        Ok(Self {
            list,
            cursor: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// `--controller`'s value parser: the text, once [`Endpoints::parse`] accepts it, so
    /// a malformed list is refused at start-up with its reason rather than retried.
    pub fn parse_arg(text: &str) -> Result<String, ClientError> {
        Self::parse(text).map(|_| text.to_owned())
    }

    /// One endpoint, taken as it is (a bad URI fails when connecting).
    pub fn single(endpoint: String) -> Self {
        Self {
            list: vec![endpoint],
            cursor: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// [`Endpoints::parse`], or the text as one endpoint when it does not parse.
    pub fn parse_lenient(text: &str) -> Self {
        Self::parse(text).unwrap_or_else(|_| Self::single(text.to_owned()))
    }

    /// The endpoint to use now.
    pub fn current(&self) -> &str {
        let i = self.cursor.load(std::sync::atomic::Ordering::Relaxed) % self.list.len();
        &self.list[i]
    }

    /// Moves to the next endpoint (wrapping around).
    pub fn rotate(&self) {
        self.cursor
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many endpoints there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Always `false`: there is at least one endpoint.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Whether a call was refused because the replica does not lead.
pub fn is_not_leader(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable && status.message() == super::NOT_LEADER
}

/// Connects a channel to `endpoint` (`https://host:port`, or `http://127.0.0.1:port`
/// for the loopback fixture).
pub async fn connect(
    endpoint: &str,
    transport: &ClientTransport,
    options: &ClientOptions,
) -> Result<Channel, ClientError> {
    let ep = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|_| ClientError::InvalidEndpoint(endpoint.to_owned()))?
        .connect_timeout(options.connect_timeout)
        .http2_keep_alive_interval(options.keepalive_interval)
        .keep_alive_timeout(options.keepalive_timeout)
        .keep_alive_while_idle(true);
    let ep = match transport {
        ClientTransport::LoopbackPlaintext => {
            let host = ep.uri().host().unwrap_or_default().trim_matches(['[', ']']);
            let loopback =
                host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
            if !loopback || ep.uri().scheme_str() != Some("http") {
                return Err(ClientError::PlaintextNotLoopback);
            }
            ep
        }
        ClientTransport::Mtls {
            ca_pem,
            cert_pem,
            key_pem,
            server_name,
        } => ep.tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca_pem))
                .identity(Identity::from_pem(cert_pem, key_pem.expose()))
                .domain_name(server_name.clone()),
        )?,
    };
    Ok(ep.connect().await?)
}

/// Connects like [`connect`], retrying transport failures after `backoff` delays until
/// it works or `give_up` completes (then the last error is returned). Configuration
/// errors are returned at once. The backoff is reset after a success.
pub async fn connect_with_backoff(
    endpoint: &str,
    transport: &ClientTransport,
    options: &ClientOptions,
    backoff: &mut Backoff,
    give_up: impl std::future::Future<Output = ()>,
) -> Result<Channel, ClientError> {
    tokio::pin!(give_up);
    loop {
        match connect(endpoint, transport, options).await {
            Ok(ch) => {
                backoff.reset();
                return Ok(ch);
            }
            Err(e @ ClientError::Transport(_)) => {
                let delay = backoff.next_delay();
                tracing::debug!(error = %e, delay_ms = delay.as_millis() as u64, "control plane unreachable; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut give_up => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The reconnect backoff (`proxy_pool_runtime::backoff`, the one implementation):
/// [`Backoff::reconnect`] is [`RECONNECT_BASE`] up to [`RECONNECT_MAX`], uniform in
/// `[base, min(max, base·2ⁿ)]`.
pub use proxy_pool_runtime::backoff::{Backoff, RECONNECT_BASE, RECONNECT_MAX};

#[cfg(test)]
mod tests {
    #[test]
    fn endpoints_rotate_and_refuse_empty_entries() {
        let e = super::Endpoints::parse("http://127.0.0.1:1, http://127.0.0.1:2").unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e.current(), "http://127.0.0.1:1");
        e.rotate();
        assert_eq!(e.current(), "http://127.0.0.1:2");
        e.rotate();
        assert_eq!(e.current(), "http://127.0.0.1:1");
        assert!(super::Endpoints::parse("a,,b").is_err());
        assert!(super::Endpoints::parse("").is_err());
        assert!(super::Endpoints::parse_arg("a,,b").is_err());
        assert_eq!(super::Endpoints::parse_arg("a, b").unwrap(), "a, b");
        assert!(super::is_not_leader(&tonic::Status::unavailable(
            "not_leader"
        )));
        assert!(!super::is_not_leader(&tonic::Status::unavailable(
            "shutting_down"
        )));
    }

    use super::*;

    #[tokio::test]
    async fn reconnects_until_the_server_is_up_or_gives_up() {
        let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let endpoint = format!("http://{addr}");
        let options = ClientOptions::default();
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(50));
        // Plaintext to `addr`, retried with `b` until `give_up` completes.
        let mut connect = async |give_up: Duration| {
            let transport = ClientTransport::LoopbackPlaintext;
            let deadline = tokio::time::sleep(give_up);
            connect_with_backoff(&endpoint, &transport, &options, &mut b, deadline).await
        };
        let r = connect(Duration::from_millis(200)).await;
        assert!(matches!(r, Err(ClientError::Transport(_))));
        let server = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let l = tokio::net::TcpListener::bind(addr).await.unwrap();
            let _conn = l.accept().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        let r = connect(Duration::from_secs(5)).await;
        assert!(r.is_ok(), "{r:?}");
        server.abort();
    }

    /// A connect nobody answers — its SYNs dropped, as to a deleted pod's address a
    /// Service still points at — fails after the connect timeout, so the worker tries
    /// again soon instead of waiting out a long one.
    #[tokio::test]
    async fn an_unanswered_connect_gives_up_after_the_connect_timeout() {
        // A listener whose accept queue is full: the kernel drops further SYNs.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        for _ in 0..16 {
            let attempt = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(Duration::from_millis(300), attempt).await {
                Ok(Ok(s)) => queued.push(s),
                _ => break,
            }
        }
        assert!(queued.len() < 16, "the accept queue never filled");
        let started = std::time::Instant::now();
        let r = connect(
            &format!("http://{addr}"),
            &ClientTransport::LoopbackPlaintext,
            &ClientOptions::default(),
        )
        .await;
        let took = started.elapsed();
        assert!(matches!(r, Err(ClientError::Transport(_))), "{r:?}");
        // It waited (the connect was not refused), and gave up within 3 s.
        assert!(
            took >= CONNECT_TIMEOUT - Duration::from_millis(100) && took < Duration::from_secs(3),
            "gave up after {took:?}, connect timeout {CONNECT_TIMEOUT:?}"
        );
        drop(listener);
    }

    #[tokio::test]
    async fn plaintext_only_to_loopback() {
        let err = connect(
            "http://10.1.2.3:1",
            &ClientTransport::LoopbackPlaintext,
            &ClientOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ClientError::PlaintextNotLoopback));
    }
}
