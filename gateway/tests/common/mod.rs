//! Shared fixtures for the gateway's socket tests: a vendor simulator, a gateway on
//! `127.0.0.1:0` fed snapshots directly, and small real clients (raw HTTP proxy,
//! CONNECT, SOCKS5, rustls). Everything stays on loopback.
#![allow(dead_code)]

use base64::Engine as _;
use proxy_pool_api::controlplane::model::{self, Checksum, Header, Snapshot};
pub use proxy_pool_api::controlplane::model::{Routing, SnapshotProxy};
use proxy_pool_api::egress::{EgressPolicy, PortRanges};
pub use proxy_pool_e2e::http::read_head;
use proxy_pool_e2e::http::status_of;
use proxy_pool_e2e::sim::{
    EchoReply, FailureMode, Protocol, ProxySpec, SimConfig, SimProxy, Simulator,
};
use proxy_pool_gateway::clock;
use proxy_pool_gateway::outcome::OutcomeReceiver;
use proxy_pool_gateway::snapshot::{ClientCredential, ProxyId, SnapshotInput, standalone_proxy};
use proxy_pool_gateway::{
    AuthMode, Gateway, GatewayConfig, Listeners, ServeReport, SnapshotHandle,
};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const IO_LIMIT: Duration = Duration::from_secs(10);
pub const USER: &str = "alice";
pub const PASS: &str = "alice-secret";

/// A running simulator + gateway.
pub struct Harness {
    pub sim: Simulator,
    pub handle: SnapshotHandle,
    pub gateway: Gateway,
    pub outcomes: OutcomeReceiver,
    pub http: SocketAddr,
    pub socks: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<ServeReport>>,
    version: AtomicU64,
}

impl Harness {
    /// Whether no proxy holds an Active or Reserved slot.
    pub fn slots_free(&self) -> bool {
        self.handle
            .runtime_report()
            .iter()
            .all(|r| r.active == 0 && r.reserved == 0)
    }

    pub async fn start() -> Self {
        Self::start_with(local_config()).await
    }

    /// A new simulated proxy of `protocol` (taking 10 concurrent uses), installed as
    /// the only one under the catch-all routing [`all`].
    pub async fn serve_one(&self, protocol: Protocol) -> SimProxy {
        let p = self.proxy(protocol).await;
        self.install(vec![upstream(&p, 10)], vec![all()]);
        p
    }

    /// A harness serving one simulated proxy of each of `protocols` (each taking 10
    /// concurrent uses) under the catch-all routing [`all`].
    pub async fn serving<const N: usize>(protocols: [Protocol; N]) -> (Self, [SimProxy; N]) {
        let h = Self::start().await;
        let mut proxies = Vec::with_capacity(N);
        for protocol in protocols {
            proxies.push(h.proxy(protocol).await);
        }
        h.install(
            proxies.iter().map(|p| upstream(p, 10)).collect(),
            vec![all()],
        );
        let proxies = proxies.try_into().unwrap_or_else(|_| panic!("{N} proxies"));
        (h, proxies)
    }

    pub async fn start_with(config: GatewayConfig) -> Self {
        let sim = Simulator::start(SimConfig::default())
            .await
            .expect("sim starts");
        let handle = SnapshotHandle::new(Duration::from_secs(600));
        let (gateway, outcomes) = Gateway::new(handle.clone(), config);
        let http_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socks_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = http_l.local_addr().unwrap();
        let socks = socks_l.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let listeners = Listeners {
            http: Some(http_l),
            socks5: Some(socks_l),
        };
        let join = tokio::spawn(gateway.clone().run(listeners, async {
            let _ = rx.await;
        }));
        Self {
            sim,
            handle,
            gateway,
            outcomes,
            http,
            socks,
            shutdown: Some(tx),
            join: Some(join),
            version: AtomicU64::new(0),
        }
    }

    /// A healthy simulated proxy.
    pub async fn proxy(&self, protocol: Protocol) -> SimProxy {
        self.proxy_in(protocol, None).await
    }

    pub async fn proxy_in(&self, protocol: Protocol, region: Option<&str>) -> SimProxy {
        let mut spec = ProxySpec::new(protocol, Duration::from_secs(600));
        spec.labels.region = region.map(str::to_owned);
        self.sim.spawn_proxy_with(spec).await.expect("proxy spawns")
    }

