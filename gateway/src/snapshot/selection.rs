//! Selection by username parameters within one routing (`country-us-city-new_york`):
//! for every combination of the dimensions the routing's selectors name, the candidates
//! holding each combination of values — their positions in the routing's candidate
//! list (four bytes a member; a proxy is a member of up to 2^d − 1 sets), all sets in
//! one array of exact size built when the snapshot is compiled, each with its own
//! cursor. A request finds its array through one flat
//! open-addressing table and picks within it exactly as within the routing's whole
//! candidate list. A combination no proxy holds is an error ([`Narrowing::NoMatch`]),
//! never a silent fallback to the whole routing.
//!
//! A selection's key is a sequence of 64-bit words: the dimension mask, then for each
//! value (in [`Dimension::ALL`] order) its length and its bytes — decoded, ASCII
//! lower-cased — eight to a word, the last zero-padded. The table holds each key's hash;
//! the keys themselves lie in one array. A request computes its key's words straight
//! from the username's values (a value without `%` a word at a time, case folded eight
//! bytes at once; one with escapes byte by byte, decoded), hashes them, and compares
//! them with the stored key of the slot whose hash matches: no allocation, no lock, and
//! a hash collision never selects the wrong set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use proxy_pool_api::controlplane::model::{Dimension, SnapshotProxy};

use super::live::Candidate;
use crate::parse::username::{decoded, values_eq};

/// The cursor that spreads picks over a set of candidates.
#[derive(Debug, Default)]
pub struct Rotation {
    cursor: AtomicUsize,
    /// The set's size when it was made, if it fits 32 bits (else 0), and `2^64 / len`
    /// rounded up, for [`Self::next`]'s remainder without a division.
    len: u32,
    reciprocal: u64,
}

impl Rotation {
    /// The rotation over `len` candidates.
    fn new(len: usize) -> Self {
        let len = u32::try_from(len).unwrap_or_default();
        Self {
            cursor: AtomicUsize::new(0),
            len,
            reciprocal: (u64::MAX / u64::from(len.max(1))).wrapping_add(1),
        }
    }

    /// Where the next pick among `n` candidates starts: the cursor, advanced by one,
    /// modulo `n` (0 for none). The remainder of the cursor's low 32 bits, computed
    /// with a multiplication (Lemire's "fastmod"): after 2^32 picks in one set the
    /// rotation restarts once at the first candidate.
    ///
    /// The cursor is advanced by a plain load and store, not a read-modify-write (a
    /// locked instruction costs ~20 cycles even uncontended, a fifth of a pick). From
    /// one thread the rotation is exact. Picks racing on other threads can read the
    /// same value (they start at the same candidate; each still takes a slot only if
    /// it has room) or store over each other: a pick's start lags the exact rotation
    /// by at most the number of picks in the same set that ran between its load and
    /// its store — a few instructions, unless its thread is preempted right there.
    /// Every thread still advances the rotation by one per pick, so each candidate is
    /// tried first about as often as any other; capacity stays exact (the slot's
    /// compare-and-swap decides).
    #[inline]
    fn next(&self, n: usize) -> usize {
        let at = self.cursor.load(Ordering::Relaxed);
        self.cursor.store(at.wrapping_add(1), Ordering::Relaxed);
        if self.len != 0 && n == self.len as usize {
            let low = self.reciprocal.wrapping_mul(u64::from(at as u32));
            ((u128::from(low) * u128::from(self.len)) >> 64) as usize
        } else {
            at.checked_rem(n).unwrap_or_default()
        }
    }
}

/// A routing's candidates by ascending proxy index, with the cursor that spreads
/// picks over them.
#[derive(Debug, Default)]
pub struct CandidateSet {
    /// The candidates, by ascending proxy index.
    pub candidates: Vec<Candidate>,
    rotation: Rotation,
}

impl CandidateSet {
    /// A set of `candidates` (sorted by proxy index).
    pub fn new(candidates: Vec<Candidate>) -> Self {
        Self {
            rotation: Rotation::new(candidates.len()),
            candidates,
        }
    }

    /// All of them, to pick among.
    pub fn view(&self) -> Candidates<'_> {
        Candidates {
            all: &self.candidates,
            members: None,
            rotation: &self.rotation,
        }
    }
}

