//! [`ProxyId`]: a proxy's ID as the compiled snapshot, the capacity counters, sticky
//! sessions and outcome observations hold it. A leaf: it depends on nothing else in
//! the crate.

use std::fmt;
use std::sync::Arc;

/// A proxy's ID as the compiled snapshot holds it: shared, cheap to clone (the hot
/// path, capacity counters and sessions pass it around by `Arc`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProxyId(Arc<str>);

impl ProxyId {
    /// The ID text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ProxyId {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl From<String> for ProxyId {
    fn from(s: String) -> Self {
        Self(Arc::from(s))
    }
}

impl fmt::Debug for ProxyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ProxyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
