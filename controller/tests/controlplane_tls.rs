//! mTLS on the control plane: certificates made here with `rcgen` (a CA, the
//! controller's server certificate, SPIFFE workload leaves); the client is the `api`
//! crate's connection helper. The SPIFFE URI must match the ID in every message.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod controlplane_support;

use std::time::Duration;

use controlplane_support::*;
use proxy_pool_api::controlplane::client::{ClientOptions, ClientTransport, connect};
use proxy_pool_api::controlplane::model::{CheckTier, Credentials, Protocol, Secret};
use proxy_pool_api::controlplane::pb;
use proxy_pool_api::controlplane::pb::checker_control_plane_client::CheckerControlPlaneClient;
use proxy_pool_api::controlplane::pb::worker_control_plane_client::WorkerControlPlaneClient;
use proxy_pool_controller::controlplane::{ServeError, ServerTls, Transport, serve};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tonic::Code;

struct Pki {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("ca");
        Pki {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn server(&self) -> (String, String) {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        (cert.pem(), key.serialize_pem())
    }

    /// A client leaf with the given URI SANs (none: a DNS name only).
    fn leaf(&self, uris: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.subject_alt_names = if uris.is_empty() {
            vec![SanType::DnsName("client.test".try_into().expect("dns"))]
        } else {
            uris.iter()
                .map(|u| SanType::URI((*u).try_into().expect("uri")))
                .collect()
        };
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf");
        (cert.pem(), key.serialize_pem())
    }
}

async fn mtls_harness(pki: &Pki) -> Harness {
    let (cert_pem, key_pem) = pki.server();
    let tls = ServerTls {
        cert_pem,
        key_pem: Secret::new(key_pem),
        client_ca_pem: pki.ca_pem.clone(),
        trust_domain: "pp.test".into(),
        environment: "test".into(),
    };
    Harness::serving(Kind::Memory, config(), 64, Some(Transport::Mtls(tls))).await
}

/// A fresh PKI and the control plane serving mTLS with its CA as client CA.
async fn mtls() -> (Pki, Harness) {
    let pki = Pki::new();
    let h = mtls_harness(&pki).await;
    (pki, h)
}

/// A channel to `h` with a leaf of `pki` naming `uris`.
async fn connect_as(
    h: &Harness,
    pki: &Pki,
    uris: &[&str],
) -> Result<tonic::transport::Channel, String> {
    channel(h, &pki.ca_pem, pki.leaf(uris)).await
}

/// A channel to `h` as `identity` (`worker/<id>` or `checker/<id>` in the test trust
/// domain and environment), which must connect.
async fn connected(h: &Harness, pki: &Pki, identity: &str) -> tonic::transport::Channel {
    let uri = format!("spiffe://pp.test/test/{identity}");
    connect_as(h, pki, &[&uri])
        .await
        .unwrap_or_else(|e| panic!("mTLS connect as {uri}: {e}"))
}

async fn channel(
    h: &Harness,
    ca_pem: &str,
    leaf: (String, String),
) -> Result<tonic::transport::Channel, String> {
    let transport = ClientTransport::Mtls {
        ca_pem: ca_pem.to_owned(),
        cert_pem: leaf.0,
        key_pem: Secret::new(leaf.1),
        server_name: "localhost".into(),
    };
    connect(&h.endpoint, &transport, &ClientOptions::default())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spiffe_id_must_match_the_worker_id_of_every_message() {
    let (pki, h) = mtls().await;
    let ch = connected(&h, &pki, "worker/gw-0").await;
    let mut w = Worker::register_on(WorkerControlPlaneClient::new(ch.clone()), "gw-0").await;
    h.available("p", 1, 600).await;
    h.pass().await;
    w.watch().await;
    w.apply_next().await;
    w.ack(true).await.expect("ack as gw-0");

    // The same certificate cannot speak for another worker, in any RPC.
    let mut other = WorkerControlPlaneClient::new(ch);
    assert_identity_mismatch(other.register_worker(register_req("gw-1", "i-1")).await);
    let mut req = w.runtime_req(1, &[]);
    req.worker_id = "gw-1".into();
    assert_identity_mismatch(other.report_runtime(req).await);
    let watch = other
        .watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: "gw-1".into(),
            session_id: w.session.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(watch.expect_err("denied").code(), Code::PermissionDenied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_kind_domain_or_environment_is_refused() {
    let (pki, h) = mtls().await;
    for uri in [
        "spiffe://pp.test/test/checker/gw-0",
        "spiffe://other.test/test/worker/gw-0",
        "spiffe://pp.test/prod/worker/gw-0",
    ] {
        let ch = connect_as(&h, &pki, &[uri]).await.expect("connect");
        let mut c = WorkerControlPlaneClient::new(ch);
        let r = c.register_worker(register_req("gw-0", "i-1")).await;
        assert_eq!(r.expect_err(uri).code(), Code::PermissionDenied, "{uri}");
    }
    // No URI SAN, or two of them: not an identity at all.
    for uris in [
        vec![],
        vec![
            "spiffe://pp.test/test/worker/gw-0",
            "spiffe://pp.test/test/worker/gw-1",
        ],
    ] {
        let ch = connect_as(&h, &pki, &uris).await.expect("connect");
        let mut c = WorkerControlPlaneClient::new(ch);
        let r = c.register_worker(register_req("gw-0", "i-1")).await;
        assert_eq!(r.expect_err("no identity").code(), Code::Unauthenticated);
    }
}

/// The operator's issuer names gateway pods `…/worker/<pod>` and checker pods
/// `…/checker/<pod>`: neither kind may use the other's service, even with the same ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_checker_identities_cannot_cross_services() {
    let (pki, h) = mtls().await;
    let pod = "proxy-pool-checker-5d9f-x2k4q";

    // A checker certificate on the gateway service: refused in every RPC.
    let ch = connected(&h, &pki, &format!("checker/{pod}")).await;
    let mut as_worker = WorkerControlPlaneClient::new(ch.clone());
    assert_identity_mismatch(as_worker.register_worker(register_req(pod, "i-1")).await);
    let watch = as_worker
        .watch_snapshots(pb::WatchSnapshotsRequest {
            worker_id: pod.into(),
            session_id: "s-1".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(watch.expect_err("denied").code(), Code::PermissionDenied);
    // ... while the same certificate is a checker.
    CheckerControlPlaneClient::new(ch)
        .register_checker(checker_req(pod, 2, &[pb::CheckTier::Basic]))
        .await
        .expect("the checker certificate registers as a checker");

    // A gateway certificate on the checker service: refused in every RPC.
    let ch = connected(&h, &pki, &format!("worker/{pod}")).await;
    let mut as_checker = CheckerControlPlaneClient::new(ch.clone());
    assert_identity_mismatch(
        as_checker
            .register_checker(checker_req(pod, 2, &[pb::CheckTier::Basic]))
            .await,
    );
    let stream = as_checker.stream_tasks(stream_tasks_req(pod, "s-1")).await;
    assert_eq!(stream.expect_err("denied").code(), Code::PermissionDenied);
    let report = as_checker
        .report_observations(pb::ReportObservationsRequest {
            checker_id: pod.into(),
            session_id: "s-1".into(),
            observations: vec![],
        })
        .await;
    assert_eq!(report.expect_err("denied").code(), Code::PermissionDenied);
    // ... while the same certificate is a gateway worker.
    WorkerControlPlaneClient::new(ch)
        .register_worker(register_req(pod, "i-1"))
        .await
        .expect("the worker certificate registers as a worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_from_another_ca_or_none_are_refused_by_the_handshake() {
    let (pki, h) = mtls().await;
    let rogue = Pki::new();
    let leaf = rogue.leaf(&["spiffe://pp.test/test/worker/gw-0"]);
    let refused = match channel(&h, &pki.ca_pem, leaf).await {
        Err(_) => true,
        Ok(ch) => WorkerControlPlaneClient::new(ch)
            .register_worker(register_req("gw-0", "i-1"))
            .await
            .is_err(),
    };
    assert!(refused, "a leaf of another CA must not get through");
    // Plaintext to the mTLS listener does not work either.
    let plain = h.endpoint.replace("https://", "http://");
    let r = connect(
        &plain,
        &ClientTransport::LoopbackPlaintext,
        &ClientOptions::default(),
    )
    .await;
    let refused = match r {
        Err(_) => true,
        Ok(ch) => WorkerControlPlaneClient::new(ch)
            .register_worker(register_req("gw-0", "i-1"))
            .await
            .is_err(),
    };
    assert!(refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checker_identity_and_task_cycle_over_mtls() {
    let (pki, h) = mtls().await;
    let ch = connected(&h, &pki, "checker/chk-0").await;
    let mut c = CheckerControlPlaneClient::new(ch);
    let reg = c
        .register_checker(checker_req("chk-0", 2, &[pb::CheckTier::Basic]))
        .await
        .expect("register checker")
        .into_inner();
    let denied = c
        .register_checker(checker_req("chk-1", 2, &[pb::CheckTier::Basic]))
        .await;
    assert_eq!(denied.expect_err("other id").code(), Code::PermissionDenied);
    let mut stream = c
        .stream_tasks(stream_tasks_req("chk-0", &reg.session_id))
        .await
        .expect("stream")
        .into_inner();
    let mut t1 = check_task(&h, "t-1", CheckTier::Basic, 30, Protocol::Http);
    t1.proxy.dial.credentials = Some(Credentials {
        username: "u".into(),
        password: Secret::new("s3cr3t-pass"),
    });
    assert!(h.checker.enqueue(t1));
    let t = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("in time")
        .expect("ok")
        .expect("open");
    assert_eq!(t.task_id, "t-1");
    let creds = t.credentials.as_ref().expect("credentials for the probe");
    assert!(
        !format!("{creds:?}").contains("s3cr3t"),
        "Debug redacts the password"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_fixture_refuses_a_non_loopback_listener() {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0")
        .await
        .expect("bind");
    let clock = activity_pool::ManualClock::starting_now();
    let (pool, _r) = pool_of(Kind::Memory, &clock).await;
    let (checker, _o) = proxy_pool_controller::controlplane::MemoryCheckerBackend::new(
        1,
        1,
        std::sync::Arc::new(clock.clone()),
    );
    let (outcomes, _rx) = proxy_pool_controller::controlplane::OutcomeQueue::bounded(1);
    let cp = std::sync::Arc::new(proxy_pool_controller::controlplane::ControlPlane::new(
        config(),
        ports_of(pool, clock),
        std::sync::Arc::new(checker),
        outcomes,
    ));
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        serve(
            listener,
            Transport::LoopbackFixture,
            cp,
            std::future::pending(),
        ),
    )
    .await
    .expect("returns at once");
    assert!(matches!(r, Err(ServeError::PlaintextNotLoopback)));
}

fn assert_identity_mismatch<T: std::fmt::Debug>(r: Result<T, tonic::Status>) {
    assert_code(r, Code::PermissionDenied, "identity_mismatch");
}
