//! A real etcd + kube-apiserver for the tests that need the Kubernetes API (the
//! TokenReview verifier, the Lease leader election).

use proxy_pool_e2e::k8s::{K8sBins, KubeApiServer, Workloads};

/// A fresh etcd + kube-apiserver (binaries from the environment) and a client of it,
/// with namespace `ns` holding these ServiceAccounts.
pub async fn apiserver_with(ns: &str, service_accounts: &[&str]) -> (KubeApiServer, kube::Client) {
    let bins = K8sBins::from_env().unwrap_or_else(|e| panic!("{e}"));
    let cluster = KubeApiServer::start(&bins)
        .await
        .unwrap_or_else(|e| panic!("starting etcd + kube-apiserver: {e}"));
    let client = cluster.client();
    Workloads::create_namespace(&client, ns).await;
    let workloads = Workloads::new(client.clone(), ns);
    for sa in service_accounts {
        workloads.create_service_account(sa).await;
    }
    (cluster, client)
}
