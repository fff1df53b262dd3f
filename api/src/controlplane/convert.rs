//! The protobuf edge: wire messages ⇄ domain values ([`super::model`]).
//!
//! Inbound conversions check every field (IDs, ports, enums); an unknown enum value is
//! refused, never guessed (proto evolution rule). Errors name the field, never a secret.

use std::time::Duration;

use super::model::{
    CheckTarget, CheckTask, CheckTier, Checksum, Credentials, Delta, Dial, Dimension, FailureCode,
    Header, Labels, Observation, Outcome, OutcomeStage, Protocol, ProxyEndpoint, RetryBudget,
    Routing, RoutingMatch, Secret, Selector, Snapshot, SnapshotProxy, Sticky, Strategy,
    UsernameParam,
};
use super::pb;

/// A wire message that does not convert to a domain value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct ConvertError {
    /// Path of the offending field.
    pub field: String,
    /// What is wrong.
    pub reason: &'static str,
}

fn bad(field: impl Into<String>, reason: &'static str) -> ConvertError {
    ConvertError {
        field: field.into(),
        reason,
    }
}

/// Longest ID accepted on the wire.
pub const MAX_ID_LEN: usize = 128;
/// Most routings one snapshot proxy may be excluded from.
pub const MAX_EXCLUDED_ROUTINGS: usize = 256;

