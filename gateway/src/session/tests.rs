use super::*;

const POLICY: StickyPolicy = StickyPolicy {
    ttl: Duration::from_secs(60),
    idle_timeout: Duration::from_secs(10),
};

#[test]
fn binding_lives_until_ttl_and_idle_timeout() {
    let table = SessionTable::new(100);
    let key = table.key("c", "r", "s1");
    let t0 = Instant::now();
    assert_eq!(table.lookup(key, t0), Lookup::Unknown);
    table.bind(key, ProxyId::from("p"), POLICY, t0);
    let t = t0 + Duration::from_secs(9);
    assert_eq!(table.lookup(key, t), Lookup::Bound(ProxyId::from("p")));
    for step in 2..=6 {
        let t = t0 + Duration::from_secs(9 * step);
        assert_eq!(
            table.lookup(key, t),
            Lookup::Bound(ProxyId::from("p")),
            "touched"
        );
    }
    assert_eq!(
        table.lookup(key, t0 + Duration::from_secs(61)),
        Lookup::Expired
    );
    assert_eq!(
        table.lookup(key, t0 + Duration::from_secs(200)),
        Lookup::Unknown
    );
    assert!(table.is_empty());
}

#[test]
fn a_client_flooding_session_ids_cannot_evict_other_clients() {
    let table = SessionTable::new(SHARDS * 32).with_client_quota(SHARDS * 4);
    let t0 = Instant::now();
    let victims: Vec<SessionKey> = (0..SHARDS * 2)
        .map(|i| table.key("victim", "r", &format!("v{i}")))
        .collect();
    for (i, k) in victims.iter().enumerate() {
        assert!(table.bind(*k, ProxyId::from(format!("p{i}").as_str()), POLICY, t0));
    }
    let mut bound = 0;
    for i in 0..100_000 {
        let k = table.key("attacker", "r", &format!("s{i}"));
        if table.bind(k, ProxyId::from("x"), POLICY, t0 + Duration::from_millis(1)) {
            bound += 1;
        }
    }
    assert!(bound <= SHARDS * 4, "the attacker got {bound} bindings");
    for (i, k) in victims.iter().enumerate() {
        assert_eq!(
            table.lookup(*k, t0 + Duration::from_secs(1)),
            Lookup::Bound(ProxyId::from(format!("p{i}").as_str())),
            "victim session {i} survived the flood"
        );
    }
    assert!(table.len() <= SHARDS * 6, "{}", table.len());
    // Quota comes back as the attacker's sessions die.
    let later = t0 + Duration::from_secs(20);
    table.sweep(later);
    let k = table.key("attacker", "r", "fresh");
    assert!(table.bind(k, ProxyId::from("y"), POLICY, later));
}

#[test]
fn keys_separate_clients_routings_and_sessions() {
    let table = SessionTable::new(10);
    let a = table.key("c", "r", "s");
    assert_ne!(a, table.key("c2", "r", "s"));
    assert_ne!(a, table.key("c", "r2", "s"));
    assert_ne!(a, table.key("c", "r", "s2"));
    assert_eq!(a, table.key("c", "r", "s"));
}

#[test]
fn table_is_bounded() {
    let table = SessionTable::new(SHARDS);
    let now = Instant::now();
    for i in 0..10_000 {
        let key = table.key("c", "r", &i.to_string());
        table.bind(key, ProxyId::from("p"), POLICY, now);
    }
    assert!(table.len() <= SHARDS, "{}", table.len());
}

/// A table holding `per_shard` bindings in each shard, and `n` distinct keys that all
/// land in one shard.
fn one_shard(per_shard: usize, n: usize) -> (SessionTable, Vec<SessionKey>) {
    let table = SessionTable::new(SHARDS * per_shard);
    let first = table.key("c", "r", "0");
    let shard = (first.0 as usize) % SHARDS;
    let keys = (0..)
        .map(|i: u32| table.key("c", "r", &i.to_string()))
        .filter(|k| (k.0 as usize) % SHARDS == shard)
        .take(n)
        .collect();
    (table, keys)
}

fn bound(p: &str) -> Lookup {
    Lookup::Bound(ProxyId::from(p))
}