    pub fn set_failure(&self, p: &SimProxy, mode: FailureMode) {
        self.sim.set_failure(&p.id, mode).unwrap();
    }

    /// Installs a snapshot with these proxies and routings, and the test client.
    pub fn install(&self, proxies: Vec<SnapshotProxy>, routings: Vec<Routing>) {
        self.install_valid_until(
            proxies,
            routings,
            SystemTime::now() + Duration::from_secs(600),
        );
    }

    pub fn install_valid_until(
        &self,
        proxies: Vec<SnapshotProxy>,
        routings: Vec<Routing>,
        valid_until: SystemTime,
    ) {
        let clients = vec![ClientCredential::from_password("team-a", USER, PASS)];
        self.install_full(proxies, routings, valid_until, clients);
    }

    /// Installs a snapshot with these proxies, routings and clients.
    pub fn install_clients(
        &self,
        proxies: Vec<SnapshotProxy>,
        routings: Vec<Routing>,
        clients: Vec<ClientCredential>,
    ) {
        let valid_until = SystemTime::now() + Duration::from_secs(600);
        self.install_full(proxies, routings, valid_until, clients);
    }

    fn install_full(
        &self,
        proxies: Vec<SnapshotProxy>,
        routings: Vec<Routing>,
        valid_until: SystemTime,
        clients: Vec<ClientCredential>,
    ) {
        let version = self.version.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot = Snapshot {
            header: Header {
                version,
                ownership_epoch: 1,
                generated_at_ms: unix_ms(SystemTime::now()),
                valid_until_ms: unix_ms(valid_until),
            },
            routings,
            proxies,
            checksum: Checksum::default(),
        };
        self.handle
            .install(SnapshotInput::new(snapshot, clients))
            .expect("snapshot installs");
    }

    /// The egress address of a simulated proxy.
    pub fn egress(&self, p: &SimProxy) -> Ipv4Addr {
        self.sim
            .live_proxies()
            .into_iter()
            .find(|s| s.proxy.id == p.id)
            .expect("proxy is live")
            .egress_ip
    }

    pub fn echo(&self) -> SocketAddr {
        self.sim.echo_http_addr()
    }

    /// `GET path` from the echo target through the HTTP listener, as [`USER`] on a
    /// fresh connection.
    pub async fn get(&self, path: &str) -> Response {
        get_once(self.http, USER, self.echo(), path).await
    }

    /// `CONNECT` to the echo target through the HTTP listener, as [`USER`]: the
    /// response head and the stream.
    pub async fn connect_echo(&self) -> (Response, TcpStream) {
        connect(self.http, USER, PASS, &self.echo().to_string()).await
    }

    /// A tunnel to the echo target (the gateway answered `200`).
    pub async fn tunnel(&self) -> TcpStream {
        let (resp, tunnel) = self.connect_echo().await;
        assert_eq!(resp.status, 200, "{}", resp.head);
        tunnel
    }

    /// `GET path` from the echo target over an open `tunnel` (which it closes).
    pub async fn echo_over<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        tunnel: S,
        path: &str,
    ) -> Response {
        echo_over(tunnel, &self.echo().to_string(), path).await
    }

    /// Signals shutdown and waits for the gateway to finish draining.
    pub async fn shutdown(&mut self) -> ServeReport {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let join = self.join.take().expect("running");
        tokio::time::timeout(Duration::from_secs(60), join)
            .await
            .expect("drains in time")
            .expect("serve task")
    }

    pub fn signal_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn join(&mut self) -> ServeReport {
        let join = self.join.take().expect("running");
        tokio::time::timeout(Duration::from_secs(60), join)
            .await
            .expect("drains in time")
            .expect("serve task")
    }
}

/// Unix milliseconds of `t`, as snapshots carry instants.
pub fn unix_ms(t: SystemTime) -> i64 {
    clock::to_model_ms(clock::unix_ms(t))
}

/// A routing named `name` that matches everything and allows every proxy (CONNECT to
/// 443 and 80 only).
pub fn catch_all(name: &str) -> Routing {
    Routing {
        name: name.into(),
        ..Routing::default()
    }
}

/// A gateway view of a simulated proxy.
pub fn upstream(p: &SimProxy, max: u32) -> SnapshotProxy {
    SnapshotProxy {
        dial: p.dial(),
        upstream: "sim".into(),
        labels: model::Labels {
            region: Some(p.region.clone()),
            carrier: Some(p.carrier.clone()),
            city: p.city.clone(),
        },
        ..raw_upstream(&p.id, SocketAddr::from(([127, 0, 0, 1], p.port)), max)
    }
}

