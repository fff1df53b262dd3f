//! Shared fixtures of the worker-identity e2e tests (`identity`, `worker_identity`):
//! the names the operator's issuer is configured with, the CA on a real apiserver, the
//! issuer served on a loopback port, and a private temp dir for token and bundle files.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer, Workloads};
use proxy_pool_operator::identity::authority::Authority;
use proxy_pool_operator::identity::authz::CheckerWorkload;
use proxy_pool_operator::identity::kube_adapters::{BUNDLE_KEY, KubeCaStore};
use proxy_pool_operator::identity::{
    CaParams, IdentityOptions, IdentityService, IssuerConfig, SystemClock,
};

pub const OPERATOR_NS: &str = "proxy-pool-system";
pub const GATEWAY_NS: &str = "gateways";
pub const CA_SECRET: &str = "proxy-pool-identity-ca";
pub const BUNDLE_CM: &str = "proxy-pool-trust-bundle";
pub const SA: &str = "gateway";
/// The checker Deployment and its ServiceAccount the issuer is configured with.
pub const CHECKER_DEPLOYMENT: &str = "proxy-pool-checker";
pub const CHECKER_SA: &str = "checker";
/// The issuer's TLS server name.
pub const ISSUER_NAME: &str = "proxy-pool-operator.proxy-pool-system.svc";
pub const TRUST_DOMAIN: &str = "proxy-pool.test";
pub const ENVIRONMENT: &str = "e2e";

/// A real etcd + kube-apiserver with the operator's and the gateways' namespaces and,
/// in the gateways' namespace, the gateway and checker ServiceAccounts.
pub async fn cluster_with_accounts(bins: &K8sBins) -> (KubeApiServer, Workloads) {
    let cluster = KubeApiServer::start_for_test(bins, false).await;
    let client = cluster.client();
    for ns in [OPERATOR_NS, GATEWAY_NS] {
        Workloads::create_namespace(&client, ns).await;
    }
    let workloads = Workloads::new(client, GATEWAY_NS);
    for sa in [SA, CHECKER_SA] {
        workloads.create_service_account(sa).await;
    }
    (cluster, workloads)
}

/// The operator's CA store: the CA Secret in the operator's namespace, the bundle
/// ConfigMap in the operator's and the gateways' namespaces.
pub fn ca_store(client: &kube::Client) -> KubeCaStore {
    KubeCaStore::new(
        client.clone(),
        OPERATOR_NS,
        CA_SECRET,
        BUNDLE_CM,
        vec![OPERATOR_NS.into(), GATEWAY_NS.into()],
    )
}

/// The operator's CA on the store of [`ca_store`], created or loaded.
pub async fn start_authority(client: &kube::Client, what: &str) -> Arc<Authority> {
    Authority::start(
        Arc::new(ca_store(client)),
        Arc::new(SystemClock),
        CaParams::default(),
    )
    .await
    .expect(what)
}

/// The CA bundle published in `ns`.
pub async fn published_bundle(client: &kube::Client, ns: &str) -> String {
    bundle_in(client, ns, BUNDLE_CM).await
}

/// The CA bundle in the ConfigMap `name` of `ns`.
pub async fn bundle_in(client: &kube::Client, ns: &str, name: &str) -> String {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("bundle ConfigMap")
        .data
        .and_then(|mut d| d.remove(BUNDLE_KEY))
        .expect("bundle key")
}

/// The operator's identity service as `main` composes it (same CA Secret and bundle
/// ConfigMaps as [`ca_store`]), serving on a loopback port; its address and the PEM of
/// the CA it signs with.
pub async fn start_issuer(client: &kube::Client) -> (SocketAddr, String) {
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
    let ca_pem = service.authority().cas().cas()[0].cert_pem().to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(service.run(listener, std::future::pending()));
    (addr, ca_pem)
}

/// A private temp dir for token and bundle files, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    /// `<temp>/<prefix>-<pid>`.
    pub fn new(prefix: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&path).expect("temp dir");
        Self { path }
    }

    /// Writes `contents` to `name` (a path below the dir; missing folders are made).
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("temp subdir");
        }
        std::fs::write(&path, contents).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