/// The candidates one pick chooses among: a routing's whole list, or a selection
/// within it (positions in that list, four bytes a member instead of a copy of the
/// candidate), with the set's rotation.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    all: &'a [Candidate],
    /// Positions in `all`, ascending; `None`: all of them.
    members: Option<&'a [u32]>,
    rotation: &'a Rotation,
}

impl<'a> Candidates<'a> {
    /// How many.
    #[inline]
    pub fn len(&self) -> usize {
        self.members.map_or(self.all.len(), <[u32]>::len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th (below [`Self::len`]).
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a Candidate> {
        match self.members {
            None => self.all.get(i),
            Some(members) => members.get(i).and_then(|&at| self.all.get(at as usize)),
        }
    }

    /// Every one, by ascending proxy index.
    pub fn iter(self) -> impl Iterator<Item = &'a Candidate> {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    /// Where the next pick starts ([`Rotation::next`]).
    #[inline]
    pub fn next_start(&self) -> usize {
        self.rotation.next(self.len())
    }

    /// The candidate for proxy `idx`, if it is one (binary search).
    pub fn candidate(&self, idx: u32) -> Option<&'a Candidate> {
        let at = match self.members {
            None => self.all.binary_search_by_key(&idx, |c| c.idx).ok()?,
            Some(members) => {
                let i = members
                    .binary_search_by_key(&idx, |&at| {
                        self.all.get(at as usize).map_or(u32::MAX, |c| c.idx)
                    })
                    .ok()?;
                *members.get(i)? as usize
            }
        };
        self.all.get(at)
    }

    /// Whether `self` and `other` are the same set (of the same snapshot).
    pub fn is(&self, other: &Candidates<'_>) -> bool {
        std::ptr::eq(self.rotation, other.rotation)
    }
}

/// Where a request's selection parameters lead.
#[derive(Debug)]
pub enum Narrowing<'a> {
    /// No selection parameter: the routing's whole candidate list.
    All,
    /// The candidates holding the requested values, and the key that finds them again
    /// in a later snapshot (retries).
    Set(Candidates<'a>, SelectionKey),
    /// Two parameters name one dimension with different values.
    Conflict(Dimension),
    /// No candidate holds the requested values.
    NoMatch,
}

/// A request's selection (dimension mask and key hash), kept across retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectionKey {
    mask: u8,
    hash: u64,
}

/// A routing's candidates and the selections within them.
#[derive(Debug)]
pub struct Selection {
    /// The routing's candidates.
    all: CandidateSet,
    /// Every set's members (positions in `all`), one set after another.
    members: Box<[u32]>,
    /// The selector parameters (lower-cased) and their dimension's index into `dims`.
    params: Vec<Param>,
    /// The distinct dimensions, in [`Dimension::ALL`] order.
    dims: Vec<Dimension>,
    /// Open addressing, linear probing, a power of two long and at most half full (empty
    /// when the routing has no selection set).
    table: Box<[Slot]>,
    /// The sets, each with its key's place in `keys`.
    entries: Box<[Entry]>,
    /// Every set's key words, one after another.
    keys: Box<[u64]>,
    /// The most words a stored key has.
    longest: usize,
    /// The bits of a key's hash that are kept: all of them, except in tests that force
    /// collisions.
    hash_bits: u64,
}

impl Default for Selection {
    fn default() -> Self {
        Self {
            all: CandidateSet::default(),
            members: Box::default(),
            params: Vec::new(),
            dims: Vec::new(),
            table: Box::default(),
            entries: Box::default(),
            keys: Box::default(),
            longest: 0,
            hash_bits: u64::MAX,
        }
    }
}

#[derive(Debug)]
struct Param {
    /// Lower-cased.
    key: Box<str>,
    /// `key` as one [`short_word`] when it is 1 to 8 bytes long (else 0, unused).
    word: u64,
    /// Index into `dims`.
    slot: u8,
}

/// One slot of the table.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The key's hash.
    hash: u64,
    /// Index into `entries` plus one; 0: empty.
    entry: u32,
}

/// One selection set, on a cache line of its own (its cursor is written by every pick
/// in it; sets picked from on other cores must not share the line).
#[derive(Debug)]
#[repr(align(64))]
struct Entry {
    /// Where its key starts in `keys`.
    key: u32,
    /// How many words its key has.
    words: u32,
    /// Where its members start in `members`, and how many.
    first: u32,
    len: u32,
    rotation: Rotation,
}

