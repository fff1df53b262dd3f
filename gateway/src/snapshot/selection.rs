//! Selection by username parameters within one routing (`country-us-city-new_york`):
//! for every combination of the dimensions the routing's selectors name, the candidates
//! holding each combination of values — contiguous arrays built when the snapshot is
//! compiled, each with its own cursor. A request finds its array with one hash over its
//! decoded, lower-cased values (no allocation, no lock) and picks within it exactly as
//! within the routing's whole candidate list. A combination no proxy holds is an error
//! ([`Narrowing::NoMatch`]), never a silent fallback to the whole routing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::AtomicUsize;

use proxy_pool_api::controlplane::model::{Dimension, SnapshotProxy};

use super::live::Candidate;
use crate::parse::username::{decoded, value_eq, values_eq};

/// Candidates (of a routing, or of one selection within it) by ascending proxy index,
/// with the cursor that spreads picks over them.
#[derive(Debug, Default)]
pub struct CandidateSet {
    /// The candidates, by ascending proxy index.
    pub candidates: Vec<Candidate>,
    pub(crate) cursor: AtomicUsize,
}

impl CandidateSet {
    /// A set of `candidates` (sorted by proxy index).
    pub fn new(candidates: Vec<Candidate>) -> Self {
        Self {
            candidates,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The candidate for proxy `idx`, if it is one (binary search).
    pub fn candidate(&self, idx: u32) -> Option<&Candidate> {
        self.candidates
            .binary_search_by_key(&idx, |c| c.idx)
            .ok()
            .map(|i| &self.candidates[i])
    }
}

/// Where a request's selection parameters lead.
#[derive(Debug)]
pub enum Narrowing<'a> {
    /// No selection parameter: the routing's whole candidate list.
    All,
    /// The candidates holding the requested values, and the key that finds them again
    /// in a later snapshot (retries).
    Set(&'a CandidateSet, SelectionKey),
    /// Two parameters name one dimension with different values.
    Conflict(Dimension),
    /// No candidate holds the requested values.
    NoMatch,
}

/// A request's selection (dimension mask and value hash), kept across retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectionKey {
    mask: u8,
    hash: u64,
}

/// The selections of one routing.
#[derive(Debug, Default)]
pub struct Selection {
    /// Lower-cased parameter → index into `dims`.
    params: Vec<(String, u8)>,
    /// The distinct dimensions, in [`Dimension::ALL`] order.
    dims: Vec<Dimension>,
    /// Value hash → the sets with that hash (more than one only on a collision).
    sets: HashMap<u64, Vec<Subset>, BuildHasherDefault<Prehashed>>,
}

#[derive(Debug)]
struct Subset {
    mask: u8,
    /// Lower-cased values of the dimensions in `mask`, in `dims` order.
    values: Box<[Box<str>]>,
    set: CandidateSet,
}

impl Selection {
    /// The selections `selectors` define over `candidates` (`proxies` holds their
    /// labels, by candidate index).
    pub fn build(
        selectors: &[proxy_pool_api::controlplane::model::Selector],
        candidates: &[Candidate],
        proxies: &[SnapshotProxy],
    ) -> Self {
        let mut dims: Vec<Dimension> = selectors.iter().map(|s| s.dimension).collect();
        dims.sort();
        dims.dedup();
        let slot = |d: Dimension| dims.iter().position(|x| *x == d).unwrap_or_default() as u8;
        let params = selectors
            .iter()
            .map(|s| (s.param.to_ascii_lowercase(), slot(s.dimension)))
            .collect();
        let mut sets: HashMap<u64, Vec<Subset>, BuildHasherDefault<Prehashed>> = HashMap::default();
        let mut building: HashMap<(u8, Vec<Box<str>>), Vec<Candidate>> = HashMap::new();
        for c in candidates {
            let Some(p) = proxies.get(c.idx as usize) else {
                continue;
            };
            let values: Vec<Option<Box<str>>> = dims
                .iter()
                .map(|d| value_of(p, *d).map(|v| v.to_ascii_lowercase().into_boxed_str()))
                .collect();
            for mask in 1..(1u8 << dims.len()) {
                let picked: Option<Vec<Box<str>>> = (0..dims.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| values[i].clone())
                    .collect();
                if let Some(picked) = picked {
                    building.entry((mask, picked)).or_default().push(c.clone());
                }
            }
        }
        for ((mask, values), members) in building {
            let hash = hash_values(mask, values.iter().map(|v| v.bytes()));
            sets.entry(hash).or_default().push(Subset {
                mask,
                values: values.into_boxed_slice(),
                set: CandidateSet::new(members),
            });
        }
        Self { params, dims, sets }
    }

