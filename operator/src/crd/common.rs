//! Building blocks shared by the three custom resources: Secret references, the
//! duration and name patterns the API server enforces, and the status conditions.
//!
//! These types only describe the wire format; they never read a Secret or touch the API.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::core::object::HasStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Go-style duration made of whole units, e.g. `30s`, `5m`, `1h30m`, `250ms`.
/// The API server checks it with this pattern and CEL rules compare values with
/// `duration(...)`, which accepts exactly this syntax.
pub const DURATION_PATTERN: &str = r"^([0-9]{1,9}(ms|s|m|h))+$";
/// Longest accepted duration string; bounds the cost of CEL rules that parse it.
pub const DURATION_MAX_LEN: u32 = proxy_pool_api::config::DURATION_MAX_LEN as u32;
/// A Kubernetes object name (DNS-1123 subdomain).
pub const NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A key inside a Secret's `data`.
pub const SECRET_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";
/// A region, carrier or city label value: lower case, digits, `-`, `_` and `.`.
pub const LABEL_VALUE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$";
/// Most values any list filter (regions, carriers, cities, upstreams) may hold, as in the
/// Distribution API's own limit.
pub const MAX_FILTER_VALUES: u32 = 64;

/// A Secret in the same namespace as the custom resource; the keys read from it are
/// fixed by the field that holds the reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub name: String,
}

/// One key of a Secret in the same namespace as the custom resource.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), pattern(NAME_PATTERN))]
    pub name: String,
    /// Key inside the Secret's data.
    #[schemars(length(min = 1, max = 253), pattern(SECRET_KEY_PATTERN))]
    pub key: String,
}

/// The part every custom resource's status starts with: the generation it describes
/// and the [`CONDITION_READY`] and [`CONDITION_DEGRADED`] conditions. Each status
/// flattens it into its own object, so the fields sit directly under `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedConditions {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `Degraded` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A custom resource whose status carries the [`CONDITION_READY`] and
/// [`CONDITION_DEGRADED`] conditions.
pub trait HasConditions {
    /// The conditions last reported (none before the first status).
    fn conditions(&self) -> &[Condition];
    /// The `metadata.generation` the last status describes (none before the first).
    fn observed_generation(&self) -> Option<i64>;
}

/// Every custom resource whose status holds [`ObservedConditions`].
impl<K> HasConditions for K
where
    K: HasStatus,
    K::Status: AsRef<ObservedConditions>,
{
    fn conditions(&self) -> &[Condition] {
        self.status().map_or(&[], |s| &s.as_ref().conditions)
    }

    fn observed_generation(&self) -> Option<i64> {
        self.status().and_then(|s| s.as_ref().observed_generation)
    }
}

/// Condition type: the resource is fully reconciled and serving.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the resource works, but with reduced capacity or a failing part.
pub const CONDITION_DEGRADED: &str = "Degraded";

/// A duration string that does not match [`DURATION_PATTERN`] or overflows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: expected whole units like 30s, 5m, 1h30m or 250ms")]
pub struct InvalidDuration(pub String);

/// Parses a duration in the CRDs' syntax (see [`DURATION_PATTERN`]) with the controller
/// config's own parser, so the two cannot drift; the API server has already checked the
/// pattern, so this fails only on values it never admitted.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, InvalidDuration> {
    proxy_pool_api::config::parse_duration(text).map_err(|_| InvalidDuration(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn parses_the_units_the_pattern_admits() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m500ms"), Ok(Duration::from_millis(60_500)));
    }

    #[test]
    fn rejects_what_the_pattern_rejects() {
        for bad in [
            "",
            "5",
            "s",
            "5 m",
            "1.5s",
            "5d",
            "-1s",
            "10us",
            "1234567890s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}
