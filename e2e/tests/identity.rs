//! Worker identity e2e against a real etcd + kube-apiserver (built by
//! `scripts/k8s-bins.sh`): the operator's CA is created in a Secret by server-side
//! apply and its bundle published in ConfigMaps; a pod of a managed gateway Deployment
//! (Deployment → ReplicaSet → Pod objects created directly — no controllers run here)
//! gets a certificate through the real client library with a bound ServiceAccount
//! token, whose only SAN is its SPIFFE ID and whose chain verifies against the
//! published bundle; a pod of the configured checker Deployment under the checker
//! ServiceAccount gets a `checker/<pod>` identity; pods outside a managed gateway or the
//! checker Deployment are refused (403), the checker's ServiceAccount alone included,
//! and tokens for another audience are refused (401).
//!
//! One control plane serves every step (starting one is slow on a small machine).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams};
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer, Workloads};
use proxy_pool_identity_client::{ClientConfig, ClientError, Identity, IdentityClient};
use proxy_pool_operator::identity::authority::Authority;
use proxy_pool_operator::identity::authz::CheckerWorkload;
use proxy_pool_operator::identity::kube_adapters::{BUNDLE_KEY, KubeCaStore};
use proxy_pool_operator::identity::{
    CaParams, FIELD_MANAGER, IdentityOptions, IdentityService, IssuerConfig, ManualClock,
    SystemClock, wire::DEFAULT_AUDIENCE,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;

const OPERATOR_NS: &str = "proxy-pool-system";
const GATEWAY_NS: &str = "gateways";
const CA_SECRET: &str = "proxy-pool-identity-ca";
const BUNDLE_CM: &str = "proxy-pool-trust-bundle";
const SA: &str = "gateway";
/// The checker Deployment and its ServiceAccount the issuer is configured with.
const CHECKER_DEPLOYMENT: &str = "proxy-pool-checker";
const CHECKER_SA: &str = "checker";
const SERVER_NAME: &str = "proxy-pool-operator.proxy-pool-system.svc";
const TRUST_DOMAIN: &str = "proxy-pool.test";
const ENVIRONMENT: &str = "e2e";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_identities_on_a_real_apiserver() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start(&bins)
        .await
        .unwrap_or_else(|e| panic!("starting etcd + kube-apiserver: {e}"));
    let client = cluster.client();
    let dir = TempDir::new();

    for ns in [OPERATOR_NS, GATEWAY_NS] {
        Workloads::create_namespace(&client, ns).await;
    }
    let workloads = Workloads::new(client.clone(), GATEWAY_NS);
    for sa in [SA, CHECKER_SA] {
        workloads.create_service_account(sa).await;
    }

    let authority = ca_is_created_and_bundle_published(&client).await;
    ca_rotation_through_server_side_apply(&client).await;
    let issuer_addr = start_issuer(&client, authority).await;
    let bundle_file = dir.write(
        "ca-bundle.crt",
        &published_bundle(&client, GATEWAY_NS).await,
    );

    // A managed gateway: Deployment (our labels) → ReplicaSet → Pod.
    let gateway_pod = workloads.deployment_chain("gw", SA, true).await;
    let token = workloads.token_for(&gateway_pod, DEFAULT_AUDIENCE).await;
    let identity = issue(issuer_addr, &dir.write("gw.token", &token), &bundle_file)
        .await
        .unwrap_or_else(|e| panic!("issuing for the gateway pod: {e}\n{}", cluster.logs()));
    certificate_names_the_pod_and_verifies_against_the_bundle(
        &identity,
        &gateway_pod.name,
        &bundle_file,
    );

    // A pod of a Deployment without our labels, and a bare pod: 403.
    let unmanaged_pod = workloads.deployment_chain("other", SA, false).await;
    let token = workloads.token_for(&unmanaged_pod, DEFAULT_AUDIENCE).await;
    let err = issue(issuer_addr, &dir.write("other.token", &token), &bundle_file).await;
    assert_refused(err, 403, "pod of an unmanaged Deployment");
    let bare = workloads.create_pod("bare", SA, None).await;
    let token = workloads.token_for(&bare, DEFAULT_AUDIENCE).await;
    let err = issue(issuer_addr, &dir.write("bare.token", &token), &bundle_file).await;
    assert_refused(err, 403, "pod without owner");

    // The checker Deployment's pod under the checker ServiceAccount: a checker identity.
    let checker_pod = workloads
        .deployment_chain(CHECKER_DEPLOYMENT, CHECKER_SA, false)
        .await;
    let token = workloads.token_for(&checker_pod, DEFAULT_AUDIENCE).await;
    let identity = issue(issuer_addr, &dir.write("chk.token", &token), &bundle_file)
        .await
        .unwrap_or_else(|e| panic!("issuing for the checker pod: {e}\n{}", cluster.logs()));
    assert_eq!(
        identity.spiffe_id(),
        format!(
            "spiffe://{TRUST_DOMAIN}/{ENVIRONMENT}/checker/{}",
            checker_pod.name
        )
    );
    // The checker's ServiceAccount on a pod of another Deployment: no identity (the
    // rule is the named Deployment, found through the owner chain, not the account).
    let imposter = workloads
        .deployment_chain("imposter", CHECKER_SA, false)
        .await;
    let token = workloads.token_for(&imposter, DEFAULT_AUDIENCE).await;
    let err = issue(issuer_addr, &dir.write("imp.token", &token), &bundle_file).await;
    assert_refused(
        err,
        403,
        "checker ServiceAccount outside the checker Deployment",
    );
    // A bare pod named like a checker pod, under the checker ServiceAccount: 403.
    let bare = workloads
        .create_pod(
            &format!("{CHECKER_DEPLOYMENT}-7c9d5-bare1"),
            CHECKER_SA,
            None,
        )
        .await;
    let token = workloads.token_for(&bare, DEFAULT_AUDIENCE).await;
    let err = issue(
        issuer_addr,
        &dir.write("chk-bare.token", &token),
        &bundle_file,
    )
    .await;
    assert_refused(err, 403, "bare pod under the checker ServiceAccount");

    // The gateway pod's own token, but for another audience: 401. And garbage: 401.
    let token = workloads
        .token_for(&gateway_pod, "some-other-audience")
        .await;
    let err = issue(issuer_addr, &dir.write("aud.token", &token), &bundle_file).await;
    assert_refused(err, 401, "token for another audience");
    let err = issue(
        issuer_addr,
        &dir.write("junk.token", "not-a-token"),
        &bundle_file,
    )
    .await;
    assert_refused(err, 401, "garbage token");

    // Once the pod is gone its (possibly cached) token no longer yields a certificate.
    let gw_token = dir.path.join("gw.token");
    Api::<Pod>::namespaced(client.clone(), GATEWAY_NS)
        .delete(&gateway_pod.name, &DeleteParams::default())
        .await
        .expect("delete gateway pod");
    let err = issue(issuer_addr, &gw_token, &bundle_file).await;
    match err {
        Err(ClientError::Rejected {
            status: 401 | 403, ..
        }) => {}
        other => panic!("deleted pod: expected 401/403, got {other:?}"),
    }
}