/// Binds `k[i]` to proxy `p{i}` for each `(policy, seconds after t0)` of `binds`, in turn.
fn bind_in_turn(
    table: &SessionTable,
    k: &[SessionKey],
    t0: Instant,
    binds: &[(StickyPolicy, u64)],
) {
    for (i, (policy, at)) in binds.iter().enumerate() {
        let proxy = ProxyId::from(format!("p{i}").as_str());
        table.bind(k[i], proxy, *policy, t0 + Duration::from_secs(*at));
    }
}

#[test]
fn full_shard_evicts_its_least_recently_used_binding() {
    let (table, k) = one_shard(3, 4);
    let t0 = Instant::now();
    let s = Duration::from_secs;
    bind_in_turn(&table, &k, t0, &[(POLICY, 0), (POLICY, 1), (POLICY, 2)]);
    // k0 is used again: k1 is now the least recently used.
    assert_eq!(table.lookup(k[0], t0 + s(3)), bound("p0"));
    table.bind(k[3], ProxyId::from("p3"), POLICY, t0 + s(4));
    assert_eq!(table.len(), 3);
    assert_eq!(table.lookup(k[1], t0 + s(5)), Lookup::Unknown);
    assert_eq!(table.lookup(k[0], t0 + s(5)), bound("p0"));
    assert_eq!(table.lookup(k[2], t0 + s(5)), bound("p2"));
    assert_eq!(table.lookup(k[3], t0 + s(5)), bound("p3"));
    // Re-binding a held session evicts nothing.
    table.bind(k[0], ProxyId::from("q0"), POLICY, t0 + s(6));
    assert_eq!(table.len(), 3);
    assert_eq!(table.lookup(k[0], t0 + s(6)), bound("q0"));
}

#[test]
fn full_shard_drops_dead_bindings_of_any_policy_before_the_lru() {
    let short_ttl = StickyPolicy {
        ttl: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(60),
    };
    let short_idle = StickyPolicy {
        ttl: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(3),
    };
    let (table, k) = one_shard(4, 6);
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let binds = [(POLICY, 0), (short_ttl, 1), (short_idle, 1), (POLICY, 2)];
    bind_in_turn(&table, &k, t0, &binds);
    // At t0+5: k1 is past its TTL and k2 idle; k0 is the LRU but alive. Both dead
    // ones go (k1 would otherwise answer `Expired`), the LRU stays.
    table.bind(k[4], ProxyId::from("p4"), POLICY, t0 + s(5));
    assert_eq!(table.len(), 3);
    assert_eq!(table.lookup(k[1], t0 + s(5)), Lookup::Unknown);
    assert_eq!(table.lookup(k[2], t0 + s(5)), Lookup::Unknown);
    assert_eq!(table.lookup(k[0], t0 + s(5)), bound("p0"));
    table.bind(k[5], ProxyId::from("p5"), POLICY, t0 + s(6));
    // Nothing dead: the LRU, k3 (k0 was used at t0+5), goes.
    table.bind(k[1], ProxyId::from("p1"), POLICY, t0 + s(7));
    assert_eq!(table.len(), 4);
    assert_eq!(table.lookup(k[3], t0 + s(7)), Lookup::Unknown);
    for (i, p) in [(0, "p0"), (4, "p4"), (5, "p5"), (1, "p1")] {
        assert_eq!(table.lookup(k[i], t0 + s(7)), bound(p), "k{i}");
    }
}

#[test]
fn sweep_drops_only_dead_bindings() {
    let table = SessionTable::new(1000);
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let a = table.key("c", "r", "a");
    let b = table.key("c", "r", "b");
    let c = table.key("c", "r", "c");
    table.bind(a, ProxyId::from("p"), POLICY, t0);
    table.bind(b, ProxyId::from("p"), POLICY, t0 + s(5));
    table.bind(c, ProxyId::from("p"), POLICY, t0 + s(5));
    assert_eq!(table.lookup(c, t0 + s(12)), bound("p"));
    table.sweep(t0 + s(12));
    assert_eq!(table.len(), 2, "a idle");
    table.sweep(t0 + s(15));
    assert_eq!(table.len(), 1, "b idle");
    assert_eq!(table.lookup(c, t0 + s(15)), bound("p"));
}

mod model {
    //! The table against the original full-scan implementation: same answers,
    //! same bindings held, after every operation.
    use super::*;
    use proptest::prelude::*;

