//! Composition of the identity parts for the operator binary: the Kubernetes-backed
//! CA, the cached TokenReview, the issuer and its HTTPS listener, started with one
//! call and run until a shutdown future completes. It binds nothing and reads no
//! environment: `main` passes the client, the options and a bound listener.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio::net::TcpListener;

use super::authority::{Authority, AuthorityError};
use super::ca::CaParams;
use super::clock::SystemClock;
use super::http::{router, serve, server_tls};
use super::issuer::{Issuer, IssuerConfig};
use super::kube_adapters::{KubeCaStore, KubeTokenReviewer, KubeWorkloads};
use super::metrics::IdentityMetrics;
use super::review::{CachedReviewer, MAX_CACHE_TTL};
use super::serving::{ServingCert, ServingError};

/// Default name of the CA Secret.
pub const DEFAULT_CA_SECRET: &str = "proxy-pool-identity-ca";
/// Default name of the trust-bundle ConfigMap (key `ca.crt`), as gateways mount it.
pub const DEFAULT_TRUST_BUNDLE_CONFIG_MAP: &str = "proxy-pool-trust-bundle";
/// Review results cached at most (bounded memory).
const REVIEW_CACHE_ENTRIES: usize = 4096;

/// Everything the identity service needs to know.
#[derive(Clone, Debug)]
pub struct IdentityOptions {
    /// Namespace of the CA Secret (the operator's).
    pub namespace: String,
    /// Name of the CA Secret.
    pub ca_secret: String,
    /// Name of the trust-bundle ConfigMap.
    pub trust_bundle_config_map: String,
    /// Namespaces the bundle is published in (where workers run).
    pub bundle_namespaces: Vec<String>,
    /// What is signed and for whom (also sets the leaf lifetime).
    pub issuer: IssuerConfig,
    /// CA lifetimes; its `leaf_lifetime` is taken from `issuer`.
    pub ca: CaParams,
    /// DNS names / IPs of the endpoint's serving certificate (the Service name).
    pub serving_names: Vec<String>,
    /// How long TokenReview results are reused (capped at 120 s).
    pub review_cache_ttl: Duration,
    /// Owner of the CA Secret and of the bundle ConfigMap in `namespace` (the
    /// operator's Deployment), so uninstalling the operator removes them; `None`
    /// leaves them unowned.
    pub owner: Option<OwnerReference>,
    /// Where issuances, refusals and certificate expiries are reported (the operator
    /// passes the ones its registry holds).
    pub metrics: IdentityMetrics,
}

impl IdentityOptions {
    /// Defaults for an operator in `namespace` serving workers in the same namespace
    /// behind Service `service` (serving names `<service>`, `<service>.<ns>.svc`, ...).
    /// Unless `issuer.namespaces` is set, only pods of `namespace` are served.
    pub fn new(namespace: &str, service: &str, mut issuer: IssuerConfig) -> Self {
        if issuer.namespaces.is_none() {
            issuer.namespaces = Some(vec![namespace.to_owned()]);
        }
        Self {
            namespace: namespace.to_owned(),
            ca_secret: DEFAULT_CA_SECRET.to_owned(),
            trust_bundle_config_map: DEFAULT_TRUST_BUNDLE_CONFIG_MAP.to_owned(),
            bundle_namespaces: vec![namespace.to_owned()],
            issuer,
            ca: CaParams::default(),
            serving_names: vec![
                service.to_owned(),
                format!("{service}.{namespace}"),
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
            ],
            review_cache_ttl: MAX_CACHE_TTL,
            owner: None,
            metrics: IdentityMetrics::default(),
        }
    }
}

/// Why the identity service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Invalid options.
    #[error("identity options: {}", .0.join("; "))]
    Options(Vec<String>),
    /// The CA could not be loaded or created.
    #[error("identity CA: {0}")]
    Authority(#[from] AuthorityError),
    /// The serving certificate could not be made.
    #[error("identity endpoint certificate: {0}")]
    Serving(#[from] ServingError),
    /// TLS configuration failed.
    #[error("identity endpoint TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// A started identity service, ready to [`run`](Self::run).
#[derive(Debug)]
pub struct IdentityService {
    authority: Arc<Authority>,
    serving: Arc<ServingCert>,
    issuer: Arc<Issuer>,
}

impl IdentityService {
    /// Loads or creates the CA, publishes the bundle and prepares the endpoint.
    pub async fn start(client: kube::Client, options: IdentityOptions) -> Result<Self, StartError> {
        options.issuer.validate().map_err(StartError::Options)?;
        let clock = Arc::new(SystemClock);
        let store = KubeCaStore::new(
            client.clone(),
            &options.namespace,
            &options.ca_secret,
            &options.trust_bundle_config_map,
            options.bundle_namespaces.clone(),
        )
        .with_owner(options.owner.clone());
        let params = CaParams {
            leaf_lifetime: options.issuer.leaf_lifetime,
            ..options.ca.clone()
        };
        let authority = Authority::start(Arc::new(store), clock.clone(), params).await?;
        let serving = ServingCert::new(authority.clone(), options.serving_names.clone())?;
        let reviewer = CachedReviewer::new(
            Arc::new(KubeTokenReviewer::new(client.clone())),
            clock,
            options.review_cache_ttl,
            REVIEW_CACHE_ENTRIES,
        );
        let issuer = Arc::new(
            Issuer::new(
                options.issuer,
                Arc::new(reviewer),
                Arc::new(KubeWorkloads::new(client)),
                authority.clone(),
            )
            .with_metrics(options.metrics.clone()),
        );
        options.metrics.watch(authority.clone(), serving.clone());
        Ok(Self {
            authority,
            serving,
            issuer,
        })
    }

    /// The CA.
    pub fn authority(&self) -> &Arc<Authority> {
        &self.authority
    }

    /// Serves the endpoint on `listener`, keeps the CA rotated and the serving
    /// certificate fresh, until `shutdown` completes (then drains, bounded).
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), StartError> {
        let tls = server_tls(self.serving.clone())?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let wait = move || {
            let mut rx = stopped.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let authority = self.authority.clone();
        let rotation = tokio::spawn({
            let wait = wait();
            async move { authority.run(wait).await }
        });
        let serving = self.serving.clone();
        let renewal = tokio::spawn({
            let wait = wait();
            async move { serving.run(wait).await }
        });
        serve(listener, tls, router(self.issuer), async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await;
        let _ = rotation.await;
        let _ = renewal.await;
        Ok(())
    }
}
