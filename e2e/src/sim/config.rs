//! Simulator configuration: a serde struct (file, flags, tests) and `validate()`,
//! which reports every problem at once and yields the typed [`Settings`] the rest
//! of the simulator trusts. Never reads files or the environment itself.

use proxy_pool_api::controlplane::model::Secret;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::time::Duration;

use super::error::ConfigError;
use super::failure::FailureMode;
use super::model::MAX_PROXY_TTL;

/// Vendor API credentials: clients send `X-API-Key: <api_key>` or
/// `Authorization: Basic <username:password>`. The key and the password are the
/// contract's [`Secret`]s (plain strings in the file, never printed by `Debug`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VendorCredentials {
    /// Value expected in the `X-API-Key` header.
    pub api_key: Secret,
    /// Basic-auth user name.
    pub username: String,
    /// Basic-auth password.
    pub password: Secret,
}

impl Default for VendorCredentials {
    fn default() -> Self {
        Self {
            api_key: Secret::new("sim-api-key"),
            username: "sim-vendor".into(),
            password: Secret::new("sim-vendor-secret"),
        }
    }
}

/// A share of newly issued vendor proxies that start with a failure mode.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureShare {
    /// Probability in `[0, 1]` that a proxy issued by the vendor API gets `failure`.
    pub probability: f64,
    /// The mode such a proxy starts with.
    pub failure: FailureMode,
}

/// Simulator configuration as written in a file (`--config`, YAML or JSON) or in code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SimConfig {
    /// Vendor API credentials.
    pub credentials: VendorCredentials,
    /// Most proxies alive at once (vendor API and `spawn_proxy` together).
    pub max_live_proxies: usize,
    /// Most proxies one `GET /v1/proxies` may ask for.
    pub max_per_request: u32,
    /// Shortest TTL the vendor API hands out, in seconds.
    pub ttl_min_seconds: u64,
    /// Longest TTL the vendor API hands out, in seconds.
    pub ttl_max_seconds: u64,
    /// Region labels; a request may ask for one, otherwise one is picked at random.
    pub regions: Vec<String>,
    /// Carrier labels; a request may ask for one, otherwise one is picked at random.
    pub carriers: Vec<String>,
    /// City labels; a request may ask for one, otherwise one is picked at random.
    /// Empty (the default): proxies have no city unless the control API or
    /// `spawn_proxy_with` gives one.
    pub cities: Vec<String>,
    /// Address the proxies listen on and the vendor API reports as their host:
    /// loopback, or with `allowNonLoopbackListen` any unicast address (a pod IP).
    pub proxy_listen_ip: Ipv4Addr,
    /// Lets `proxyListenIp` be a non-loopback address, so the proxies are reachable from
    /// other machines' (or pods') gateways and checkers. Off by default. The proxies still
    /// reach loopback targets only, and egress addresses stay loopback.
    pub allow_non_loopback_listen: bool,
    /// First per-proxy egress (source) address.
    pub egress_first_ip: Ipv4Addr,
    /// Last per-proxy egress (source) address.
    pub egress_last_ip: Ipv4Addr,
    /// Source address used by the `wrongEgress` failure mode.
    pub shared_egress_ip: Ipv4Addr,
    /// Concurrent client connections one proxy accepts; more are closed on accept.
    pub max_connections_per_proxy: usize,
    /// Concurrent connections the echo servers accept, each.
    pub max_echo_connections: usize,
    /// Time a client has to finish a proxy handshake, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// Time a proxy waits to connect to a target, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Failure modes given to a share of proxies issued by the vendor API.
    pub failure_mix: Vec<FailureShare>,
    /// Answer HTTP-proxy requests (absolute-URI and `CONNECT`) addressed to the
    /// plain-HTTP echo server inside the proxy's own process instead of over a second
    /// loopback connection. Off by default; the gateway benchmark turns it on so the
    /// target's cost stays off the cores the proxies under test share. The reply still
    /// reports the proxy's egress address (port 0). Not for proxies with a byte budget
    /// (`dropAfter`), nor for SOCKS5 proxies: those always dial.
    pub inline_echo: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            credentials: VendorCredentials::default(),
            max_live_proxies: 256,
            max_per_request: 100,
            ttl_min_seconds: 30,
            ttl_max_seconds: 180,
            regions: ["shanghai", "beijing", "guangzhou", "shenzhen"]
                .map(String::from)
                .to_vec(),
            carriers: ["telecom", "unicom", "mobile"].map(String::from).to_vec(),
            cities: Vec::new(),
            proxy_listen_ip: Ipv4Addr::LOCALHOST,
            allow_non_loopback_listen: false,
            egress_first_ip: Ipv4Addr::new(127, 0, 0, 2),
            egress_last_ip: Ipv4Addr::new(127, 0, 3, 254),
            shared_egress_ip: Ipv4Addr::LOCALHOST,
            max_connections_per_proxy: 64,
            max_echo_connections: 1024,
            handshake_timeout_ms: 10_000,
            connect_timeout_ms: 5_000,
            failure_mix: Vec::new(),
            inline_echo: false,
        }
    }
}

