//! The compiled, immutable snapshot the hot path reads: proxies with their stable
//! capacity state and pre-encoded upstream credentials, routings with their candidate
//! lists computed once, clients by username. Built off the hot path.

use base64::Engine as _;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use proxy_pool_api::controlplane::model::{Protocol, Routing, SnapshotProxy};

use super::selection::{CandidateSet, Selection};
use super::{ClientCredential, LEASE_SAFETY, ProxyId, SnapshotInput};
use crate::capacity::{CapacityRegistry, ProxyState};
use crate::clock::{from_model_ms, from_unix_ms, unix_ms};
use crate::metrics::{Breakdown, NamedCounters};
use crate::parse::authority::{Host, parse_host};
use crate::parse::username::value_eq;

/// Why a snapshot was rejected before it was published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid snapshot: {}", problems.join("; "))]
pub struct SnapshotError {
    /// Every problem found, with its field path.
    pub problems: Vec<String>,
}

/// Where a vendor proxy listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    /// An IP literal: no resolution needed.
    Ip(SocketAddr),
    /// A DNS name.
    Name(Arc<str>, u16),
}

/// Upstream credentials, pre-encoded. `Debug` shows neither.
#[derive(Clone)]
pub(crate) struct UpstreamAuth {
    pub(crate) username: Arc<str>,
    pub(crate) password: Arc<str>,
    /// `Basic …` value for `Proxy-Authorization`.
    pub(crate) basic: Arc<str>,
}

impl fmt::Debug for UpstreamAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UpstreamAuth(..)")
    }
}

/// One proxy as the hot path sees it.
#[derive(Debug)]
pub struct ProxyEntry {
    /// ID.
    pub id: ProxyId,
    /// Protocol it speaks.
    pub protocol: Protocol,
    /// Address.
    pub addr: UpstreamAddr,
    pub(crate) auth: Option<UpstreamAuth>,
    /// Unix milliseconds after which no new work starts on it.
    pub usable_until_ms: u64,
    /// Capacity counters, stable across snapshots.
    pub state: Arc<ProxyState>,
    /// Request, tunnel and error counters of its upstream (none without a name).
    pub upstream: Option<&'static NamedCounters>,
}

impl crate::capacity::Counted for ProxyEntry {
    fn counters(&self) -> &ProxyState {
        &self.state
    }
}

/// One candidate of a routing: everything selection reads, in one contiguous array
/// (no pointer chase to the [`ProxyEntry`] on the hot path).
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index into [`LiveSnapshot::proxies`].
    pub idx: u32,
    /// Unix milliseconds after which no new work starts on it.
    pub usable_until_ms: u64,
    /// Its capacity counters.
    pub state: Arc<ProxyState>,
}

/// A routing with its candidates.
#[derive(Debug)]
pub struct CompiledRouting {
    /// The rule as delivered.
    pub spec: Routing,
    /// The rule's name, shared with requests for retries.
    pub name: Arc<str>,
    /// Every candidate (by ascending proxy index), and the candidates each selection
    /// (username parameters) narrows to.
    pub selection: Selection,
    /// Its request, tunnel and error counters.
    pub stats: &'static NamedCounters,
    target_patterns: Vec<TargetPattern>,
}

#[derive(Debug)]
enum TargetPattern {
    Ip(IpAddr),
    Exact(String),
    Suffix(String),
}

impl CompiledRouting {
    /// Every candidate (by ascending proxy index) and its cursor.
    pub fn all(&self) -> &CandidateSet {
        self.selection.all()
    }

    /// Whether the routing's conditions hold for this request.
    pub fn matches(&self, client: &str, params: &[(&str, &str)], target: &Host<'_>) -> bool {
        let m = &self.spec.matcher;
        if !m.clients.is_empty() && !m.clients.iter().any(|c| c == client) {
            return false;
        }
        let params_ok = m.username_params.iter().all(|want| {
            params.iter().any(|(pk, pv)| {
                pk.eq_ignore_ascii_case(&want.key)
                    && (want.values.is_empty() || want.values.iter().any(|v| value_eq(pv, v)))
            })
        });
        params_ok && (self.target_patterns.is_empty() || self.target_matches(target))
    }

