//! The worker certificate's expiry as a Prometheus gauge (feature `metrics`), for the
//! binaries that run with a worker identity (gateway, checker):
//! `<prefix>_certificate_expiry_timestamp_seconds{certificate="worker"}`, the Unix time
//! at which the certificate the worker presents to the controller stops being valid.
//! It is read at every scrape, so a renewal moves it forward with nothing else to do.
//!
//! The gauge is registered when the binary builds its registry, usually before the first
//! certificate is issued (the ops listener answers while the worker waits for it);
//! [`CertificateExpiry::follow`] points it at the TLS source once there is one. Until
//! then, and with file-based TLS (whose certificate is not parsed here), the metric is
//! exported without a sample.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::worker::WorkerTls;

const NAME: &str = "certificate_expiry_timestamp_seconds";
const HELP: &str = "Unix time at which the worker's current certificate expires";
const LABEL: (&str, &str) = ("certificate", "worker");

/// The `certificate_expiry_timestamp_seconds{certificate="worker"}` gauge of a registry,
/// and the TLS source it reports. Clones share the source.
#[derive(Clone, Debug, Default)]
pub struct CertificateExpiry {
    tls: Arc<ArcSwapOption<WorkerTls>>,
}

impl CertificateExpiry {
    /// Registers the gauge in `registry` (whose prefix names the binary, e.g.
    /// `proxy_pool_gateway`); it has no sample until [`follow`](Self::follow).
    pub fn register(registry: &mut Registry) -> Self {
        let this = Self::default();
        registry.register_collector(Box::new(this.clone()));
        this
    }

    /// Reports `tls`'s certificate from now on (an issued identity: its current
    /// certificate, renewals included; files: nothing).
    pub fn follow(&self, tls: &WorkerTls) {
        self.tls.store(Some(Arc::new(tls.clone())));
    }

    /// What the gauge reports now.
    pub fn not_after(&self) -> Option<SystemTime> {
        self.tls.load().as_ref()?.not_after()
    }
}

impl Collector for CertificateExpiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(NAME, HELP, None, MetricType::Gauge)?;
        if let Some(not_after) = self.not_after() {
            let secs = not_after
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let gauge = ConstGauge::new(i64::try_from(secs).unwrap_or(i64::MAX));
            gauge.encode(metric.encode_family(&[LABEL])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::{Identity, IdentityHandle};
    use std::path::PathBuf;

    fn identity(not_after: u64) -> Identity {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["w".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let response = crate::wire::IssueResponse {
            spiffe_id: "spiffe://td/env/worker/w".into(),
            certificate: cert.pem(),
            trust_bundle: String::new(),
            not_before: 1,
            not_after,
        };
        Identity::from_response(response, key.serialize_der(), key.serialize_pem()).unwrap()
    }

    fn encode(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    const SAMPLE: &str =
        "proxy_pool_demo_certificate_expiry_timestamp_seconds{certificate=\"worker\"}";

    #[test]
    fn follows_the_issued_certificate_across_renewals() {
        let mut registry = Registry::with_prefix("proxy_pool_demo");
        let expiry = CertificateExpiry::register(&mut registry);
        let text = encode(&registry);
        assert!(
            text.contains("# TYPE proxy_pool_demo_certificate_expiry_timestamp_seconds gauge"),
            "{text}"
        );
        assert!(!text.contains(SAMPLE), "no sample before a source: {text}");

        let files = WorkerTls::Files {
            ca: PathBuf::from("/nonexistent/ca"),
            cert: PathBuf::from("/nonexistent/cert"),
            key: PathBuf::from("/nonexistent/key"),
        };
        expiry.follow(&files);
        assert!(!encode(&registry).contains(SAMPLE), "files: no sample");

        let handle = IdentityHandle::new();
        expiry.follow(&WorkerTls::Issued {
            handle: handle.clone(),
            trust_bundle: PathBuf::from("/nonexistent/bundle"),
        });
        assert!(!encode(&registry).contains(SAMPLE), "not issued yet");
        handle.store(identity(2_000_000_000));
        let text = encode(&registry);
        assert!(text.contains(&format!("{SAMPLE} 2000000000")), "{text}");
        // A renewal: the next scrape sees the new certificate.
        handle.store(identity(2_000_086_400));
        let text = encode(&registry);
        assert!(text.contains(&format!("{SAMPLE} 2000086400")), "{text}");
        assert_eq!(
            expiry.not_after(),
            Some(UNIX_EPOCH + std::time::Duration::from_secs(2_000_086_400))
        );
    }
}