/// Most dimensions a routing selects by.
const DIMS: usize = Dimension::ALL.len();

impl Selection {
    /// A routing's `candidates` (by ascending proxy index) and the selections
    /// `selectors` define over them (`proxies` holds their labels, by candidate index).
    pub fn build(
        selectors: &[proxy_pool_api::controlplane::model::Selector],
        candidates: Vec<Candidate>,
        proxies: &[SnapshotProxy],
    ) -> Self {
        Self::build_hashing(selectors, candidates, proxies, u64::MAX)
    }

    /// [`Self::build`], keeping only `hash_bits` of every key's hash (tests force
    /// collisions with few bits).
    fn build_hashing(
        selectors: &[proxy_pool_api::controlplane::model::Selector],
        candidates: Vec<Candidate>,
        proxies: &[SnapshotProxy],
        hash_bits: u64,
    ) -> Self {
        let mut dims: Vec<Dimension> = selectors.iter().map(|s| s.dimension).collect();
        dims.sort();
        dims.dedup();
        dims.truncate(DIMS);
        let slot = |d: Dimension| dims.iter().position(|x| *x == d).unwrap_or_default() as u8;
        let params = selectors
            .iter()
            .map(|s| {
                let key = s.param.to_ascii_lowercase();
                Param {
                    word: short_word(key.as_bytes()).unwrap_or_default(),
                    key: key.into_boxed_str(),
                    slot: slot(s.dimension),
                }
            })
            .collect();
        // Each set's key (in `keys`) and size, in the order first met; and the set of
        // every (candidate, combination) in candidate order (`NONE`: a value missing),
        // so that the members can then be laid out with exact sizes, in one array.
        const NONE: u32 = u32::MAX;
        let combinations = (1usize << dims.len()) - 1;
        let mut keys: Vec<u64> = Vec::new();
        let mut sets: Vec<(usize, usize, u32)> = Vec::new();
        let mut index: HashMap<Box<[u64]>, u32> = HashMap::new();
        let mut assigned: Vec<u32> = Vec::new();
        if combinations > 0 {
            assigned.reserve_exact(candidates.len() * combinations);
        }
        let mut key: Vec<u64> = Vec::new();
        for c in &candidates {
            let Some(p) = proxies.get(c.idx as usize) else {
                assigned.extend(std::iter::repeat_n(NONE, combinations));
                continue;
            };
            // Labels as they are: their key words fold case (no allocation per proxy).
            let mut values: [Option<&str>; DIMS] = [None; DIMS];
            for (v, d) in values.iter_mut().zip(&dims) {
                *v = value_of(p, *d);
            }
            for mask in 1..(1u8 << dims.len()) {
                key.clear();
                key.push(u64::from(mask));
                let complete = values.iter().enumerate().all(|(i, v)| {
                    if mask & (1 << i) == 0 {
                        return true;
                    }
                    v.is_some_and(|v| {
                        slice_words(v.as_bytes(), &mut |w| {
                            key.push(w);
                            true
                        })
                    })
                });
                let set = if !complete {
                    NONE
                } else if let Some(&i) = index.get(key.as_slice()) {
                    i
                } else {
                    // Fewer than 2^32 - 1 sets: always (each is one of at most 2^32
                    // candidates' combinations); past that, left out.
                    match u32::try_from(sets.len()) {
                        Ok(i) if i != NONE => {
                            index.insert(key.as_slice().into(), i);
                            sets.push((keys.len(), key.len(), 0));
                            keys.extend_from_slice(&key);
                            i
                        }
                        _ => NONE,
                    }
                };
                if let Some((_, _, size)) = sets.get_mut(set as usize) {
                    *size += 1;
                }
                assigned.push(set);
            }
        }
        drop(index);
        // Members: each set's positions in `candidates`, ascending, sets one after
        // another in the order first met.
        let mut next: Vec<usize> = Vec::with_capacity(sets.len());
        let mut total = 0usize;
        for (_, _, size) in &sets {
            next.push(total);
            total += *size as usize;
        }
        let mut members = vec![0u32; total];
        if combinations > 0 {
            for (at, sets_of) in assigned.chunks_exact(combinations).enumerate() {
                let Ok(at) = u32::try_from(at) else { break };
                for &set in sets_of {
                    if let Some(next) = next.get_mut(set as usize) {
                        if let Some(m) = members.get_mut(*next) {
                            *m = at;
                        }
                        *next += 1;
                    }
                }
            }
        }
        drop(assigned);
        let mut table = vec![Slot::default(); (sets.len() * 2).next_power_of_two()];
        if sets.is_empty() {
            table.clear();
        }
        let mut entries = Vec::with_capacity(sets.len());
        let mut longest = 0;
        let mut first = 0usize;
        for (start, words, size) in sets {
            // More than 2^32 key words or members (tens of gigabytes) cannot be built; a
            // set past that is left out rather than indexed wrongly.
            let (Ok(entry), Ok(key), Ok(words), Ok(at)) = (
                u32::try_from(entries.len() + 1),
                u32::try_from(start),
                u32::try_from(words),
                u32::try_from(first),
            ) else {
                break;
            };
            first += size as usize;
            let hash = keys
                .get(start..start + words as usize)
                .map_or(0, |k| hash_words(k.iter().copied()))
                & hash_bits;
            let last = table.len() - 1;
            let mut i = hash as usize & last;
            while table.get(i).is_some_and(|s| s.entry != 0) {
                i = (i + 1) & last;
            }
            if let Some(slot) = table.get_mut(i) {
                *slot = Slot { hash, entry };
            }
            longest = longest.max(words as usize);
            entries.push(Entry {
                key,
                words,
                first: at,
                len: size,
                rotation: Rotation::new(size as usize),
            });
        }
        Self {
            all: CandidateSet::new(candidates),
            members: members.into_boxed_slice(),
            params,
            dims,
            table: table.into_boxed_slice(),
            entries: entries.into_boxed_slice(),
            keys: keys.into_boxed_slice(),
            longest,
            hash_bits,
        }
    }

