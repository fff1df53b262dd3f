//! Request admission on one snapshot: staleness, the egress policy on the target,
//! client authentication (with failures throttled per source and per user name), first
//! matching routing and its CONNECT port allow-list, sticky-session lookup, and the pick
//! (with its Reserved slot). Synchronous; besides one session-shard lookup on sticky
//! requests it takes only the throttle's short sharded locks.

use std::net::IpAddr;
use std::sync::Arc;
use tokio::time::Instant;

use proxy_pool_api::egress::{EgressDenied, EgressPolicy};
use proxy_pool_api::throttle::{AuthThrottle, ThrottleConfig, Verdict};

use crate::capacity::Reservation;
use crate::config::AuthMode;
use crate::error::GatewayError;
use crate::limits::{ClientState, ConnHold};
use crate::metrics::NamedCounters;
use crate::parse::authority::Host;
use crate::parse::username::{SESSTIME, Username, parse_username, split_password_params};
use crate::select::{self, Choice};
use crate::session::{Lookup, MoveReason, SessionKey, SessionTable, StickyPolicy};
use crate::snapshot::{
    CompiledRouting, LiveSnapshot, Narrowing, ProxyEntry, ProxyId, SelectionKey,
};
use crate::usage::{Meter, UsageRecorder};
use proxy_pool_api::controlplane::model::{RetryBudget, Sticky};

pub use crate::parse::Credentials;

/// What a request keeps across retries: its routing (by name, so a newer snapshot
/// can be used), retry budget and sticky session.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// Routing name.
    pub routing: Arc<str>,
    /// Retry budget of that routing.
    pub retry: RetryBudget,
    /// The routing's request, tunnel and error counters.
    pub stats: &'static NamedCounters,
    session: Option<(SessionKey, StickyPolicy)>,
    /// The selection its username parameters made within the routing (`None`: all
    /// candidates).
    selection: Option<SelectionKey>,
    /// Where the request's bytes are metered (`None`: past the Routing cap).
    pub(crate) meter: Option<Meter>,
    /// A connection slot of the client, taken for this request's connection (`None`:
    /// the connection holds one already, or the client is not from the clients file).
    pub(crate) hold: Option<ConnHold>,
}

impl Ticket {
    /// Whether the request is pinned to a sticky session.
    pub fn is_sticky(&self) -> bool {
        self.session.is_some()
    }
}

/// A chosen proxy with a Reserved slot, and whether a session moved to it.
#[derive(Debug)]
pub struct Pick {
    /// The Reserved slot, held by the proxy's entry (see [`Pick::entry`]).
    pub reservation: Reservation<ProxyEntry>,
    /// Set when a sticky session had to leave its previous proxy.
    pub moved: Option<MoveReason>,
}

impl Pick {
    /// The proxy.
    pub fn entry(&self) -> &Arc<ProxyEntry> {
        self.reservation.owner()
    }
}

/// One request to admit.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Credentials as presented.
    pub creds: Option<Credentials<'a>>,
    /// The target host.
    pub target: &'a Host<'a>,
    /// The target port of a CONNECT (HTTP or SOCKS5): checked against the routing's
    /// allow-list. `None` for forwarded plain HTTP.
    pub connect_port: Option<u16>,
    /// The client's address, for the failed-authentication throttle.
    pub source: Option<IpAddr>,
    /// The client whose connection slot the request's connection holds already.
    pub held: Option<&'a ClientState>,
}