pub fn basic(user: &str, pass: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    /// Asserts the gateway refused the request with `status` and `X-Proxy-Pool-Error:
    /// error`.
    #[track_caller]
    pub fn assert_refused(&self, status: u16, error: &str) {
        assert_eq!(self.status, status, "{}", self.head);
        assert_eq!(
            self.header("X-Proxy-Pool-Error").as_deref(),
            Some(error),
            "{}",
            self.head
        );
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    pub fn echo(&self) -> EchoReply {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not an echo reply ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The egress IP the echo server saw.
    pub fn remote_ip(&self) -> Ipv4Addr {
        let remote: SocketAddr = self.echo().remote.parse().unwrap();
        match remote.ip() {
            std::net::IpAddr::V4(ip) => ip,
            other => panic!("unexpected {other}"),
        }
    }
}

/// Reads one response (Content-Length or close-delimited body).
pub async fn read_response<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Response> {
    let head = read_head(s).await?;
    let status = status_of(&head);
    let len = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            tokio::time::timeout(IO_LIMIT, s.read_exact(&mut body)).await??;
        }
        None if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked") =>
        {
            body = read_chunked(s).await?;
        }
        None => {
            tokio::time::timeout(IO_LIMIT, s.read_to_end(&mut body)).await??;
        }
    }
    Ok(Response { status, head, body })
}

async fn read_chunked<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            line.push(s.read_u8().await?);
        }
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&line)
                .trim()
                .split(';')
                .next()
                .unwrap_or("0"),
            16,
        )
        .unwrap();
        if size == 0 {
            let mut rest = Vec::new();
            while !rest.ends_with(b"\r\n") {
                rest.push(s.read_u8().await?);
            }
            return Ok(body);
        }
        let mut chunk = vec![0; size + 2];
        s.read_exact(&mut chunk).await?;
        body.extend_from_slice(&chunk[..size]);
    }
}

/// A kept-alive HTTP proxy client connection.
pub struct ProxyClient {
    pub stream: TcpStream,
    user: String,
    pass: String,
}

impl ProxyClient {
    pub async fn connect(gateway: SocketAddr, user: &str, pass: &str) -> Self {
        Self {
            stream: TcpStream::connect(gateway).await.unwrap(),
            user: user.into(),
            pass: pass.into(),
        }
    }

    /// `GET http://target/path` on this connection.
    pub async fn get(&mut self, target: SocketAddr, path: &str) -> Response {
        let req = format!(
            "GET http://{target}{path} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\nProxy-Connection: keep-alive\r\n\r\n",
            basic(&self.user, &self.pass)
        );
        self.stream.write_all(req.as_bytes()).await.unwrap();
        read_response(&mut self.stream).await.expect("response")
    }
}

/// One GET on a fresh connection.
pub async fn get_once(gateway: SocketAddr, user: &str, target: SocketAddr, path: &str) -> Response {
    ProxyClient::connect(gateway, user, PASS)
        .await
        .get(target, path)
        .await
}

/// `CONNECT target` through the gateway; returns the response head and the stream.
pub async fn connect(
    gateway: SocketAddr,
    user: &str,
    pass: &str,
    target: &str,
) -> (Response, TcpStream) {
    connect_on(
        TcpStream::connect(gateway).await.unwrap(),
        user,
        pass,
        target,
    )
    .await
}

/// `CONNECT target` on an open connection to the gateway.
pub async fn connect_on(
    mut s: TcpStream,
    user: &str,
    pass: &str,
    target: &str,
) -> (Response, TcpStream) {
    let req = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {}\r\n\r\n",
        basic(user, pass)
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await.unwrap();
    let status = status_of(&head);
    (
        Response {
            status,
            head,
            body: Vec::new(),
        },
        s,
    )
}

/// `GET path` with `Connection: close` over an established tunnel.
pub async fn echo_over<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    path: &str,
) -> Response {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    read_response(&mut s).await.expect("echo response")
}

/// A SOCKS5 handshake: `Ok(stream)` after a success reply, else the failing stage.
pub async fn socks5(
    gateway: SocketAddr,
    user: &str,
    pass: &str,
    target: SocketAddr,
    cmd: u8,
) -> Result<TcpStream, (String, u8)> {
    let s = TcpStream::connect(gateway).await.unwrap();
    socks5_on(s, user, pass, target, cmd).await
}

