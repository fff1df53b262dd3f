//! Value types the simulator hands out: protocols, proxy descriptions as a vendor
//! would return them, live status for the control API, and timestamp formatting.

use proxy_pool_api::controlplane::model::{Credentials, Secret};
use proxy_pool_api::proxy::{Dial, Labels};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::failure::FailureMode;

/// The protocol a simulated proxy speaks to its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP forward proxy: `CONNECT` tunnels and absolute-URI forwarding.
    Http,
    /// SOCKS5 with username/password authentication, `CONNECT` only.
    Socks5,
}

impl Protocol {
    /// The URL scheme (`http` or `socks5`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Socks5 => "socks5",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "http" => Ok(Self::Http),
            "socks5" => Ok(Self::Socks5),
            other => Err(format!("unknown protocol {other:?} (http or socks5)")),
        }
    }
}

/// Longest TTL any proxy may have (a week: far past any vendor's, and no clock overflow).
pub const MAX_PROXY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What to create when spawning a proxy directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySpec {
    /// Client-facing protocol.
    pub protocol: Protocol,
    /// Time until the proxy stops accepting and closes its tunnels.
    pub ttl: Duration,
    /// Initial failure mode.
    pub failure: FailureMode,
    /// Labels (the contract's dimensions); one left `None` picks the first value
    /// configured for it.
    pub labels: Labels<String>,
}

impl ProxySpec {
    /// A spec with the given protocol and TTL, healthy, default labels.
    pub fn new(protocol: Protocol, ttl: Duration) -> Self {
        Self {
            protocol,
            ttl,
            failure: FailureMode::None,
            labels: Labels::default(),
        }
    }
}

/// A simulated proxy as the vendor API describes it (the JSON item of `GET /v1/proxies`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimProxy {
    /// Vendor-side identifier.
    pub id: String,
    /// `http` or `socks5`.
    pub protocol: Protocol,
    /// Host the proxy listens on.
    pub host: Ipv4Addr,
    /// Port the proxy listens on.
    pub port: u16,
    /// Proxy user name.
    pub username: String,
    /// Proxy password.
    pub password: String,
    /// Region label.
    pub region: String,
    /// Carrier label.
    pub carrier: String,
    /// City label, when it has one (left out of the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    /// Hard expiry, RFC 3339 UTC with milliseconds.
    pub expires_at: String,
    /// TTL the proxy was created with, whole seconds (rounded up).
    pub ttl_seconds: u64,
}

impl fmt::Debug for SimProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimProxy")
            .field("id", &self.id)
            .field("protocol", &self.protocol)
            .field("addr", &self.addr())
            .field("username", &self.username)
            .field("region", &self.region)
            .field("carrier", &self.carrier)
            .field("city", &self.city)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl SimProxy {
    /// The proxy's listening address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.host, self.port))
    }

    /// How a gateway or checker dials this proxy: the contract's [`Dial`], with the
    /// proxy's own credentials.
    pub fn dial(&self) -> Dial {
        Dial {
            protocol: match self.protocol {
                Protocol::Http => proxy_pool_api::proxy::Protocol::Http,
                Protocol::Socks5 => proxy_pool_api::proxy::Protocol::Socks5,
            },
            host: self.host.to_string(),
            port: self.port,
            credentials: Some(Credentials {
                username: self.username.clone(),
                password: Secret::new(self.password.clone()),
            }),
        }
    }

    /// `protocol://user:pass@host:port` — the vendor's line format.
    pub fn url(&self) -> String {
        format!(
            "{}://{}:{}@{}:{}",
            self.protocol, self.username, self.password, self.host, self.port
        )
    }
}

/// A live proxy as the control API lists it: the vendor view plus simulator state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    /// The vendor view of the proxy.
    #[serde(flatten)]
    pub proxy: SimProxy,
    /// Source address its outbound connections use when healthy.
    pub egress_ip: Ipv4Addr,
    /// Current failure mode.
    pub failure: FailureMode,
    /// Client connections open right now.
    pub active_connections: usize,
}

/// Formats a time as RFC 3339 UTC with millisecond precision.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_123); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_012_345);
        assert_eq!(rfc3339(t), "2026-11-30T04:19:05.000Z");
    }

    #[test]
    fn protocol_round_trips() {
        assert_eq!("socks5".parse::<Protocol>(), Ok(Protocol::Socks5));
        assert!("ftp".parse::<Protocol>().is_err());
        assert_eq!(serde_json::to_string(&Protocol::Http).unwrap(), r#""http""#);
    }

    #[test]
    fn debug_hides_the_password() {
        let proxy = SimProxy {
            id: "p1".into(),
            protocol: Protocol::Http,
            host: Ipv4Addr::LOCALHOST,
            port: 1,
            username: "u".into(),
            password: "hunter2".into(),
            region: "r".into(),
            carrier: "c".into(),
            city: None,
            expires_at: String::new(),
            ttl_seconds: 1,
        };
        assert!(!format!("{proxy:?}").contains("hunter2"));
        assert_eq!(proxy.url(), "http://u:hunter2@127.0.0.1:1");
    }
}
