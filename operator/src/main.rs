//! `proxy-pool-operator`: parses the command line, binds the ops listener, waits for
//! the leader Lease and runs the reconcilers until SIGTERM / Ctrl-C. Composition only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use proxy_pool_api::config::RawConfig;
use proxy_pool_operator::identity::IssuerConfig;
use proxy_pool_operator::identity::authz::CheckerWorkload;
use proxy_pool_operator::identity::service::{
    DEFAULT_CA_SECRET, DEFAULT_TRUST_BUNDLE_CONFIG_MAP, IdentityOptions, IdentityService,
};
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
    /// Secret holding the identity CA (`ca.crt`/`ca.key`), made on first start. One per
    /// operator: two operators in one namespace need different names (the chart
    /// renders `<release>-identity-ca`).
    #[arg(long, env = "PROXY_POOL_IDENTITY_CA_SECRET",
          default_value = DEFAULT_CA_SECRET, value_parser = object_name)]
    identity_ca_secret: String,
    /// ConfigMap the identity trust bundle (`ca.crt`) is published to, and that the
    /// gateway pods and the controller mount (the chart renders
    /// `<release>-trust-bundle`).
    #[arg(long, env = "PROXY_POOL_TRUST_BUNDLE_CONFIG_MAP",
          default_value = DEFAULT_TRUST_BUNDLE_CONFIG_MAP, value_parser = object_name)]
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

/// The identity service's options and the reconcilers' config from the command line:
/// the one place the identity CA Secret and trust-bundle ConfigMap names are handed to
/// their users (the CA store, the controller certificate, the gateway pods' mount).
fn plan(
    cli: &Cli,
    base_config: RawConfig,
    gateway_pod: GatewayPodSettings,
) -> anyhow::Result<(IdentityOptions, OperatorConfig)> {
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
    identity.ca_secret.clone_from(&cli.identity_ca_secret);
    identity
        .trust_bundle_config_map
        .clone_from(&cli.trust_bundle_config_map);
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
        controller_deployment: cli.controller_deployment.clone(),
        controller_container: cli.controller_container.clone(),
        config_map: cli.config_map.clone(),
        config_dir: cli.config_dir.clone(),
        gateway: GatewayTemplate {
            image: cli.gateway_image.clone(),
            image_pull_policy: cli.gateway_image_pull_policy.clone(),
            service_account: cli.gateway_service_account.clone(),
            controller_address: cli.controller_address.clone(),
            identity_endpoint: cli.identity_endpoint.clone(),
            trust_bundle_config_map: identity.trust_bundle_config_map.clone(),
            // One egress policy: the gateways get the controller's.
            egress_deny_cidrs: egress.deny_cidrs,
            egress_allow_cidrs: egress.allow_cidrs,
            pod: gateway_pod,
        },
        instance: Some(cli.pod_name.clone()),
        controller_tls,
        // Loaded (or made) once the API client exists, in `main`.
        hash_key: reconcile::hash_key::HashKey::new([0; 32]),
        controller_admin: (!cli.controller_admin_url.is_empty())
            .then(|| cli.controller_admin_url.clone()),
    };
    Ok((identity, config))
}

/// A Kubernetes object name (DNS-1123 subdomain), for the names this operator is told.
fn object_name(value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "{value:?} is not a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)"
        ))
    }
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
    let (mut identity, config) = plan(&cli, base_config, gateway_pod)?;
    let leader = LeaderSettings {
        lease_name: cli.lease_name.clone(),
        identity: cli.pod_name.clone(),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    /// The flags the chart always passes, then `more`.
    fn cli(more: &[&str]) -> Result<Cli, clap::Error> {
        let mut args = vec![
            "proxy-pool-operator",
            "--namespace=proxy-pool",
            "--pod-name=operator-0",
            "--base-config=/dev/null",
            "--controller-deployment=pp-controller",
            "--config-map=pp-controller-config",
            "--gateway-image=proxy-pool-gateway:test",
            "--gateway-service-account=pp-gateway",
            "--controller-address=pp-controller-control-plane:9443",
            "--identity-endpoint=https://pp-operator:8443",
            "--controller-tls-secret=pp-controller-tls",
        ];
        args.extend_from_slice(more);
        Cli::try_parse_from(args)
    }

    /// Every name the identity CA Secret and the trust bundle go by, in what the
    /// operator runs: (CA store's Secret, CA store's ConfigMap, controller
    /// certificate's CA Secret, controller's bundle mount, gateway pods' bundle mount).
    fn names(cli: &Cli) -> [String; 5] {
        let base = proxy_pool_api::config::parse_yaml("store: {backend: memory}\n").unwrap();
        let (identity, config) = plan(cli, base, GatewayPodSettings::default()).unwrap();
        let tls = config.controller_tls.expect("controller TLS");
        [
            identity.ca_secret,
            identity.trust_bundle_config_map,
            tls.ca_secret,
            tls.trust_bundle_config_map,
            config.gateway.trust_bundle_config_map,
        ]
    }

    #[test]
    fn the_identity_object_names_reach_every_user() {
        let cli = cli(&[
            "--identity-ca-secret=canary-proxy-pool-identity-ca",
            "--trust-bundle-config-map=canary-proxy-pool-trust-bundle",
        ])
        .unwrap();
        let [ca, bundle, tls_ca, tls_bundle, gateway_bundle] = names(&cli);
        assert_eq!(ca, "canary-proxy-pool-identity-ca");
        assert_eq!(tls_ca, ca);
        assert_eq!(bundle, "canary-proxy-pool-trust-bundle");
        assert_eq!(tls_bundle, bundle);
        assert_eq!(gateway_bundle, bundle);
    }

    #[test]
    fn without_the_flags_the_identity_objects_keep_their_default_names() {
        let [ca, bundle, tls_ca, tls_bundle, gateway_bundle] = names(&cli(&[]).unwrap());
        assert_eq!([ca, tls_ca], [DEFAULT_CA_SECRET; 2]);
        assert_eq!(
            [bundle, tls_bundle, gateway_bundle],
            [DEFAULT_TRUST_BUNDLE_CONFIG_MAP; 3]
        );
        assert_eq!(DEFAULT_CA_SECRET, "proxy-pool-identity-ca");
        assert_eq!(DEFAULT_TRUST_BUNDLE_CONFIG_MAP, "proxy-pool-trust-bundle");
    }

    #[test]
    fn identity_object_names_must_be_kubernetes_names() {
        for bad in [
            "",
            "Upper",
            "under_score",
            "-lead",
            "trail-",
            "a..b",
            &"a".repeat(254),
        ] {
            for flag in ["--identity-ca-secret", "--trust-bundle-config-map"] {
                let err = cli(&[&format!("{flag}={bad}")]).expect_err(bad).to_string();
                assert!(err.contains(flag), "{err}");
                assert!(err.contains("not a Kubernetes object name"), "{err}");
            }
        }
        assert!(cli(&["--identity-ca-secret=a.b-c"]).is_ok());
    }
}
