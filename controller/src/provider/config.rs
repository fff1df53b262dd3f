//! From the controller configuration (`proxy_pool_api::config::UpstreamConfig`) to a
//! reconciler's options and source. Pure: secrets come in already resolved (the
//! composition root reads the files), nothing here touches the disk or the network.

use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::{Credentials, Label, Secret, UpstreamId};
use proxy_pool_api::config::{SourceConfig, UpstreamConfig};

use super::error::ProviderError;
use super::http::{HttpVendorSource, VendorAuth};
use super::model::VendorProxy;
use super::options::ProviderOptions;
use super::source::{StaticSource, VendorSource};

/// Secret values of one upstream, resolved by the caller (e.g. from mounted files).
#[derive(Clone, Debug, Default)]
pub struct ResolvedSecrets {
    /// The vendor API key (`vendorApi.apiKeyFile`), sent as `X-API-Key`.
    pub vendor_api_key: Option<Secret>,
    /// The proxies' password (`…credentials.password` / `passwordFile`).
    pub proxy_password: Option<Secret>,
}

/// A reconciler's options and source for one configured upstream.
#[derive(Debug)]
pub struct UpstreamPlan {
    /// Options.
    pub options: ProviderOptions,
    /// Source.
    pub source: Arc<dyn VendorSource>,
}

/// Maps one upstream of the controller config. `maxRequestsPerMinute` stretches the
/// fetch interval so the vendor is never called more often; `timeout` becomes the
/// fetch budget's request timeout and `maxProxiesPerFetch` its `max_candidates` (the
/// rest of a response is counted `over_budget`).
pub fn plan_upstream(
    cfg: &UpstreamConfig,
    secrets: &ResolvedSecrets,
    egress: &proxy_pool_api::egress::EgressPolicy,
) -> Result<UpstreamPlan, ProviderError> {
    let field = |f: &str| format!("upstreams.{}.{f}", cfg.name);
    let upstream = UpstreamId::new(&cfg.name)
        .map_err(|e| ProviderError::option(field("name"), e.to_string()))?;
    let label = |v: &Option<String>, f: &str| {
        v.as_ref()
            .map(|s| Label::new(s).map_err(|e| ProviderError::option(field(f), e.to_string())))
            .transpose()
    };
    let mut options = ProviderOptions::new(upstream, cfg.protocol, cfg.ttl);
    options.defaults.region = label(&cfg.region, "region")?;
    options.defaults.carrier = label(&cfg.carrier, "carrier")?;
    options.defaults.city = label(&cfg.city, "city")?;
    options.defaults.max_concurrency = cfg.max_concurrency_per_proxy;
    options.defaults.egress = egress.clone();
    options.safety_margin = cfg.safety_margin;
    options.max_size = cfg.max_size;
    options.quarantine = cfg.quarantine;
    options.fetch_interval = cfg.fetch_interval;
    let creds = |c: &Option<proxy_pool_api::config::ProxyCredentials>| {
        c.as_ref().map(|c| Credentials {
            username: c.username.clone(),
            password: secrets
                .proxy_password
                .clone()
                .unwrap_or_else(|| Secret::new("")),
        })
    };
    let source: Arc<dyn VendorSource> = match &cfg.source {
        SourceConfig::Static(s) => {
            options.assume_healthy = s.assume_healthy;
            options.defaults.credentials = creds(&s.credentials);
            let entries = s
                .proxies
                .iter()
                .map(|p| VendorProxy::at(p.host.clone(), p.port))
                .collect();
            Arc::new(StaticSource::new(entries))
        }
        SourceConfig::VendorApi(v) => {
            options.defaults.credentials = creds(&v.credentials);
            options.budget.request_timeout = v.timeout;
            if let Some(n) = v.max_proxies_per_fetch {
                options.budget.max_candidates = usize::try_from(n.get()).unwrap_or(usize::MAX);
            }
            if v.max_requests_per_minute > 0 {
                let floor = Duration::from_secs(60) / v.max_requests_per_minute;
                options.fetch_interval = options.fetch_interval.max(floor);
                options.backoff.initial = options.backoff.initial.max(floor);
                options.backoff.max = options.backoff.max.max(options.backoff.initial);
            }
            let auth = match &secrets.vendor_api_key {
                Some(key) => VendorAuth::api_key(key.clone()),
                None => VendorAuth::None,
            };
            Arc::new(HttpVendorSource::new(&v.url, v.format, auth)?)
        }
    };
    options.validate()?;
    Ok(UpstreamPlan { options, source })
}