    /// The routing's candidates.
    pub fn all(&self) -> &CandidateSet {
        &self.all
    }

    /// The candidates of set `e`.
    fn view<'a>(&'a self, e: &'a Entry) -> Candidates<'a> {
        let first = e.first as usize;
        Candidates {
            all: &self.all.candidates,
            members: Some(
                self.members
                    .get(first..first + e.len as usize)
                    .unwrap_or_default(),
            ),
            rotation: &e.rotation,
        }
    }

    /// The candidates a request's parameters select (`params` as the username carries
    /// them: keys in any case, values with percent escapes).
    pub fn narrow(&self, params: &[(&str, &str)]) -> Narrowing<'_> {
        let mut values: [&str; DIMS] = [""; DIMS];
        let mut mask = 0u8;
        for &(key, value) in params {
            let Some(slot) = self.slot(key) else {
                continue;
            };
            let bit = 1u8 << slot;
            if mask & bit == 0 {
                values[slot] = value;
                mask |= bit;
            } else if !values_eq(values[slot], value) {
                return Narrowing::Conflict(self.dims[slot]);
            }
        }
        if mask == 0 {
            return Narrowing::All;
        }
        // The key's words on the stack, then hashed and compared with the stored key as
        // a slice; a key too long for the buffer (values of more than about 100 bytes
        // together) is answered at once when no stored key is that long, else matched
        // word by word as it is made.
        let mut key = KeyBuf::default();
        let (hash, found) = if request_words(mask, &values, &mut |w| key.push(w)) {
            let key = key.words();
            let hash = hash_words(key.iter().copied()) & self.hash_bits;
            (hash, self.probe(hash).find(|e| same(self.key(e), key)))
        } else if self.longest <= KEY_BUF {
            return Narrowing::NoMatch;
        } else {
            self.find_long(mask, &values)
        };
        match found {
            Some(e) => Narrowing::Set(self.view(e), SelectionKey { mask, hash }),
            None => Narrowing::NoMatch,
        }
    }

    /// [`Self::narrow`]'s search for a key longer than [`KEY_BUF`] words: hashed, then
    /// compared, word by word as it is made.
    #[cold]
    fn find_long(&self, mask: u8, values: &[&str; DIMS]) -> (u64, Option<&Entry>) {
        let mut h = KeyHash::default();
        request_words(mask, values, &mut |w| {
            h.push(w);
            true
        });
        let hash = h.finish() & self.hash_bits;
        let found = self.probe(hash).find(|e| {
            let mut stored = self.key(e).iter();
            request_words(mask, values, &mut |w| stored.next() == Some(&w))
                && stored.next().is_none()
        });
        (hash, found)
    }

    /// The index into `dims` of the selector parameter `key` (any case), if it is one.
    #[inline]
    fn slot(&self, key: &str) -> Option<usize> {
        let found = match short_word(key.as_bytes()) {
            Some(word) => {
                let word = lower8(word);
                self.params
                    .iter()
                    .find(|p| p.word == word && p.key.len() == key.len())
            }
            None => self.params.iter().find(|p| p.key.eq_ignore_ascii_case(key)),
        };
        found.map(|p| usize::from(p.slot))
    }

    /// The entries whose key hashes to `hash`, in probe order.
    fn probe(&self, hash: u64) -> impl Iterator<Item = &Entry> + '_ {
        let last = self.table.len().wrapping_sub(1);
        let start = hash as usize & last;
        (0..self.table.len())
            .map(move |n| self.table.get((start + n) & last))
            .map_while(|slot| slot.filter(|s| s.entry != 0))
            .filter(move |s| s.hash == hash)
            .filter_map(|s| self.entries.get(s.entry as usize - 1))
    }

    /// The words of `e`'s key.
    #[inline]
    fn key(&self, e: &Entry) -> &[u64] {
        let start = e.key as usize;
        self.keys
            .get(start..start + e.words as usize)
            .unwrap_or_default()
    }

    /// The set `key` found in an earlier snapshot, in this one (a retry). `None` also
    /// when two sets of the key's shape share its hash here (never seen with 64 bits;
    /// the key keeps no values to tell them apart).
    pub fn by_key(&self, key: SelectionKey) -> Option<Candidates<'_>> {
        let mut same = self
            .probe(key.hash)
            .filter(|e| self.key(e).first() == Some(&u64::from(key.mask)));
        match (same.next(), same.next()) {
            (Some(e), None) => Some(self.view(e)),
            _ => None,
        }
    }

    /// How many selection sets this routing holds (for tests and sizing).
    pub fn sets(&self) -> usize {
        self.entries.len()
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

/// Calls `f` with each word of the key a request's `values` (those in `mask`, raw as the
/// username holds them) make; stops and answers `false` as soon as `f` does.
#[inline]
fn request_words(mask: u8, values: &[&str; DIMS], f: &mut impl FnMut(u64) -> bool) -> bool {
    if !f(u64::from(mask)) {
        return false;
    }
    for (i, v) in values.iter().enumerate() {
        if mask & (1 << i) == 0 {
            continue;
        }
        let more = if has_percent(v.as_bytes()) {
            decoded_words(v, f)
        } else {
            slice_words(v.as_bytes(), f)
        };
        if !more {
            return false;
        }
    }
    true
}

/// The words of one value given as bytes (a label, or a username value without
/// escapes): its length, then its bytes ASCII lower-cased, eight to a word.
#[inline]
fn slice_words(bytes: &[u8], f: &mut impl FnMut(u64) -> bool) -> bool {
    if !f(bytes.len() as u64) {
        return false;
    }
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if !f(lower8(u64::from_le_bytes(word))) {
            return false;
        }
    }
    match short_word(chunks.remainder()) {
        Some(tail) => f(lower8(tail)),
        None => true,
    }
}

