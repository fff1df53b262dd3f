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
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams};
use proxy_pool_e2e::k8s::K8sBins;
use proxy_pool_identity_client::{ClientConfig, ClientError, Identity, IdentityClient};
use proxy_pool_operator::identity::authority::Authority;
use proxy_pool_operator::identity::kube_adapters::KubeCaStore;
use proxy_pool_operator::identity::{CaParams, FIELD_MANAGER, ManualClock, wire::DEFAULT_AUDIENCE};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;

mod identity_support;
use identity_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_identities_on_a_real_apiserver() {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let (cluster, workloads) = cluster_with_accounts(&bins).await;
    let client = cluster.client();
    let dir = TempDir::new("pp-identity-e2e");

    let authority = ca_is_created_and_bundle_published(&client).await;
    ca_rotation_through_server_side_apply(&client).await;
    let (issuer_addr, issuer_ca) = start_issuer(&client).await;
    assert_eq!(
        issuer_ca,
        authority.cas().cas()[0].cert_pem(),
        "the service uses the stored CA"
    );
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
    let authority = start_authority(client, "CA bootstrap").await;
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
    let again = start_authority(client, "CA reload").await;
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
    let bundle = || bundle_in(client, OPERATOR_NS, bundle_name);
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

async fn issue(addr: SocketAddr, token: &Path, bundle: &Path) -> Result<Identity, ClientError> {
    let mut config = ClientConfig::new(
        format!("https://{addr}").parse().expect("endpoint"),
        token.to_owned(),
        bundle.to_owned(),
    );
    config.server_name = Some(ISSUER_NAME.into());
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