    /// The candidates a request's parameters select (`params` as the username carries
    /// them: keys in any case, values with percent escapes).
    pub fn narrow(&self, params: &[(&str, &str)]) -> Narrowing<'_> {
        let mut values: [Option<&str>; Dimension::ALL.len()] = [None; Dimension::ALL.len()];
        let mut mask = 0u8;
        for (key, value) in params {
            let Some((_, slot)) = self
                .params
                .iter()
                .find(|(p, _)| p.eq_ignore_ascii_case(key))
            else {
                continue;
            };
            let slot = usize::from(*slot);
            match values[slot] {
                Some(seen) if !values_eq(seen, value) => {
                    return Narrowing::Conflict(self.dims[slot]);
                }
                _ => values[slot] = Some(value),
            }
            mask |= 1 << slot;
        }
        if mask == 0 {
            return Narrowing::All;
        }
        let requested = || values.iter().flatten();
        let hash = hash_values(mask, requested().map(|v| lower(decoded(v))));
        let found = self.sets.get(&hash).and_then(|subsets| {
            subsets.iter().find(|s| {
                s.mask == mask
                    && s.values.len() == requested().count()
                    && s.values
                        .iter()
                        .zip(requested())
                        .all(|(l, v)| value_eq(v, l))
            })
        });
        match found {
            Some(s) => Narrowing::Set(&s.set, SelectionKey { mask, hash }),
            None => Narrowing::NoMatch,
        }
    }

    /// The set `key` found in an earlier snapshot, in this one (a retry).
    pub fn by_key(&self, key: SelectionKey) -> Option<&CandidateSet> {
        let subsets = self.sets.get(&key.hash)?;
        // On a hash collision the first set of the same shape is taken: the earlier
        // request verified its values; two value tuples sharing a 64-bit hash and a
        // mask within one routing are not expected.
        subsets.iter().find(|s| s.mask == key.mask).map(|s| &s.set)
    }

    /// How many selection sets this routing holds (for tests and sizing).
    pub fn sets(&self) -> usize {
        self.sets.values().map(Vec::len).sum()
    }
}

/// A proxy's value in `d`, if it has one.
fn value_of(p: &SnapshotProxy, d: Dimension) -> Option<&str> {
    match d {
        Dimension::Region => p.labels.region.as_deref(),
        Dimension::City => p.labels.city.as_deref(),
        Dimension::Carrier => p.labels.carrier.as_deref(),
        Dimension::Upstream => Some(p.upstream.as_str()),
        Dimension::Protocol => Some(p.dial.protocol.as_str()),
    }
}

fn lower(bytes: impl Iterator<Item = u8>) -> impl Iterator<Item = u8> {
    bytes.map(|b| b.to_ascii_lowercase())
}

/// FNV-1a over the mask, then each value's bytes with a terminator (values are
/// lower-cased by the caller).
fn hash_values<I, B>(mask: u8, values: I) -> u64
where
    I: IntoIterator<Item = B>,
    B: IntoIterator<Item = u8>,
{
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    };
    mix(mask);
    for value in values {
        for b in value {
            mix(b);
        }
        mix(0xFF);
    }
    h
}

/// A hasher for keys that are already hashes.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
