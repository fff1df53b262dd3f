//! The HTTP vendor source: `GET` a vendor API (hyper + rustls), authenticate with an
//! API-key header, a bearer token or Basic, and parse JSON or lines within the fetch
//! budget. Never logs or reports the URL's query, a header value or a body.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use activity_pool::model::Secret;
use async_trait::async_trait;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::error::{FetchError, ProviderError};
use super::model::VendorBatch;
use super::options::FetchBudget;
use super::parse::{parse_json, parse_lines};
use super::source::VendorSource;

/// Response header some vendors use to declare the TTL of a whole line-format batch.
const TTL_HEADER: &str = "x-proxy-ttl-seconds";

/// Format of a vendor response, as configured (`format: json | lines`): JSON is read
/// by [`parse_json`], one proxy per line by [`parse_lines`].
pub use proxy_pool_api::config::VendorFormat;

/// How to authenticate to the vendor API. Secret values come in resolved.
#[derive(Clone)]
pub enum VendorAuth {
    /// No credentials.
    None,
    /// An API key in a header (`X-API-Key` unless the vendor names another).
    ApiKey {
        /// Header name.
        header: HeaderName,
        /// The key.
        key: Secret,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
    /// `Authorization: Basic`.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: Secret,
    },
}

impl fmt::Debug for VendorAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "None",
            Self::ApiKey { .. } => "ApiKey(***)",
            Self::Bearer(_) => "Bearer(***)",
            Self::Basic { .. } => "Basic(***)",
        })
    }
}

impl VendorAuth {
    /// An API key in `X-API-Key`.
    pub fn api_key(key: Secret) -> Self {
        Self::ApiKey {
            header: HeaderName::from_static("x-api-key"),
            key,
        }
    }

    fn header(&self) -> Result<Option<(HeaderName, HeaderValue)>, ProviderError> {
        let bad = || ProviderError::option("vendorApi.auth", "not a valid header value");
        let value = |s: String| {
            let mut v = HeaderValue::try_from(s).map_err(|_| bad())?;
            v.set_sensitive(true);
            Ok::<_, ProviderError>(v)
        };
        Ok(match self {
            Self::None => None,
            Self::ApiKey { header, key } => Some((header.clone(), value(key.expose().to_owned())?)),
            Self::Bearer(token) => Some((
                header::AUTHORIZATION,
                value(format!("Bearer {}", token.expose()))?,
            )),
            Self::Basic { username, password } => {
                let raw = format!("{username}:{}", password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
                Some((header::AUTHORIZATION, value(format!("Basic {encoded}"))?))
            }
        })
    }
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A vendor API fetched over HTTP(S).
#[derive(Clone)]
pub struct HttpVendorSource {
    uri: Uri,
    format: VendorFormat,
    auth: Option<(HeaderName, HeaderValue)>,
    client: Arc<HttpClient>,
}

impl fmt::Debug for HttpVendorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpVendorSource")
            .field("host", &self.uri.host())
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl HttpVendorSource {
    /// A source for `url` (`http` or `https`); trusts the platform's root CAs.
    pub fn new(url: &str, format: VendorFormat, auth: VendorAuth) -> Result<Self, ProviderError> {
        let uri: Uri = url
            .parse()
            .map_err(|_| ProviderError::option("vendorApi.url", "not a valid URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(ProviderError::option(
                "vendorApi.url",
                "must be an absolute http or https URL",
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = match HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider.clone())
        {
            Ok(b) => b,
            Err(_) => {
                tracing::debug!("no platform root CAs found; https vendor APIs will fail");
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|_| ProviderError::option("vendorApi.tls", "no usable TLS versions"))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                HttpsConnectorBuilder::new().with_tls_config(config)
            }
        };
        let connector = builder.https_or_http().enable_http1().build();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(1)
            .build(connector);
        Ok(Self {
            uri,
            format,
            auth: auth.header()?,
            client: Arc::new(client),
        })
    }

    async fn get(&self, budget: &FetchBudget) -> Result<(Bytes, Option<Duration>), FetchError> {
        let mut req = Request::get(self.uri.clone())
            .header(header::ACCEPT, "application/json, text/plain")
            .header(header::USER_AGENT, "proxy-pool-controller");
        if let Some((name, value)) = &self.auth {
            req = req.header(name, value);
        }
        let req = req
            .body(Empty::new())
            .map_err(|_| FetchError::Transport("request"))?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|_| FetchError::Transport("connect"))?;
        let status = resp.status();
        if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
            return Err(FetchError::Unauthorized(status.as_u16()));
        }
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let limit = budget.max_response_bytes;
        let declared = resp
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(FetchError::TooLarge { limit });
        }
        let ttl = resp
            .headers()
            .get(TTL_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| (1..=7 * 24 * 3600).contains(s))
            .map(Duration::from_secs);
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| FetchError::Transport("body"))?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > limit {
                    return Err(FetchError::TooLarge { limit });
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok((buf.freeze(), ttl))
    }
}

#[async_trait]
impl VendorSource for HttpVendorSource {
    async fn fetch(&self, budget: &FetchBudget) -> Result<VendorBatch, FetchError> {
        let (body, ttl) = tokio::time::timeout(budget.request_timeout, self.get(budget))
            .await
            .map_err(|_| FetchError::Timeout)??;
        let mut batch = match self.format {
            VendorFormat::Json => parse_json(&body, budget.max_candidates)?,
            VendorFormat::Lines => parse_lines(&body, budget.max_candidates)?,
        };
        batch.batch_ttl = ttl;
        Ok(batch)
    }
}
