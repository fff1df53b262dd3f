use std::time::SystemTime;

use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use rcgen::{CertificateParams, KeyPair};
use tower::ServiceExt as _;

use super::*;
use crate::identity::authority::Authority;
use crate::identity::authz::MemoryWorkloads;
use crate::identity::ca::CaParams;
use crate::identity::clock::SystemClock;
use crate::identity::fixtures::{Chain, NS, checker_chain, checker_workload, gateway_chain};
use crate::identity::issuer::IssuerConfig;
use crate::identity::review::{MemoryReviewer, ReviewedToken};
use crate::identity::store::MemoryCaStore;
use crate::identity::wire::{DEFAULT_AUDIENCE, Problem};

pub(crate) struct Fixture {
    pub(crate) reviewer: Arc<MemoryReviewer>,
    pub(crate) workloads: Arc<MemoryWorkloads>,
    pub(crate) issuer: Arc<Issuer>,
    pub(crate) authority: Arc<Authority>,
    pub(crate) chain: Chain,
}

const TOKEN: &str = "token-of-the-gateway-pod";

pub(crate) async fn fixture() -> Fixture {
    let authority = Authority::start(
        Arc::new(MemoryCaStore::new()),
        Arc::new(SystemClock),
        CaParams::default(),
    )
    .await
    .unwrap();
    let reviewer = Arc::new(MemoryReviewer::default());
    let workloads = Arc::new(MemoryWorkloads::default());
    let chain = gateway_chain("gw-5d9f-abcde");
    chain.load(&workloads);
    reviewer.allow(TOKEN, DEFAULT_AUDIENCE, reviewed(&chain, DEFAULT_AUDIENCE));
    let issuer = Arc::new(Issuer::new(
        IssuerConfig {
            checker: Some(checker_workload()),
            ..IssuerConfig::new("proxy-pool.local", "test")
        },
        reviewer.clone(),
        workloads.clone(),
        authority.clone(),
    ));
    Fixture {
        reviewer,
        workloads,
        issuer,
        authority,
        chain,
    }
}

pub(crate) fn reviewed(chain: &Chain, audience: &str) -> ReviewedToken {
    let caller = chain.caller();
    ReviewedToken {
        username: format!("system:serviceaccount:{NS}:{}", caller.service_account),
        audiences: vec![audience.to_owned()],
        pod_name: Some(caller.pod_name),
        pod_uid: Some(caller.pod_uid),
    }
}

fn csr_with_sans(sans: Vec<String>) -> String {
    let key = KeyPair::generate().unwrap();
    CertificateParams::new(sans)
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap()
}

fn request(token: Option<&str>, body: String) -> Request<Body> {
    let mut b = Request::post(ISSUE_PATH).header("content-type", "application/json");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(Body::from(body)).unwrap()
}

fn json_body(csr: &str) -> String {
    serde_json::to_string(&IssueRequest { csr: csr.into() }).unwrap()
}

