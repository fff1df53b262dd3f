//! The controller's own control-plane certificate: issued by the operator from the
//! identity CA (the one that signs worker identities), stored in a Secret the operator
//! owns (owner: the controller Deployment), mounted with the trust bundle into the
//! controller pod, and named in the rendered `controlPlane.tls`.
//!
//! The certificate carries the controller's SPIFFE ID
//! `spiffe://<trust-domain>/<environment>/controller` and the DNS names of the
//! controller Service (what gateways dial). It is renewed once half of its lifetime
//! has passed, when the CA that signed it is no longer trusted, or when the names
//! change; the content hash of certificate and bundle goes into the config hash, so a
//! renewal (or a CA rotation) rolls the controller, which reads the files at start-up.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxy_pool_api::config::raw::RawControlPlaneTls;
use rcgen::{KeyPair, PublicKeyData as _};
use sha2::{Digest, Sha256};
use x509_parser::prelude::FromDer as _;

use super::common::{CERT_KEY, KEY_KEY};
use super::error::Error;
use crate::identity::ca::{CaParams, CaSet};
use crate::identity::kube_adapters::BUNDLE_KEY;

/// How the operator secures the controller's control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerTls {
    /// Secret the certificate and key are written to (owned by the operator).
    pub secret: String,
    /// DNS names of the controller Service (subject alternative names).
    pub dns_names: Vec<String>,
    /// SPIFFE trust domain (as the identity issuer's).
    pub trust_domain: String,
    /// Environment segment of SPIFFE IDs.
    pub environment: String,
    /// Secret holding the identity CA.
    pub ca_secret: String,
    /// ConfigMap holding the trust bundle (key `ca.crt`).
    pub trust_bundle_config_map: String,
    /// Signing parameters (as the identity service's).
    pub ca: CaParams,
    /// Validity of one controller certificate.
    pub lifetime: Duration,
}

impl ControllerTls {
    /// The controller's SPIFFE ID.
    pub fn spiffe_id(&self) -> String {
        format!(
            "spiffe://{}/{}/controller",
            self.trust_domain, self.environment
        )
    }

    /// `controlPlane.tls` pointing at the files in the controller's config volume.
    pub fn raw(&self, config_dir: &str) -> RawControlPlaneTls {
        let dir = config_dir.trim_end_matches('/');
        RawControlPlaneTls {
            cert_file: format!("{dir}/tls/{CERT_KEY}"),
            key_file: format!("{dir}/tls/{KEY_KEY}"),
            client_ca_file: format!("{dir}/trust/{BUNDLE_KEY}"),
            trust_domain: Some(self.trust_domain.clone()),
            environment: Some(self.environment.clone()),
        }
    }
}

/// What a reconcile learned about the controller's TLS material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsState {
    /// SHA-256 over the certificate and the trust bundle (hex).
    pub digest: String,
    /// When the certificate is to be renewed.
    pub renew_at: SystemTime,
    /// Whether this reconcile issued a new certificate.
    pub issued: bool,
}

/// Why a stored certificate must be replaced (`None`: keep it).
pub fn renewal_reason(
    cert_pem: &str,
    key_pem: &str,
    cas: &CaSet,
    now: SystemTime,
    spiffe_id: &str,
    dns_names: &[String],
) -> Option<&'static str> {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()) else {
        return Some("the stored certificate is not PEM");
    };
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(&pem.contents) else {
        return Some("the stored certificate is not X.509");
    };
    let Ok(key) = KeyPair::from_pem(key_pem) else {
        return Some("the stored key is not PEM");
    };
    if key.subject_public_key_info() != cert.tbs_certificate.subject_pki.raw {
        return Some("the stored key does not match the certificate");
    }
    let (not_before, not_after) = validity(&cert);
    if now >= renew_at(not_before, not_after) {
        return Some("half of its lifetime has passed");
    }
    let signed_by_trusted = cas
        .cas()
        .iter()
        .filter(|ca| ca.not_after() > now)
        .any(|ca| {
            x509_parser::pem::parse_x509_pem(ca.cert_pem().as_bytes())
                .ok()
                .and_then(|(_, p)| {
                    x509_parser::certificate::X509Certificate::from_der(&p.contents)
                        .ok()
                        .map(|(_, c)| cert.verify_signature(Some(c.public_key())).is_ok())
                })
                .unwrap_or(false)
        });
    if !signed_by_trusted {
        return Some("its CA is no longer trusted");
    }
    let mut uris = Vec::new();
    let mut dns = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::URI(u) => uris.push((*u).to_owned()),
                x509_parser::extensions::GeneralName::DNSName(d) => dns.push((*d).to_owned()),
                _ => {}
            }
        }
    }
    let mut want_dns = dns_names.to_vec();
    want_dns.sort();
    dns.sort();
    if uris != [spiffe_id] || dns != want_dns {
        return Some("its names changed");
    }
    None
}

