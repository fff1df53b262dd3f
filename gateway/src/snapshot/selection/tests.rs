use std::sync::Arc;

use proxy_pool_api::controlplane::model::Selector;

use super::*;
use crate::capacity::ProxyState;
use crate::parse::username::value_eq;
use crate::snapshot::fixture;

/// A xorshift stream: reproducible cases without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn eight_bytes_fold_like_to_ascii_lowercase() {
    let fillers = [
        0x00u8, b'@', b'A', b'Z', b'[', b'`', b'z', 0x7F, 0x80, 0xC1, 0xDA, 0xFF,
    ];
    for b in 0..=255u8 {
        for pos in 0..8 {
            for f in fillers {
                let mut bytes = [f; 8];
                bytes[pos] = b;
                let want = bytes.map(|x| x.to_ascii_lowercase());
                assert_eq!(
                    lower8(u64::from_le_bytes(bytes)).to_le_bytes(),
                    want,
                    "{bytes:?}"
                );
            }
        }
    }
}

/// `label` as a client may write it: each byte in either case, or escaped (`%XX`,
/// either case of hex digit); bytes outside the username's word characters always
/// escaped.
/// Candidate `idx` (proxy `p<idx>`), usable for ever, one slot.
fn candidate(idx: u32) -> Candidate {
    Candidate {
        idx,
        usable_until_ms: u64::MAX,
        state: Arc::new(ProxyState::new(
            crate::snapshot::ProxyId::from(format!("p{idx}").as_str()),
            1,
            1,
        )),
    }
}

fn spelled(label: &str, rng: &mut Rng) -> String {
    let mut out = String::new();
    for b in label.bytes() {
        let word = b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'@';
        match rng.below(4) {
            0 | 1 if word => out.push(char::from(b)),
            2 if word => out.push(char::from(b.to_ascii_uppercase())),
            _ if rng.below(2) == 0 => out.push_str(&format!("%{b:02X}")),
            _ => out.push_str(&format!("%{b:02x}")),
        }
    }
    out
}

/// The key words of `values` (those in `mask`) as a request spells them.
fn request_key(mask: u8, values: &[&str]) -> Vec<u64> {
    let mut all = [""; DIMS];
    all[..values.len()].copy_from_slice(values);
    let mut words = Vec::new();
    assert!(request_words(mask, &all, &mut |w| {
        words.push(w);
        true
    }));
    words
}

/// The key words of labels (lower-cased, in `mask`), as the build makes them.
fn label_key(mask: u8, labels: &[&str]) -> Vec<u64> {
    let mut words = vec![u64::from(mask)];
    for (i, l) in labels.iter().enumerate() {
        if mask & (1 << i) != 0 {
            slice_words(l.to_ascii_lowercase().as_bytes(), &mut |w| {
                words.push(w);
                true
            });
        }
    }
    words
}

#[test]
fn a_raw_value_makes_the_key_of_its_decoded_lower_cased_label() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let alphabet: Vec<char> = "abcxyzABCXYZ0129_.@-:%ü".chars().collect();
    for case in 0..5_000 {
        let len = rng.below(20);
        let label: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        let raw = spelled(&label, &mut rng);
        assert!(value_eq(&raw, &label), "{raw} names {label}");
        let mask = 1 << rng.below(DIMS);
        let labels = [label.as_str(); DIMS];
        let want = label_key(mask, &labels);
        assert_eq!(
            request_key(mask, &[raw.as_str(); DIMS]),
            want,
            "case {case}: {raw} / {label}"
        );
        // One byte more or different: another key.
        let longer = format!("{raw}a");
        assert_ne!(request_key(mask, &[longer.as_str(); DIMS]), want);
        let mut other = label.to_ascii_lowercase().into_bytes();
        if let Some(b) = other.first_mut() {
            *b = if *b == b'q' { b'r' } else { b'q' };
            let other = String::from_utf8_lossy(&other).into_owned();
            assert_ne!(request_key(mask, &[other.as_str(); DIMS]), want);
        }
    }
}

#[test]
fn values_split_differently_make_different_keys() {
    let key = |values: &[&str]| request_key(3, values);
    assert_ne!(key(&["ab", "c"]), key(&["a", "bc"]));
    assert_ne!(key(&["abcdefgh", ""]), key(&["", "abcdefgh"]));
    assert_ne!(key(&["a", ""]), key(&["a%00", ""]));
    // A decoded length word can never pass for data: the length comes first.
    assert_ne!(key(&["%08", "x"]), key(&["", "%08x"]));
    assert_ne!(request_key(1, &["a"]), request_key(2, &["", "a"]));
}