async fn call(f: &Fixture, req: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let resp = router(f.issuer.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

async fn problem(f: &Fixture, req: Request<Body>, want: StatusCode) -> Problem {
    let (status, headers, body) = call(f, req).await;
    assert_eq!(status, want, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/problem+json");
    let p: Problem = serde_json::from_slice(&body).unwrap();
    assert_eq!(p.status, want.as_u16());
    p
}

/// The problem a request with `token` and `csr` is refused with (status `want`).
async fn refusal(f: &Fixture, token: &str, csr: &str, want: StatusCode) -> Problem {
    problem(f, request(Some(token), json_body(csr)), want).await
}

/// The identity issued for a request with `token` and `csr`.
async fn issue(f: &Fixture, token: &str, csr: &str) -> IssueResponse {
    let (status, _, body) = call(f, request(Some(token), json_body(csr))).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Loads `chain`'s workloads and lets `token` review as its pod.
fn admit(f: &Fixture, token: &str, chain: &Chain) {
    chain.load(&f.workloads);
    f.reviewer
        .allow(token, DEFAULT_AUDIENCE, reviewed(chain, DEFAULT_AUDIENCE));
}

#[tokio::test]
async fn issues_a_spiffe_leaf_named_after_the_pod_not_the_csr() {
    let f = fixture().await;
    let csr = csr_with_sans(vec![
        "spiffe://evil/prod/worker/admin".into(),
        "evil.example".into(),
    ]);
    let issued = issue(&f, TOKEN, &csr).await;
    assert_eq!(
        issued.spiffe_id,
        "spiffe://proxy-pool.local/test/worker/gw-5d9f-abcde"
    );
    assert!(!issued.certificate.contains("evil"));
    let der = x509_parser::pem::parse_x509_pem(issued.certificate.as_bytes())
        .unwrap()
        .1
        .contents;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap().value;
    assert_eq!(
        san.general_names,
        vec![x509_parser::extensions::GeneralName::URI(&issued.spiffe_id)]
    );
    assert_eq!(issued.not_after - issued.not_before, 24 * 3600 + 60);
    assert_eq!(
        issued.trust_bundle,
        f.authority.cas().bundle_pem(SystemTime::now())
    );
}

#[tokio::test]
async fn bad_requests_are_400_413_415() {
    let f = fixture().await;
    let p = problem(
        &f,
        request(Some(TOKEN), json_body("not a csr")),
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(p.detail.unwrap().contains("CSR"));
    problem(
        &f,
        request(Some(TOKEN), "{".into()),
        StatusCode::BAD_REQUEST,
    )
    .await;
    problem(
        &f,
        request(
            Some(TOKEN),
            format!(r#"{{"csr":"{}"}}"#, "A".repeat(MAX_REQUEST_BYTES)),
        ),
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    let plain = Request::post(ISSUE_PATH)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "text/plain")
        .body(Body::from("x"))
        .unwrap();
    problem(&f, plain, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
    assert_eq!(f.reviewer.calls(), 0, "nothing reaches TokenReview");
}

#[tokio::test]
async fn missing_unknown_and_wrong_audience_tokens_are_401() {
    let f = fixture().await;
    let csr = csr_with_sans(vec![]);
    let (status, headers, _) = call(&f, request(None, json_body(&csr))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["www-authenticate"], "Bearer");
    refusal(&f, "forged", &csr, StatusCode::UNAUTHORIZED).await;
    // Authenticated, but the API server reports another audience.
    f.reviewer.allow(
        "other-aud",
        DEFAULT_AUDIENCE,
        reviewed(&f.chain, "kubernetes"),
    );
    refusal(&f, "other-aud", &csr, StatusCode::UNAUTHORIZED).await;
}

#[tokio::test]
async fn unmanaged_pods_and_unbound_tokens_are_403() {
    let f = fixture().await;
    let csr = csr_with_sans(vec![]);
    // A token for a pod that is not part of a managed gateway.
    let mut stranger = gateway_chain("stranger");
    stranger.pod.metadata.owner_references = None;
    f.workloads.put_pod(stranger.pod.clone());
    f.reviewer.allow(
        "stranger",
        DEFAULT_AUDIENCE,
        reviewed(&stranger, DEFAULT_AUDIENCE),
    );
    let p = refusal(&f, "stranger", &csr, StatusCode::FORBIDDEN).await;
    assert!(p.detail.unwrap().contains("ReplicaSet"));
    // A token not bound to a pod.
    let mut unbound = reviewed(&f.chain, DEFAULT_AUDIENCE);
    unbound.pod_uid = None;
    f.reviewer.allow("unbound", DEFAULT_AUDIENCE, unbound);
    refusal(&f, "unbound", &csr, StatusCode::FORBIDDEN).await;
    // A token for an earlier pod of the same name.
    let mut earlier = reviewed(&f.chain, DEFAULT_AUDIENCE);
    earlier.pod_uid = Some("uid-old".into());
    f.reviewer.allow("earlier", DEFAULT_AUDIENCE, earlier);
    refusal(&f, "earlier", &csr, StatusCode::FORBIDDEN).await;
}

#[tokio::test]
async fn api_outages_are_503_with_retry_after_and_no_internal_text() {
    let f = fixture().await;
    let csr = csr_with_sans(vec![]);
    f.reviewer.set_unavailable(true);
    let (status, headers, body) = call(&f, request(Some(TOKEN), json_body(&csr))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key("retry-after"));
    assert!(!String::from_utf8_lossy(&body).contains("memory reviewer"));
    f.reviewer.set_unavailable(false);
    f.workloads.set_unavailable(true);
    refusal(&f, TOKEN, &csr, StatusCode::SERVICE_UNAVAILABLE).await;
}

mod over_tls {
    use std::path::PathBuf;
    use std::time::Duration;

    use proxy_pool_identity_client::{
        ClientConfig, ClientError, IdentityClient, IdentityHandle, RenewalPolicy, run_renewal,
    };
    use rustls::RootCertStore;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    use rustls::server::WebPkiClientVerifier;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::identity::serving::ServingCert;

    const SERVER_NAME: &str = "proxy-pool-operator.proxy-pool.svc";

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pp-identity-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    struct Running {
        addr: std::net::SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(f: &Fixture) -> Running {
        let serving = ServingCert::new(f.authority.clone(), vec![SERVER_NAME.into()]).unwrap();
        let tls = server_tls(serving).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, tls, router(f.issuer.clone()), async {
            let _ = stopped.await;
        }));
        Running { addr, stop, task }
    }

    fn client_config(f: &Fixture, addr: std::net::SocketAddr, tag: &str) -> ClientConfig {
        let dir = temp_dir(tag);
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
        let bundle = f.authority.cas().bundle_pem(SystemTime::now());
        std::fs::write(dir.join("ca-bundle.crt"), bundle).unwrap();
        let mut config = ClientConfig::new(
            format!("https://{addr}").parse().unwrap(),
            dir.join("token"),
            dir.join("ca-bundle.crt"),
        );
        config.server_name = Some(SERVER_NAME.into());
        config
    }

    #[tokio::test]
    async fn the_client_library_obtains_a_certificate_usable_for_mtls() {
        let f = fixture().await;
        let server = start(&f).await;
        let client = IdentityClient::new(client_config(&f, server.addr, "mtls"));
        let identity = client.issue().await.unwrap();
        assert_eq!(
            identity.spiffe_id(),
            "spiffe://proxy-pool.local/test/worker/gw-5d9f-abcde"
        );
        assert!(identity.is_valid_at(SystemTime::now()));
        let handle = IdentityHandle::new();
        handle.store(identity);
        mutual_tls_handshake(&f, handle).await;

        // A client that expects another server name refuses the issuer.
        let mut wrong = client_config(&f, server.addr, "wrong-name");
        wrong.server_name = Some("elsewhere.svc".into());
        let err = IdentityClient::new(wrong).issue().await.unwrap_err();
        assert!(matches!(err, ClientError::Transport(_)), "{err:?}");

        // Refusals come back as problems.
        f.reviewer.set_unavailable(true);
        let err = client.issue().await.unwrap_err();
        assert!(
            matches!(err, ClientError::Rejected { status: 503, .. }),
            "{err:?}"
        );
        assert!(err.is_retryable());

        server.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(15), server.task)
            .await
            .unwrap()
            .unwrap();
    }

    /// The handle serves as the client certificate of a TLS connection whose server
    /// verifies clients against the trust bundle.
    async fn mutual_tls_handshake(f: &Fixture, handle: IdentityHandle) {
        let mut roots = RootCertStore::empty();
        let bundle = f.authority.cas().bundle_pem(SystemTime::now());
        for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots.clone()), provider.clone())
                .build()
                .unwrap();
        let serving = ServingCert::new(f.authority.clone(), vec![SERVER_NAME.into()]).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(serving);
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_cert_resolver(Arc::new(handle));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let accept = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await.unwrap();
            peer
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let mut tls = connector
            .connect(ServerName::try_from(SERVER_NAME).unwrap(), tcp)
            .await
            .unwrap();
        tls.write_all(b"ping").await.unwrap();
        let peer = accept.await.unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&peer).unwrap();
        let san = cert.subject_alternative_name().unwrap().unwrap().value;
        assert_eq!(
            san.general_names,
            vec![x509_parser::extensions::GeneralName::URI(
                "spiffe://proxy-pool.local/test/worker/gw-5d9f-abcde"
            )]
        );
    }

    #[tokio::test]
    async fn the_renewal_loop_fills_the_handle_and_renews() {
        let mut f = fixture().await;
        // Shortest leaves the issuer allows: 60 s (+60 s backdating).
        let mut config = IssuerConfig::new("proxy-pool.local", "test");
        config.leaf_lifetime = Duration::from_secs(60);
        f.issuer = Arc::new(Issuer::new(
            config,
            f.reviewer.clone(),
            f.workloads.clone(),
            f.authority.clone(),
        ));
        let server = start(&f).await;
        let client = IdentityClient::new(client_config(&f, server.addr, "renew"));
        let handle = IdentityHandle::new();
        let policy = RenewalPolicy {
            at_fraction: 0.52, // 120 s × 0.52 = 2.4 s after "now"
            jitter_fraction: 0.0,
            ..RenewalPolicy::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let renewal = tokio::spawn(run_renewal(client, handle.clone(), policy, async {
            let _ = stopped.await;
        }));
        let first = wait_for(|| handle.current()).await;
        let second = wait_for(|| handle.current().filter(|i| !Arc::ptr_eq(i, &first))).await;
        assert!(second.not_after() > first.not_after());
        assert_eq!(second.spiffe_id(), first.spiffe_id());
        stop.send(()).unwrap();
        renewal.await.unwrap();
        server.stop.send(()).unwrap();
    }

    async fn wait_for<T>(mut probe: impl FnMut() -> Option<T>) -> T {
        for _ in 0..200 {
            if let Some(v) = probe() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("condition not met within 10 s");
    }
}

/// Captured log output for one test.
#[derive(Clone, Default)]
struct Capture(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn tokens_keys_and_certificates_never_reach_the_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let f = fixture().await;
        let csr = csr_with_sans(vec![]);
        let issued = issue(&f, TOKEN, &csr).await;
        refusal(&f, "forged-token-xyz", &csr, StatusCode::UNAUTHORIZED).await;
        f.workloads.set_unavailable(true);
        refusal(&f, TOKEN, &csr, StatusCode::SERVICE_UNAVAILABLE).await;
        let logs = String::from_utf8(capture.0.lock().clone()).unwrap();
        assert!(logs.contains("worker certificate issued"), "{logs}");
        assert!(logs.contains("identity issuance failed"), "{logs}");
        for secret in [
            TOKEN,
            "forged-token-xyz",
            "BEGIN",
            issued.certificate.lines().nth(1).unwrap(),
        ] {
            assert!(!logs.contains(secret), "{secret:?} logged:\n{logs}");
        }
    });
}

fn san_uris(certificate_pem: &str) -> Vec<String> {
    let der = x509_parser::pem::parse_x509_pem(certificate_pem.as_bytes())
        .unwrap()
        .1
        .contents;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap().value;
    san.general_names
        .iter()
        .map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => (*u).to_owned(),
            other => panic!("unexpected SAN {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn checker_pods_get_checker_ids_and_gateways_keep_worker_ids() {
    let f = fixture().await;
    let checker = checker_chain("proxy-pool-checker-5d9f-x2k4q");
    admit(&f, "checker-token", &checker);
    // The CSR asks to be a gateway worker; the kind comes from the Deployment.
    let csr = csr_with_sans(vec![
        "spiffe://proxy-pool.local/test/worker/proxy-pool-checker-5d9f-x2k4q".into(),
    ]);
    let issued = issue(&f, "checker-token", &csr).await;
    let want = "spiffe://proxy-pool.local/test/checker/proxy-pool-checker-5d9f-x2k4q";
    assert_eq!(issued.spiffe_id, want);
    assert_eq!(san_uris(&issued.certificate), vec![want.to_owned()]);
    // The controller reads it as a checker identity.
    let sid = proxy_pool_api::controlplane::spiffe::SpiffeId::parse(&issued.spiffe_id).unwrap();
    assert_eq!(
        sid.kind,
        proxy_pool_api::controlplane::spiffe::WorkloadKind::Checker
    );

    // The gateway pod of the same issuer still gets a worker identity.
    let csr = csr_with_sans(vec![
        "spiffe://proxy-pool.local/test/checker/gw-5d9f-abcde".into(),
    ]);
    let issued = issue(&f, TOKEN, &csr).await;
    let want = "spiffe://proxy-pool.local/test/worker/gw-5d9f-abcde";
    assert_eq!(issued.spiffe_id, want);
    assert_eq!(san_uris(&issued.certificate), vec![want.to_owned()]);
}

#[tokio::test]
async fn checker_refusals_keep_their_reasons() {
    let f = fixture().await;
    let csr = csr_with_sans(vec![]);
    // A pod of the checker Deployment under another ServiceAccount.
    let mut wrong_sa = checker_chain("proxy-pool-checker-5d9f-aaaaa");
    wrong_sa.pod.spec.as_mut().unwrap().service_account_name = Some("default".into());
    admit(&f, "wrong-sa", &wrong_sa);
    let p = refusal(&f, "wrong-sa", &csr, StatusCode::FORBIDDEN).await;
    assert_eq!(
        p.detail.as_deref(),
        Some("pod of the checker Deployment does not run under the checker ServiceAccount")
    );
    // A pod of some other, unlabelled Deployment under the checker's ServiceAccount.
    let mut other = checker_chain("other-5d9f-bbbbb");
    other.deployment.metadata.name = Some("other".into());
    other.deployment.metadata.uid = Some("uid-other".into());
    let rs_owner = &mut other
        .replica_set
        .metadata
        .owner_references
        .as_mut()
        .unwrap()[0];
    rs_owner.name = "other".into();
    rs_owner.uid = "uid-other".into();
    admit(&f, "other", &other);
    let p = refusal(&f, "other", &csr, StatusCode::FORBIDDEN).await;
    assert!(
        p.detail.unwrap().contains("checker Deployment"),
        "the reason names both rules"
    );
}

type Trickle = futures::channel::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>;

/// A request whose body sends its first byte and then nothing more.
fn trickling() -> (Request<Body>, Trickle) {
    let (mut tx, rx) = futures::channel::mpsc::channel(1);
    let _ = tx.try_send(Ok(axum::body::Bytes::from_static(b"{")));
    let req = Request::post(ISSUE_PATH)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-length", "4096")
        .body(Body::from_stream(rx))
        .unwrap();
    (req, tx)
}

#[tokio::test]
async fn trickling_clients_cannot_block_issuance_for_a_real_worker() {
    let f = fixture().await;
    let app = router(f.issuer.clone());
    // As many slow senders as there are issuance slots, each stuck in its body.
    let mut stuck = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..MAX_IN_FLIGHT {
        let (req, tx) = trickling();
        senders.push(tx);
        let app = app.clone();
        stuck.push(tokio::spawn(async move {
            app.oneshot(req).await.unwrap().status()
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A real worker is served at once.
    let csr = csr_with_sans(vec!["ignored".into()]);
    let started = std::time::Instant::now();
    let resp = app
        .clone()
        .oneshot(request(Some(TOKEN), json_body(&csr)))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(started.elapsed() < BODY_TIMEOUT, "{:?}", started.elapsed());
    // The slow senders are cut at the body deadline, with 408.
    for s in stuck {
        let status = tokio::time::timeout(BODY_TIMEOUT * 3, s)
            .await
            .expect("cut at the body deadline")
            .unwrap();
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    }
    drop(senders);
}
