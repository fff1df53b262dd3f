//! The controller's admin inventory, as the Upstream status needs it:
//! `GET <admin>/api/v1/inventory` over plain HTTP inside the cluster (read-only, no
//! credentials), bounded in time and size. The controller is the only source of
//! inventory and fetch state; the operator writes them into `Upstream.status`.

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::Deserialize;

/// Bound on one inventory read (connect, request and body).
const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest inventory document accepted.
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// One upstream as the controller reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamReport {
    /// FETCHED, CHECKING, AVAILABLE, SUSPECT or DRAINING.
    pub managed: i64,
    /// AVAILABLE, unowned, usable.
    pub available: i64,
    /// Free slots over available proxies.
    pub available_slots: i64,
    /// RFC 3339 time of the last successful fetch.
    pub last_fetch_time: Option<String>,
    /// The fetch failure since then, if any.
    pub fetch_error: Option<FetchError>,
}

/// A failing vendor fetch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchError {
    /// `unauthorized`, `timeout`, `invalid_document`, `status`, `transport`,
    /// `too_large` or `pool_error`.
    pub reason: String,
    /// When it last failed.
    pub at: String,
    /// Failures in a row.
    pub consecutive_failures: u32,
}

impl FetchError {
    /// The condition reason for it.
    pub fn condition_reason(&self) -> &'static str {
        match self.reason.as_str() {
            "unauthorized" => "VendorUnauthorized",
            "timeout" => "VendorTimeout",
            "invalid_document" => "VendorInvalidDocument",
            "too_large" => "VendorResponseTooLarge",
            "transport" => "VendorUnreachable",
            "status" => "VendorError",
            "pool_error" => "PoolUnavailable",
            _ => "FetchFailing",
        }
    }
}

#[derive(Deserialize)]
struct Document {
    upstreams: Vec<Named>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
    #[serde(flatten)]
    report: UpstreamReport,
}

/// Reads the inventory from `base` (`http://host:port`): upstream name → report.
/// Errors are short texts (never a body).
pub async fn fetch(base: &str) -> Result<HashMap<String, UpstreamReport>, String> {
    tokio::time::timeout(TIMEOUT, read(base))
        .await
        .map_err(|_| "timed out".to_owned())?
}

async fn read(base: &str) -> Result<HashMap<String, UpstreamReport>, String> {
    let authority = base
        .strip_prefix("http://")
        .ok_or("the controller admin URL must be http://host:port")?
        .trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("connect: {}", e.kind()))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| "handshake failed".to_owned())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::get("/api/v1/inventory")
        .header(hyper::header::HOST, authority)
        .body(Empty::<Bytes>::new())
        .map_err(|_| "bad request".to_owned())?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|_| "request failed".to_owned())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status().as_u16()));
    }
    let body = Limited::new(resp.into_body(), MAX_BYTES)
        .collect()
        .await
        .map_err(|_| "body unreadable or too large".to_owned())?
        .to_bytes();
    let doc: Document =
        serde_json::from_slice(&body).map_err(|_| "not an inventory document".to_owned())?;
    Ok(doc
        .upstreams
        .into_iter()
        .map(|n| (n.name, n.report))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_document_parses() {
        let doc: Document = serde_json::from_str(
            r#"{"upstreams":[{"name":"u","managed":3,"unextracted":3,"available":1,"availableSlots":4,
                "lastFetchTime":"2026-01-01T00:00:00Z","fetchError":{"reason":"unauthorized",
                "at":"2026-01-01T00:00:05Z","consecutiveFailures":2}}]}"#,
        )
        .unwrap();
        let r = &doc.upstreams[0].report;
        assert_eq!((r.managed, r.available, r.available_slots), (3, 1, 4));
        let e = r.fetch_error.as_ref().unwrap();
        assert_eq!(e.condition_reason(), "VendorUnauthorized");
        assert_eq!(e.consecutive_failures, 2);
    }
}