fn validity(cert: &x509_parser::certificate::X509Certificate<'_>) -> (SystemTime, SystemTime) {
    let at =
        |secs: i64| u64::try_from(secs).map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s));
    let v = cert.validity();
    (at(v.not_before.timestamp()), at(v.not_after.timestamp()))
}

/// Half-life of a certificate valid from `not_before` to `not_after`.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(not_before).unwrap_or_default();
    not_before + life / 2
}

/// A fresh key and certificate (PEM) and its renewal time.
pub fn issue(
    settings: &ControllerTls,
    cas: &CaSet,
    now: SystemTime,
) -> Result<(String, String, SystemTime), Error> {
    let key = KeyPair::generate().map_err(|e| Error::Tls(format!("controller key: {e}")))?;
    let leaf = cas
        .sign_controller(
            now,
            &settings.ca,
            &key,
            &settings.spiffe_id(),
            &settings.dns_names,
            settings.lifetime,
        )
        .map_err(|e| Error::Tls(format!("signing the controller certificate: {e}")))?;
    Ok((
        leaf.pem,
        key.serialize_pem(),
        renew_at(leaf.not_before, leaf.not_after),
    ))
}

/// Digest of the certificate and the bundle: what rolls the controller.
pub fn digest(cert_pem: &str, bundle_pem: &str) -> String {
    let mut h = Sha256::new();
    h.update(Sha256::digest(cert_pem.as_bytes()));
    h.update(Sha256::digest(bundle_pem.as_bytes()));
    hex::encode(h.finalize())
}

/// When the certificate `cert_pem` is to be renewed (`None`: it does not parse).
pub fn certificate_renew_at(cert_pem: &str) -> Option<SystemTime> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&pem.contents).ok()?;
    let (nb, na) = validity(&cert);
    Some(renew_at(nb, na))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::identity::ca::CaCert;

    fn settings() -> ControllerTls {
        ControllerTls {
            secret: "ctl-tls".into(),
            dns_names: vec!["ctl".into(), "ctl.ns.svc".into()],
            trust_domain: "td.example".into(),
            environment: "prod".into(),
            ca_secret: "ca".into(),
            trust_bundle_config_map: "bundle".into(),
            ca: CaParams::default(),
            lifetime: Duration::from_secs(24 * 3600),
        }
    }

    fn ca_set(now: SystemTime) -> CaSet {
        CaSet::new(vec![Arc::new(
            CaCert::generate(now, Duration::from_secs(90 * 24 * 3600)).expect("CA"),
        )])
    }

    #[test]
    fn issues_spiffe_and_dns_names_and_renews_at_half_life() {
        let now = SystemTime::now();
        let cas = ca_set(now - Duration::from_secs(3600));
        let s = settings();
        let (cert, key, renew) = issue(&s, &cas, now).expect("issue");
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).expect("pem");
        let (_, x) =
            x509_parser::certificate::X509Certificate::from_der(&pem.contents).expect("der");
        let san = x.subject_alternative_name().expect("ext").expect("san");
        let names: Vec<String> = san
            .value
            .general_names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.contains("spiffe://td.example/prod/controller")),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n.contains("ctl.ns.svc")), "{names:?}");
        // Half of 24 h (+ the 60 s backdate) from now.
        let half = renew.duration_since(now).expect("future");
        assert!(
            half > Duration::from_secs(11 * 3600) && half < Duration::from_secs(13 * 3600),
            "{half:?}"
        );
        let id = s.spiffe_id();
        assert_eq!(
            renewal_reason(&cert, &key, &cas, now, &id, &s.dns_names),
            None
        );
        assert_eq!(
            renewal_reason(&cert, &key, &cas, renew, &id, &s.dns_names),
            Some("half of its lifetime has passed")
        );
        let other = ["ctl".to_owned()];
        assert_eq!(
            renewal_reason(&cert, &key, &cas, now, &id, &other),
            Some("its names changed")
        );
        let rotated = ca_set(now - Duration::from_secs(60));
        assert_eq!(
            renewal_reason(&cert, &key, &rotated, now, &id, &s.dns_names),
            Some("its CA is no longer trusted")
        );
        let (_, other_key, _) = issue(&s, &cas, now).expect("issue");
        assert_eq!(
            renewal_reason(&cert, &other_key, &cas, now, &id, &s.dns_names),
            Some("the stored key does not match the certificate")
        );
        assert_eq!(
            renewal_reason("junk", &key, &cas, now, &id, &s.dns_names),
            Some("the stored certificate is not PEM")
        );
    }

    #[test]
    fn the_config_names_the_mounted_files() {
        let t = settings().raw("/etc/proxy-pool/");
        assert_eq!(t.cert_file, "/etc/proxy-pool/tls/tls.crt");
        assert_eq!(t.key_file, "/etc/proxy-pool/tls/tls.key");
        assert_eq!(t.client_ca_file, "/etc/proxy-pool/trust/ca.crt");
        assert_eq!(t.trust_domain.as_deref(), Some("td.example"));
        assert_eq!(t.environment.as_deref(), Some("prod"));
        assert_ne!(digest("a", "b"), digest("a", "c"));
    }
}
