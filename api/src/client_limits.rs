//! What one client may use of a gateway fleet: a DistributionClient's `gatewayLimits`.
//! One definition for every place that carries it — the CRD (converted once by the
//! operator), the gateway's clients file ([`crate::gateway_clients::ClientEntry`]) and the
//! controller's config (`clients[].gatewayLimits`).
//!
//! Every limit is **fleet-wide**: the budget of the client across all gateways of a group.
//! Each gateway enforces its share ([`GatewayLimits::share`]): the budget divided by the
//! number of gateways of its group with a live control-plane session, which the controller
//! sends back in every runtime report's answer (`ClientBudgets.group_gateways`). The daily
//! byte quota is judged by the controller from the metered bytes of every gateway's
//! reports (a UTC day) and pushed back the same way (`quota_exhausted_clients`).
//!
//! Written form (camelCase JSON/YAML), every field optional:
//!
//! ```json
//! {"maxConnections": 200, "requestsPerSecond": 50, "burst": 100, "dailyBytes": 10737418240}
//! ```

use std::fmt;
use std::num::{NonZeroU32, NonZeroU64};

use serde::{Deserialize, Serialize};

/// Largest `maxConnections` accepted.
pub const MAX_CONNECTIONS: u32 = 1_000_000;
/// Largest `requestsPerSecond` accepted.
pub const MAX_REQUESTS_PER_SECOND: u32 = 1_000_000;
/// Largest `burst` accepted.
pub const MAX_BURST: u32 = 10_000_000;

/// A client's fleet-wide gateway limits. Absent fields do not limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayLimits {
    /// Concurrent client connections (HTTP keep-alive connections, CONNECT tunnels,
    /// SOCKS5 connections) across the group, 1..=1,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<NonZeroU32>,
    /// Sustained requests per second across the group (one request: a forwarded HTTP
    /// request, a CONNECT tunnel or a SOCKS5 connection), 1..=1,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<NonZeroU32>,
    /// Token-bucket size for `requestsPerSecond` (default: `requestsPerSecond`); needs
    /// `requestsPerSecond` and is at least it, at most 10,000,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<NonZeroU32>,
    /// Bytes per UTC day, both directions together, as metered by the gateways
    /// (approximate: see docs/gateway.md "Limits").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_bytes: Option<NonZeroU64>,
}

/// Why [`GatewayLimits`] are refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A value is out of its range.
    #[error("{field} must be 1 to {max}, got {got}")]
    OutOfRange {
        /// The camelCase field.
        field: &'static str,
        /// Its maximum.
        max: u64,
        /// The value given.
        got: u64,
    },
    /// `burst` without `requestsPerSecond`.
    #[error("burst needs requestsPerSecond")]
    BurstWithoutRate,
    /// `burst` below `requestsPerSecond`.
    #[error("burst ({burst}) must be at least requestsPerSecond ({rate})")]
    BurstBelowRate {
        /// The burst given.
        burst: u32,
        /// The rate given.
        rate: u32,
    },
}

/// The part of a fleet-wide budget one gateway enforces: `ceil(budget / gateways)`, at
/// least 1 (`gateways` 0 counts as 1).
pub fn share_of(budget: u64, gateways: u32) -> u64 {
    let n = u64::from(gateways.max(1));
    budget.div_ceil(n).max(1)
}

/// One gateway's share of a client's limits (see [`GatewayLimits::share`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalShare {
    /// Concurrent connections this gateway admits for the client.
    pub max_connections: Option<u64>,
    /// Requests per second this gateway admits (token refill rate).
    pub requests_per_second: Option<u64>,
    /// Token-bucket size on this gateway.
    pub burst: Option<u64>,
}