/// Most live proxies any configuration may ask for (each holds a listening socket).
pub const MAX_LIVE_PROXIES: usize = 10_000;

/// Typed, validated settings. Built only by [`SimConfig::validate`].
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) credentials: VendorCredentials,
    pub(crate) max_live_proxies: usize,
    pub(crate) max_per_request: u32,
    pub(crate) ttl: TtlRange,
    pub(crate) regions: Vec<String>,
    pub(crate) carriers: Vec<String>,
    pub(crate) cities: Vec<String>,
    pub(crate) proxy_listen_ip: Ipv4Addr,
    pub(crate) egress_first: Ipv4Addr,
    pub(crate) egress_last: Ipv4Addr,
    pub(crate) shared_egress_ip: Ipv4Addr,
    pub(crate) max_connections_per_proxy: usize,
    pub(crate) max_echo_connections: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) failure_mix: Vec<FailureShare>,
    pub(crate) inline_echo: bool,
}

/// An inclusive TTL range, `min <= max`, both non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlRange {
    min: Duration,
    max: Duration,
}

impl TtlRange {
    /// Draws one TTL, whole seconds, uniformly from the range.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> Duration {
        Duration::from_secs(rng.random_range(self.min.as_secs()..=self.max.as_secs()))
    }
}

impl Settings {
    /// Picks the starting failure mode for a proxy issued by the vendor API.
    pub(crate) fn draw_failure(&self, rng: &mut impl Rng) -> FailureMode {
        let roll: f64 = rng.random();
        let mut acc = 0.0;
        for share in &self.failure_mix {
            acc += share.probability;
            if roll < acc {
                return share.failure;
            }
        }
        FailureMode::None
    }
}

