//! Identifier newtypes of the contract: proxy, upstream, worker, session, client,
//! request and operation IDs, labels, idempotency keys and request digests.
//!
//! An identifier can only hold a value that is safe inside a Redis key and a log line;
//! constructing one is the validation. Serde goes through the same check (an ID
//! serializes as its plain string).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::config::check_identifier;

/// Why a value is not a valid identifier: the field it was for and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct IdError {
    /// The identifier's field name, e.g. `proxy_id`.
    pub field: &'static str,
    /// What is wrong with the value.
    pub reason: String,
}

impl IdError {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// What every string newtype here shares, its own `new` being the only way in:
/// `as_str`, `TryFrom<String>` (through `new`, which serde uses) and `From<_> for String`.
macro_rules! string_conversions {
    ($name:ident) => {
        impl $name {
            /// The value.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }
    };
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            /// Validates and wraps `value`: 1..=MAX_LEN bytes of `[A-Za-z0-9._:-]`.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                check_identifier(&value, $max).map_err(|reason| IdError::new($what, reason))?;
                Ok(Self(value))
            }
        }

        string_conversions!($name);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

identifier!(
    /// A proxy's ID, unique within the pool.
    ProxyId, "proxy_id", 128
);
identifier!(
    /// A vendor / provider of proxies (an `Upstream` resource).
    UpstreamId, "upstream", 63
);
identifier!(
    /// A gateway worker's logical ID (its pod name in a cluster).
    WorkerId, "worker_id", 128
);
identifier!(
    /// One process of a worker.
    InstanceId, "instance_id", 128
);
identifier!(
    /// One registration of a worker instance; fences stale processes.
    SessionId, "session_id", 128
);
identifier!(
    /// An extraction client (DistributionClient name, or a hashed source address).
    ClientId, "client_id", 128
);
identifier!(
    /// A request ID (`X-Request-ID`), also the low-level retry guard of an extraction.
    RequestId, "request_id", 128
);
identifier!(
    /// An internal operation ID that makes a write safe to retry after a dropped connection.
    OperationId, "operation_id", 160
);
identifier!(
    /// A label value: region, carrier, city, or a failure code.
    Label, "label", 64
);

/// A client-chosen idempotency key. Any printable ASCII, 1..=255 bytes; it is only
/// ever stored digested.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates and wraps a key.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        if value.is_empty() || value.len() > 255 {
            return Err(IdError::new("idempotency_key", "must be 1 to 255 bytes"));
        }
        if !value.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(IdError::new(
                "idempotency_key",
                "must be printable ASCII without spaces",
            ));
        }
        Ok(Self(value))
    }
}

string_conversions!(IdempotencyKey);

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(..)")
    }
}

/// SHA-256 of a request's canonical body, lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestDigest(String);

impl RequestDigest {
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest;
        Self(hex::encode(sha2::Sha256::digest(bytes)))
    }

    /// Parses 64 lowercase hex characters.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        if value.len() != 64
            || !value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(IdError::new(
                "request_digest",
                "must be 64 lowercase hex characters",
            ));
        }
        Ok(Self(value))
    }
}

string_conversions!(RequestDigest);
