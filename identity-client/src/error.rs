//! Why an issuance attempt failed, and whether retrying can help.

use std::path::PathBuf;

/// Why a certificate could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A local file (token, CA bundle) could not be read.
    #[error("reading {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The CA bundle holds no usable certificate.
    #[error("CA bundle {0} holds no usable certificate")]
    EmptyBundle(PathBuf),
    /// The token file is empty.
    #[error("token file {0} is empty")]
    EmptyToken(PathBuf),
    /// Key or CSR generation failed.
    #[error("generating the key or CSR: {0}")]
    Keygen(#[from] rcgen::Error),
    /// The TLS configuration could not be built.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// Connecting, the TLS handshake or the HTTP exchange failed.
    #[error("talking to the issuer: {0}")]
    Transport(String),
    /// The request did not finish in time.
    #[error("the issuer did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The issuer refused the request.
    #[error("the issuer refused the request: {status} {title}{}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Rejected {
        /// HTTP status.
        status: u16,
        /// Problem title.
        title: String,
        /// Problem detail.
        detail: Option<String>,
    },
    /// The issuer's answer could not be used.
    #[error("unusable answer from the issuer: {0}")]
    BadResponse(String),
}

impl ClientError {
    /// Whether the same request may succeed later without a configuration change:
    /// transport failures, timeouts, 5xx and 429, and 401 (the kubelet may rotate a
    /// token that had just expired). 400/403 need someone to act, but a renewal loop
    /// still retries them at its longest backoff.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Transport(_) | Self::Timeout(_) | Self::ReadFile { .. } => true,
            Self::Rejected { status, .. } => *status >= 500 || *status == 429 || *status == 401,
            _ => false,
        }
    }
}