/// Checks an identifier: 1..=128 bytes of `[A-Za-z0-9._:-]`.
pub fn check_id(field: &str, value: &str) -> Result<(), ConvertError> {
    if value.is_empty() {
        return Err(bad(field, "must not be empty"));
    }
    if value.len() > MAX_ID_LEN {
        return Err(bad(field, "too long"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(bad(field, "characters outside [A-Za-z0-9._:-]"));
    }
    Ok(())
}

fn opt(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Parses a wire checksum (exactly 32 bytes).
pub fn checksum_from_wire(field: &str, bytes: &[u8]) -> Result<Checksum, ConvertError> {
    <[u8; 32]>::try_from(bytes)
        .map(Checksum)
        .map_err(|_| bad(field, "must be 32 bytes"))
}

impl From<Protocol> for pb::UpstreamProtocol {
    fn from(p: Protocol) -> Self {
        match p {
            Protocol::Http => Self::Http,
            Protocol::Socks5 => Self::Socks5,
        }
    }
}

fn protocol_from_wire(field: &str, v: i32) -> Result<Protocol, ConvertError> {
    match pb::UpstreamProtocol::try_from(v) {
        Ok(pb::UpstreamProtocol::Http) => Ok(Protocol::Http),
        Ok(pb::UpstreamProtocol::Socks5) => Ok(Protocol::Socks5),
        _ => Err(bad(field, "unknown or unspecified protocol")),
    }
}

fn credentials_to_wire(c: &Option<Credentials>) -> Option<pb::UpstreamCredentials> {
    c.as_ref().map(|c| pb::UpstreamCredentials {
        username: c.username.clone(),
        password: c.password.expose().to_owned(),
    })
}

fn credentials_from_wire(c: Option<pb::UpstreamCredentials>) -> Option<Credentials> {
    c.map(|c| Credentials {
        username: c.username,
        password: Secret::new(c.password),
    })
}

fn port_from_wire(field: &str, port: u32) -> Result<u16, ConvertError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| bad(field, "must be 1..=65535"))
}

impl From<&SnapshotProxy> for pb::SnapshotProxy {
    fn from(p: &SnapshotProxy) -> Self {
        Self {
            id: p.id.clone(),
            upstream: p.upstream.clone(),
            protocol: pb::UpstreamProtocol::from(p.dial.protocol) as i32,
            host: p.dial.host.clone(),
            port: u32::from(p.dial.port),
            credentials: credentials_to_wire(&p.dial.credentials),
            region: p.labels.region.clone().unwrap_or_default(),
            carrier: p.labels.carrier.clone().unwrap_or_default(),
            max_concurrency: p.max_concurrency,
            expires_at_ms: p.expires_at_ms,
            usable_until_ms: p.usable_until_ms,
            assignment_epoch: p.assignment_epoch,
            draining: p.draining,
            lease_expires_at_ms: p.lease_expires_at_ms,
            excluded_routings: p.excluded_routings.clone(),
            city: p.labels.city.clone().unwrap_or_default(),
        }
    }
}

impl TryFrom<pb::SnapshotProxy> for SnapshotProxy {
    type Error = ConvertError;
    fn try_from(p: pb::SnapshotProxy) -> Result<Self, ConvertError> {
        check_id("proxy.id", &p.id)?;
        check_id("proxy.upstream", &p.upstream)?;
        if p.host.is_empty() || p.host.len() > 253 {
            return Err(bad("proxy.host", "must be 1..=253 bytes"));
        }
        if p.usable_until_ms > p.expires_at_ms {
            return Err(bad("proxy.usable_until_ms", "after expires_at_ms"));
        }
        if p.lease_expires_at_ms < 0 {
            return Err(bad("proxy.lease_expires_at_ms", "negative"));
        }
        if p.excluded_routings.len() > MAX_EXCLUDED_ROUTINGS
            || p.excluded_routings.windows(2).any(|w| w[0] >= w[1])
        {
            return Err(bad(
                "proxy.excluded_routings",
                "must be sorted, unique and at most 256",
            ));
        }
        Ok(Self {
            dial: Dial {
                protocol: protocol_from_wire("proxy.protocol", p.protocol)?,
                port: port_from_wire("proxy.port", p.port)?,
                host: p.host,
                credentials: credentials_from_wire(p.credentials),
            },
            labels: Labels {
                region: opt(p.region),
                carrier: opt(p.carrier),
                city: opt(p.city),
            },
            id: p.id,
            upstream: p.upstream,
            max_concurrency: p.max_concurrency,
            expires_at_ms: p.expires_at_ms,
            usable_until_ms: p.usable_until_ms,
            assignment_epoch: p.assignment_epoch,
            draining: p.draining,
            lease_expires_at_ms: p.lease_expires_at_ms,
            excluded_routings: p.excluded_routings,
        })
    }
}

impl From<Strategy> for pb::BalanceStrategy {
    fn from(s: Strategy) -> Self {
        match s {
            Strategy::RoundRobin => Self::RoundRobin,
            Strategy::LeastActive => Self::LeastActive,
            Strategy::PowerOfTwoChoices => Self::PowerOfTwoChoices,
        }
    }
}

impl From<&Routing> for pb::Routing {
    fn from(r: &Routing) -> Self {
        Self {
            name: r.name.clone(),
            r#match: Some(pb::RoutingMatch {
                username_params: r
                    .matcher
                    .username_params
                    .iter()
                    .map(|p| pb::UsernameParam {
                        key: p.key.clone(),
                        values: p.values.clone(),
                    })
                    .collect(),
                clients: r.matcher.clients.clone(),
                target_hosts: r.matcher.target_hosts.clone(),
            }),
            upstreams: r.upstreams.clone(),
            regions: r.regions.clone(),
            carriers: r.carriers.clone(),
            selectors: r.selectors.as_ref().map(|list| pb::Selectors {
                items: list
                    .iter()
                    .map(|s| pb::Selector {
                        param: s.param.clone(),
                        dimension: s.dimension.as_str().to_owned(),
                    })
                    .collect(),
            }),
            cities: r.cities.clone(),
            strategy: pb::BalanceStrategy::from(r.strategy) as i32,
            sticky: r.sticky.as_ref().map(|s| pb::StickySessions {
                enabled: true,
                param: s.param.clone(),
                session_ttl_ms: ms(s.session_ttl),
                idle_timeout_ms: ms(s.idle_timeout),
                max_session_ttl_ms: ms(s.max_ttl),
            }),
            retry: Some(pb::RetryBudget {
                max_attempts: r.retry.max_attempts,
                deadline_ms: ms(r.retry.deadline),
            }),
            connect_ports: r
                .connect_ports
                .ranges()
                .iter()
                .map(|p| pb::PortRange {
                    first: u32::from(p.first),
                    last: u32::from(p.last),
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::Routing> for Routing {
    type Error = ConvertError;
    fn try_from(r: pb::Routing) -> Result<Self, ConvertError> {
        check_id("routing.name", &r.name)?;
        let strategy = match pb::BalanceStrategy::try_from(r.strategy) {
            Ok(pb::BalanceStrategy::RoundRobin) => Strategy::RoundRobin,
            Ok(pb::BalanceStrategy::LeastActive) => Strategy::LeastActive,
            Ok(pb::BalanceStrategy::PowerOfTwoChoices) => Strategy::PowerOfTwoChoices,
            _ => return Err(bad("routing.strategy", "unknown or unspecified strategy")),
        };
        let m = r.r#match.unwrap_or_default();
        let selectors = match r.selectors {
            None => None,
            Some(list) if list.items.len() > Routing::MAX_SELECTORS => {
                return Err(bad("routing.selectors", "too many selectors"));
            }
            Some(list) => Some(
                list.items
                    .into_iter()
                    .map(|s| match Dimension::parse(&s.dimension) {
                        Some(d) if !s.param.is_empty() => Ok(Selector::new(s.param, d)),
                        _ => Err(bad("routing.selectors", "unknown dimension or empty param")),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        if r.connect_ports.len() > crate::egress::MAX_PORT_RANGES {
            return Err(bad("routing.connect_ports", "too many ranges"));
        }
        let connect_ports = r
            .connect_ports
            .iter()
            .map(|p| {
                let port = |v: u32| u16::try_from(v).ok().filter(|v| *v != 0);
                match (port(p.first), port(p.last)) {
                    (Some(first), Some(last)) if first <= last => {
                        Ok(crate::egress::PortRange { first, last })
                    }
                    _ => Err(bad("routing.connect_ports", "not a port range")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let retry = r.retry.map_or_else(RetryBudget::default, |b| RetryBudget {
            max_attempts: b.max_attempts.max(1),
            deadline: Duration::from_millis(b.deadline_ms),
        });
        if !retry.attempts_valid() {
            return Err(bad("routing.retry.max_attempts", "must be 1..=10"));
        }
        if !retry.deadline_valid() {
            return Err(bad("routing.retry.deadline_ms", "must be positive"));
        }
        Ok(Self {
            name: r.name,
            matcher: RoutingMatch {
                username_params: m
                    .username_params
                    .into_iter()
                    .map(|p| UsernameParam::new(p.key, p.values))
                    .collect(),
                clients: m.clients,
                target_hosts: m.target_hosts,
            },
            upstreams: r.upstreams,
            regions: r.regions,
            carriers: r.carriers,
            cities: r.cities,
            selectors,
            strategy,
            sticky: r.sticky.filter(|s| s.enabled).map(|s| Sticky {
                param: if s.param.is_empty() {
                    "session".to_owned()
                } else {
                    s.param
                },
                session_ttl: Duration::from_millis(s.session_ttl_ms),
                idle_timeout: Duration::from_millis(s.idle_timeout_ms),
                // 0 from a controller of the previous release: the default.
                max_ttl: match s.max_session_ttl_ms {
                    0 => Sticky::default_max_ttl(Duration::from_millis(s.session_ttl_ms)),
                    m => Duration::from_millis(m).max(Duration::from_millis(s.session_ttl_ms)),
                },
            }),
            retry,
            connect_ports: crate::egress::PortRanges::new(connect_ports),
        })
    }
}

fn routings_from_wire(rs: Vec<pb::Routing>) -> Result<Vec<Routing>, ConvertError> {
    rs.into_iter().map(Routing::try_from).collect()
}

fn proxies_from_wire(ps: Vec<pb::SnapshotProxy>) -> Result<Vec<SnapshotProxy>, ConvertError> {
    ps.into_iter().map(SnapshotProxy::try_from).collect()
}

impl From<&Snapshot> for pb::WorkerSnapshot {
    fn from(s: &Snapshot) -> Self {
        Self {
            version: s.header.version,
            ownership_epoch: s.header.ownership_epoch,
            generated_at_ms: s.header.generated_at_ms,
            valid_until_ms: s.header.valid_until_ms,
            routings: s.routings.iter().map(pb::Routing::from).collect(),
            proxies: s.proxies.iter().map(pb::SnapshotProxy::from).collect(),
            checksum: s.checksum.0.to_vec(),
        }
    }
}

impl TryFrom<pb::WorkerSnapshot> for Snapshot {
    type Error = ConvertError;
    fn try_from(s: pb::WorkerSnapshot) -> Result<Self, ConvertError> {
        Ok(Self {
            header: Header {
                version: s.version,
                ownership_epoch: s.ownership_epoch,
                generated_at_ms: s.generated_at_ms,
                valid_until_ms: s.valid_until_ms,
            },
            routings: routings_from_wire(s.routings)?,
            proxies: proxies_from_wire(s.proxies)?,
            checksum: checksum_from_wire("snapshot.checksum", &s.checksum)?,
        })
    }
}

impl From<&Delta> for pb::SnapshotDelta {
    fn from(d: &Delta) -> Self {
        Self {
            base_version: d.base_version,
            version: d.header.version,
            ownership_epoch: d.header.ownership_epoch,
            generated_at_ms: d.header.generated_at_ms,
            valid_until_ms: d.header.valid_until_ms,
            upserts: d.upserts.iter().map(pb::SnapshotProxy::from).collect(),
            removals: d.removals.clone(),
            routings_changed: d.routings.is_some(),
            routings: d.routings.iter().flatten().map(pb::Routing::from).collect(),
            checksum: d.checksum.0.to_vec(),
        }
    }
}

impl TryFrom<pb::SnapshotDelta> for Delta {
    type Error = ConvertError;
    fn try_from(d: pb::SnapshotDelta) -> Result<Self, ConvertError> {
        for id in &d.removals {
            check_id("delta.removals[]", id)?;
        }
        Ok(Self {
            base_version: d.base_version,
            header: Header {
                version: d.version,
                ownership_epoch: d.ownership_epoch,
                generated_at_ms: d.generated_at_ms,
                valid_until_ms: d.valid_until_ms,
            },
            upserts: proxies_from_wire(d.upserts)?,
            removals: d.removals,
            routings: if d.routings_changed {
                Some(routings_from_wire(d.routings)?)
            } else {
                None
            },
            checksum: checksum_from_wire("delta.checksum", &d.checksum)?,
        })
    }
}

impl From<OutcomeStage> for pb::OutcomeStage {
    fn from(s: OutcomeStage) -> Self {
        match s {
            OutcomeStage::Dial => Self::Dial,
            OutcomeStage::ProxyHandshake => Self::ProxyHandshake,
            OutcomeStage::ResponseHeaders => Self::ResponseHeaders,
            OutcomeStage::Tunnel => Self::Tunnel,
        }
    }
}

impl From<&Outcome> for pb::Outcome {
    fn from(o: &Outcome) -> Self {
        Self {
            proxy_id: o.proxy_id.clone(),
            routing: o.routing.clone().unwrap_or_default(),
            stage: pb::OutcomeStage::from(o.stage) as i32,
            success: o.success,
            latency_ms: ms(o.latency),
            failure_code: o.failure_code.clone().unwrap_or_default(),
            observed_at_ms: o.observed_at_ms,
        }
    }
}

impl TryFrom<pb::Outcome> for Outcome {
    type Error = ConvertError;
    fn try_from(o: pb::Outcome) -> Result<Self, ConvertError> {
        check_id("outcome.proxy_id", &o.proxy_id)?;
        let stage = match pb::OutcomeStage::try_from(o.stage) {
            Ok(pb::OutcomeStage::Dial) => OutcomeStage::Dial,
            Ok(pb::OutcomeStage::ProxyHandshake) => OutcomeStage::ProxyHandshake,
            Ok(pb::OutcomeStage::ResponseHeaders) => OutcomeStage::ResponseHeaders,
            Ok(pb::OutcomeStage::Tunnel) => OutcomeStage::Tunnel,
            _ => return Err(bad("outcome.stage", "unknown or unspecified stage")),
        };
        if o.failure_code.len() > 64 {
            return Err(bad("outcome.failure_code", "longer than 64 bytes"));
        }
        Ok(Self {
            proxy_id: o.proxy_id,
            routing: opt(o.routing),
            stage,
            success: o.success,
            latency: Duration::from_millis(o.latency_ms),
            failure_code: opt(o.failure_code),
            observed_at_ms: o.observed_at_ms,
        })
    }
}

impl From<CheckTier> for pb::CheckTier {
    fn from(t: CheckTier) -> Self {
        match t {
            CheckTier::Basic => Self::Basic,
            CheckTier::Egress => Self::Egress,
            CheckTier::Target => Self::Target,
        }
    }
}

/// Parses a wire tier; unknown and unspecified values are refused.
pub fn tier_from_wire(field: &str, v: i32) -> Result<CheckTier, ConvertError> {
    match pb::CheckTier::try_from(v) {
        Ok(pb::CheckTier::Basic) => Ok(CheckTier::Basic),
        Ok(pb::CheckTier::Egress) => Ok(CheckTier::Egress),
        Ok(pb::CheckTier::Target) => Ok(CheckTier::Target),
        _ => Err(bad(field, "unknown or unspecified tier")),
    }
}

impl From<&CheckTask> for pb::CheckTask {
    fn from(t: &CheckTask) -> Self {
        Self {
            task_id: t.task_id.clone(),
            tier: pb::CheckTier::from(t.tier) as i32,
            proxy_id: t.proxy.id.clone(),
            upstream: t.proxy.upstream.clone(),
            protocol: pb::UpstreamProtocol::from(t.proxy.dial.protocol) as i32,
            host: t.proxy.dial.host.clone(),
            port: u32::from(t.proxy.dial.port),
            credentials: credentials_to_wire(&t.proxy.dial.credentials),
            deadline_ms: t.deadline_ms,
            routing: t.routing.clone().unwrap_or_default(),
            target: t.target.as_ref().map(|g| pb::CheckTarget {
                url: g.url.clone(),
                expect_status: g.expect_status.map_or(0, u32::from),
            }),
        }
    }
}

impl TryFrom<pb::CheckTask> for CheckTask {
    type Error = ConvertError;
    fn try_from(t: pb::CheckTask) -> Result<Self, ConvertError> {
        check_id("task.task_id", &t.task_id)?;
        check_id("task.proxy_id", &t.proxy_id)?;
        Ok(Self {
            tier: tier_from_wire("task.tier", t.tier)?,
            proxy: ProxyEndpoint {
                dial: Dial {
                    protocol: protocol_from_wire("task.protocol", t.protocol)?,
                    port: port_from_wire("task.port", t.port)?,
                    host: t.host,
                    credentials: credentials_from_wire(t.credentials),
                },
                id: t.proxy_id,
                upstream: t.upstream,
            },
            task_id: t.task_id,
            deadline_ms: t.deadline_ms,
            routing: opt(t.routing),
            target: t.target.map(|g| CheckTarget {
                url: g.url,
                expect_status: u16::try_from(g.expect_status).ok().filter(|s| *s != 0),
            }),
        })
    }
}

impl From<&Observation> for pb::Observation {
    fn from(o: &Observation) -> Self {
        Self {
            task_id: o.task_id.clone(),
            proxy_id: o.proxy_id.clone(),
            tier: pb::CheckTier::from(o.tier) as i32,
            success: o.success,
            latency_ms: ms(o.latency.unwrap_or_default()),
            failure_code: o.failure.map(|f| f.as_str().to_owned()).unwrap_or_default(),
            egress_address: o.egress.map(|ip| ip.to_string()).unwrap_or_default(),
            anonymity_leak: o.failure == Some(FailureCode::ClientLeaked),
            routing: o.routing.clone().unwrap_or_default(),
            observed_at_ms: o.observed_at_ms,
        }
    }
}

impl TryFrom<pb::Observation> for Observation {
    type Error = ConvertError;
    fn try_from(o: pb::Observation) -> Result<Self, ConvertError> {
        check_id("observation.task_id", &o.task_id)?;
        check_id("observation.proxy_id", &o.proxy_id)?;
        if o.failure_code.len() > 64 || o.egress_address.len() > 64 {
            return Err(bad("observation", "failure_code / egress_address too long"));
        }
        Ok(Self {
            tier: tier_from_wire("observation.tier", o.tier)?,
            task_id: o.task_id,
            proxy_id: o.proxy_id,
            success: o.success,
            latency: Some(Duration::from_millis(o.latency_ms)),
            failure: FailureCode::reported(o.success, o.anonymity_leak, &o.failure_code),
            egress: o.egress_address.parse().ok(),
            routing: opt(o.routing),
            observed_at_ms: o.observed_at_ms,
        })
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