/// The session policy of a request on a routing with sessions: the routing's, or with
/// `sesstime-<minutes>` the client's own lifetime (idle timeout capped at it), which
/// must lie within the routing's `max_ttl` — otherwise the request is refused
/// ([`GatewayError::BadParameter`]), never silently given another lifetime.
pub(crate) fn session_policy(
    sticky: &Sticky,
    user: &Username<'_>,
) -> Result<StickyPolicy, GatewayError> {
    let mut policy = StickyPolicy::from(sticky);
    match user.sesstime_minutes() {
        None => {}
        Some(Ok(minutes)) => {
            let ttl = std::time::Duration::from_secs(u64::from(minutes) * 60);
            if ttl > sticky.max_ttl {
                return Err(GatewayError::BadParameter(SESSTIME));
            }
            policy.ttl = ttl;
            policy.idle_timeout = policy.idle_timeout.min(ttl);
        }
        Some(Err(_)) => return Err(GatewayError::BadParameter(SESSTIME)),
    }
    Ok(policy)
}

/// An authenticated client: its name (the identity metered), its username (with the
/// routing parameters) and, for a client of the clients file, its limit state.
type Authenticated<'a> = (&'a str, Username<'a>, Option<&'a Arc<ClientState>>);

/// Admission logic plus the session table.
#[derive(Debug)]
pub struct Router {
    sessions: SessionTable,
    auth: AuthMode,
    usage: Arc<UsageRecorder>,
    egress: EgressPolicy,
    throttle: AuthThrottle,
}

impl Router {
    /// A router with room for `max_sessions` sticky bindings (a tenth per client), the
    /// default egress policy and throttle.
    pub fn new(auth: AuthMode, max_sessions: usize) -> Self {
        Self::with(
            auth,
            SessionTable::new(max_sessions),
            EgressPolicy::default(),
            ThrottleConfig::default(),
        )
    }

    /// A router with these parts.
    pub fn with(
        auth: AuthMode,
        sessions: SessionTable,
        egress: EgressPolicy,
        throttle: ThrottleConfig,
    ) -> Self {
        Self {
            sessions,
            auth,
            usage: Arc::default(),
            egress,
            throttle: AuthThrottle::new(throttle),
        }
    }

    /// The egress policy (targets here, vendor proxies when dialled).
    pub fn egress(&self) -> &EgressPolicy {
        &self.egress
    }

    /// Per-Routing usage (requests and client identities), drained by the agent.
    pub fn usage(&self) -> &Arc<UsageRecorder> {
        &self.usage
    }

    /// The session table (for sweeping).
    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    /// Admits a request without a source address or CONNECT port (tests, benches):
    /// see [`Router::admit_request`].
    pub fn admit(
        &self,
        snap: Option<&LiveSnapshot>,
        creds: Option<Credentials<'_>>,
        target: &Host<'_>,
        now_ms: u64,
    ) -> Result<(Ticket, Pick), GatewayError> {
        let req = Request {
            creds,
            target,
            connect_port: None,
            source: None,
            held: None,
        };
        self.admit_request(snap, &req, now_ms)
    }

