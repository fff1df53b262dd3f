//! The JSON contract of the operator's identity issuance endpoint (`docs/identity.md`),
//! shared by the operator's issuer and the workers' client (`proxy-pool-identity-client`).
//!
//! Request: `POST /v1/identity/issue`, `Authorization: Bearer <projected SA token>`,
//! `Content-Type: application/json`, body [`IssueRequest`]. Success: `200` with
//! [`IssueResponse`]; failure: `application/problem+json` with [`Problem`].

use serde::{Deserialize, Serialize};

/// Path of the issuance endpoint.
pub const ISSUE_PATH: &str = "/v1/identity/issue";
/// Default audience of the projected ServiceAccount token the endpoint accepts.
pub const DEFAULT_AUDIENCE: &str = "proxy-pool-identity";
/// Content type of error bodies.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
/// Largest request body the endpoint reads.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// Body of an issuance request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssueRequest {
    /// PKCS#10 certificate signing request, PEM. Only its public key is used; any
    /// names or extensions it requests are ignored.
    pub csr: String,
}

/// Body of a successful issuance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssueResponse {
    /// The SPIFFE ID the certificate carries as its only URI SAN.
    pub spiffe_id: String,
    /// The leaf certificate, PEM.
    pub certificate: String,
    /// Every CA certificate currently trusted (PEM), the signer of `certificate` among
    /// them; during a CA rotation it holds both the old and the new CA.
    pub trust_bundle: String,
    /// Start of validity, seconds since the Unix epoch.
    pub not_before: u64,
    /// End of validity, seconds since the Unix epoch.
    pub not_after: u64,
}

/// An RFC 9457 problem document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Problem type URI (`about:blank` or a stable `urn:proxy-pool:identity:*`).
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// Human-readable detail; never internal error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}
