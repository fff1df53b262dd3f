//! What a worker (gateway, checker) presents to the controller's control plane, and
//! where it comes from: a certificate issued by the operator and renewed in memory
//! ([`WorkerTls::Issued`]), or PEM files written by something else
//! ([`WorkerTls::Files`], e.g. cert-manager or a local run). Either way
//! [`WorkerTls::material`] is called for every new connection, so a renewed
//! certificate or rewritten files are used from the next connection on, without a
//! restart.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};

use crate::client::IdentityClient;
use crate::error::ClientError;
use crate::handle::{Identity, IdentityHandle};
use crate::renew::RenewalPolicy;

/// PEM material for one mTLS connection. `Debug` never shows the key.
#[derive(Clone)]
pub struct TlsMaterial {
    /// Trust bundle the controller's certificate is verified against.
    pub ca_pem: String,
    /// The workload certificate (chain).
    pub cert_pem: String,
    /// Its private key (PKCS#8 PEM); never log it.
    pub key_pem: String,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

/// Where a worker's control-plane TLS material comes from.
#[derive(Clone, Debug)]
pub enum WorkerTls {
    /// Issued by the operator's endpoint, held in memory by `handle` (renewed by
    /// [`crate::run_renewal`]); the controller is verified against `trust_bundle`
    /// (the mounted ConfigMap, re-read every time) or, when it cannot be read, the
    /// bundle the issuer returned.
    Issued {
        /// The current identity.
        handle: IdentityHandle,
        /// The operator's trust bundle file.
        trust_bundle: PathBuf,
    },
    /// PEM files, re-read for every connection (so rotated files are picked up).
    Files {
        /// Trust bundle.
        ca: PathBuf,
        /// Certificate chain.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
    },
}

/// Why no TLS material is available right now.
#[derive(Debug, thiserror::Error)]
pub enum MaterialError {
    /// No certificate has been issued yet.
    #[error("no workload certificate yet")]
    NotIssued,
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected kind.
    #[error("{0} holds no PEM {1}")]
    NotPem(PathBuf, &'static str),
}

fn read(path: &Path) -> Result<String, MaterialError> {
    std::fs::read_to_string(path).map_err(|source| MaterialError::Read {
        path: path.to_owned(),
        source,
    })
}

fn expect_pem(path: &Path, text: String, what: &'static str) -> Result<String, MaterialError> {
    if text.contains("-----BEGIN ") {
        Ok(text)
    } else {
        Err(MaterialError::NotPem(path.to_owned(), what))
    }
}

impl WorkerTls {
    /// When the certificate presented now stops being valid: the current issued
    /// identity's, `None` before the first issuance and for [`WorkerTls::Files`] (their
    /// certificate is not parsed here; whoever writes the files watches its expiry).
    pub fn not_after(&self) -> Option<std::time::SystemTime> {
        match self {
            Self::Issued { handle, .. } => handle.current().map(|i| i.not_after()),
            Self::Files { .. } => None,
        }
    }

