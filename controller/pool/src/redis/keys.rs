//! Key names of the Redis key space (`docs/pool.md`, "Key space") and the call layout
//! every script shares: 16 fixed keys, then the index keys a call may touch.
//!
//! Label values enter key names only as validated identifiers; client IDs, idempotency
//! keys and operation IDs only digested. Nothing here may ever see a password.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::model::{Protocol, UpstreamId};
use crate::validate::key_digest;

/// The hash-tagged prefix of every key.
pub(crate) const PREFIX: &str = "pp:{activity}:";

/// Fixed keys 1..=14, in the order of `lua/prelude.lua`.
const FIXED: [&str; 14] = [
    "records",
    "unique",
    "idkeys",
    "expiry",
    "available",
    "owners",
    "owner-expiry",
    "epoch",
    "inventory",
    "managed",
    "worker-sessions",
    "worker-session-expiry",
    "worker-runtime",
    "worker-runtime-expiry",
];

/// Most index keys remembered for later calls; past it, keys are learnt per call.
const MAX_KNOWN: usize = 4096;

pub(crate) fn key(suffix: &str) -> String {
    format!("{PREFIX}{suffix}")
}

pub(crate) fn protocol_key(p: Protocol) -> String {
    key(&format!("protocol:{}", p.as_str()))
}

pub(crate) fn region_key(v: &str) -> String {
    key(&format!("region:{v}"))
}

pub(crate) fn carrier_key(v: &str) -> String {
    key(&format!("carrier:{v}"))
}

pub(crate) fn upstream_key(u: &UpstreamId) -> String {
    key(&format!("upstream:{u}"))
}

pub(crate) fn owned_key(u: &UpstreamId) -> String {
    key(&format!("owned:{}", key_digest(&[u.as_str()])))
}

/// `op:<digest(parts)>`: an internal operation result.
pub(crate) fn op_key(parts: &[&str]) -> String {
    key(&format!("op:{}", key_digest(parts)))
}

/// `idem:<digest(client, key)>`: a stored extraction result.
pub(crate) fn idem_key(client: &str, idempotency_key: &str) -> String {
    key(&format!("idem:{}", key_digest(&[client, idempotency_key])))
}

/// The index key names this process has seen (from upserts and from scripts asking
/// for keys they were not given). Passed with every call that may touch records, so
/// that a script almost never has to ask.
#[derive(Debug, Default)]
pub(crate) struct KeyBook {
    known: Mutex<BTreeSet<String>>,
}

impl KeyBook {
    pub(crate) fn learn<'a>(&self, keys: impl IntoIterator<Item = &'a String>) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        for k in keys {
            if known.len() >= MAX_KNOWN {
                return;
            }
            if k.starts_with(PREFIX) && !known.contains(k) {
                known.insert(k.clone());
            }
        }
    }

    fn snapshot(&self) -> Vec<String> {
        self.known
            .lock()
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The KEYS of one call: the fixed keys, two result keys, then index keys (deduplicated).
#[derive(Debug)]
pub(crate) struct CallKeys {
    keys: Vec<String>,
    positions: HashMap<String, usize>,
}

impl CallKeys {
    /// `result` / `result2`: the operation result keys (`None`: a placeholder no script
    /// writes).
    pub(crate) fn new(result: Option<String>, result2: Option<String>) -> Self {
        let mut keys: Vec<String> = FIXED.iter().map(|s| key(s)).collect();
        let r1 = result.unwrap_or_else(|| key("op:none"));
        let r2 = result2.unwrap_or_else(|| r1.clone());
        keys.push(r1);
        keys.push(r2);
        Self {
            keys,
            positions: HashMap::new(),
        }
    }

    /// Adds an index key; returns its 1-based KEYS position.
    pub(crate) fn index(&mut self, name: String) -> usize {
        if let Some(p) = self.positions.get(&name) {
            return *p;
        }
        self.keys.push(name.clone());
        let p = self.keys.len();
        self.positions.insert(name, p);
        p
    }

    /// Adds every index key the process knows.
    pub(crate) fn with_known(mut self, book: &KeyBook) -> Self {
        for k in book.snapshot() {
            self.index(k);
        }
        self
    }

    pub(crate) fn extend(&mut self, names: &[String]) {
        for n in names {
            self.index(n.clone());
        }
    }

    pub(crate) fn as_slice(&self) -> &[String] {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_under_the_hash_tag() {
        let u = UpstreamId::new("vendor-a").unwrap();
        for k in [
            protocol_key(Protocol::Http),
            region_key("eu"),
            carrier_key("x"),
            upstream_key(&u),
            owned_key(&u),
            op_key(&["a"]),
            idem_key("c", "secret-key"),
        ] {
            assert!(k.starts_with("pp:{activity}:"), "{k}");
        }
        assert!(!idem_key("c", "secret-key").contains("secret"));
        let ck = CallKeys::new(None, None);
        assert_eq!(ck.as_slice().len(), 16);
        assert!(ck.as_slice().iter().all(|k| k.starts_with(PREFIX)));
    }
}
