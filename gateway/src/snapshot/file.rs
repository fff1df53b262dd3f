//! A static snapshot from a JSON file, for local runs without a controller: raw serde
//! types (`deny_unknown_fields`) turned into the control-plane model (a
//! [`SnapshotInput`]) by `into_snapshot`, which checks what the control-plane wire
//! edge checks for a controller's snapshot (ports, retry budgets) and reports every
//! problem with its path. Reading the file is the caller's job.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

use proxy_pool_api::controlplane::model::{
    Checksum, Credentials, Dial, Dimension, Header, Labels, Protocol, RetryBudget, Routing,
    RoutingMatch, Secret, Selector, Snapshot, SnapshotProxy, Sticky, Strategy, UsernameParam,
};
use proxy_pool_api::egress::PortRanges;

use super::{ClientCredential, SnapshotError, SnapshotInput, standalone_proxy};
use crate::clock::{now_ms, to_model_ms};

/// The file's top level.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotFile {
    /// Routings in match order.
    #[serde(default)]
    pub routings: Vec<RawRouting>,
    /// Proxies.
    #[serde(default)]
    pub proxies: Vec<RawProxy>,
    /// Clients.
    #[serde(default)]
    pub clients: Vec<RawClient>,
}

/// A routing.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRouting {
    /// Name.
    pub name: String,
    /// Conditions.
    #[serde(default, rename = "match")]
    pub matcher: RawMatch,
    /// Allowed upstreams.
    #[serde(default)]
    pub upstreams: Vec<String>,
    /// Allowed regions.
    #[serde(default)]
    pub regions: Vec<String>,
    /// Allowed carriers.
    #[serde(default)]
    pub carriers: Vec<String>,
    /// Allowed cities.
    #[serde(default)]
    pub cities: Vec<String>,
    /// `roundRobin`, `leastActive` or `powerOfTwoChoices`.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Sticky sessions.
    #[serde(default)]
    pub sticky_session: Option<RawSticky>,
    /// Retries.
    #[serde(default)]
    pub retry: Option<RawRetry>,
    /// Target ports CONNECT may reach: `"443"`, `"8000-8999"` (empty: 443 and 80).
    #[serde(default)]
    pub connect_ports: Vec<String>,
    /// Username parameters that select proxies: parameter → `region`, `city`,
    /// `carrier`, `upstream` or `protocol` (absent: the defaults; `{}`: none).
    #[serde(default)]
    pub selectors: Option<BTreeMap<String, String>>,
}

/// Routing conditions.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawMatch {
    /// Client names.
    #[serde(default)]
    pub clients: Vec<String>,
    /// Username parameters.
    #[serde(default)]
    pub username_params: BTreeMap<String, String>,
    /// Target hosts.
    #[serde(default)]
    pub target_hosts: Vec<String>,
}

/// Sticky sessions.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawSticky {
    /// Binding TTL in seconds.
    pub ttl_seconds: u64,
    /// Idle timeout in seconds.
    pub idle_timeout_seconds: u64,
    /// Longest lifetime a client may choose with `sesstime`, in seconds (default: 30
    /// minutes, or the TTL when longer).
    #[serde(default)]
    pub max_ttl_seconds: Option<u64>,
}

/// Retry budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRetry {
    /// Attempts, the first included.
    pub max_attempts: u32,
    /// Deadline for all attempts, milliseconds.
    pub deadline_ms: u64,
}

/// A proxy.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawProxy {
    /// ID.
    pub id: String,
    /// `http` or `socks5`.
    pub protocol: String,
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Username.
    #[serde(default)]
    pub username: Option<String>,
    /// Password.
    #[serde(default)]
    pub password: Option<String>,
    /// Upstream name.
    #[serde(default)]
    pub upstream: String,
    /// Region.
    #[serde(default)]
    pub region: String,
    /// Carrier.
    #[serde(default)]
    pub carrier: String,
    /// City.
    #[serde(default)]
    pub city: String,
    /// Concurrency limit.
    pub max_concurrent: u32,
}

/// A client (clear password: local runs only).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawClient {
    /// Client name.
    pub client: String,
    /// Base username.
    pub username: String,
    /// Password.
    pub password: String,
}