    /// The material for a new connection, read now.
    pub fn material(&self) -> Result<TlsMaterial, MaterialError> {
        match self {
            Self::Issued {
                handle,
                trust_bundle,
            } => {
                let identity = handle.current().ok_or(MaterialError::NotIssued)?;
                let ca_pem = match read(trust_bundle) {
                    Ok(text) if text.contains("-----BEGIN CERTIFICATE-----") => text,
                    _ => identity.trust_bundle_pem().to_owned(),
                };
                Ok(TlsMaterial {
                    ca_pem,
                    cert_pem: identity.certificate_pem().to_owned(),
                    key_pem: identity.private_key_pem().to_owned(),
                })
            }
            Self::Files { ca, cert, key } => Ok(TlsMaterial {
                ca_pem: expect_pem(ca, read(ca)?, "certificate")?,
                cert_pem: expect_pem(cert, read(cert)?, "certificate")?,
                key_pem: expect_pem(key, read(key)?, "private key")?,
            }),
        }
    }
}

/// Obtains the first certificate before the worker connects anywhere: retries
/// failures that may pass (I/O, timeouts, 5xx, 429, 401) with the policy's backoff,
/// logging each without the token, and returns at once on a refusal that needs an
/// operator (400, 403) or a bad answer — the caller should not start serving then.
/// Returns `Ok(None)` when `give_up` completed first (shutdown).
pub async fn obtain_first(
    client: &IdentityClient,
    handle: &IdentityHandle,
    policy: &RenewalPolicy,
    give_up: impl Future<Output = ()>,
) -> Result<Option<()>, ClientError> {
    tokio::pin!(give_up);
    let mut failures = 0u32;
    loop {
        let attempt = tokio::select! {
            r = client.issue() => r,
            () = &mut give_up => return Ok(None),
        };
        match attempt {
            Ok(identity) => {
                log_issued(&identity);
                handle.store(identity);
                return Ok(Some(()));
            }
            Err(error) if error.is_retryable() => {
                let delay = policy.backoff.delay(failures, &mut rand::rng());
                failures = failures.saturating_add(1);
                tracing::warn!(
                    %error,
                    endpoint = %client.config().endpoint,
                    failures,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "workload certificate not issued yet; retrying"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut give_up => return Ok(None),
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// Obtains the first certificate from `client` ([`obtain_first`]), then keeps it
/// renewed in a background task ([`crate::run_renewal`]) until `stop` completes.
/// Returns the TLS source for control-plane connections, `Ok(None)` when `give_up`
/// completed before a certificate was issued, or the refusal.
pub async fn start_issued(
    client: IdentityClient,
    trust_bundle: PathBuf,
    give_up: impl Future<Output = ()>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<Option<WorkerTls>, ClientError> {
    let handle = IdentityHandle::new();
    let policy = RenewalPolicy::default();
    if obtain_first(&client, &handle, &policy, give_up)
        .await?
        .is_none()
    {
        return Ok(None);
    }
    tokio::spawn(crate::run_renewal(client, handle.clone(), policy, stop));
    Ok(Some(WorkerTls::Issued {
        handle,
        trust_bundle,
    }))
}

fn log_issued(identity: &Identity) {
    let valid = identity
        .not_after()
        .duration_since(std::time::SystemTime::now())
        .map_or(0, |d| d.as_secs());
    tracing::info!(
        spiffe_id = identity.spiffe_id(),
        valid_secs = valid,
        "workload certificate issued"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_reread_and_checked() {
        let dir = std::env::temp_dir().join(format!("pp-worker-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, cert, key) = (dir.join("ca"), dir.join("cert"), dir.join("key"));
        let pem =
            |tag: &str, body: &str| format!("-----BEGIN {tag}-----\n{body}\n-----END {tag}-----\n");
        std::fs::write(&ca, pem("CERTIFICATE", "AA")).unwrap();
        std::fs::write(&cert, pem("CERTIFICATE", "BB")).unwrap();
        std::fs::write(&key, "not a key").unwrap();
        let tls = WorkerTls::Files {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        };
        let err = tls.material().unwrap_err();
        assert!(
            matches!(err, MaterialError::NotPem(ref p, _) if *p == key),
            "{err}"
        );
        std::fs::write(&key, pem("PRIVATE KEY", "CC")).unwrap();
        let m = tls.material().unwrap();
        assert!(m.cert_pem.contains("BB") && m.key_pem.contains("CC"));
        assert!(!format!("{m:?}").contains("CC"), "Debug hides the key");
        // Rewritten files are seen by the next call.
        std::fs::write(&cert, pem("CERTIFICATE", "DD")).unwrap();
        assert!(tls.material().unwrap().cert_pem.contains("DD"));
        std::fs::remove_file(&ca).unwrap();
        assert!(matches!(tls.material(), Err(MaterialError::Read { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An identity as the issuer would return it (self-signed here: only the pairing
    /// of certificate and key matters to the handle).
    fn identity(bundle: &str) -> Identity {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["w".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let response = crate::wire::IssueResponse {
            spiffe_id: "spiffe://td/env/worker/w".into(),
            certificate: cert.pem(),
            trust_bundle: bundle.into(),
            not_before: 1,
            not_after: u64::MAX / 4,
        };
        Identity::from_response(response, key.serialize_der(), key.serialize_pem()).unwrap()
    }

    #[test]
    fn issued_material_follows_renewals() {
        let handle = IdentityHandle::new();
        let tls = WorkerTls::Issued {
            handle: handle.clone(),
            trust_bundle: PathBuf::from("/nonexistent/ca.crt"),
        };
        let first = identity("-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n");
        let first_pem = first.certificate_pem().to_owned();
        handle.store(first);
        let m = tls.material().unwrap();
        assert_eq!(m.cert_pem, first_pem);
        assert!(
            m.ca_pem.contains("AA"),
            "the issuer's bundle when the file is missing"
        );
        // A renewal swaps the handle: the next connection's material is the new one.
        let second = identity("-----BEGIN CERTIFICATE-----\nBB\n-----END CERTIFICATE-----\n");
        let second_pem = second.certificate_pem().to_owned();
        handle.store(second);
        let m = tls.material().unwrap();
        assert_eq!(m.cert_pem, second_pem);
        assert_ne!(second_pem, first_pem);
        assert!(m.key_pem.contains("PRIVATE KEY"));
    }

    #[test]
    fn issued_needs_a_certificate() {
        let tls = WorkerTls::Issued {
            handle: IdentityHandle::new(),
            trust_bundle: PathBuf::from("/nonexistent"),
        };
        assert!(matches!(tls.material(), Err(MaterialError::NotIssued)));
    }
}