/// What `narrow` must answer, computed directly from the labels: the candidates
/// whose labels equal every requested value (decoded, ASCII case-insensitive).
fn expected(
    selectors: &[Selector],
    proxies: &[SnapshotProxy],
    params: &[(&str, &str)],
) -> Result<Option<Vec<u32>>, Dimension> {
    let mut wanted: Vec<(Dimension, Vec<u8>)> = Vec::new();
    for (key, value) in params {
        let Some(s) = selectors.iter().find(|s| s.param.eq_ignore_ascii_case(key)) else {
            continue;
        };
        let value: Vec<u8> = decoded(value).map(|b| b.to_ascii_lowercase()).collect();
        match wanted.iter().find(|(d, _)| *d == s.dimension) {
            Some((_, seen)) if *seen != value => return Err(s.dimension),
            Some(_) => {}
            None => wanted.push((s.dimension, value)),
        }
    }
    if wanted.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        (0..proxies.len() as u32)
            .filter(|&i| {
                wanted.iter().all(|(d, v)| {
                    value_of(&proxies[i as usize], *d)
                        .is_some_and(|l| l.to_ascii_lowercase().as_bytes() == v.as_slice())
                })
            })
            .collect(),
    ))
}

struct Case {
    selectors: Vec<Selector>,
    proxies: Vec<SnapshotProxy>,
    candidates: Vec<Candidate>,
}

const REGIONS: [&str; 6] = ["us", "US-East", "de", "a:b", "a%41", "Los_Angeles_County"];
const CITIES: [&str; 5] = ["new_york", "Boston", "x.y", "berlin", "München"];
const CARRIERS: [&str; 3] = ["t@mobile", "vz", ""];

fn case() -> Case {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let proxies: Vec<SnapshotProxy> = (0..80)
        .map(|i| {
            let mut p = fixture::proxy(&format!("p{i}"), 1);
            p.labels.region = Some(REGIONS[rng.below(REGIONS.len())].into());
            p.labels.city = (rng.below(5) > 0).then(|| CITIES[rng.below(CITIES.len())].into());
            p.labels.carrier = Some(CARRIERS[rng.below(CARRIERS.len())].into());
            p.upstream = ["u1", "U2"][rng.below(2)].into();
            p
        })
        .collect();
    let candidates: Vec<Candidate> = (0..proxies.len() as u32)
        // Not every proxy is a candidate of the routing.
        .filter(|idx| idx % 7 != 3)
        .map(candidate)
        .collect();
    let mut selectors = Selector::defaults();
    selectors.push(Selector::new("Vendor", Dimension::Upstream));
    Case {
        selectors,
        proxies,
        candidates,
    }
}

/// Random requests against `selection`, each answer checked against the labels.
/// `exact_retry`: `by_key` must find every set again (otherwise it may refuse, when
/// forced collisions leave it no way to tell sets apart, but never find another).
fn answers_as_the_labels_say(c: &Case, selection: &Selection, exact_retry: bool) {
    let candidates: Vec<u32> = c.candidates.iter().map(|c| c.idx).collect();
    let keys = [
        "country", "REGION", "City", "carrier", "vendor", "session", "x",
    ];
    let values: Vec<&str> = REGIONS
        .iter()
        .chain(&CITIES)
        .chain(&CARRIERS)
        .chain(&["u1", "u2", "paris", "US", "new_yorkk", "los_angeles_countz"])
        .copied()
        .collect();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut sets_found = 0;
    for case in 0..4_000 {
        let mut params: Vec<(&str, String)> = Vec::new();
        for _ in 0..rng.below(5) {
            let key = keys[rng.below(keys.len())];
            let value = spelled(values[rng.below(values.len())], &mut rng);
            params.push((key, value));
        }
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let got = match selection.narrow(&params) {
            Narrowing::All => Ok(None),
            Narrowing::Conflict(d) => Err(d),
            Narrowing::NoMatch => Ok(Some(Vec::new())),
            Narrowing::Set(set, key) => {
                sets_found += 1;
                match selection.by_key(key) {
                    Some(found) => assert!(found.is(&set), "case {case}: another set"),
                    None => assert!(!exact_retry, "case {case}: the key finds the set"),
                }
                assert!(!set.is_empty());
                Ok(Some(set.iter().map(|c| c.idx).collect()))
            }
        };
        // Only the routing's candidates can be selected.
        let want = expected(&c.selectors, &c.proxies, &params)
            .map(|set| set.map(|s| s.into_iter().filter(|i| candidates.contains(i)).collect()));
        assert_eq!(got, want, "case {case}: {params:?}");
    }
    assert!(sets_found > 250, "{sets_found} requests found a set");
}