/// The words of a username value holding `%`: as [`slice_words`] on its decoded bytes.
#[cold]
fn decoded_words(raw: &str, f: &mut impl FnMut(u64) -> bool) -> bool {
    if !f(decoded(raw).count() as u64) {
        return false;
    }
    let (mut word, mut filled) = ([0u8; 8], 0);
    for b in decoded(raw) {
        if let Some(slot) = word.get_mut(filled) {
            *slot = b;
        }
        filled += 1;
        if filled == 8 {
            if !f(lower8(u64::from_le_bytes(word))) {
                return false;
            }
            filled = 0;
        }
    }
    match short_word(word.get(..filled).unwrap_or_default()) {
        Some(tail) => f(lower8(tail)),
        None => true,
    }
}

/// One to eight bytes as one word, without copying them byte by byte: overlapping loads
/// from both ends (bytes may appear twice; with the length known, the word still tells
/// any two byte strings of that length apart). `None` for none or more than eight.
#[inline]
fn short_word(b: &[u8]) -> Option<u64> {
    let n = b.len();
    let word = match n {
        0 | 9.. => return None,
        8 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        }
        4..=7 => {
            let (mut lo, mut hi) = ([0u8; 4], [0u8; 4]);
            lo.copy_from_slice(b.get(..4)?);
            hi.copy_from_slice(b.get(n - 4..)?);
            u64::from(u32::from_le_bytes(lo)) | u64::from(u32::from_le_bytes(hi)) << 32
        }
        _ => {
            let at = |i: usize| u64::from(b.get(i).copied().unwrap_or_default());
            at(0) | at(n / 2) << 8 | at(n - 1) << 16
        }
    };
    Some(word)
}

