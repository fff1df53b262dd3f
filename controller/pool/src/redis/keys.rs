//! Key names of the Redis key space (`docs/pool.md`, "Key space") and the call layout
//! every script shares: 18 fixed keys, then the index keys a call may touch.
//!
//! Label values enter key names only as validated identifiers; client IDs, idempotency
//! keys and operation IDs only digested. Nothing here may ever see a password.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::model::{Protocol, UpstreamId};
use crate::validate::key_digest;

/// The hash-tagged prefix of every key. `v2`: the key-space version (v2 = one
/// availability ZSET per label combination). A layout change bumps it, so a new
/// version never reads keys an older one wrote (`docs/pool.md`, "Key-space versions").
pub(crate) const PREFIX: &str = "pp:{activity}:v2:";

/// Fixed keys 1..=16, in the order of `lua/prelude.lua`.
const FIXED: [&str; 16] = [
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
    "combos",
    "combos-version",
];

/// Most index keys remembered for later calls; past it, keys are learnt per call.
const MAX_KNOWN: usize = 4096;

pub(crate) fn key(suffix: &str) -> String {
    format!("{PREFIX}{suffix}")
}

/// The labels of one availability combination: upstream, protocol, region, carrier.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Combo {
    pub upstream: String,
    pub protocol: String,
    pub region: String,
    pub carrier: String,
}

/// Prefix of the combination keys: `avail:<upstream>|<protocol>|<region>|<carrier>`
/// (region / carrier empty when the proxy has none). Label values are validated
/// identifiers (`[A-Za-z0-9._:-]`), so `|` cannot occur in them.
fn combo_prefix() -> String {
    key("avail:")
}

/// A combination key's name without the key prefix: `<upstream>|<protocol>|<region>|<carrier>`.
pub(crate) fn combo_name(key: &str) -> &str {
    let prefix = combo_prefix();
    key.strip_prefix(prefix.as_str()).unwrap_or(key)
}

/// The availability ZSET of one label combination.
pub(crate) fn combo_key(
    u: &UpstreamId,
    p: Protocol,
    region: Option<&str>,
    carrier: Option<&str>,
) -> String {
    format!(
        "{}{u}|{}|{}|{}",
        combo_prefix(),
        p.as_str(),
        region.unwrap_or(""),
        carrier.unwrap_or("")
    )
}

/// The labels of a combination key; `None` for any other key.
pub(crate) fn parse_combo(name: &str) -> Option<Combo> {
    let rest = name.strip_prefix(&combo_prefix())?;
    let mut parts = rest.split('|');
    let combo = Combo {
        upstream: parts.next()?.to_owned(),
        protocol: parts.next()?.to_owned(),
        region: parts.next()?.to_owned(),
        carrier: parts.next()?.to_owned(),
    };
    if parts.next().is_some() {
        return None;
    }
    Some(combo)
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
    /// The version of the combination registry `known` is complete for ("" = none).
    combos_version: Mutex<String>,
}

impl KeyBook {
    /// Records the registry version after learning every registered combination.
    pub(crate) fn set_combos_version(&self, v: &str) {
        if let Ok(mut cv) = self.combos_version.lock() {
            v.clone_into(&mut cv);
        }
    }

    pub(crate) fn combos_version(&self) -> String {
        self.combos_version
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Known `owned:<digest>` keys.
    pub(crate) fn owned_keys(&self) -> Vec<String> {
        let Ok(known) = self.known.lock() else {
            return Vec::new();
        };
        let from = key("owned:");
        known
            .range(from.clone()..)
            .take_while(|k| k.starts_with(&from))
            .cloned()
            .collect()
    }

    /// Known combination keys whose labels satisfy `keep`, ascending by name.
    pub(crate) fn combos(&self, keep: impl Fn(&Combo) -> bool) -> Vec<String> {
        let Ok(known) = self.known.lock() else {
            return Vec::new();
        };
        let from = combo_prefix();
        known
            .range(from.clone()..)
            .take_while(|k| k.starts_with(&from))
            .filter(|k| parse_combo(k).is_some_and(|c| keep(&c)))
            .cloned()
            .collect()
    }

    /// Remembers index key names; false when some did not fit (the book is bounded).
    pub(crate) fn learn<'a>(&self, keys: impl IntoIterator<Item = &'a String>) -> bool {
        let Ok(mut known) = self.known.lock() else {
            return false;
        };
        for k in keys {
            if k.starts_with(PREFIX) && !known.contains(k) {
                if known.len() >= MAX_KNOWN {
                    return false;
                }
                known.insert(k.clone());
            }
        }
        true
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
        let combo = combo_key(&u, Protocol::Http, Some("eu"), None);
        assert_eq!(combo, "pp:{activity}:v2:avail:vendor-a|http|eu|");
        assert_eq!(
            parse_combo(&combo),
            Some(Combo {
                upstream: "vendor-a".into(),
                protocol: "http".into(),
                region: "eu".into(),
                carrier: String::new(),
            })
        );
        assert_eq!(parse_combo(&owned_key(&u)), None);
        assert_eq!(parse_combo(&format!("{combo}|x")), None);
        for k in [
            combo,
            owned_key(&u),
            op_key(&["a"]),
            idem_key("c", "secret-key"),
        ] {
            assert!(k.starts_with("pp:{activity}:v2:"), "{k}");
        }
        assert!(!idem_key("c", "secret-key").contains("secret"));
        let ck = CallKeys::new(None, None);
        assert_eq!(ck.as_slice().len(), 18);
        assert!(ck.as_slice().iter().all(|k| k.starts_with(PREFIX)));
    }
}
