//! Key names of the Redis key space (`docs/pool.md`, "Key space") and the call layout
//! every script shares: 21 fixed keys, two result keys, then the index keys a call may touch.
//!
//! Label values enter key names only as validated identifiers; client IDs, idempotency
//! keys and operation IDs only digested. Nothing here may ever see a password.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use crate::combo::{self, Combo};
use crate::model::{Labels, Protocol, UpstreamId};
use crate::validate::key_digest;

/// The hash-tagged prefix of every key. `v2`: the key-space version (v2 = one
/// availability ZSET per label combination). A layout change bumps it, so a new
/// version never reads keys an older one wrote (`docs/pool.md`, "Key-space versions").
pub(crate) const PREFIX: &str = "pp:{activity}:v2:";

/// Fixed keys 1..=21, in the order of `lua/prelude.lua`.
const FIXED: [&str; 21] = [
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
    "leader-fence",
    "leader-lease",
    "demands",
    "generation",
    "changes",
];

/// Up to this many known index keys, every write is given all of them (no script has
/// to ask for a key); beyond, a write is given the `owned:` keys only and a script asks
/// for the combinations it meets (one more round trip).
const PASS_ALL_UP_TO: usize = 256;

pub(crate) fn key(suffix: &str) -> String {
    format!("{PREFIX}{suffix}")
}

/// Prefix of the combination keys: `avail:` + the combination's name (`crate::combo`:
/// `<upstream>|<protocol>|<region>|<carrier>|<city>`, a label empty when the proxy has
/// none; a four-part name from before the city still parses).
fn combo_prefix() -> String {
    key("avail:")
}

/// A combination key's name without the key prefix (`crate::combo`).
pub(crate) fn combo_name(key: &str) -> &str {
    let prefix = combo_prefix();
    key.strip_prefix(prefix.as_str()).unwrap_or(key)
}

/// The availability ZSET of one label combination.
pub(crate) fn combo_key(u: &UpstreamId, p: Protocol, labels: &Labels<&str>) -> String {
    format!("{}{}", combo_prefix(), combo::name(u.as_str(), p, labels))
}

/// The labels of a combination key; `None` for any other key.
pub(crate) fn parse_combo(name: &str) -> Option<Combo<'_>> {
    combo::parse(name.strip_prefix(&combo_prefix())?)
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

/// The index key names this process knows: the combination registry as last read
/// (replaced whole at each read, so names the registry dropped are forgotten), the
/// combinations this process wrote since, and the `owned:` keys. No fixed ceiling: it
/// mirrors the registry, whose size the pool's own contents bound.
#[derive(Debug, Default)]
pub(crate) struct KeyBook {
    known: Mutex<BTreeSet<String>>,
    /// The version of the combination registry `known` is complete for ("" = none).
    combos_version: Mutex<String>,
    /// Where the next maintenance sweep of combinations starts.
    gc_cursor: Mutex<String>,
}

impl KeyBook {
    /// Takes the whole registry `all` (version `cv`) as the known combinations,
    /// forgetting every other combination name.
    pub(crate) fn replace_combos(&self, all: &[String], cv: &str) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        let prefix = combo_prefix();
        known.retain(|k| !k.starts_with(&prefix));
        known.extend(all.iter().filter(|k| k.starts_with(PREFIX)).cloned());
        drop(known);
        self.set_combos_version(cv);
    }

    /// Forgets names (combinations the registry dropped).
    pub(crate) fn forget(&self, names: &[String]) {
        if let Ok(mut known) = self.known.lock() {
            for n in names {
                known.remove(n);
            }
        }
    }

    /// Up to `n` known combinations after the sweep cursor (wrapping around once), and
    /// moves the cursor past them.
    pub(crate) fn gc_window(&self, n: usize) -> Vec<String> {
        let (Ok(known), Ok(mut cursor)) = (self.known.lock(), self.gc_cursor.lock()) else {
            return Vec::new();
        };
        let prefix = combo_prefix();
        let combos = || known.iter().filter(|k| k.starts_with(&prefix));
        let mut out: Vec<String> = combos()
            .filter(|k| k.as_str() > cursor.as_str())
            .take(n)
            .cloned()
            .collect();
        if out.len() < n {
            let more = n - out.len();
            let first = out.first().cloned();
            out.extend(
                combos()
                    .take_while(|k| first.as_ref().is_none_or(|f| *k < f))
                    .take(more)
                    .cloned(),
            );
            out.sort();
            out.dedup();
        }
        match out.last() {
            Some(last) if out.len() >= n => last.clone_into(&mut cursor),
            _ => cursor.clear(),
        }
        out
    }

    /// How many names are known.
    pub(crate) fn len(&self) -> usize {
        self.known.lock().map(|k| k.len()).unwrap_or(0)
    }
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

    /// Remembers index key names.
    pub(crate) fn learn<'a>(&self, keys: impl IntoIterator<Item = &'a String>) {
        if let Ok(mut known) = self.known.lock() {
            known.extend(keys.into_iter().filter(|k| k.starts_with(PREFIX)).cloned());
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

    /// Passes the combination keys `combos` to the call and names them in `payload`:
    /// `src`, their KEYS positions in order, and `cv`, the registry version of `book`
    /// they were read at (a script that finds another version asks again).
    pub(crate) fn pass_combos(
        &mut self,
        book: &KeyBook,
        combos: Vec<String>,
        payload: &mut serde_json::Value,
    ) {
        let src: Vec<usize> = combos.into_iter().map(|k| self.index(k)).collect();
        payload["src"] = src.into();
        payload["cv"] = book.combos_version().into();
    }

    /// Adds the index keys a write may touch without asking: every known one while
    /// the book is small, else the `owned:` keys (a script asks for the combinations).
    pub(crate) fn with_known(mut self, book: &KeyBook) -> Self {
        let keys = if book.len() <= PASS_ALL_UP_TO {
            book.snapshot()
        } else {
            book.owned_keys()
        };
        self.extend(keys);
        self
    }

    /// Adds every index key `book` knows, whatever its size.
    pub(crate) fn extend_known(&mut self, book: &KeyBook) {
        self.extend(book.snapshot());
    }

    pub(crate) fn extend(&mut self, names: impl IntoIterator<Item = String>) {
        for n in names {
            self.index(n);
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
        let combo = combo_key(
            &u,
            Protocol::Http,
            &Labels {
                region: Some("eu"),
                carrier: None,
                city: Some("paris"),
            },
        );
        assert_eq!(combo, "pp:{activity}:v2:avail:vendor-a|http|eu||paris");
        assert_eq!(
            parse_combo(&combo),
            Some(Combo {
                upstream: "vendor-a",
                protocol: "http",
                labels: Labels {
                    region: Some("eu"),
                    carrier: None,
                    city: Some("paris"),
                },
            })
        );
        // A key written before the city dimension: no city.
        let old = parse_combo("pp:{activity}:v2:avail:vendor-a|http|eu|c1").unwrap();
        assert_eq!((old.labels.carrier, old.labels.city), (Some("c1"), None));
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
        assert_eq!(ck.as_slice().len(), 23);
        assert!(ck.as_slice().iter().all(|k| k.starts_with(PREFIX)));
        // The scripts find the index keys right after these.
        let first = format!("local FIRST_INDEX = {}\n", ck.as_slice().len() + 1);
        assert!(include_str!("lua/prelude.lua").contains(&first), "{first}");
    }
}