#[test]
fn narrowing_answers_as_the_labels_say() {
    let c = case();
    let selection = Selection::build(&c.selectors, c.candidates.clone(), &c.proxies);
    answers_as_the_labels_say(&c, &selection, true);
}

/// Every key hashing alike (or into a handful of values): the stored key, not the
/// hash, decides which set a request gets.
#[test]
fn hash_collisions_never_select_another_set() {
    let c = case();
    for bits in [0, 1, 0xF0] {
        let selection =
            Selection::build_hashing(&c.selectors, c.candidates.clone(), &c.proxies, bits);
        assert!(selection.sets() > 100, "{}", selection.sets());
        answers_as_the_labels_say(&c, &selection, false);
    }
}

#[test]
fn a_retry_key_shared_by_two_sets_finds_neither() {
    let c = case();
    let selection = Selection::build_hashing(&c.selectors, c.candidates.clone(), &c.proxies, 0);
    let Narrowing::Set(_, key) = selection.narrow(&[("country", "de")]) else {
        panic!("de is a region");
    };
    assert_eq!(selection.by_key(key).map(|s| s.len()), None);
    // With the whole hash, the same request's key finds its set again.
    let selection = Selection::build(&c.selectors, c.candidates.clone(), &c.proxies);
    let Narrowing::Set(set, key) = selection.narrow(&[("country", "de")]) else {
        panic!("de is a region");
    };
    assert!(selection.by_key(key).is_some_and(|s| s.is(&set)));
}

#[test]
fn the_table_is_at_most_half_full_and_sets_keep_candidate_order() {
    let c = case();
    let selection = Selection::build(&c.selectors, c.candidates.clone(), &c.proxies);
    assert!(selection.table.len().is_power_of_two());
    assert!(selection.sets() * 2 <= selection.table.len());
    assert_eq!(
        selection.table.iter().filter(|s| s.entry != 0).count(),
        selection.sets()
    );
    for e in selection.entries.iter() {
        let idx: Vec<u32> = selection.view(e).iter().map(|c| c.idx).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "{idx:?}");
        assert_eq!(std::mem::align_of_val(e), 64);
    }
}

#[test]
fn no_selectors_or_no_candidates_select_nothing() {
    let c = case();
    let none = Selection::build(&[], c.candidates.clone(), &c.proxies);
    assert_eq!(none.sets(), 0);
    assert!(matches!(none.narrow(&[("country", "us")]), Narrowing::All));
    let empty = Selection::build(&c.selectors, Vec::new(), &c.proxies);
    assert_eq!(empty.sets(), 0);
    assert!(matches!(
        empty.narrow(&[("country", "us")]),
        Narrowing::NoMatch
    ));
    assert!(matches!(empty.narrow(&[("session", "s")]), Narrowing::All));
    assert!(empty.by_key(SelectionKey { mask: 1, hash: 0 }).is_none());
}

/// Keys longer than the stack buffer (labels no username could spell, but `narrow`
/// takes any parameters) are matched word by word.
#[test]
fn keys_longer_than_the_buffer_still_match_exactly() {
    let long = "L".repeat(KEY_BUF * 8 + 5);
    let longer = format!("{long}x");
    let mut proxies: Vec<SnapshotProxy> = (0..3)
        .map(|i| fixture::proxy(&format!("p{i}"), 1))
        .collect();
    proxies[0].labels.city = Some(long.clone());
    proxies[1].labels.city = Some(longer.clone());
    proxies[2].labels.city = Some("short".into());
    let candidates: Vec<Candidate> = (0..3).map(candidate).collect();
    let selectors = Selector::defaults();
    let idx = |n: Narrowing<'_>| match n {
        Narrowing::Set(set, _) => set.iter().map(|c| c.idx).collect(),
        Narrowing::NoMatch => Vec::new(),
        other => panic!("{other:?}"),
    };
    for bits in [u64::MAX, 0] {
        let selection = Selection::build_hashing(&selectors, candidates.clone(), &proxies, bits);
        assert!(selection.longest > KEY_BUF);
        let lower = long.to_ascii_lowercase();
        assert_eq!(idx(selection.narrow(&[("city", &lower)])), [0]);
        assert_eq!(idx(selection.narrow(&[("CITY", &long)])), [0]);
        assert_eq!(idx(selection.narrow(&[("city", &longer)])), [1]);
        assert_eq!(
            idx(selection.narrow(&[("city", &format!("{long}%78"))])),
            [1]
        );
        assert_eq!(
            idx(selection.narrow(&[("city", &format!("{long}y"))])),
            [0u32; 0]
        );
        assert_eq!(idx(selection.narrow(&[("city", "short")])), [2]);
    }
    // Without such labels, a request too long for the buffer matches nothing.
    proxies[0].labels.city = Some("a".into());
    proxies[1].labels.city = Some("b".into());
    let selection = Selection::build(&selectors, candidates.clone(), &proxies);
    assert!(selection.longest <= KEY_BUF);
    assert_eq!(idx(selection.narrow(&[("city", &long)])), [0u32; 0]);
    assert_eq!(idx(selection.narrow(&[("city", "A")])), [0]);
}

