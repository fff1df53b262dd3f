//! The identity CA: key + self-signed certificate ([`CaCert`]), the set of currently
//! trusted CAs with its rotation rule ([`CaSet`]), and leaf signing.
//!
//! Rotation with an overlap window: when the newest CA comes within
//! `overlap + publish_lead` of its expiry a new CA is generated and enters the trust
//! bundle at once; it starts signing `publish_lead` later (time for the bundle to reach
//! every mounted ConfigMap), so for `overlap` both CAs are trusted and new leaves come
//! from the new one; the old CA leaves the set when it expires. Leaves never outlive
//! their signer. Pure functions of `now`: no I/O, no clock of their own.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proxy_pool_api::controlplane::model::Secret;
use rand::RngCore as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use x509_parser::prelude::FromDer as _;

/// Clock skew tolerated by peers: certificates start this long before they are made.
const BACKDATE: Duration = Duration::from_secs(60);
/// Common name of every CA certificate (each also carries a unique serial).
const CA_COMMON_NAME: &str = "proxy-pool identity CA";
/// Organisation of every certificate the CA makes.
const ORGANISATION: &str = "proxy-pool";

/// Lifetimes of the CA and its leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaParams {
    /// Validity of a CA certificate.
    pub ca_lifetime: Duration,
    /// How long the old and the new CA are both trusted and the new one signs.
    pub overlap: Duration,
    /// How long a new CA is trusted before it signs (bundle propagation time).
    pub publish_lead: Duration,
    /// Default validity of a leaf.
    pub leaf_lifetime: Duration,
}

impl Default for CaParams {
    fn default() -> Self {
        Self {
            ca_lifetime: Duration::from_secs(90 * 24 * 3600),
            overlap: Duration::from_secs(7 * 24 * 3600),
            publish_lead: Duration::from_secs(10 * 60),
            leaf_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

impl CaParams {
    /// Every inconsistency at once: a leaf must fit in the overlap (so the last leaves
    /// of the old CA expire before it does) and a CA must live at least twice
    /// `overlap + publish_lead` (so at most two CAs are ever trusted).
    pub fn validate(&self) -> Result<(), CaError> {
        let mut problems = Vec::new();
        if self.leaf_lifetime < Duration::from_secs(60) {
            problems.push("leafLifetime must be at least 1m".to_owned());
        }
        if self.overlap <= self.leaf_lifetime {
            problems.push("overlap must be longer than leafLifetime".to_owned());
        }
        if self.ca_lifetime < (self.overlap + self.publish_lead) * 2 {
            problems.push("caLifetime must be at least 2 × (overlap + publishLead)".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(CaError::Params(problems))
        }
    }
}

/// Why CA material could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Inconsistent lifetimes.
    #[error("invalid CA parameters: {}", .0.join("; "))]
    Params(Vec<String>),
    /// Key generation or signing failed.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// Stored CA material is unusable.
    #[error("stored CA material: {0}")]
    Stored(&'static str),
    /// No CA is valid now.
    #[error("no valid CA")]
    NoSigner,
}

/// One CA: its certificate and signing key. `Debug` never shows the key (the PEM is a
/// [`Secret`]; rcgen's `Issuer` leaves its key pair out).
#[derive(Debug)]
pub struct CaCert {
    cert_pem: String,
    key_pem: Secret,
    issuer: Issuer<'static, KeyPair>,
    not_before: SystemTime,
    not_after: SystemTime,
}

impl CaCert {
    /// A new CA valid from `now - BACKDATE` for `lifetime`.
    pub fn generate(now: SystemTime, lifetime: Duration) -> Result<Self, CaError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, ORGANISATION);
        params
            .distinguished_name
            .push(DnType::CommonName, CA_COMMON_NAME);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.serial_number = Some(random_serial());
        params.not_before = (now - BACKDATE).into();
        params.not_after = (now + lifetime).into();
        let cert = params.self_signed(&key)?;
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// Reads stored material, checking that the key belongs to the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|_| CaError::Stored("CA certificate is not PEM"))?;
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&pem.contents)
            .map_err(|_| CaError::Stored("CA certificate is not X.509"))?;
        let key = KeyPair::from_pem(key_pem).map_err(|_| CaError::Stored("CA key is not PEM"))?;
        if key.subject_public_key_info() != cert.tbs_certificate.subject_pki.raw {
            return Err(CaError::Stored("CA key does not match its certificate"));
        }
        let validity = cert.validity();
        let not_before = unix(validity.not_before.timestamp());
        let not_after = unix(validity.not_after.timestamp());
        let der = rustls::pki_types::CertificateDer::from(pem.contents.clone());
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        Ok(Self {
            cert_pem: cert_pem.trim().to_owned() + "\n",
            key_pem: Secret::new(key_pem.trim().to_owned() + "\n"),
            issuer,
            not_before,
            not_after,
        })
    }

    /// The certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PKCS#8 PEM — only for storing in the CA Secret.
    pub fn key_pem(&self) -> &str {
        self.key_pem.expose()
    }

    /// Start of validity.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// End of validity.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// When this CA may start signing: `publish_lead` after it was made.
    fn signs_from(&self, params: &CaParams) -> SystemTime {
        self.not_before + BACKDATE + params.publish_lead
    }
}

/// The CAs trusted now, oldest first (at most two under valid [`CaParams`]).
#[derive(Clone, Debug, Default)]
pub struct CaSet {
    cas: Vec<Arc<CaCert>>,
}

/// A signed leaf certificate.
#[derive(Clone, Debug)]
pub struct SignedLeaf {
    /// The certificate, PEM.
    pub pem: String,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
}

impl CaSet {
    /// A set of the given CAs (ordered by start of validity).
    pub fn new(mut cas: Vec<Arc<CaCert>>) -> Self {
        cas.sort_by_key(|c| c.not_before);
        Self { cas }
    }

