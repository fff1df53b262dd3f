//! One issuance: generate a key in memory, build the CSR, read the projected token and
//! the CA bundle from their files (both are re-read every time: the kubelet rotates the
//! token and updates the mounted bundle), and call the issuer over TLS.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rcgen::{CertificateParams, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::ClientError;
use crate::handle::Identity;
use crate::wire::{ISSUE_PATH, IssueRequest, IssueResponse, Problem};

/// Largest response body read from the issuer.
const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// Where the issuer is and what to present to it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `https://<host>:<port>` of the operator's issuance endpoint.
    pub endpoint: Uri,
    /// Name the issuer's certificate must carry, when it differs from the endpoint's
    /// host (e.g. connecting to an IP but verifying the Service DNS name).
    pub server_name: Option<String>,
    /// The projected ServiceAccount token file (audience `proxy-pool-identity`).
    pub token_path: PathBuf,
    /// The operator's trust bundle (PEM), usually the mounted ConfigMap.
    pub ca_bundle_path: PathBuf,
    /// Deadline for one whole request (connect, handshake, answer).
    pub timeout: Duration,
}

impl ClientConfig {
    /// A configuration with a 10 s timeout.
    pub fn new(endpoint: Uri, token_path: PathBuf, ca_bundle_path: PathBuf) -> Self {
        Self {
            endpoint,
            server_name: None,
            token_path,
            ca_bundle_path,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Calls the issuance endpoint.
#[derive(Clone, Debug)]
pub struct IdentityClient {
    config: Arc<ClientConfig>,
}

impl IdentityClient {
    /// A client for `config`.
    pub fn new(config: ClientConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Generates a fresh key and obtains a certificate for it.
    #[tracing::instrument(skip_all, fields(endpoint = %self.config.endpoint))]
    pub async fn issue(&self) -> Result<Identity, ClientError> {
        let key = KeyPair::generate()?;
        let csr = CertificateParams::default()
            .serialize_request(&key)?
            .pem()?;
        let response = tokio::time::timeout(self.config.timeout, self.exchange(csr))
            .await
            .map_err(|_| ClientError::Timeout(self.config.timeout))??;
        let identity = Identity::from_response(response, key.serialize_der(), key.serialize_pem())?;
        tracing::debug!(
            spiffe_id = identity.spiffe_id(),
            "workload certificate issued"
        );
        Ok(identity)
    }

    async fn exchange(&self, csr: String) -> Result<IssueResponse, ClientError> {
        let token = read_token(&self.config.token_path).await?;
        let roots = read_roots(&self.config.ca_bundle_path).await?;
        let (host, port) = host_port(&self.config.endpoint)?;
        let name = self
            .config
            .server_name
            .as_deref()
            .unwrap_or(&host)
            .to_owned();
        let server_name = ServerName::try_from(name)
            .map_err(|_| ClientError::Transport("invalid server name".into()))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| ClientError::Transport(format!("connect: {e}")))?;
        let stream = TlsConnector::from(Arc::new(tls))
            .connect(server_name, tcp)
            .await
            .map_err(|e| ClientError::Transport(format!("TLS handshake: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Transport(format!("HTTP handshake: {e}")))?;
        let conn = tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "issuer connection ended");
            }
        });

        let body = serde_json::to_vec(&IssueRequest { csr })
            .map_err(|e| ClientError::Transport(format!("encode request: {e}")))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(ISSUE_PATH)
            .header(header::HOST, authority(&self.config.endpoint))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ClientError::Transport(format!("build request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ClientError::Transport(format!("send: {e}")))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| ClientError::Transport(format!("read answer: {e}")))?
            .to_bytes();
        conn.abort();
        decode(status, &bytes)
    }
}

fn decode(status: StatusCode, body: &[u8]) -> Result<IssueResponse, ClientError> {
    if status == StatusCode::OK {
        return serde_json::from_slice(body)
            .map_err(|e| ClientError::BadResponse(format!("decode answer: {e}")));
    }
    let problem: Option<Problem> = serde_json::from_slice(body).ok();
    Err(ClientError::Rejected {
        status: status.as_u16(),
        title: problem.as_ref().map_or_else(
            || status.canonical_reason().unwrap_or("error").to_owned(),
            |p| p.title.clone(),
        ),
        detail: problem.and_then(|p| p.detail),
    })
}

/// How a failed read of the file at `path` is reported.
fn read_failed(path: &Path) -> impl FnOnce(std::io::Error) -> ClientError + '_ {
    move |source| ClientError::ReadFile {
        path: path.to_owned(),
        source,
    }
}

async fn read_token(path: &PathBuf) -> Result<String, ClientError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(read_failed(path))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ClientError::EmptyToken(path.clone()));
    }
    Ok(token.to_owned())
}

async fn read_roots(path: &PathBuf) -> Result<RootCertStore, ClientError> {
    let pem = tokio::fs::read(path).await.map_err(read_failed(path))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
        // A certificate the verifier cannot use is skipped, not fatal: the rest of the
        // bundle still works.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(ClientError::EmptyBundle(path.clone()));
    }
    Ok(roots)
}

fn host_port(endpoint: &Uri) -> Result<(String, u16), ClientError> {
    if endpoint.scheme_str() != Some("https") {
        return Err(ClientError::Transport("endpoint must be https://".into()));
    }
    let host = endpoint
        .host()
        .ok_or_else(|| ClientError::Transport("endpoint has no host".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok((host, endpoint.port_u16().unwrap_or(443)))
}

fn authority(endpoint: &Uri) -> String {
    endpoint
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_bodies_become_rejections() {
        let body = br#"{"type":"about:blank","title":"Forbidden","status":403,"detail":"pod is not managed"}"#;
        let err = decode(StatusCode::FORBIDDEN, body).unwrap_err();
        assert!(
            matches!(&err, ClientError::Rejected { status: 403, title, detail: Some(d) } if title == "Forbidden" && d == "pod is not managed"),
            "{err:?}"
        );
        assert!(!err.is_retryable());
        let err = decode(StatusCode::SERVICE_UNAVAILABLE, b"oops").unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
    }

    #[test]
    fn endpoint_must_be_https_with_a_host() {
        assert_eq!(
            host_port(&"https://[::1]:8443".parse().unwrap()).unwrap(),
            ("::1".to_owned(), 8443)
        );
        assert_eq!(
            host_port(&"https://issuer.ns.svc".parse().unwrap())
                .unwrap()
                .1,
            443
        );
        assert!(host_port(&"http://issuer:80".parse().unwrap()).is_err());
    }
}