#[test]
fn short_words_tell_strings_of_one_length_apart() {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    for n in 1..=8 {
        let mut seen: HashMap<u64, Vec<u8>> = HashMap::new();
        for _ in 0..5_000 {
            let b: Vec<u8> = (0..n).map(|_| b"ab%\x00\xff"[rng.below(5)]).collect();
            let w = short_word(&b).unwrap();
            let before = seen.entry(w).or_insert_with(|| b.clone());
            assert_eq!(*before, b, "{n} bytes");
            assert_eq!(has_percent(&b), b.contains(&b'%'), "{b:?}");
        }
    }
    assert_eq!(short_word(b""), None);
    assert_eq!(short_word(&[0; 9]), None);
    assert!(has_percent(b"abcdefgh%"));
    assert!(!has_percent(b"abcdefgh_abcdefgh"));
}

#[test]
fn the_next_start_is_the_cursor_modulo_the_set_size() {
    for n in [1usize, 2, 3, 7, 16, 25_000, 100_000] {
        let set = CandidateSet::new((0..n as u32).map(candidate).collect());
        for at in [0usize, 1, n - 1, n, n + 1, 3 * n + 2, u32::MAX as usize - 1] {
            set.rotation.cursor.store(at, Ordering::Relaxed);
            assert_eq!(set.view().next_start(), at % n, "{at} % {n}");
            assert_eq!(set.rotation.cursor.load(Ordering::Relaxed), at + 1);
        }
        for at in 0..2 * n.min(1000) {
            assert!(set.view().next_start() < n, "{at}");
        }
    }
    assert_eq!(CandidateSet::new(Vec::new()).view().next_start(), 0);
    // Candidates removed after the set was made: a plain remainder, never past the end.
    let mut set = CandidateSet::new((0..3).map(candidate).collect());
    set.candidates.truncate(2);
    set.rotation.cursor.store(5, Ordering::Relaxed);
    assert_eq!(set.view().next_start(), 1);
    set.candidates.clear();
    assert_eq!(set.view().next_start(), 0);
}

#[test]
fn a_key_hashes_alike_streamed_or_from_a_slice() {
    let mut rng = Rng(0x0DDB_1A5E_5BAD_5EED);
    for len in 0..40 {
        let words: Vec<u64> = (0..len).map(|_| rng.below(usize::MAX) as u64).collect();
        let mut h = KeyHash::default();
        for w in &words {
            h.push(*w);
        }
        assert_eq!(h.finish(), hash_words(words.iter().copied()));
        let mut longer = words.clone();
        longer.push(0);
        assert_ne!(hash_words(longer.into_iter()), h.finish(), "{len}");
    }
}

/// A selection's members are positions in the routing's candidate list (four bytes
/// each, not a copy of the candidate), laid out in one array of exactly the members'
/// number, and a selection finds the same candidates through them.
#[test]
fn selection_members_are_positions_in_one_exact_array() {
    let c = case();
    let selection = Selection::build(&c.selectors, c.candidates.clone(), &c.proxies);
    let total: usize = selection.entries.iter().map(|e| e.len as usize).sum();
    assert_eq!(selection.members.len(), total);
    assert_eq!(std::mem::size_of_val(&*selection.members), 4 * total);
    let mut first = 0;
    for e in selection.entries.iter() {
        assert_eq!(e.first as usize, first, "sets one after another");
        first += e.len as usize;
        let view = selection.view(e);
        assert_eq!(view.len(), e.len as usize);
        for (i, cand) in view.iter().enumerate() {
            let at = selection.members[e.first as usize + i] as usize;
            assert!(std::ptr::eq(cand, &selection.all().candidates[at]));
            assert!(std::ptr::eq(view.candidate(cand.idx).unwrap(), cand));
        }
        assert!(view.candidate(u32::MAX).is_none());
    }
}