    /// The CAs, oldest first.
    pub fn cas(&self) -> &[Arc<CaCert>] {
        &self.cas
    }

    /// The rotation rule applied at `now`: drops expired CAs and adds a new one when
    /// none is left or the newest is within `overlap + publish_lead` of expiry.
    /// `None` when nothing changes.
    pub fn rotated(&self, now: SystemTime, params: &CaParams) -> Result<Option<Self>, CaError> {
        let mut cas: Vec<_> = self
            .cas
            .iter()
            .filter(|c| c.not_after > now)
            .cloned()
            .collect();
        let dropped = cas.len() != self.cas.len();
        let add = cas
            .last()
            .is_none_or(|newest| now >= rotate_at(newest, params));
        if add {
            cas.push(Arc::new(CaCert::generate(now, params.ca_lifetime)?));
        }
        Ok((dropped || add).then(|| Self::new(cas)))
    }

    /// The next instant at which [`rotated`](Self::rotated) or
    /// [`signer`](Self::signer) may give a different answer.
    /// `None` for an empty set (rotate at once).
    pub fn next_change(&self, now: SystemTime, params: &CaParams) -> Option<SystemTime> {
        let newest = self.cas.last()?;
        let expiries = self.cas.iter().map(|c| c.not_after);
        let activations = self
            .cas
            .iter()
            .map(|c| c.signs_from(params))
            .filter(|t| *t > now);
        Some(
            expiries
                .chain(activations)
                .fold(rotate_at(newest, params), SystemTime::min),
        )
    }

    /// The CA that signs at `now`: the newest one past its publish lead, else the
    /// newest valid one (a fresh install has only one).
    pub fn signer(&self, now: SystemTime, params: &CaParams) -> Option<&Arc<CaCert>> {
        let valid = || {
            self.cas
                .iter()
                .rev()
                .filter(move |c| c.not_before <= now && now < c.not_after)
        };
        valid()
            .find(|c| c.signs_from(params) <= now)
            .or_else(|| valid().next())
    }