    /// Admits a request: snapshot fresh, target allowed by the egress policy, client
    /// known (and not throttled), a routing matches and allows the CONNECT port, the
    /// client within its limits (quota, connections, rate: see [`crate::limits`]), a
    /// proxy with room chosen; then counted and metered.
    pub fn admit_request(
        &self,
        snap: Option<&LiveSnapshot>,
        req: &Request<'_>,
        now_ms: u64,
    ) -> Result<(Ticket, Pick), GatewayError> {
        let snap = snap.ok_or(GatewayError::NoSnapshot)?;
        if snap.is_stale(now_ms) {
            return Err(GatewayError::Stale);
        }
        let (client, user, state) = self.authenticate(snap, req.creds, req.source)?;
        check_target(&self.egress, req.target).map_err(GatewayError::EgressDenied)?;
        let target = req.target;
        let routing = snap
            .routings
            .iter()
            .find(|r| r.matches(client, user.params(), target))
            .ok_or(GatewayError::NoRouting)?;
        if let Some(port) = req.connect_port
            && !routing.spec.connect_ports.allows(port)
        {
            return Err(GatewayError::EgressDenied(EgressDenied::Port));
        }
        let session = match routing.spec.sticky.as_ref() {
            Some(sticky) => {
                let policy = session_policy(sticky, &user)?;
                user.param(&sticky.param)
                    .map(|s| (self.sessions.key(client, &routing.name, s), policy))
            }
            None => None,
        };
        let selection = match routing.selection.narrow(user.params()) {
            Narrowing::All => None,
            Narrowing::Set(_, key) => Some(key),
            Narrowing::Conflict(d) => return Err(GatewayError::BadParameter(d.as_str())),
            // A Routing with no candidate at all (its proxies drained, expired or not
            // assigned yet) is out of capacity whatever was asked; only a value that
            // none of its proxies holds is the client's.
            Narrowing::NoMatch if routing.all().candidates.is_empty() => {
                return Err(GatewayError::NoCapacity);
            }
            Narrowing::NoMatch => return Err(GatewayError::NoMatchingProxy),
        };
        let hold = match state {
            Some(state) => {
                let held = req.held.is_some_and(|h| std::ptr::eq(h, &**state));
                state.admit(held).map_err(GatewayError::ClientLimit)?
            }
            None => None,
        };
        let mut ticket = Ticket {
            routing: routing.name.clone(),
            retry: routing.spec.retry,
            stats: routing.stats,
            session,
            selection,
            meter: None,
            hold,
        };
        let pick = self.choose(snap, routing, &ticket, now_ms, &[])?;
        // One request per admission that got a proxy (retries reselect; not recounted).
        ticket.meter = self.usage.meter(&routing.name, client);
        Ok((ticket, pick))
    }

    /// Picks again for a retry (or the next request of a kept-alive connection),
    /// avoiding `exclude`, on whatever snapshot is current.
    pub fn reselect(
        &self,
        snap: Option<&LiveSnapshot>,
        ticket: &Ticket,
        now_ms: u64,
        exclude: &[ProxyId],
    ) -> Result<Pick, GatewayError> {
        let snap = snap.ok_or(GatewayError::NoSnapshot)?;
        if snap.is_stale(now_ms) {
            return Err(GatewayError::Stale);
        }
        let routing = snap
            .routing(&ticket.routing)
            .ok_or(GatewayError::NoRouting)?;
        self.choose(snap, routing, ticket, now_ms, exclude)
    }

    /// Checks credentials alone (the SOCKS5 sub-negotiation answers before routing).
    pub fn check_credentials(
        &self,
        snap: Option<&LiveSnapshot>,
        creds: Credentials<'_>,
        source: Option<IpAddr>,
    ) -> Result<(), GatewayError> {
        let snap = snap.ok_or(GatewayError::NoSnapshot)?;
        self.authenticate(snap, Some(creds), source).map(|_| ())
    }

