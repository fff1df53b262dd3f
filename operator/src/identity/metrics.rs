//! What the identity issuer exports (registered in the operator's registry, so every
//! name is `proxy_pool_operator_…`): certificates issued, requests refused by reason
//! (a fixed set: [`IssueError::reason`]), and the expiry of the CA and of the issuance
//! endpoint's own serving certificate, read at every scrape.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::authority::Authority;
use super::error::IssueError;
use super::serving::ServingCert;

/// The `reason` label of refused issuance requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The issuer's counters and the certificates whose expiry is reported. Clones share
/// everything; [`register`](Self::register) it once, in the operator's registry.
#[derive(Clone, Debug)]
pub struct IdentityMetrics {
    issued: Counter,
    denied: Family<ReasonLabel, Counter>,
    certificates: Arc<ArcSwapOption<Certificates>>,
}

#[derive(Debug)]
struct Certificates {
    authority: Arc<Authority>,
    serving: Arc<ServingCert>,
}

impl Default for IdentityMetrics {
    fn default() -> Self {
        let denied = Family::<ReasonLabel, Counter>::default();
        // Every reason exists from the start (at 0), so rates over it are defined.
        for reason in IssueError::REASONS {
            let _ = denied.get_or_create(&ReasonLabel { reason });
        }
        Self {
            issued: Counter::default(),
            denied,
            certificates: Arc::default(),
        }
    }
}

impl IdentityMetrics {
    /// Registers the issuer's metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "identity_issued",
            "Workload certificates the identity issuer signed",
            self.issued.clone(),
        );
        registry.register(
            "identity_denied",
            "Identity issuance requests answered without a certificate, by reason",
            self.denied.clone(),
        );
        registry.register_collector(Box::new(Expiry(self.certificates.clone())));
    }

    /// Counts one issuance request's outcome.
    pub fn record<T>(&self, result: &Result<T, IssueError>) {
        match result {
            Ok(_) => {
                self.issued.inc();
            }
            Err(e) => {
                self.denied
                    .get_or_create(&ReasonLabel { reason: e.reason() })
                    .inc();
            }
        }
    }

    /// Reports the expiry of `authority`'s newest CA and of `serving` from now on.
    pub fn watch(&self, authority: Arc<Authority>, serving: Arc<ServingCert>) {
        self.certificates
            .store(Some(Arc::new(Certificates { authority, serving })));
    }

    /// Certificates issued so far.
    pub fn issued(&self) -> u64 {
        self.issued.get()
    }

    /// Requests refused so far for `reason`.
    pub fn denied(&self, reason: &'static str) -> u64 {
        self.denied.get_or_create(&ReasonLabel { reason }).get()
    }
}

/// `certificate_expiry_timestamp_seconds{certificate}`: `ca` (the newest CA of the
/// trust bundle: the one workers roll to; an old CA expiring during the rotation
/// overlap is expected) and `identity-endpoint` (the issuance endpoint's serving
/// certificate, renewed at half-life).
#[derive(Debug)]
struct Expiry(Arc<ArcSwapOption<Certificates>>);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabel {
    certificate: &'static str,
}

fn unix(t: SystemTime) -> i64 {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    i64::try_from(secs).unwrap_or(i64::MAX)
}

impl Collector for Expiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "certificate_expiry_timestamp_seconds",
            "Unix time at which a certificate the operator holds expires, by certificate (ca, identity-endpoint)",
            None,
            MetricType::Gauge,
        )?;
        let Some(certs) = self.0.load_full() else {
            return Ok(());
        };
        let newest_ca = certs
            .authority
            .cas()
            .cas()
            .iter()
            .map(|c| c.not_after())
            .max();
        let samples = [
            ("ca", newest_ca),
            ("identity-endpoint", Some(certs.serving.not_after())),
        ];
        for (certificate, not_after) in samples {
            if let Some(t) = not_after {
                let labels = CertificateLabel { certificate };
                ConstGauge::new(unix(t)).encode(metric.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::ca::CaParams;
    use crate::identity::clock::ManualClock;
    use crate::identity::store::MemoryCaStore;
    use std::time::Duration;

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[tokio::test]
    async fn counts_outcomes_and_reports_the_expiries() {
        let metrics = IdentityMetrics::default();
        let mut registry = Registry::with_prefix("proxy_pool_operator");
        metrics.register(&mut registry);
        let text = encode(&registry);
        assert!(
            text.contains("# TYPE proxy_pool_operator_certificate_expiry_timestamp_seconds gauge"),
            "{text}"
        );
        assert!(
            !text.contains("certificate=\""),
            "no sample before watch: {text}"
        );

        metrics.record(&Ok::<(), IssueError>(()));
        metrics.record::<()>(&Err(IssueError::Unauthenticated("no")));
        metrics.record::<()>(&Err(IssueError::Forbidden("no".into())));
        metrics.record::<()>(&Err(IssueError::Forbidden("no".into())));
        assert_eq!(metrics.issued(), 1);
        assert_eq!(metrics.denied("forbidden"), 2);

        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let params = CaParams::default();
        let ca_lifetime = params.ca_lifetime;
        let authority = Authority::start(
            Arc::new(MemoryCaStore::new()),
            Arc::new(ManualClock::new(now)),
            params,
        )
        .await
        .unwrap();
        let serving = ServingCert::new(authority.clone(), vec!["issuer".into()]).unwrap();
        metrics.watch(authority, serving.clone());
        let text = encode(&registry);
        for line in [
            "proxy_pool_operator_identity_issued_total 1".to_owned(),
            r#"proxy_pool_operator_identity_denied_total{reason="forbidden"} 2"#.to_owned(),
            r#"proxy_pool_operator_identity_denied_total{reason="unauthenticated"} 1"#.to_owned(),
            r#"proxy_pool_operator_identity_denied_total{reason="internal"} 0"#.to_owned(),
            format!(
                r#"proxy_pool_operator_certificate_expiry_timestamp_seconds{{certificate="ca"}} {}"#,
                unix(now + ca_lifetime)
            ),
            format!(
                r#"proxy_pool_operator_certificate_expiry_timestamp_seconds{{certificate="identity-endpoint"}} {}"#,
                unix(serving.not_after())
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
        }
        assert!(
            serving.not_after() > now,
            "the serving certificate is valid"
        );
    }
}
