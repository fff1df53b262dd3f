//! The controller's admin inventory document (`GET /api/v1/inventory` on the admin
//! listener, `Inventory` in `api/openapi/proxy-pool.yaml`): each configured upstream's
//! pool figures and fetch state. The controller writes it; the operator reads it into
//! `Upstream.status`. One definition for both sides; unknown fields are ignored on
//! reading so an older reader keeps working against a newer controller.

use serde::{Deserialize, Serialize};

/// The whole document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// One entry per configured upstream.
    pub upstreams: Vec<UpstreamInventory>,
}

/// One upstream's inventory and fetch state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamInventory {
    /// The upstream's name.
    pub name: String,
    /// FETCHED, CHECKING, AVAILABLE, SUSPECT or DRAINING.
    pub managed: u64,
    /// Managed and not extracted.
    pub unextracted: u64,
    /// AVAILABLE proxies no gateway owns, before their `usableUntil`.
    pub available: u64,
    /// Free slots over available proxies.
    pub available_slots: u64,
    /// While the upstream's proxies are held back after a new pool generation (first
    /// start, or a store that lost its data): RFC 3339 time the hold ends; absent
    /// otherwise. `available` is 0 meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantined_until: Option<String>,
    /// RFC 3339 time of the last successful fetch (`null`: none yet).
    pub last_fetch_time: Option<String>,
    /// Why fetches fail since the last success (`null`: they do not).
    pub fetch_error: Option<FetchError>,
}

/// A failing vendor fetch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchError {
    /// Why it fails.
    pub reason: FetchFailure,
    /// When it last failed (RFC 3339).
    pub at: String,
    /// Failures in a row.
    pub consecutive_failures: u32,
}

/// Why an upstream's fetches fail: the `reason` code of the document (snake case on
/// the wire), also the controller's fetch-result metric label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchFailure {
    /// The vendor refused the credentials (401/403).
    Unauthorized,
    /// The vendor did not answer in time.
    Timeout,
    /// The body is not a document of the configured format.
    InvalidDocument,
    /// Another unexpected HTTP status.
    Status,
    /// The request failed below HTTP (connect, TLS, reset).
    Transport,
    /// The body exceeded its size limit.
    TooLarge,
    /// The fetched proxies could not be written to the pool.
    PoolError,
    /// A code this reader does not know (a newer controller).
    #[default]
    #[serde(other)]
    Unknown,
}

impl FetchFailure {
    /// Every code, in declaration order.
    pub const ALL: [FetchFailure; 8] = [
        Self::Unauthorized,
        Self::Timeout,
        Self::InvalidDocument,
        Self::Status,
        Self::Transport,
        Self::TooLarge,
        Self::PoolError,
        Self::Unknown,
    ];

    /// The wire code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Timeout => "timeout",
            Self::InvalidDocument => "invalid_document",
            Self::Status => "status",
            Self::Transport => "transport",
            Self::TooLarge => "too_large",
            Self::PoolError => "pool_error",
            Self::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_round_trips_in_camel_case() {
        let text = r#"{"upstreams":[{"name":"u","managed":3,"unextracted":3,"available":1,
            "availableSlots":4,"lastFetchTime":"2026-01-01T00:00:00Z","fetchError":
            {"reason":"unauthorized","at":"2026-01-01T00:00:05Z","consecutiveFailures":2}}]}"#;
        let doc: Inventory = serde_json::from_str(text).unwrap();
        let u = &doc.upstreams[0];
        assert_eq!((u.managed, u.available, u.available_slots), (3, 1, 4));
        let e = u.fetch_error.as_ref().unwrap();
        assert_eq!(
            (e.reason.as_str(), e.consecutive_failures),
            ("unauthorized", 2)
        );
        let back: serde_json::Value = serde_json::to_value(&doc).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
    }

    #[test]
    fn nulls_and_unknown_fields_are_accepted() {
        let doc: Inventory = serde_json::from_str(
            r#"{"upstreams":[{"name":"u","managed":0,"unextracted":0,"available":0,
                "availableSlots":0,"lastFetchTime":null,"fetchError":null,"later":1}]}"#,
        )
        .unwrap();
        assert_eq!(doc.upstreams[0].fetch_error, None);
        assert_eq!(doc.upstreams[0].last_fetch_time, None);
    }

    #[test]
    fn every_fetch_failure_code_is_its_wire_form() {
        for f in FetchFailure::ALL {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str(), "{f:?}");
            let back: FetchFailure = serde_json::from_value(f.as_str().into()).unwrap();
            assert_eq!(back, f);
        }
        let newer: FetchFailure = serde_json::from_value("rate_limited".into()).unwrap();
        assert_eq!(newer, FetchFailure::Unknown);
    }
}