    /// Authenticates `creds`; with a `source`, a throttled source or user name is
    /// refused before the password is judged, and a failure counts against both.
    fn authenticate<'a>(
        &self,
        snap: &'a LiveSnapshot,
        creds: Option<Credentials<'a>>,
        source: Option<IpAddr>,
    ) -> Result<Authenticated<'a>, GatewayError> {
        let (Some(source), Some(c), AuthMode::Required) = (source, creds, self.auth) else {
            return self.verify(snap, creds);
        };
        let base = c.username.split(|&b| b == b'-').next().unwrap_or_default();
        let now = std::time::Instant::now();
        if let Verdict::Throttled(_) = self.throttle.check(source, Some(base), now) {
            return Err(GatewayError::AuthThrottled);
        }
        let verdict = self.verify(snap, creds);
        match &verdict {
            Err(GatewayError::AuthFailed) => self.throttle.failed(source, Some(base), now),
            Ok(_) => self.throttle.succeeded(source, base, now),
            Err(_) => {}
        }
        verdict
    }

    fn verify<'a>(
        &self,
        snap: &'a LiveSnapshot,
        creds: Option<Credentials<'a>>,
    ) -> Result<Authenticated<'a>, GatewayError> {
        let Some(creds) = creds else {
            return match self.auth {
                AuthMode::Required => Err(GatewayError::AuthRequired),
                AuthMode::Open => Ok(("anonymous", parse_username(b"anonymous")?, None)),
            };
        };
        let user = parse_username(creds.username).map_err(|_| GatewayError::AuthFailed)?;
        // The password form (`secret_country-us_session-x`), when the username carries no
        // parameters: tried only after the whole password fails.
        let split = split_password_params(&user, creds.password);
        if self.auth == AuthMode::Open {
            let user = split.map_or(user, |(_, with)| with);
            return Ok((user.base, user, None));
        }
        let Some(entry) = snap.clients.get(user.base) else {
            // The same hash work as a known user: timing does not tell names apart.
            proxy_pool_api::secret::SaltedHash::burn(creds.password);
            if let Some((password, _)) = split {
                proxy_pool_api::secret::SaltedHash::burn(password);
            }
            return Err(GatewayError::AuthFailed);
        };
        let state = Some(&entry.state);
        if entry.password.matches(creds.password) {
            return Ok((&entry.client, user, state));
        }
        match split {
            Some((password, with)) if entry.password.matches(password) => {
                Ok((&entry.client, with, state))
            }
            _ => Err(GatewayError::AuthFailed),
        }
    }

    fn choose(
        &self,
        snap: &LiveSnapshot,
        routing: &CompiledRouting,
        ticket: &Ticket,
        now_ms: u64,
        exclude: &[ProxyId],
    ) -> Result<Pick, GatewayError> {
        // The request's selection, found again in this snapshot (a retry may run on a
        // newer one, where the selection can have emptied: its values were valid at
        // admission, so that is a lack of capacity, not a bad parameter).
        let set = match ticket.selection {
            None => routing.all().view(),
            Some(key) => routing
                .selection
                .by_key(key)
                .ok_or(GatewayError::NoCapacity)?,
        };
        let strategy = routing.spec.strategy;
        // The slot rides on the request's one reference to the chosen entry (its
        // counters are the entry's: `keep` refuses anything else, releasing the slot).
        let pick = |choice: Choice<'_>, moved| {
            let entry = snap.proxies.get(choice.idx as usize).map(Arc::clone);
            let reservation = entry.and_then(|e| choice.slot.keep(e));
            reservation
                .map(|reservation| Pick { reservation, moved })
                .ok_or(GatewayError::NoCapacity)
        };
        let Some((key, policy)) = ticket.session else {
            return select::pick_in(set, strategy, now_ms, exclude)
                .ok_or(GatewayError::NoCapacity)
                .and_then(|c| pick(c, None));
        };
        let now = Instant::now();
        let moved = match self.sessions.lookup(key, now) {
            Lookup::Unknown => None,
            Lookup::Expired => Some(MoveReason::Expired),
            Lookup::Bound(id) => {
                if exclude.contains(&id) {
                    Some(MoveReason::ProxyFailed)
                } else {
                    let cand = snap.index_of(&id).and_then(|i| set.candidate(i));
                    match cand.filter(|c| now_ms < c.usable_until_ms) {
                        None => Some(MoveReason::ProxyGone),
                        Some(c) => match select::try_take(c, now_ms, exclude) {
                            Some(c) => return pick(c, None),
                            None => Some(MoveReason::ProxyFull),
                        },
                    }
                }
            }
        };
        let choice =
            select::pick_in(set, strategy, now_ms, exclude).ok_or(GatewayError::NoCapacity)?;
        let chosen = pick(choice, moved)?;
        self.sessions
            .bind(key, chosen.entry().id.clone(), policy, now);
        Ok(chosen)
    }
}

/// The egress policy on a target as the client named it.
fn check_target(policy: &EgressPolicy, target: &Host<'_>) -> Result<(), EgressDenied> {
    match target {
        Host::Domain(d) => policy.check_host(d),
        other => other.ip().map_or(Ok(()), |ip| policy.check_ip(ip)),
    }
}

#[cfg(test)]
mod tests;