impl GatewayLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the ranges and the burst rule; the error names the field.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let range = |field, max: u32, v: Option<NonZeroU32>| match v {
            Some(v) if v.get() > max => Err(LimitsError::OutOfRange {
                field,
                max: u64::from(max),
                got: u64::from(v.get()),
            }),
            _ => Ok(()),
        };
        range("maxConnections", MAX_CONNECTIONS, self.max_connections)?;
        range(
            "requestsPerSecond",
            MAX_REQUESTS_PER_SECOND,
            self.requests_per_second,
        )?;
        range("burst", MAX_BURST, self.burst)?;
        match (self.burst, self.requests_per_second) {
            (Some(_), None) => Err(LimitsError::BurstWithoutRate),
            (Some(b), Some(r)) if b < r => Err(LimitsError::BurstBelowRate {
                burst: b.get(),
                rate: r.get(),
            }),
            _ => Ok(()),
        }
    }

    /// The token-bucket size: `burst`, else `requestsPerSecond`.
    pub fn effective_burst(&self) -> Option<NonZeroU32> {
        self.burst.or(self.requests_per_second)
    }

    /// What one of `gateways` gateways enforces: each budget divided by `gateways`,
    /// rounded up, at least 1. So the fleet admits at most the budget plus one per
    /// gateway (the rounding), while the gateway count the controller reported is current.
    pub fn share(&self, gateways: u32) -> LocalShare {
        let part = |v: Option<u64>| v.map(|v| share_of(v, gateways));
        LocalShare {
            max_connections: part(self.max_connections.map(|v| u64::from(v.get()))),
            requests_per_second: part(self.requests_per_second.map(|v| u64::from(v.get()))),
            burst: part(self.effective_burst().map(|v| u64::from(v.get()))),
        }
    }
}

impl fmt::Display for GatewayLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(v) = self.max_connections {
            parts.push(format!("maxConnections={v}"));
        }
        if let Some(v) = self.requests_per_second {
            parts.push(format!("requestsPerSecond={v}"));
        }
        if let Some(v) = self.burst {
            parts.push(format!("burst={v}"));
        }
        if let Some(v) = self.daily_bytes {
            parts.push(format!("dailyBytes={v}"));
        }
        if parts.is_empty() {
            f.write_str("unlimited")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(v: u32) -> Option<NonZeroU32> {
        NonZeroU32::new(v)
    }

    #[test]
    fn reads_the_written_form_and_refuses_unknown_fields_and_zero() {
        let l: GatewayLimits = serde_json::from_str(
            r#"{"maxConnections": 200, "requestsPerSecond": 50, "burst": 100, "dailyBytes": 1024}"#,
        )
        .expect("reads");
        assert_eq!(l.max_connections, nz(200));
        assert_eq!(l.daily_bytes, NonZeroU64::new(1024));
        assert!(l.validate().is_ok());
        assert!(serde_json::from_str::<GatewayLimits>(r#"{"maxConnection": 1}"#).is_err());
        assert!(serde_json::from_str::<GatewayLimits>(r#"{"maxConnections": 0}"#).is_err());
        assert_eq!(
            serde_json::to_string(&GatewayLimits::default()).expect("writes"),
            "{}"
        );
    }

    #[test]
    fn validation_names_the_field() {
        let over = GatewayLimits {
            max_connections: nz(MAX_CONNECTIONS + 1),
            ..GatewayLimits::default()
        };
        assert_eq!(
            over.validate().unwrap_err().to_string(),
            "maxConnections must be 1 to 1000000, got 1000001"
        );
        let burst_only = GatewayLimits {
            burst: nz(5),
            ..GatewayLimits::default()
        };
        assert_eq!(burst_only.validate(), Err(LimitsError::BurstWithoutRate));
        let low = GatewayLimits {
            requests_per_second: nz(10),
            burst: nz(5),
            ..GatewayLimits::default()
        };
        assert_eq!(
            low.validate().unwrap_err().to_string(),
            "burst (5) must be at least requestsPerSecond (10)"
        );
    }

    #[test]
    fn a_gateway_enforces_its_rounded_up_share() {
        let l = GatewayLimits {
            max_connections: nz(10),
            requests_per_second: nz(7),
            ..GatewayLimits::default()
        };
        let one = l.share(1);
        assert_eq!(one.max_connections, Some(10));
        assert_eq!(one.burst, Some(7), "burst defaults to the rate");
        let three = l.share(3);
        assert_eq!(three.max_connections, Some(4));
        assert_eq!(three.requests_per_second, Some(3));
        assert_eq!(l.share(0), one, "no count known yet: the whole budget");
        assert_eq!(l.share(100).max_connections, Some(1), "never zero");
        assert_eq!(GatewayLimits::default().share(2).max_connections, None);
        assert_eq!(l.to_string(), "maxConnections=10 requestsPerSecond=7");
    }
}