/// Whether `b` holds a `%` (eight bytes at a time).
#[inline]
fn has_percent(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let has = |w: u64| {
        let x = w ^ (ONES * u64::from(b'%'));
        x.wrapping_sub(ONES) & !x & (ONES << 7) != 0
    };
    let mut chunks = b.chunks_exact(8);
    chunks.any(|c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        has(u64::from_le_bytes(w))
    }) || short_word(chunks.remainder()).is_some_and(has)
}

/// The most words [`KeyBuf`] holds: values of up to ~80 bytes in all (longer ones are
/// matched without it).
const KEY_BUF: usize = 16;

/// A request's key words, on the stack.
struct KeyBuf {
    words: [u64; KEY_BUF],
    len: usize,
}

impl Default for KeyBuf {
    fn default() -> Self {
        Self {
            words: [0; KEY_BUF],
            len: 0,
        }
    }
}

impl KeyBuf {
    /// Appends `w`; `false` when full.
    #[inline]
    fn push(&mut self, w: u64) -> bool {
        match self.words.get_mut(self.len) {
            Some(slot) => {
                *slot = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    fn words(&self) -> &[u64] {
        self.words.get(..self.len).unwrap_or_default()
    }
}

/// Whether two keys are equal (inline: a key is a few words, too short for `memcmp`).
#[inline]
fn same(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The hash of a key's words. Within one process only (a [`SelectionKey`] is never
/// stored or sent), so it may change between versions.
fn hash_words(words: impl Iterator<Item = u64>) -> u64 {
    words
        .fold(KeyHash::default(), |mut h, w| {
            h.push(w);
            h
        })
        .finish()
}

/// The key hash, fed a word at a time: one folded multiply per pair of words (the
/// 16-byte step of foldhash).
#[derive(Debug, Clone, Copy)]
struct KeyHash {
    h: u64,
    pending: Option<u64>,
}

impl Default for KeyHash {
    fn default() -> Self {
        Self {
            h: 0x243F_6A88_85A3_08D3,
            pending: None,
        }
    }
}

impl KeyHash {
    const PAIR: u64 = 0x1319_8A2E_0370_7344;
    const LAST: u64 = 0xA409_3822_299F_31D0;

    #[inline]
    fn push(&mut self, w: u64) {
        match self.pending.take() {
            Some(a) => self.h = folded_mul(a ^ self.h, w ^ Self::PAIR),
            None => self.pending = Some(w),
        }
    }

    #[inline]
    fn finish(self) -> u64 {
        match self.pending {
            Some(a) => folded_mul(a ^ self.h, Self::LAST),
            None => self.h,
        }
    }
}

/// The 128-bit product of `a` and `b`, its halves xored (foldhash's and ahash's mixing
/// step).
#[inline]
fn folded_mul(a: u64, b: u64) -> u64 {
    let x = u128::from(a) * u128::from(b);
    (x as u64) ^ ((x >> 64) as u64)
}

/// `u8::to_ascii_lowercase` on each of eight bytes at once (bytes at or above 0x80 and
/// all but `A`–`Z` unchanged).
#[inline]
fn lower8(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low7 = x & !HIGH;
    // The high bit of each byte: its low seven bits are at least `A` / more than `Z`.
    let ge_a = low7 + ONES * (0x80 - u64::from(b'A'));
    let gt_z = low7 + ONES * (0x80 - u64::from(b'Z') - 1);
    let upper = ge_a & !gt_z & !x & HIGH;
    x | (upper >> 2)
}

#[cfg(test)]
mod tests;