async fn ca_is_created_and_bundle_published(client: &kube::Client) -> Arc<Authority> {
    let store = KubeCaStore::new(
        client.clone(),
        OPERATOR_NS,
        CA_SECRET,
        BUNDLE_CM,
        vec![OPERATOR_NS.into(), GATEWAY_NS.into()],
    );
    let authority = Authority::start(
        Arc::new(store.clone()),
        Arc::new(SystemClock),
        CaParams::default(),
    )
    .await
    .expect("CA bootstrap");
    let secret = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
        .get(CA_SECRET)
        .await
        .expect("CA Secret exists");
    let data = secret.data.clone().unwrap_or_default();
    assert!(
        data.contains_key("ca.crt") && data.contains_key("ca.key"),
        "{:?}",
        data.keys()
    );
    let managers: Vec<_> = secret
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        vec![(FIELD_MANAGER.to_owned(), "Apply".to_owned())]
    );

    // A restart keeps the same CA.
    let again = Authority::start(Arc::new(store), Arc::new(SystemClock), CaParams::default())
        .await
        .expect("CA reload");
    assert_eq!(
        again.cas().cas()[0].cert_pem(),
        authority.cas().cas()[0].cert_pem()
    );

    let ca_pem = String::from_utf8(data["ca.crt"].0.clone()).expect("PEM");
    for ns in [OPERATOR_NS, GATEWAY_NS] {
        assert_eq!(
            published_bundle(client, ns).await.trim(),
            ca_pem.trim(),
            "bundle in {ns}"
        );
    }
    authority
}

/// A rotation on a controllable clock, through the real Secret and ConfigMap: the
/// previous CA is added next to the new one, both are published, and the previous one's
/// keys disappear from the Secret (server-side apply drops fields it no longer sets).
async fn ca_rotation_through_server_side_apply(client: &kube::Client) {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let (secret_name, bundle_name) = ("rotation-ca", "rotation-bundle");
    let store = KubeCaStore::new(
        client.clone(),
        OPERATOR_NS,
        secret_name,
        bundle_name,
        vec![OPERATOR_NS.into()],
    );
    let clock = ManualClock::new(SystemTime::now());
    let params = CaParams {
        ca_lifetime: 100 * DAY,
        overlap: 10 * DAY,
        publish_lead: Duration::from_secs(3600),
        leaf_lifetime: DAY,
    };
    let authority = Authority::start(Arc::new(store), Arc::new(clock.clone()), params)
        .await
        .expect("CA bootstrap");
    let secrets = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS);
    let keys = |s: Secret| -> BTreeMap<String, String> {
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.0).expect("PEM")))
            .collect()
    };
    let bundle = || async {
        Api::<ConfigMap>::namespaced(client.clone(), OPERATOR_NS)
            .get(bundle_name)
            .await
            .expect("bundle ConfigMap")
            .data
            .and_then(|mut d| d.remove(BUNDLE_KEY))
            .expect("bundle key")
    };
    let first = keys(secrets.get(secret_name).await.expect("Secret"));
    assert_eq!(first.keys().collect::<Vec<_>>(), ["ca.crt", "ca.key"]);

    clock.advance(90 * DAY);
    authority.reconcile().await.expect("rotate");
    let during = keys(secrets.get(secret_name).await.expect("Secret"));
    assert_eq!(
        during.keys().collect::<Vec<_>>(),
        ["ca.crt", "ca.key", "previous-ca.crt", "previous-ca.key"]
    );
    assert_eq!(during["previous-ca.crt"], first["ca.crt"]);
    assert_ne!(during["ca.crt"], first["ca.crt"]);
    let published = bundle().await;
    assert_eq!(published.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(
        published.contains(first["ca.crt"].trim()) && published.contains(during["ca.crt"].trim())
    );

    clock.advance(11 * DAY);
    authority.reconcile().await.expect("drop the expired CA");
    let after = keys(secrets.get(secret_name).await.expect("Secret"));
    assert_eq!(after.keys().collect::<Vec<_>>(), ["ca.crt", "ca.key"]);
    assert_eq!(after["ca.crt"], during["ca.crt"]);
    assert_eq!(bundle().await.trim(), during["ca.crt"].trim());
}

