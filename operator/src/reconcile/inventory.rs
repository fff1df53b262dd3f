//! The controller's admin inventory, as the Upstream status needs it:
//! `GET <admin>/api/v1/inventory` over plain HTTP inside the cluster (read-only, no
//! credentials), bounded in time and size. The controller is the only source of
//! inventory and fetch state; the operator writes them into `Upstream.status`.
//!
//! One read serves every Upstream for [`FRESH_FOR`] ([`InventoryCache`]): the document
//! covers all upstreams, so N Upstreams cost one request (and one controller scan of
//! the pool) per refresh, not N.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use proxy_pool_api::inventory::{FetchError, FetchFailure, Inventory, UpstreamInventory};

/// Bound on one inventory read (connect, request and body).
const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest inventory document accepted.
const MAX_BYTES: usize = 4 * 1024 * 1024;

/// How long one inventory read (or its failure) answers every Upstream's reconcile;
/// well under the Upstreams' refresh period.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// A read inventory: upstream name → report, or why it could not be read.
pub type Read = Arc<Result<HashMap<String, UpstreamInventory>, String>>;

/// The last inventory read, shared by the Upstream reconciles. Reconciles that ask
/// while a read is under way wait for it (an async mutex held across the read, which
/// is bounded by [`TIMEOUT`]) instead of starting their own.
#[derive(Debug, Default)]
pub struct InventoryCache {
    last: tokio::sync::Mutex<Option<(Instant, Read)>>,
}

impl InventoryCache {
    /// The inventory at `base`, read at most [`FRESH_FOR`] ago.
    pub async fn get(&self, base: &str) -> Read {
        let mut last = self.last.lock().await;
        if let Some((at, read)) = last.as_ref()
            && at.elapsed() < FRESH_FOR
        {
            return read.clone();
        }
        let read = Arc::new(fetch(base).await);
        *last = Some((Instant::now(), read.clone()));
        read
    }
}

/// The condition reason for a failing fetch's reason code.
pub fn condition_reason(e: &FetchError) -> &'static str {
    match e.reason {
        FetchFailure::Unauthorized => "VendorUnauthorized",
        FetchFailure::Timeout => "VendorTimeout",
        FetchFailure::InvalidDocument => "VendorInvalidDocument",
        FetchFailure::TooLarge => "VendorResponseTooLarge",
        FetchFailure::Transport => "VendorUnreachable",
        FetchFailure::Status => "VendorError",
        FetchFailure::PoolError => "PoolUnavailable",
        FetchFailure::Unknown => "FetchFailing",
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

    #[tokio::test]
    async fn one_read_serves_every_upstream_while_fresh() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = reads.clone();
        let server = tokio::spawn(async move {
            let body = r#"{"upstreams":[{"name":"a","managed":1,"unextracted":1,"available":1,
                "availableSlots":1,"lastFetchTime":null,"fetchError":null}]}"#;
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let mut head = [0u8; 1024];
                let _ = s.read(&mut head).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        let cache = InventoryCache::default();
        for _ in 0..3 {
            let read = cache.get(&base).await;
            let all = read.as_ref().as_ref().unwrap();
            assert_eq!(all["a"].managed, 1);
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "one read for every reconcile"
        );
        server.abort();
    }
}