impl SnapshotFile {
    /// Converts to a snapshot valid for `validity` from now.
    pub fn into_snapshot(
        self,
        version: u64,
        validity: Duration,
    ) -> Result<SnapshotInput, SnapshotError> {
        let mut problems = Vec::new();
        let now = to_model_ms(now_ms());
        let far = now.saturating_add(i64::try_from(validity.as_millis()).unwrap_or(i64::MAX));
        let routings = self
            .routings
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let strategy = match r.strategy.as_deref() {
                    None => Strategy::default(),
                    Some(name) => Strategy::parse(name).unwrap_or_else(|| {
                        problems.push(format!("routings[{i}].strategy: unknown {name:?}"));
                        Strategy::default()
                    }),
                };
                let retry = r.retry.map_or_else(RetryBudget::default, |r| RetryBudget {
                    max_attempts: r.max_attempts,
                    deadline: Duration::from_millis(r.deadline_ms),
                });
                if !retry.attempts_valid() {
                    problems.push(format!("routings[{i}].retry.maxAttempts: must be 1..=10"));
                }
                if !retry.deadline_valid() {
                    problems.push(format!("routings[{i}].retry.deadline: must be positive"));
                }
                let selectors = r.selectors.map(|s| {
                    s.into_iter()
                        .filter_map(|(param, dimension)| match Dimension::parse(&dimension) {
                            Some(d) => Some(Selector::new(param, d)),
                            None => {
                                problems.push(format!(
                                    "routings[{i}].selectors.{param}: unknown dimension {dimension:?}"
                                ));
                                None
                            }
                        })
                        .collect()
                });
                Routing {
                    selectors,
                    name: r.name,
                    matcher: RoutingMatch {
                        clients: r.matcher.clients,
                        username_params: r
                            .matcher
                            .username_params
                            .into_iter()
                            .map(|(key, value)| UsernameParam::new(key, [value]))
                            .collect(),
                        target_hosts: r.matcher.target_hosts,
                    },
                    upstreams: r.upstreams,
                    regions: r.regions,
                    carriers: r.carriers,
                    cities: r.cities,
                    strategy,
                    // Sessions are on for every routing (the defaults without the block).
                    sticky: Some(r.sticky_session.map_or_else(Sticky::default, |s| {
                        let session_ttl = Duration::from_secs(s.ttl_seconds);
                        Sticky {
                            session_ttl,
                            idle_timeout: Duration::from_secs(s.idle_timeout_seconds),
                            max_ttl: s.max_ttl_seconds.map_or_else(
                                || Sticky::default_max_ttl(session_ttl),
                                Duration::from_secs,
                            ),
                            ..Sticky::default()
                        }
                    })),
                    retry,
                    connect_ports: PortRanges::parse(&r.connect_ports).unwrap_or_else(|e| {
                        for p in e {
                            problems.push(format!("routings[{i}].connectPorts{p}"));
                        }
                        PortRanges::default()
                    }),
                }
            })
            .collect();
        let proxies = self
            .proxies
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let protocol = Protocol::parse(&p.protocol).unwrap_or_else(|| {
                    problems.push(format!("proxies[{i}].protocol: unknown {:?}", p.protocol));
                    Protocol::Http
                });
                if p.port == 0 {
                    problems.push(format!("proxies[{i}].port: must not be 0"));
                }
                let credentials = match (p.username, p.password) {
                    (Some(username), Some(password)) => Some(Credentials {
                        username,
                        password: Secret::new(password),
                    }),
                    (None, None) => None,
                    _ => {
                        problems.push(format!("proxies[{i}]: username and password go together"));
                        None
                    }
                };
                let base = standalone_proxy(p.id, protocol, p.host, p.port, p.max_concurrent, far);
                SnapshotProxy {
                    upstream: p.upstream,
                    dial: Dial {
                        credentials,
                        ..base.dial
                    },
                    labels: Labels {
                        region: Some(p.region).filter(|v| !v.is_empty()),
                        carrier: Some(p.carrier).filter(|v| !v.is_empty()),
                        city: Some(p.city).filter(|v| !v.is_empty()),
                    },
                    ..base
                }
            })
            .collect();
        let clients = self
            .clients
            .iter()
            .map(|c| ClientCredential::from_password(&c.client, &c.username, &c.password))
            .collect();
        if !problems.is_empty() {
            return Err(SnapshotError { problems });
        }
        let snapshot = Snapshot {
            header: Header {
                version,
                ownership_epoch: 0,
                generated_at_ms: now,
                valid_until_ms: far,
            },
            routings,
            proxies,
            checksum: Checksum::default(),
        };
        Ok(SnapshotInput::new(snapshot, clients))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_file_and_reports_problems() {
        let text = r#"{
            "routings": [{"name": "sh", "match": {"usernameParams": {"region": "shanghai"}},
                          "strategy": "powerOfTwoChoices",
                          "stickySession": {"ttlSeconds": 600, "idleTimeoutSeconds": 60}}],
            "proxies": [{"id": "p1", "protocol": "socks5", "host": "127.0.0.1", "port": 1080,
                         "username": "u", "password": "p", "maxConcurrent": 5}],
            "clients": [{"client": "team", "username": "alice", "password": "pw"}]
        }"#;
        let file: SnapshotFile = serde_json::from_str(text).unwrap();
        let input = file.into_snapshot(1, Duration::from_secs(60)).unwrap();
        let snap = &input.snapshot;
        assert_eq!(snap.routings[0].strategy, Strategy::PowerOfTwoChoices);
        assert_eq!(snap.proxies[0].dial.protocol, Protocol::Socks5);
        let bad = r#"{"proxies": [{"id": "p", "protocol": "ftp", "host": "h", "port": 1,
                      "username": "u", "maxConcurrent": 1}]}"#;
        let err = serde_json::from_str::<SnapshotFile>(bad)
            .unwrap()
            .into_snapshot(1, Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(err.problems.len(), 2);
        assert!(serde_json::from_str::<SnapshotFile>(r#"{"extra": 1}"#).is_err());
    }

    #[test]
    fn ports_and_retry_budgets_are_checked() {
        let text = r#"{
            "routings": [{"name": "r", "retry": {"maxAttempts": 11, "deadlineMs": 0}}],
            "proxies": [{"id": "p", "protocol": "http", "host": "h", "port": 0,
                         "maxConcurrent": 1}]
        }"#;
        let err = serde_json::from_str::<SnapshotFile>(text)
            .unwrap()
            .into_snapshot(1, Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(
            err.problems,
            [
                "routings[0].retry.maxAttempts: must be 1..=10",
                "routings[0].retry.deadline: must be positive",
                "proxies[0].port: must not be 0",
            ]
        );
    }
}