    fn target_matches(&self, target: &Host<'_>) -> bool {
        let ip = target.ip();
        self.target_patterns.iter().any(|p| match (p, target) {
            (TargetPattern::Ip(want), _) => ip == Some(*want),
            (TargetPattern::Exact(name), Host::Domain(d)) => {
                d.trim_end_matches('.').eq_ignore_ascii_case(name)
            }
            (TargetPattern::Suffix(suffix), Host::Domain(d)) => {
                let d = d.trim_end_matches('.');
                d.len() > suffix.len()
                    && d.is_char_boundary(d.len() - suffix.len())
                    && d[d.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
            _ => false,
        })
    }
}

/// A client that may authenticate.
#[derive(Debug)]
pub(crate) struct ClientEntry {
    pub(crate) client: Arc<str>,
    pub(crate) password: proxy_pool_api::secret::SaltedHash,
    /// The client's limit state (shared by its credentials, kept across snapshots).
    pub(crate) state: Arc<crate::limits::ClientState>,
}

/// The compiled snapshot.
#[derive(Debug)]
pub struct LiveSnapshot {
    /// Version.
    pub version: u64,
    /// Ownership epoch.
    pub epoch: u64,
    /// When the controller built it.
    pub generated_at: SystemTime,
    /// Its validity end.
    pub valid_until: SystemTime,
    /// Proxies, in snapshot order.
    pub proxies: Vec<Arc<ProxyEntry>>,
    /// Routings, in match order.
    pub routings: Vec<CompiledRouting>,
    by_id: HashMap<ProxyId, u32>,
    pub(crate) clients: HashMap<String, ClientEntry>,
    stale_at_ms: AtomicU64,
}

impl LiveSnapshot {
    /// Validates and compiles `input`, reusing capacity state from `registry` and the
    /// per-Routing and per-upstream counters of `breakdown`. `stale_at` is the instant
    /// past which it refuses new traffic.
    pub fn build(
        input: SnapshotInput,
        registry: &CapacityRegistry,
        breakdown: &Breakdown,
        stale_at: SystemTime,
    ) -> Result<Self, SnapshotError> {
        let clients = crate::limits::ClientStates::default();
        Self::build_with(input, registry, breakdown, &clients, stale_at)
    }

    /// [`LiveSnapshot::build`], resolving the clients' limit state in `client_states`
    /// (kept across snapshots: live connection counts stay consistent).
    pub fn build_with(
        input: SnapshotInput,
        registry: &CapacityRegistry,
        breakdown: &Breakdown,
        client_states: &crate::limits::ClientStates,
        stale_at: SystemTime,
    ) -> Result<Self, SnapshotError> {
        validate(&input)?;
        let SnapshotInput { snapshot, clients } = input;
        let mut proxies = Vec::with_capacity(snapshot.proxies.len());
        let mut by_id = HashMap::with_capacity(snapshot.proxies.len());
        let ids: Vec<ProxyId> = snapshot
            .proxies
            .iter()
            .map(|p| ProxyId::from(p.id.as_str()))
            .collect();
        // Counters first, in one pass: new ones are then allocated next to each other,
        // which keeps random picks (power of two choices) cache- and TLB-friendlier.
        let states: Vec<Arc<ProxyState>> = snapshot
            .proxies
            .iter()
            .zip(&ids)
            .map(|(p, id)| {
                let max = if p.draining { 0 } else { p.max_concurrency };
                let state = registry.state_for(id, max, None);
                state.set_assignment(p.assignment_epoch, p.draining, lease_cut_ms(p));
                state
            })
            .collect();
        // Upstream counters resolved once per name, not once per proxy.
        let mut upstreams: HashMap<&str, Option<&'static NamedCounters>> = HashMap::new();
        for (((i, p), state), id) in snapshot.proxies.iter().enumerate().zip(states).zip(ids) {
            let idx = u32::try_from(i).map_err(|_| problem("proxies: too many"))?;
            let dial = &p.dial;
            let addr = match dial.host.parse::<IpAddr>() {
                Ok(ip) => UpstreamAddr::Ip(SocketAddr::new(ip, dial.port)),
                Err(_) => UpstreamAddr::Name(Arc::from(dial.host.as_str()), dial.port),
            };
            let auth = dial.credentials.as_ref().map(|c| {
                let password = c.password.expose();
                let raw = format!("{}:{password}", c.username);
                let basic = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                );
                UpstreamAuth {
                    username: Arc::from(c.username.as_str()),
                    password: Arc::from(password),
                    basic: Arc::from(basic),
                }
            });
            by_id.insert(id.clone(), idx);
            let upstream = match upstreams.get(p.upstream.as_str()) {
                Some(counters) => *counters,
                None => {
                    let counters = breakdown.upstream(&p.upstream);
                    upstreams.insert(p.upstream.as_str(), counters);
                    counters
                }
            };
            proxies.push(Arc::new(ProxyEntry {
                id,
                protocol: dial.protocol,
                addr,
                auth,
                usable_until_ms: from_model_ms(p.usable_until_ms)
                    .min(from_model_ms(p.expires_at_ms))
                    .min(lease_cut_ms(p)),
                state,
                upstream,
            }));
        }
        // Proxies gone from this snapshot take no new work; busy ones stay for reports.
        let listed: HashSet<&ProxyId> = by_id.keys().collect();
        for id in registry.ids() {
            if !listed.contains(&id) {
                registry.close(&id);
            }
        }
        registry.retain(|id| listed.contains(id));
        let routings = snapshot
            .routings
            .into_iter()
            .map(|r| {
                let stats = breakdown.routing(&r.name);
                compile_routing(r, &snapshot.proxies, &proxies, stats)
            })
            .collect();
        let states = client_states.resolve(clients.iter().map(|c| (c.client.as_str(), c.limits)));
        let clients = clients
            .into_iter()
            .filter_map(|c: ClientCredential| {
                let state = states.get(c.client.as_str())?;
                let entry = ClientEntry {
                    client: Arc::clone(&state.name_arc()),
                    password: c.password,
                    state: Arc::clone(state),
                };
                Some((c.username, entry))
            })
            .collect();
        let header = &snapshot.header;
        let valid_until = from_unix_ms(from_model_ms(header.valid_until_ms));
        Ok(Self {
            version: header.version,
            epoch: header.ownership_epoch,
            generated_at: from_unix_ms(from_model_ms(header.generated_at_ms)),
            valid_until,
            proxies,
            routings,
            by_id,
            clients,
            stale_at_ms: AtomicU64::new(unix_ms(stale_at.min(valid_until))),
        })
    }

    /// Index of a proxy by ID.
    pub fn index_of(&self, id: &ProxyId) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    /// Whether some proxy can take new work at `now_ms`: before its `usable_until`,
    /// and not draining (a draining proxy's capacity is zero).
    pub fn has_usable_proxy(&self, now_ms: u64) -> bool {
        self.proxies
            .iter()
            .any(|p| p.usable_until_ms > now_ms && p.state.max() > 0)
    }

    /// Whether new traffic must be refused at `now_ms` (Unix milliseconds).
    pub fn is_stale(&self, now_ms: u64) -> bool {
        now_ms >= self.stale_at_ms.load(Ordering::Relaxed)
    }

    /// Pushes the staleness deadline to `stale_at`, capped at `valid_until`.
    pub fn refresh(&self, stale_at: SystemTime) {
        let at = unix_ms(stale_at.min(self.valid_until));
        self.stale_at_ms.fetch_max(at, Ordering::Relaxed);
    }

    /// The routing named `name`.
    pub fn routing(&self, name: &str) -> Option<&CompiledRouting> {
        self.routings.iter().find(|r| &*r.name == name)
    }
}

/// A proxy's region, carrier or city as routings compare it: an unlabelled proxy has
/// the empty label.
fn label(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

fn compile_routing(
    spec: Routing,
    proxies: &[SnapshotProxy],
    entries: &[Arc<ProxyEntry>],
    stats: &'static NamedCounters,
) -> CompiledRouting {
    let any_or = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    let candidates: Vec<Candidate> = proxies
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            !p.draining
                && p.max_concurrency > 0
                && !p.excluded_routings.contains(&spec.name)
                && any_or(&spec.upstreams, &p.upstream)
                && any_or(&spec.regions, label(&p.labels.region))
                && any_or(&spec.carriers, label(&p.labels.carrier))
                && any_or(&spec.cities, label(&p.labels.city))
        })
        .filter_map(|(i, _)| {
            let entry = entries.get(i)?;
            Some(Candidate {
                idx: u32::try_from(i).ok()?,
                usable_until_ms: entry.usable_until_ms,
                state: entry.state.clone(),
            })
        })
        .collect();
    let target_patterns = spec
        .matcher
        .target_hosts
        .iter()
        .map(|t| {
            let t = t.trim_end_matches('.');
            if let Some(suffix) = t.strip_prefix("*.") {
                TargetPattern::Suffix(format!(".{suffix}"))
            } else if let Ok(ip) = t.trim_matches(['[', ']']).parse::<IpAddr>() {
                TargetPattern::Ip(ip)
            } else {
                TargetPattern::Exact(t.to_owned())
            }
        })
        .collect();
    let selection = Selection::build(&spec.selectors(), candidates, proxies);
    CompiledRouting {
        name: Arc::from(spec.name.as_str()),
        spec,
        selection,
        stats,
        target_patterns,
    }
}