async fn published_bundle(client: &kube::Client, ns: &str) -> String {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(BUNDLE_CM)
        .await
        .expect("bundle ConfigMap")
        .data
        .and_then(|mut d| d.remove(BUNDLE_KEY))
        .expect("bundle key")
}

/// The operator's identity service as `main` composes it (same CA Secret and bundle
/// ConfigMaps as above), serving on a loopback port.
async fn start_issuer(client: &kube::Client, authority: Arc<Authority>) -> SocketAddr {
    let mut options = IdentityOptions::new(
        OPERATOR_NS,
        "proxy-pool-operator",
        IssuerConfig::new(TRUST_DOMAIN, ENVIRONMENT),
    );
    // Gateways run in their own namespace here (by default only the operator's is served).
    options.issuer.namespaces = Some(vec![GATEWAY_NS.into()]);
    // As the operator binary: gateway identities only under the gateway ServiceAccount.
    options.issuer.gateway_service_account = Some(SA.into());
    options.issuer.checker = Some(CheckerWorkload {
        namespace: GATEWAY_NS.into(),
        deployment: CHECKER_DEPLOYMENT.into(),
        service_account: CHECKER_SA.into(),
    });
    options.bundle_namespaces = vec![OPERATOR_NS.into(), GATEWAY_NS.into()];
    let service = IdentityService::start(client.clone(), options)
        .await
        .expect("identity service");
    assert_eq!(
        service.authority().cas().cas()[0].cert_pem(),
        authority.cas().cas()[0].cert_pem(),
        "the service uses the stored CA"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(service.run(listener, std::future::pending()));
    addr
}

async fn issue(addr: SocketAddr, token: &Path, bundle: &Path) -> Result<Identity, ClientError> {
    let mut config = ClientConfig::new(
        format!("https://{addr}").parse().expect("endpoint"),
        token.to_owned(),
        bundle.to_owned(),
    );
    config.server_name = Some(SERVER_NAME.into());
    config.timeout = Duration::from_secs(30);
    IdentityClient::new(config).issue().await
}

fn assert_refused(result: Result<Identity, ClientError>, want: u16, what: &str) {
    match result {
        Err(ClientError::Rejected { status, .. }) if status == want => {}
        other => panic!("{what}: expected {want}, got {other:?}"),
    }
}

fn certificate_names_the_pod_and_verifies_against_the_bundle(
    identity: &Identity,
    pod: &str,
    bundle: &Path,
) {
    let want = format!("spiffe://{TRUST_DOMAIN}/{ENVIRONMENT}/worker/{pod}");
    assert_eq!(identity.spiffe_id(), want);
    let leaf =
        CertificateDer::from_pem_slice(identity.certificate_pem().as_bytes()).expect("leaf PEM");
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).expect("leaf X.509");
    let san = cert
        .subject_alternative_name()
        .expect("SAN extension")
        .expect("SAN present")
        .value;
    assert_eq!(
        san.general_names,
        vec![x509_parser::extensions::GeneralName::URI(&want)],
        "exactly one URI SAN"
    );
    let eku = cert
        .extended_key_usage()
        .expect("EKU")
        .expect("EKU present")
        .value;
    assert!(eku.client_auth && eku.server_auth);
    let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert!(
        (24 * 3600..=24 * 3600 + 120).contains(&life),
        "lifetime {life}s"
    );

    // The chain verifies against the bundle the operator published, as a peer's
    // mTLS verifier would check it.
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(bundle).expect("bundle file");
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.expect("bundle PEM"))
            .expect("bundle certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .expect("verifier");
    verifier
        .verify_client_cert(&leaf, &[], UnixTime::now())
        .expect("leaf chains to the published bundle");
}

/// A private temp dir for token and bundle files, removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!("pp-identity-e2e-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self { path }
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
