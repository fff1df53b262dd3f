//! An Upstream's config entry: its source (a vendor API or a static list) with the
//! vendor API key and proxy credentials as mounted files, and its pool settings.

use proxy_pool_api::config::raw::{
    RawLabels, RawSource, RawStaticSource, RawUpstream, RawUpstreamHealth, RawVendorApi,
};

use super::cx::Cx;
use super::model::{Kind, Problem, name};
use crate::crd::Upstream;

impl Cx<'_> {
    pub(super) fn upstream(&mut self, u: &Upstream) -> Option<RawUpstream> {
        let n = name(u);
        match self.upstream_source(u) {
            Ok(source) => Some(RawUpstream {
                name: n,
                source,
                protocol: Some(u.spec.protocol.as_str().to_owned()),
                labels: u
                    .spec
                    .labels
                    .as_ref()
                    .map(|l| RawLabels {
                        region: l.region.clone(),
                        carrier: l.carrier.clone(),
                        city: l.city.clone(),
                    })
                    .unwrap_or_default(),
                ttl: Some(u.spec.ttl.clone()),
                safety_margin: Some(u.spec.safety_margin.clone()),
                quarantine: u.spec.quarantine.clone(),
                max_concurrency_per_proxy: Some(u.spec.max_concurrency_per_proxy),
                max_size: Some(u.spec.max_size),
                fetch_interval: Some(u.spec.fetch_interval.clone()),
                health: u.spec.health.as_ref().map(|h| RawUpstreamHealth {
                    interval: Some(h.interval.clone()),
                    timeout: Some(h.timeout.clone()),
                    failure_threshold: Some(h.failure_threshold),
                    egress: Some(h.egress),
                    targets: h.targets.clone(),
                }),
            }),
            Err(p) => {
                self.problem(Kind::Upstream, &n, p);
                None
            }
        }
    }

    fn upstream_source(&mut self, u: &Upstream) -> Result<RawSource, Problem> {
        let src = &u.spec.source;
        if let Some(v) = &src.vendor_api {
            let budget = u.spec.fetch_budget.as_ref();
            let (api_key_file, credentials) = match &v.credentials_secret_ref {
                None => (None, None),
                Some(r) => {
                    let data = self.secret(&r.name)?;
                    let has_key = data.contains_key("apiKey");
                    let has_user = data.contains_key("username") || data.contains_key("password");
                    if !has_key && !has_user {
                        return Err(Problem::new(
                            "SecretKeyMissing",
                            format!(
                                "Secret {:?} has neither key \"apiKey\" nor keys \"username\" and \"password\"",
                                r.name
                            ),
                        ));
                    }
                    let creds = if has_user {
                        Some(self.proxy_credentials(&r.name)?)
                    } else {
                        None
                    };
                    let key = has_key.then(|| self.file(&r.name, "apiKey"));
                    (key, creds)
                }
            };
            return Ok(RawSource {
                static_list: None,
                vendor_api: Some(RawVendorApi {
                    url: v.url.clone(),
                    format: v.format.as_str().to_owned(),
                    api_key_file,
                    credentials,
                    timeout: budget.map(|b| b.timeout.clone()),
                    max_requests_per_minute: budget.map(|b| b.max_requests_per_minute),
                    max_proxies_per_fetch: budget.and_then(|b| b.max_proxies_per_fetch),
                }),
            });
        }
        if let Some(s) = &src.static_list {
            let credentials = match &s.credentials_secret_ref {
                None => None,
                Some(r) => Some(self.proxy_credentials(&r.name)?),
            };
            return Ok(RawSource {
                static_list: Some(RawStaticSource {
                    proxies: s.proxies.clone(),
                    credentials,
                    assume_healthy: None,
                }),
                vendor_api: None,
            });
        }
        Err(Problem::new(
            "InvalidSpec",
            "source needs exactly one of vendorApi or static",
        ))
    }
}