/// What compiling needs on top of the checks made where the snapshot entered (the
/// control-plane wire edge, or the snapshot file): unique IDs and names, hosts that
/// can be dialled, credentials that fit the upstream handshakes, positive session
/// times and base client usernames.
fn validate(input: &SnapshotInput) -> Result<(), SnapshotError> {
    let s = &input.snapshot;
    let mut problems = Vec::new();
    let mut ids = HashSet::new();
    for (i, p) in s.proxies.iter().enumerate() {
        if !ids.insert(&p.id) {
            problems.push(format!("proxies[{i}].id: duplicate {}", p.id));
        }
        let dial = &p.dial;
        if dial.host.parse::<IpAddr>().is_err() && parse_host(dial.host.as_bytes()).is_err() {
            problems.push(format!("proxies[{i}].host: not an IP or DNS name"));
        }
        if let Some(c) = &dial.credentials
            && (c.username.contains(':')
                || c.username.len() > 255
                || c.password.expose().len() > 255)
        {
            problems.push(format!(
                "proxies[{i}].credentials: username without ':' and both at most 255 bytes"
            ));
        }
    }
    let mut names = HashSet::new();
    for (i, r) in s.routings.iter().enumerate() {
        if !names.insert(&r.name) {
            problems.push(format!("routings[{i}].name: duplicate {}", r.name));
        }
        if let Some(st) = &r.sticky
            && (st.session_ttl.is_zero() || st.idle_timeout.is_zero())
        {
            problems.push(format!(
                "routings[{i}].sticky: ttl and idleTimeout must be positive"
            ));
        }
        if let Some(st) = &r.sticky
            && st.max_ttl < st.session_ttl
        {
            problems.push(format!(
                "routings[{i}].sticky: maxTtl must not be shorter than ttl"
            ));
        }
    }
    let mut users = HashSet::new();
    for (i, c) in input.clients.iter().enumerate() {
        if !users.insert(&c.username) {
            problems.push(format!("clients[{i}].username: duplicate"));
        }
        if c.username.is_empty() || c.username.contains('-') {
            problems.push(format!("clients[{i}].username: non-empty, without '-'"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(SnapshotError { problems })
    }
}

fn problem(p: &str) -> SnapshotError {
    SnapshotError {
        problems: vec![p.to_owned()],
    }
}

/// Unix ms from which nothing may go through `p`: its lease end less
/// [`LEASE_SAFETY`], or `u64::MAX` without a lease bound.
fn lease_cut_ms(p: &SnapshotProxy) -> u64 {
    if p.lease_expires_at_ms > 0 {
        from_model_ms(p.lease_expires_at_ms).saturating_sub(LEASE_SAFETY.as_millis() as u64)
    } else {
        u64::MAX
    }
}
