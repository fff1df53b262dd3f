//! TLS material for the HTTPS echo server: a throw-away CA and a leaf for
//! `localhost` / `127.0.0.1`, generated at start. Only the CA PEM leaves this module.

use rcgen::{DnType, ExtendedKeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

use super::error::SimError;
use crate::ca::Ca;

/// A ready acceptor plus the PEM of the CA clients must trust.
#[derive(Clone)]
pub(crate) struct EchoTls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) ca_pem: String,
}

impl std::fmt::Debug for EchoTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EchoTls").finish_non_exhaustive()
    }
}

/// Generates a CA and a leaf for `localhost` and `127.0.0.1`, and a server config.
pub(crate) fn generate() -> Result<EchoTls, SimError> {
    let err = |e: &dyn std::fmt::Display| SimError::Tls(e.to_string());
    let ca = Ca::generate("proxy-pool vendor-sim CA").map_err(|e| err(&e))?;
    let (leaf_cert, leaf_key) = ca
        .leaf(
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "vendor-sim echo")],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
        .map_err(|e| err(&e))?;

    let chain: Vec<CertificateDer<'static>> =
        vec![leaf_cert.der().clone(), ca.cert().der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| err(&e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(EchoTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        ca_pem: ca.cert().pem(),
    })
}