/// [`socks5`] on an open connection to the gateway.
pub async fn socks5_on(
    mut s: TcpStream,
    user: &str,
    pass: &str,
    target: SocketAddr,
    cmd: u8,
) -> Result<TcpStream, (String, u8)> {
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m)
        .await
        .map_err(|_| ("method".to_owned(), 0xff))?;
    if m[1] != 2 {
        return Err(("method".into(), m[1]));
    }
    let mut auth = vec![1, user.len() as u8];
    auth.extend_from_slice(user.as_bytes());
    auth.push(pass.len() as u8);
    auth.extend_from_slice(pass.as_bytes());
    s.write_all(&auth).await.unwrap();
    s.read_exact(&mut m)
        .await
        .map_err(|_| ("auth".to_owned(), 0xff))?;
    if m[1] != 0 {
        return Err(("auth".into(), m[1]));
    }
    s.write_all(&socks5_request(cmd, target)).await.unwrap();
    let mut reply = [0u8; 10];
    tokio::time::timeout(IO_LIMIT, s.read_exact(&mut reply))
        .await
        .map_err(|_| ("reply-timeout".to_owned(), 0xff))?
        .map_err(|_| ("reply".to_owned(), 0xff))?;
    if reply[1] != 0 {
        return Err(("reply".into(), reply[1]));
    }
    Ok(s)
}

/// A TLS client trusting the simulator's echo CA.
pub fn tls_connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

/// The catch-all routing, CONNECT to any port (the simulator's targets listen on
/// random loopback ports).
pub fn all() -> Routing {
    any_port(catch_all("all"))
}

/// `r` with CONNECT allowed to every port.
pub fn any_port(mut r: Routing) -> Routing {
    r.connect_ports = PortRanges::any();
    r
}

/// The gateway config of these tests: everything at its default except the egress
/// policy, which opts in to loopback explicitly (the simulator's proxies and targets
/// all live on 127.0.0.x).
pub fn local_config() -> GatewayConfig {
    GatewayConfig {
        egress: EgressPolicy::allow_loopback(),
        ..GatewayConfig::default()
    }
}

pub fn id_of(p: &SimProxy) -> ProxyId {
    ProxyId::from(p.id.as_str())
}

pub fn open_config() -> GatewayConfig {
    GatewayConfig {
        auth: AuthMode::Open,
        ..local_config()
    }
}

/// A gateway view of a plain-HTTP proxy at `addr` that the test runs itself (no
/// credentials): raw listeners that refuse, hang or delay on purpose.
pub fn raw_upstream(id: &str, addr: SocketAddr, max: u32) -> SnapshotProxy {
    let far = unix_ms(SystemTime::now() + Duration::from_secs(600));
    let (host, port) = (addr.ip().to_string(), addr.port());
    SnapshotProxy {
        upstream: "raw".into(),
        ..standalone_proxy(id, model::Protocol::Http, host, port, max, far)
    }
}

/// A loopback address nothing listens on: bound to an ephemeral port, then closed,
/// so a TCP connect to it is refused.
pub async fn closed_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr
}

/// The runtime counts of one proxy, zero if the gateway does not report it.
pub fn counts_of(h: &Harness, id: &ProxyId) -> (u32, u32) {
    h.handle
        .runtime_report()
        .into_iter()
        .find(|r| &r.id == id)
        .map_or((0, 0), |r| (r.active, r.reserved))
}

/// Waits (up to [`IO_LIMIT`]) until a proxy's `(active, reserved)` equals `want`.
pub async fn wait_counts(h: &Harness, id: &ProxyId, want: (u32, u32)) {
    let until = tokio::time::Instant::now() + IO_LIMIT;
    while counts_of(h, id) != want {
        assert!(
            tokio::time::Instant::now() < until,
            "{id:?}: (active, reserved) = {:?}, want {want:?}",
            counts_of(h, id)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A SOCKS5 request (`cmd`: 1 CONNECT, 2 BIND, 3 UDP ASSOCIATE) for an IPv4 `target`.
pub fn socks5_request(cmd: u8, target: SocketAddr) -> Vec<u8> {
    let SocketAddr::V4(v4) = target else {
        panic!("v4 only")
    };
    let mut req = vec![5, cmd, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    req
}
