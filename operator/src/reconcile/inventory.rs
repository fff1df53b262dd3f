//! The controller's admin inventory, as the Upstream status needs it:
//! `GET <admin>/api/v1/inventory` over plain HTTP inside the cluster (read-only, no
//! credentials), bounded in time and size. The controller is the only source of
//! inventory and fetch state; the operator writes them into `Upstream.status`.

use std::collections::HashMap;
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use proxy_pool_api::inventory::{FetchError, Inventory, UpstreamInventory};

/// Bound on one inventory read (connect, request and body).
const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest inventory document accepted.
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// The condition reason for a failing fetch's reason code.
pub fn condition_reason(e: &FetchError) -> &'static str {
    match e.reason.as_str() {
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

/// Reads the inventory from `base` (`http://host:port`): upstream name → report.
/// Errors are short texts (never a body).
pub async fn fetch(base: &str) -> Result<HashMap<String, UpstreamInventory>, String> {
    tokio::time::timeout(TIMEOUT, read(base))
        .await
        .map_err(|_| "timed out".to_owned())?
}

async fn read(base: &str) -> Result<HashMap<String, UpstreamInventory>, String> {
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
    let doc: Inventory =
        serde_json::from_slice(&body).map_err(|_| "not an inventory document".to_owned())?;
    Ok(doc
        .upstreams
        .into_iter()
        .map(|u| (u.name.clone(), u))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controllers_document_parses() {
        let doc: Inventory = serde_json::from_str(
            r#"{"upstreams":[{"name":"u","managed":3,"unextracted":3,"available":1,"availableSlots":4,
                "lastFetchTime":"2026-01-01T00:00:00Z","fetchError":{"reason":"unauthorized",
                "at":"2026-01-01T00:00:05Z","consecutiveFailures":2}}]}"#,
        )
        .unwrap();
        let r = &doc.upstreams[0];
        assert_eq!((r.managed, r.available, r.available_slots), (3, 1, 4));
        let e = r.fetch_error.as_ref().unwrap();
        assert_eq!(condition_reason(e), "VendorUnauthorized");
        assert_eq!(e.consecutive_failures, 2);
    }
}