impl SimConfig {
    /// Checks every field and returns typed settings, or every problem found.
    pub(crate) fn validate(&self) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let mut bad = |field: &str, msg: &str| problems.push(format!("{field}: {msg}"));
        let c = &self.credentials;
        if c.api_key.expose().is_empty() {
            bad("credentials.apiKey", "must not be empty");
        }
        if c.username.is_empty() || c.username.contains(':') {
            bad("credentials.username", "must be non-empty without ':'");
        }
        if c.password.expose().is_empty() {
            bad("credentials.password", "must not be empty");
        }
        if !(1..=MAX_LIVE_PROXIES).contains(&self.max_live_proxies) {
            bad(
                "maxLiveProxies",
                &format!("must be in 1..={MAX_LIVE_PROXIES}"),
            );
        }
        if self.max_per_request == 0 {
            bad("maxPerRequest", "must be at least 1");
        }
        if self.ttl_min_seconds == 0 {
            bad("ttlMinSeconds", "must be at least 1");
        }
        if self.ttl_max_seconds < self.ttl_min_seconds {
            bad("ttlMaxSeconds", "must be >= ttlMinSeconds");
        }
        if self.ttl_max_seconds > MAX_PROXY_TTL.as_secs() {
            bad(
                "ttlMaxSeconds",
                &format!("must be at most {}", MAX_PROXY_TTL.as_secs()),
            );
        }
        check_labels("regions", &self.regions, &mut bad);
        check_labels("carriers", &self.carriers, &mut bad);
        if !self.cities.is_empty() {
            check_labels("cities", &self.cities, &mut bad);
        }
        let listen = self.proxy_listen_ip;
        if self.allow_non_loopback_listen {
            if listen.is_unspecified() || listen.is_multicast() || listen.is_broadcast() {
                bad(
                    "proxyListenIp",
                    "must be one unicast address (the vendor API reports it as the proxies' host)",
                );
            }
        } else if !listen.is_loopback() {
            bad(
                "proxyListenIp",
                "must be a loopback address (127.0.0.0/8) unless allowNonLoopbackListen is set",
            );
        }
        for (field, ip) in [
            ("egressFirstIp", self.egress_first_ip),
            ("egressLastIp", self.egress_last_ip),
            ("sharedEgressIp", self.shared_egress_ip),
        ] {
            if !ip.is_loopback() {
                bad(field, "must be a loopback address (127.0.0.0/8)");
            }
        }
        if u32::from(self.egress_last_ip) < u32::from(self.egress_first_ip) {
            bad("egressLastIp", "must not come before egressFirstIp");
        }
        if self.max_connections_per_proxy == 0 {
            bad("maxConnectionsPerProxy", "must be at least 1");
        }
        if self.max_echo_connections == 0 {
            bad("maxEchoConnections", "must be at least 1");
        }
        if self.handshake_timeout_ms == 0 {
            bad("handshakeTimeoutMs", "must be at least 1");
        }
        if self.connect_timeout_ms == 0 {
            bad("connectTimeoutMs", "must be at least 1");
        }
        let mut total = 0.0;
        for (i, share) in self.failure_mix.iter().enumerate() {
            if !(0.0..=1.0).contains(&share.probability) {
                bad(&format!("failureMix[{i}].probability"), "must be in [0, 1]");
            }
            if let Err(msg) = share.failure.check() {
                bad(&format!("failureMix[{i}].failure"), &msg);
            }
            total += share.probability;
        }
        if total > 1.0 + f64::EPSILON {
            bad("failureMix", "probabilities must add up to at most 1");
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Settings {
            credentials: self.credentials.clone(),
            max_live_proxies: self.max_live_proxies,
            max_per_request: self.max_per_request,
            ttl: TtlRange {
                min: Duration::from_secs(self.ttl_min_seconds),
                max: Duration::from_secs(self.ttl_max_seconds),
            },
            regions: self.regions.clone(),
            carriers: self.carriers.clone(),
            cities: self.cities.clone(),
            proxy_listen_ip: self.proxy_listen_ip,
            egress_first: self.egress_first_ip,
            egress_last: self.egress_last_ip,
            shared_egress_ip: self.shared_egress_ip,
            max_connections_per_proxy: self.max_connections_per_proxy,
            max_echo_connections: self.max_echo_connections,
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            failure_mix: self.failure_mix.clone(),
            inline_echo: self.inline_echo,
        })
    }
}

