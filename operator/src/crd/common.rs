//! Building blocks shared by the three custom resources: Secret references, the
//! duration and name patterns the API server enforces, and the status conditions.
//!
//! These types only describe the wire format; they never read a Secret or touch the API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Go-style duration made of whole units, e.g. `30s`, `5m`, `1h30m`, `250ms`.
/// The API server checks it with this pattern and CEL rules compare values with
/// `duration(...)`, which accepts exactly this syntax.
pub const DURATION_PATTERN: &str = r"^([0-9]{1,9}(ms|s|m|h))+$";
/// Longest accepted duration string; bounds the cost of CEL rules that parse it.
pub const DURATION_MAX_LEN: u32 = 32;
/// A Kubernetes object name (DNS-1123 subdomain).
pub const NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A key inside a Secret's `data`.
pub const SECRET_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";
/// A region or carrier label value: lower case, digits, `-`, `_` and `.`.
pub const LABEL_VALUE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$";
/// Most values any list filter (regions, carriers, upstreams) may hold, as in the
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

/// Condition type: the resource is fully reconciled and serving.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the resource works, but with reduced capacity or a failing part.
pub const CONDITION_DEGRADED: &str = "Degraded";