    /// Every CA certificate valid at `now`, PEM, oldest first.
    pub fn bundle_pem(&self, now: SystemTime) -> String {
        self.cas
            .iter()
            .filter(|c| c.not_after > now)
            .map(|c| c.cert_pem.as_str())
            .collect()
    }

    /// Signs a workload leaf for `public_key` with `spiffe_id` as its only SAN,
    /// clientAuth + serverAuth, valid for `lifetime` but never past its signer.
    pub fn sign_workload(
        &self,
        now: SystemTime,
        params: &CaParams,
        public_key: &impl PublicKeyData,
        spiffe_id: &str,
        lifetime: Duration,
    ) -> Result<SignedLeaf, CaError> {
        let san = SanType::URI(spiffe_id.try_into()?);
        let ekus = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        self.sign(now, params, public_key, vec![san], ekus, lifetime)
    }

    /// Signs the issuance endpoint's own serving certificate (DNS/IP SANs, serverAuth).
    pub fn sign_serving(
        &self,
        now: SystemTime,
        params: &CaParams,
        key: &KeyPair,
        names: &[String],
    ) -> Result<SignedLeaf, CaError> {
        let sans = CertificateParams::new(names.to_vec())?.subject_alt_names;
        let ekus = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(now, params, key, sans, ekus, params.leaf_lifetime)
    }

    /// Signs the controller's control-plane certificate: its SPIFFE ID and the DNS
    /// names workers dial it by, serverAuth + clientAuth, valid for `lifetime` but
    /// never past its signer.
    pub fn sign_controller(
        &self,
        now: SystemTime,
        params: &CaParams,
        key: &KeyPair,
        spiffe_id: &str,
        dns_names: &[String],
        lifetime: Duration,
    ) -> Result<SignedLeaf, CaError> {
        let mut sans = vec![SanType::URI(spiffe_id.try_into()?)];
        sans.extend(CertificateParams::new(dns_names.to_vec())?.subject_alt_names);
        let ekus = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(now, params, key, sans, ekus, lifetime)
    }

    fn sign(
        &self,
        now: SystemTime,
        params: &CaParams,
        public_key: &impl PublicKeyData,
        sans: Vec<SanType>,
        ekus: Vec<ExtendedKeyUsagePurpose>,
        lifetime: Duration,
    ) -> Result<SignedLeaf, CaError> {
        let signer = self.signer(now, params).ok_or(CaError::NoSigner)?;
        let not_before = now - BACKDATE;
        let not_after = (now + lifetime).min(signer.not_after);
        let mut leaf = CertificateParams::default();
        leaf.distinguished_name = DistinguishedName::new();
        leaf.distinguished_name
            .push(DnType::OrganizationName, ORGANISATION);
        leaf.subject_alt_names = sans;
        leaf.is_ca = IsCa::ExplicitNoCa;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = ekus;
        leaf.use_authority_key_identifier_extension = true;
        leaf.serial_number = Some(random_serial());
        leaf.not_before = not_before.into();
        leaf.not_after = not_after.into();
        let cert = leaf.signed_by(public_key, &signer.issuer)?;
        Ok(SignedLeaf {
            pem: cert.pem(),
            // Certificates carry whole seconds.
            not_before: truncate(not_before),
            not_after: truncate(not_after),
        })
    }
}

fn rotate_at(ca: &CaCert, params: &CaParams) -> SystemTime {
    ca.not_after
        .checked_sub(params.overlap + params.publish_lead)
        .unwrap_or(UNIX_EPOCH)
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[0] &= 0x7f; // positive
    bytes[0] |= 0x01; // no leading zero octet to strip
    SerialNumber::from_slice(&bytes)
}

fn unix(secs: i64) -> SystemTime {
    u64::try_from(secs).map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s))
}

fn truncate(t: SystemTime) -> SystemTime {
    unix(
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0)),
    )
}

/// Seconds since the Unix epoch (0 before it).
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
#[path = "ca_tests.rs"]
mod tests;