#[cfg(test)]
mod tests {
    use super::super::options::FetchBudget as FetchBudgetDefault;
    use super::*;
    use activity_pool::model::Protocol;
    use proxy_pool_api::config::{
        PasswordSource, ProxyCredentials, StaticProxy, StaticSourceConfig, VendorApiConfig,
    };
    use std::num::NonZeroU32;

    fn upstream(source: SourceConfig) -> UpstreamConfig {
        UpstreamConfig {
            name: "vendor-a".into(),
            source,
            protocol: Protocol::Socks5,
            region: Some("shanghai".into()),
            carrier: None,
            city: None,
            ttl: Duration::from_secs(120),
            safety_margin: Duration::from_secs(10),
            quarantine: Duration::from_secs(90),
            max_concurrency_per_proxy: 16,
            max_size: NonZeroU32::new(500).unwrap(),
            fetch_interval: Duration::from_secs(5),
            health: Default::default(),
        }
    }

    fn creds() -> Option<ProxyCredentials> {
        Some(ProxyCredentials {
            username: "acct".into(),
            password: PasswordSource::File("/run/secret".into()),
        })
    }

    #[test]
    fn vendor_api_maps_budget_rate_and_defaults() {
        let cfg = upstream(SourceConfig::VendorApi(VendorApiConfig {
            url: "http://127.0.0.1:9/v1/proxies?count=10".into(),
            format: proxy_pool_api::config::VendorFormat::Lines,
            api_key_file: Some("/run/key".into()),
            credentials: creds(),
            timeout: Duration::from_secs(3),
            max_requests_per_minute: 6,
            max_proxies_per_fetch: NonZeroU32::new(25),
        }));
        let secrets = ResolvedSecrets {
            vendor_api_key: Some(Secret::new("k")),
            proxy_password: Some(Secret::new("pw")),
        };
        let plan = plan_upstream(&cfg, &secrets, &Default::default()).unwrap();
        let o = &plan.options;
        assert_eq!(o.upstream.as_str(), "vendor-a");
        assert_eq!(o.defaults.protocol, Protocol::Socks5);
        assert_eq!(
            o.defaults.region.as_ref().map(Label::as_str),
            Some("shanghai")
        );
        assert_eq!(o.defaults.max_concurrency, 16);
        assert_eq!(
            o.quarantine,
            Duration::from_secs(90),
            "the upstream's quarantine"
        );
        assert_eq!(
            o.fetch_interval,
            Duration::from_secs(10),
            "6/min caps at one per 10 s"
        );
        assert_eq!(o.budget.request_timeout, Duration::from_secs(3));
        assert_eq!(o.budget.max_candidates, 25, "maxProxiesPerFetch");
        let c = o.defaults.credentials.as_ref().unwrap();
        assert_eq!((c.username.as_str(), c.password.expose()), ("acct", "pw"));
        assert!(!format!("{plan:?}").contains("pw\""));
    }

    #[test]
    fn static_lists_and_bad_names() {
        let cfg = upstream(SourceConfig::Static(StaticSourceConfig {
            proxies: vec![StaticProxy {
                host: "10.0.0.1".into(),
                port: 3128,
            }],
            credentials: None,
            assume_healthy: true,
        }));
        let plan = plan_upstream(&cfg, &ResolvedSecrets::default(), &Default::default()).unwrap();
        assert!(plan.options.assume_healthy);
        assert_eq!(
            plan.options.budget.max_candidates,
            FetchBudgetDefault::default().max_candidates,
            "no maxProxiesPerFetch: the default budget"
        );
        let mut bad = cfg.clone();
        bad.name = "not ok".into();
        let err =
            plan_upstream(&bad, &ResolvedSecrets::default(), &Default::default()).unwrap_err();
        assert!(err.to_string().contains("upstreams.not ok.name"), "{err}");
    }
}