fn check_labels(field: &str, labels: &[String], bad: &mut impl FnMut(&str, &str)) {
    if labels.is_empty() {
        bad(field, "must list at least one label");
    }
    for (i, label) in labels.iter().enumerate() {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !ok {
            bad(
                &format!("{field}[{i}]"),
                "must be 1-63 characters of [A-Za-z0-9_-]",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        let settings = SimConfig::default().validate().unwrap();
        assert_eq!(settings.max_live_proxies, 256);
    }

    #[test]
    fn validation_reports_every_problem_with_its_path() {
        let config = SimConfig {
            max_live_proxies: 0,
            ttl_min_seconds: 10,
            ttl_max_seconds: 5,
            regions: vec![],
            carriers: vec!["ok".into(), "not ok!".into()],
            cities: vec!["new york".into()],
            egress_first_ip: Ipv4Addr::new(10, 0, 0, 1),
            failure_mix: vec![
                FailureShare {
                    probability: 0.8,
                    failure: FailureMode::Refuse,
                },
                FailureShare {
                    probability: 0.8,
                    failure: FailureMode::BadAuth,
                },
            ],
            ..SimConfig::default()
        };
        let err = config.validate().unwrap_err();
        let text = err.to_string();
        for path in [
            "maxLiveProxies",
            "ttlMaxSeconds",
            "regions:",
            "carriers[1]",
            "cities[0]",
            "egressFirstIp",
            "failureMix:",
        ] {
            assert!(text.contains(path), "{path} missing from {text}");
        }
        assert_eq!(err.problems.len(), 7);
    }

    #[test]
    fn a_non_loopback_proxy_address_needs_the_explicit_opt_in() {
        let pod_ip = Ipv4Addr::new(10, 244, 0, 7);
        let refused = SimConfig {
            proxy_listen_ip: pod_ip,
            ..SimConfig::default()
        };
        let text = refused.validate().unwrap_err().to_string();
        assert!(
            text.contains("proxyListenIp") && text.contains("allowNonLoopbackListen"),
            "{text}"
        );
        let allowed = SimConfig {
            proxy_listen_ip: pod_ip,
            allow_non_loopback_listen: true,
            ..SimConfig::default()
        };
        assert_eq!(allowed.validate().unwrap().proxy_listen_ip, pod_ip);
        // The opt-in is about where the proxies listen; egress stays on loopback.
        let egress = SimConfig {
            egress_first_ip: pod_ip,
            ..allowed.clone()
        };
        assert!(
            egress
                .validate()
                .unwrap_err()
                .to_string()
                .contains("egressFirstIp")
        );
        let any = SimConfig {
            proxy_listen_ip: Ipv4Addr::UNSPECIFIED,
            ..allowed
        };
        assert!(
            any.validate()
                .unwrap_err()
                .to_string()
                .contains("one unicast address")
        );
    }

    #[test]
    fn config_file_rejects_unknown_fields_and_fills_defaults() {
        let parsed: SimConfig =
            serde_yaml::from_str("maxLiveProxies: 5\nttlMinSeconds: 1\nttlMaxSeconds: 2\n")
                .unwrap();
        assert_eq!(parsed.max_live_proxies, 5);
        assert_eq!(parsed.regions, SimConfig::default().regions);
        assert!(serde_yaml::from_str::<SimConfig>("maxLive: 5\n").is_err());
    }

    #[test]
    fn ttl_sample_stays_in_range() {
        let settings = SimConfig {
            ttl_min_seconds: 3,
            ttl_max_seconds: 7,
            ..SimConfig::default()
        }
        .validate()
        .unwrap();
        let mut rng = rand::rng();
        for _ in 0..200 {
            let ttl = settings.ttl.sample(&mut rng).as_secs();
            assert!((3..=7).contains(&ttl));
        }
    }

    #[test]
    fn failure_mix_draws_configured_modes() {
        let settings = SimConfig {
            failure_mix: vec![FailureShare {
                probability: 1.0,
                failure: FailureMode::Refuse,
            }],
            ..SimConfig::default()
        }
        .validate()
        .unwrap();
        assert_eq!(settings.draw_failure(&mut rand::rng()), FailureMode::Refuse);
        let none = SimConfig::default().validate().unwrap();
        assert_eq!(none.draw_failure(&mut rand::rng()), FailureMode::None);
    }

    #[test]
    fn credentials_debug_hides_secrets() {
        let text = format!("{:?}", VendorCredentials::default());
        assert!(!text.contains("secret") && !text.contains("api-key"));
    }
}
