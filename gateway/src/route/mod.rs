//! Request admission on one snapshot: staleness, client authentication, first
//! matching routing, sticky-session lookup, and the pick (with its Reserved slot).
//! Synchronous and lock-free except for one session-shard lookup on sticky requests.

use std::sync::Arc;
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::capacity::Reservation;
use crate::config::AuthMode;
use crate::error::GatewayError;
use crate::parse::authority::Host;
use crate::parse::username::{Username, parse_username};
use crate::select::{self, Choice};
use crate::session::{Lookup, MoveReason, SessionKey, SessionTable};
use crate::snapshot::{
    CompiledRouting, LiveSnapshot, ProxyEntry, ProxyId, RetryPolicy, StickyPolicy,
};
use crate::usage::UsageRecorder;

/// Client credentials as presented (`Proxy-Authorization: Basic` or RFC 1929).
#[derive(Clone, Copy)]
pub struct Credentials<'a> {
    /// Username, possibly with routing parameters.
    pub username: &'a [u8],
    /// Password.
    pub password: &'a [u8],
}

impl std::fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(..)")
    }
}

/// What a request keeps across retries: its routing (by name, so a newer snapshot
/// can be used), retry budget and sticky session.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// Routing name.
    pub routing: Arc<str>,
    /// Retry budget of that routing.
    pub retry: RetryPolicy,
    session: Option<(SessionKey, StickyPolicy)>,
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
    /// The proxy.
    pub entry: Arc<ProxyEntry>,
    /// Its Reserved slot.
    pub reservation: Reservation,
    /// Set when a sticky session had to leave its previous proxy.
    pub moved: Option<MoveReason>,
}

/// Admission logic plus the session table.
#[derive(Debug)]
pub struct Router {
    sessions: SessionTable,
    auth: AuthMode,
    usage: Arc<UsageRecorder>,
}

impl Router {
    /// A router with room for `max_sessions` sticky bindings.
    pub fn new(auth: AuthMode, max_sessions: usize) -> Self {
        Self {
            sessions: SessionTable::new(max_sessions),
            auth,
            usage: Arc::default(),
        }
    }

    /// Per-Routing usage (requests and client identities), drained by the agent.
    pub fn usage(&self) -> &Arc<UsageRecorder> {
        &self.usage
    }

    /// The session table (for sweeping).
    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    /// Admits a request: snapshot fresh, client known, a routing matches, a proxy
    /// with room chosen.
    pub fn admit(
        &self,
        snap: Option<&LiveSnapshot>,
        creds: Option<Credentials<'_>>,
        target: &Host<'_>,
        now_ms: u64,
    ) -> Result<(Ticket, Pick), GatewayError> {
        let snap = snap.ok_or(GatewayError::NoSnapshot)?;
        if snap.is_stale(now_ms) {
            return Err(GatewayError::Stale);
        }
        let (client, user) = self.authenticate(snap, creds)?;
        let routing = snap
            .routings
            .iter()
            .find(|r| r.matches(client, user.params(), target))
            .ok_or(GatewayError::NoRouting)?;
        let session = routing.spec.sticky.and_then(|policy| {
            let s = user.param(&routing.spec.session_param)?;
            Some((self.sessions.key(client, &routing.name, s), policy))
        });
        let ticket = Ticket {
            routing: routing.name.clone(),
            retry: routing.spec.retry,
            session,
        };
        let pick = self.choose(snap, routing, &ticket, now_ms, &[])?;
        // One request per admission that got a proxy (retries reselect; not recounted).
        self.usage.record(&routing.name, client);
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
    ) -> Result<(), GatewayError> {
        let snap = snap.ok_or(GatewayError::NoSnapshot)?;
        self.authenticate(snap, Some(creds)).map(|_| ())
    }

    fn authenticate<'a>(
        &self,
        snap: &'a LiveSnapshot,
        creds: Option<Credentials<'a>>,
    ) -> Result<(&'a str, Username<'a>), GatewayError> {
        let Some(creds) = creds else {
            return match self.auth {
                AuthMode::Required => Err(GatewayError::AuthRequired),
                AuthMode::Open => Ok(("anonymous", parse_username(b"anonymous")?)),
            };
        };
        let user = parse_username(creds.username).map_err(|_| GatewayError::AuthFailed)?;
        if self.auth == AuthMode::Open {
            return Ok((user.base, user));
        }
        let entry = snap
            .clients
            .get(user.base)
            .ok_or(GatewayError::AuthFailed)?;
        let digest: [u8; 32] = {
            use sha2::Digest;
            sha2::Sha256::digest(creds.password).into()
        };
        if bool::from(digest.ct_eq(&entry.password_sha256)) {
            Ok((&entry.client, user))
        } else {
            Err(GatewayError::AuthFailed)
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
        let pick = |choice: Choice, moved| Pick {
            entry: snap.proxies[choice.idx as usize].clone(),
            reservation: choice.reservation,
            moved,
        };
        let Some((key, policy)) = ticket.session else {
            return select::pick(snap, routing, now_ms, exclude)
                .map(|c| pick(c, None))
                .ok_or(GatewayError::NoCapacity);
        };
        let now = Instant::now();
        let moved = match self.sessions.lookup(key, now) {
            Lookup::Unknown => None,
            Lookup::Expired => Some(MoveReason::Expired),
            Lookup::Bound(id) => {
                if exclude.contains(&id) {
                    Some(MoveReason::ProxyFailed)
                } else {
                    let cand = snap.index_of(&id).and_then(|i| routing.candidate(i));
                    match cand.filter(|c| now_ms < c.usable_until_ms) {
                        None => Some(MoveReason::ProxyGone),
                        Some(c) => match select::try_take(c, now_ms, exclude) {
                            Some(c) => return Ok(pick(c, None)),
                            None => Some(MoveReason::ProxyFull),
                        },
                    }
                }
            }
        };
        let choice =
            select::pick(snap, routing, now_ms, exclude).ok_or(GatewayError::NoCapacity)?;
        let chosen = pick(choice, moved);
        self.sessions
            .bind(key, chosen.entry.id.clone(), policy, now);
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests;
