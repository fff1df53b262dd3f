//! `proxy-pool-operator`: parses the command line, binds the ops listener, waits for
//! the leader Lease and runs the reconcilers until SIGTERM / Ctrl-C. Composition only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use proxy_pool_operator::identity::IssuerConfig;
use proxy_pool_operator::identity::authz::CheckerWorkload;
use proxy_pool_operator::identity::service::{IdentityOptions, IdentityService};
use proxy_pool_operator::reconcile::{
    self, ControllerTls, GatewayPodSettings, GatewayTemplate, LeaderSettings, Metrics,
    OperatorConfig, http,
};
use proxy_pool_runtime::shutdown_signal;
use proxy_pool_runtime::telemetry::logging::{self, FORMAT_ENV, LogFormat, Stream};

/// Proxy Pool operator: renders the controller config and runs gateways from
/// Upstream, Routing and DistributionClient resources.
#[derive(Debug, Parser)]
#[command(name = "proxy-pool-operator", version)]
struct Cli {
    /// Namespace watched (the release namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// This replica's name, the leader Lease identity.
    #[arg(long, env = "POD_NAME")]
    pod_name: String,
    /// Controller settings not derived from custom resources (YAML, the controller's schema).
    #[arg(long, env = "PROXY_POOL_BASE_CONFIG")]
    base_config: PathBuf,
    /// The controller Deployment whose config this operator renders.
    #[arg(long, env = "PROXY_POOL_CONTROLLER_DEPLOYMENT")]
    controller_deployment: String,
    /// The container in it that reads the config.
    #[arg(long, default_value = "controller")]
    controller_container: String,
    /// ConfigMap the rendered config is written to.
    #[arg(long, env = "PROXY_POOL_CONFIG_MAP")]
    config_map: String,
    /// Mount path of the config volume in the controller container.
    #[arg(long, default_value = "/etc/proxy-pool")]
    config_dir: String,
    /// Gateway image.
    #[arg(long, env = "PROXY_POOL_GATEWAY_IMAGE")]
    gateway_image: String,
    /// Gateway image pull policy.
    #[arg(long, default_value = "IfNotPresent")]
    gateway_image_pull_policy: String,
    /// Pod settings of the gateway Deployments (YAML: hardening, pull secrets, default
    /// resources, scheduling, shutdown timing, PodDisruptionBudget); without it the
    /// built-in defaults (Pod Security `restricted`, a PodDisruptionBudget).
    #[arg(long, env = "PROXY_POOL_GATEWAY_POD_SETTINGS")]
    gateway_pod_settings: Option<PathBuf>,
    /// ServiceAccount of the gateway pods.
    #[arg(long, env = "PROXY_POOL_GATEWAY_SERVICE_ACCOUNT")]
    gateway_service_account: String,
    /// `host:port` of the controller's control plane, as gateways reach it.
    #[arg(long, env = "PROXY_POOL_CONTROLLER_ADDRESS")]
    controller_address: String,
    /// URL of the identity issuance endpoint, as gateways reach it.
    #[arg(long, env = "PROXY_POOL_IDENTITY_ENDPOINT")]
    identity_endpoint: String,
    /// ConfigMap with the identity trust bundle.
    #[arg(long, default_value = "proxy-pool-trust-bundle")]
    trust_bundle_config_map: String,
    /// Leader Lease name.
    #[arg(long, default_value = "proxy-pool-operator")]
    lease_name: String,
    /// Leader Lease duration, seconds.
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
    /// `/metrics`, `/healthz` and `/readyz` listener.
    #[arg(long, default_value = "0.0.0.0:8080")]
    ops_listen: SocketAddr,
    /// Identity issuance endpoint (HTTPS) listener.
    #[arg(long, default_value = "0.0.0.0:8443")]
    identity_listen: SocketAddr,
    /// Service name workers reach the issuance endpoint by (its certificate's names).
    #[arg(long, default_value = "proxy-pool-operator")]
    identity_service: String,
    /// SPIFFE trust domain of worker identities.
    #[arg(long, default_value = "proxy-pool.local")]
    trust_domain: String,
    /// Environment segment of worker SPIFFE IDs.
    #[arg(long, default_value = "default")]
    environment: String,
    /// The checker Deployment (in `--namespace`) whose pods get
    /// `spiffe://<trust-domain>/<environment>/checker/<pod-name>` identities (empty:
    /// checker pods are refused).
    #[arg(long, env = "PROXY_POOL_CHECKER_DEPLOYMENT", default_value = "")]
    checker_deployment: String,
    /// ServiceAccount the checker's pods run under (required with
    /// `--checker-deployment`).
    #[arg(long, env = "PROXY_POOL_CHECKER_SERVICE_ACCOUNT", default_value = "")]
    checker_service_account: String,
    /// Secret the operator writes the controller's control-plane certificate to
    /// (empty: the operator does not secure the control plane; the base config's
    /// `controlPlane` is rendered as it is).
    #[arg(long, default_value = "")]
    controller_tls_secret: String,
    /// DNS names of the controller Service (the certificate's names), comma-separated.
    #[arg(long, value_delimiter = ',')]
    controller_dns_names: Vec<String>,
    /// Lifetime of the controller's certificate, hours (renewed at half-life).
    #[arg(long, default_value_t = 24)]
    controller_cert_hours: u64,
    /// Secret holding the key that seals the content hashes written as pod annotations
    /// (made on first start).
    #[arg(long, default_value = reconcile::hash_key::DEFAULT_SECRET)]
    hash_key_secret: String,
    /// This operator's own Deployment (in `--namespace`): it owns the identity CA
    /// Secret and the trust bundle ConfigMap, so removing the operator removes them.
    /// Empty: they are left unowned.
    #[arg(long, env = "PROXY_POOL_OWNER_DEPLOYMENT", default_value = "")]
    owner_deployment: String,
    /// `http://host:port` of the controller's admin Service: Upstream status takes its
    /// inventory, last fetch time and vendor fetch failures from there (empty: the
    /// Upstream status reports the config only).
    #[arg(long, default_value = "")]
    controller_admin_url: String,
    /// Log lines as `text` or `json` (one object per line), on standard output.
    #[arg(long, env = FORMAT_ENV, default_value = "text")]
    log_format: LogFormat,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.log_format, Stream::Stdout).context("logging")?;
    let text = std::fs::read_to_string(&cli.base_config)
        .with_context(|| format!("reading {}", cli.base_config.display()))?;
    let base_config = proxy_pool_api::config::parse_yaml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cli.base_config.display()))?;
    let gateway_pod = match &cli.gateway_pod_settings {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            GatewayPodSettings::from_yaml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => GatewayPodSettings::default(),
    };
    let checker = match (
        cli.checker_deployment.as_str(),
        cli.checker_service_account.as_str(),
    ) {
        ("", "") => None,
        ("", _) | (_, "") => {
            anyhow::bail!("--checker-deployment and --checker-service-account go together")
        }
        (deployment, service_account) => Some(CheckerWorkload {
            namespace: cli.namespace.clone(),
            deployment: deployment.to_owned(),
            service_account: service_account.to_owned(),
        }),
    };
    let mut identity = IdentityOptions::new(
        &cli.namespace,
        &cli.identity_service,
        IssuerConfig {
            checker,
            gateway_service_account: Some(cli.gateway_service_account.clone()),
            ..IssuerConfig::new(cli.trust_domain.clone(), cli.environment.clone())
        },
    );
    let controller_tls = (!cli.controller_tls_secret.is_empty()).then(|| ControllerTls {
        secret: cli.controller_tls_secret.clone(),
        dns_names: cli.controller_dns_names.clone(),
        trust_domain: cli.trust_domain.clone(),
        environment: cli.environment.clone(),
        ca_secret: identity.ca_secret.clone(),
        trust_bundle_config_map: identity.trust_bundle_config_map.clone(),
        ca: identity.ca.clone(),
        lifetime: Duration::from_secs(cli.controller_cert_hours.max(1) * 3600),
    });
    let egress = base_config.egress.clone();
    let config = OperatorConfig {
        namespace: cli.namespace.clone(),
        base_config,
        controller_deployment: cli.controller_deployment,
        controller_container: cli.controller_container,
        config_map: cli.config_map,
        config_dir: cli.config_dir,
        gateway: GatewayTemplate {
            image: cli.gateway_image,
            image_pull_policy: cli.gateway_image_pull_policy,
            service_account: cli.gateway_service_account,
            controller_address: cli.controller_address,
            identity_endpoint: cli.identity_endpoint,
            trust_bundle_config_map: cli.trust_bundle_config_map,
            // One egress policy: the gateways get the controller's.
            egress_deny_cidrs: egress.deny_cidrs,
            egress_allow_cidrs: egress.allow_cidrs,
            pod: gateway_pod,
        },
        instance: Some(cli.pod_name.clone()),
        controller_tls,
        // Loaded (or made) once the API client exists, below.
        hash_key: reconcile::hash_key::HashKey::new([0; 32]),
        controller_admin: (!cli.controller_admin_url.is_empty())
            .then(|| cli.controller_admin_url.clone()),
    };
    let leader = LeaderSettings {
        lease_name: cli.lease_name,
        identity: cli.pod_name,
        lease_duration: Duration::from_secs(cli.lease_seconds.max(3)),
    };
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    rt.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .context("Kubernetes client")?;
        let mut config = config;
        config.hash_key = reconcile::hash_key::ensure(
            &kube::Api::namespaced(client.clone(), &config.namespace),
            &cli.hash_key_secret,
        )
        .await
        .context("annotation hash key")?;
        if !cli.owner_deployment.is_empty() {
            identity.owner = Some(
                reconcile::config::owner_of_deployment(
                    &client,
                    &cli.namespace,
                    &cli.owner_deployment,
                )
                .await
                .with_context(|| format!("reading Deployment {}", cli.owner_deployment))?,
            );
        }
        let health = http::Health::default();
        let metrics: Arc<Metrics> = health.metrics.clone();
        identity.metrics = metrics.identity();
        let listener = tokio::net::TcpListener::bind(cli.ops_listen)
            .await
            .with_context(|| format!("binding {}", cli.ops_listen))?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let ops = tokio::spawn(http::serve(listener, health.clone(), stopped()));
        // Every replica issues identities (the CA Secret is written with optimistic
        // concurrency); only the leader reconciles.
        let identity_listener = tokio::net::TcpListener::bind(cli.identity_listen)
            .await
            .with_context(|| format!("binding {}", cli.identity_listen))?;
        let identity = IdentityService::start(client.clone(), identity)
            .await
            .context("identity service")?;
        let identity = tokio::spawn(identity.run(identity_listener, stopped()));
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        });
        health.ready.store(true, Ordering::Release);
        let result = reconcile::run_as_leader(client, config, metrics, leader, stopped()).await;
        ops.abort();
        if result.is_ok() {
            identity
                .await
                .context("identity service task")?
                .context("identity service")?;
        } else {
            identity.abort();
        }
        result.context("operator")
    })
}