    const POLICIES: [StickyPolicy; 3] = [
        POLICY,
        StickyPolicy {
            ttl: Duration::from_secs(7),
            idle_timeout: Duration::from_secs(30),
        },
        StickyPolicy {
            ttl: Duration::from_secs(40),
            idle_timeout: Duration::from_secs(4),
        },
    ];

    #[derive(Debug, Clone)]
    enum Op {
        Bind { key: usize, policy: usize },
        Lookup { key: usize },
        Sweep,
        Wait { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..12usize, 0..3usize).prop_map(|(key, policy)| Op::Bind { key, policy }),
            4 => (0..12usize).prop_map(|key| Op::Lookup { key }),
            1 => Just(Op::Sweep),
            3 => (0..4_000u64).prop_map(|ms| Op::Wait { ms }),
        ]
    }

    struct Entry {
        proxy: ProxyId,
        bound_at: Instant,
        last_used: Instant,
        seq: u64,
        policy: StickyPolicy,
    }

    impl Entry {
        fn dead(&self, now: Instant) -> bool {
            now.saturating_duration_since(self.last_used) >= self.policy.idle_timeout
                || now.saturating_duration_since(self.bound_at) >= self.policy.ttl
        }
    }

    /// The scan-the-shard table this module replaced (one shard).
    #[derive(Default)]
    struct Model {
        map: HashMap<SessionKey, Entry>,
        seq: u64,
    }

    impl Model {
        fn lookup(&mut self, key: SessionKey, now: Instant) -> Lookup {
            let Some(e) = self.map.get_mut(&key) else {
                return Lookup::Unknown;
            };
            if now.saturating_duration_since(e.last_used) >= e.policy.idle_timeout {
                self.map.remove(&key);
                return Lookup::Unknown;
            }
            if now.saturating_duration_since(e.bound_at) >= e.policy.ttl {
                return Lookup::Expired;
            }
            self.seq += 1;
            e.last_used = now;
            e.seq = self.seq;
            Lookup::Bound(e.proxy.clone())
        }

        fn bind(
            &mut self,
            key: SessionKey,
            proxy: ProxyId,
            policy: StickyPolicy,
            now: Instant,
            cap: usize,
        ) {
            if self.map.len() >= cap && !self.map.contains_key(&key) {
                self.map.retain(|_, e| !e.dead(now));
                if self.map.len() >= cap
                    && let Some(oldest) = self
                        .map
                        .iter()
                        .min_by_key(|(_, e)| (e.last_used, e.seq))
                        .map(|(k, _)| *k)
                {
                    self.map.remove(&oldest);
                }
            }
            self.seq += 1;
            let seq = self.seq;
            self.map.insert(
                key,
                Entry {
                    proxy,
                    bound_at: now,
                    last_used: now,
                    seq,
                    policy,
                },
            );
        }
    }

    fn held(table: &SessionTable, keys: &[SessionKey]) -> Vec<SessionKey> {
        let shard = table.shard(keys[0]).lock();
        let mut held: Vec<SessionKey> = shard.index.keys().copied().collect();
        held.sort_by_key(|k| keys.iter().position(|x| x == k));
        held
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn matches_the_scanning_table(ops in proptest::collection::vec(op(), 1..200)) {
            const CAP: usize = 5;
            let (table, keys) = one_shard(CAP, 12);
            let mut model = Model::default();
            let mut now = Instant::now();
            for (n, op) in ops.iter().enumerate() {
                match *op {
                    Op::Bind { key, policy } => {
                        let proxy = ProxyId::from(format!("p{n}").as_str());
                        table.bind(keys[key], proxy.clone(), POLICIES[policy], now);
                        model.bind(keys[key], proxy, POLICIES[policy], now, CAP);
                    }
                    Op::Lookup { key } => {
                        prop_assert_eq!(table.lookup(keys[key], now), model.lookup(keys[key], now));
                    }
                    Op::Sweep => {
                        table.sweep(now);
                        model.map.retain(|_, e| !e.dead(now));
                    }
                    Op::Wait { ms } => now += Duration::from_millis(ms),
                }
                let mut expected: Vec<SessionKey> = model.map.keys().copied().collect();
                expected.sort_by_key(|k| keys.iter().position(|x| x == k));
                prop_assert_eq!(held(&table, &keys), expected, "after op {}: {:?}", n, op);
                prop_assert!(table.len() <= CAP);
            }
        }
    }
}
