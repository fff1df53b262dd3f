//! The egress policy: which addresses Proxy Pool dials (or has a vendor proxy dial) on
//! behalf of someone else. One definition for every binary that dials an address it did
//! not choose — the controller's provider (vendor-supplied proxy addresses), the checker
//! (proxies it probes) and the gateway (vendor proxies, and targets clients ask for).
//!
//! An address is refused when it is in a built-in deny range ([`BUILTIN_DENY`]: loopback,
//! link-local with the 169.254.169.254 metadata endpoint, unspecified, multicast and
//! broadcast) or a configured one (a cluster's pod and service ranges), unless a
//! configured allow range contains it — the explicit opt-in local runs and tests use for
//! loopback. IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
//!
//! CONNECT ports are an allow-list ([`PortRanges`], default 80 and 443), set per Routing.
//!
//! Pure: no I/O, no DNS. Callers resolve names and judge every resolved address.

use std::fmt;
use std::net::IpAddr;
use std::sync::LazyLock;

use ipnet::IpNet;

/// Ranges refused whatever the configuration says, unless an allow range covers them.
pub const BUILTIN_DENY: [&str; 11] = [
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/8",
    "::/128",
    "224.0.0.0/4",
    "ff00::/8",
    "255.255.255.255/32",
    "100.100.100.200/32",
    "fd00:ec2::254/128",
];

/// Most CIDRs in one deny or allow list.
pub const MAX_CIDRS: usize = 256;

/// Why an address was refused: a short, bounded label (metrics, headers, logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EgressDenied {
    /// Loopback (`127.0.0.0/8`, `::1`).
    Loopback,
    /// Link-local, including the cloud metadata endpoint `169.254.169.254`.
    LinkLocal,
    /// Unspecified, multicast, broadcast or another built-in range.
    Reserved,
    /// A configured internal range (pod, service or other private CIDRs).
    Internal,
    /// A name that always means this machine (`localhost`, `*.localhost`).
    LocalName,
    /// A CONNECT port outside the Routing's allow-list.
    Port,
}

impl EgressDenied {
    /// Metric label and reason text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::LinkLocal => "link-local",
            Self::Reserved => "reserved",
            Self::Internal => "internal",
            Self::LocalName => "local-name",
            Self::Port => "port",
        }
    }

    /// Every reason (bounded label set).
    pub const ALL: [EgressDenied; 6] = [
        Self::Loopback,
        Self::LinkLocal,
        Self::Reserved,
        Self::Internal,
        Self::LocalName,
        Self::Port,
    ];
}

impl fmt::Display for EgressDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which addresses may be dialled. The default refuses the built-in ranges only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Configured internal ranges, refused like the built-in ones.
    deny: Vec<IpNet>,
    /// Ranges dialled even when a deny range covers them (explicit opt-in).
    allow: Vec<IpNet>,
}

impl EgressPolicy {
    /// A policy refusing the built-in ranges and `deny`, except what `allow` covers.
    pub fn new(deny: Vec<IpNet>, allow: Vec<IpNet>) -> Self {
        Self { deny, allow }
    }

    /// Parses CIDR (or bare IP) lists; every bad entry is reported with its index.
    pub fn parse(deny: &[String], allow: &[String]) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let deny = parse_cidrs("deny", deny, &mut problems);
        let allow = parse_cidrs("allow", allow, &mut problems);
        if problems.is_empty() {
            Ok(Self { deny, allow })
        } else {
            Err(problems)
        }
    }

    /// The policy of local runs and tests: loopback allowed, everything else as usual.
    pub fn allow_loopback() -> Self {
        Self::new(Vec::new(), vec![net("127.0.0.0/8"), net("::1/128")])
    }

    /// Configured deny ranges.
    pub fn deny(&self) -> &[IpNet] {
        &self.deny
    }

    /// Configured allow ranges.
    pub fn allow(&self) -> &[IpNet] {
        &self.allow
    }

    /// Judges one address.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), EgressDenied> {
        let ip = canonical(ip);
        if self.allow.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        if let Some(reason) = builtin(ip) {
            return Err(reason);
        }
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return Err(EgressDenied::Internal);
        }
        Ok(())
    }

    /// Judges a host as written: an IP literal by [`EgressPolicy::check_ip`], a name
    /// that always means this machine (`localhost`, `*.localhost`) like loopback. Other
    /// names pass here; whoever resolves them judges the addresses.
    pub fn check_host(&self, host: &str) -> Result<(), EgressDenied> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.check_ip(ip);
        }
        let lower = bare.trim_end_matches('.').to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            let loopback = IpAddr::from([127, 0, 0, 1]);
            return self.check_ip(loopback).map_err(|_| EgressDenied::LocalName);
        }
        Ok(())
    }
}

fn net(s: &str) -> IpNet {
    s.parse()
        .unwrap_or_else(|_| IpNet::from(IpAddr::from([0, 0, 0, 0])))
}

/// [`BUILTIN_DENY`], parsed once.
static BUILTIN: LazyLock<Vec<IpNet>> =
    LazyLock::new(|| BUILTIN_DENY.iter().map(|n| net(n)).collect());

fn parse_cidrs(field: &str, values: &[String], problems: &mut Vec<String>) -> Vec<IpNet> {
    if values.len() > MAX_CIDRS {
        problems.push(format!("{field}: at most {MAX_CIDRS} ranges"));
    }
    values
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let parsed = parse_cidr(t);
            if parsed.is_none() {
                problems.push(format!("{field}[{i}]: `{t}` is not a CIDR or IP address"));
            }
            parsed
        })
        .collect()
}

/// A CIDR or a bare IP address (a /32 or /128).
pub fn parse_cidr(text: &str) -> Option<IpNet> {
    let t = text.trim();
    t.parse::<IpNet>()
        .ok()
        .map(|n| n.trunc())
        .or_else(|| t.parse::<IpAddr>().ok().map(IpNet::from))
}

/// IPv4-mapped IPv6 addresses as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn builtin(ip: IpAddr) -> Option<EgressDenied> {
    if ip.is_loopback() {
        return Some(EgressDenied::Loopback);
    }
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local {
        return Some(EgressDenied::LinkLocal);
    }
    BUILTIN
        .iter()
        .any(|n| n.contains(&ip))
        .then_some(EgressDenied::Reserved)
}

/// One inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (≥ `first`).
    pub last: u16,
}

/// The ports CONNECT may reach (a Routing's `connectPorts`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortRanges(Vec<PortRange>);

/// Most entries in one port list.
pub const MAX_PORT_RANGES: usize = 64;

impl Default for PortRanges {
    /// 443 and 80.
    fn default() -> Self {
        Self(vec![
            PortRange {
                first: 443,
                last: 443,
            },
            PortRange {
                first: 80,
                last: 80,
            },
        ])
    }
}

impl PortRanges {
    /// From ranges as given (empty: the default).
    pub fn new(ranges: Vec<PortRange>) -> Self {
        if ranges.is_empty() {
            Self::default()
        } else {
            Self(ranges)
        }
    }

    /// Every port (`1-65535`).
    pub fn any() -> Self {
        Self(vec![PortRange {
            first: 1,
            last: u16::MAX,
        }])
    }

    /// The ranges.
    pub fn ranges(&self) -> &[PortRange] {
        &self.0
    }

    /// Whether `port` is allowed.
    pub fn allows(&self, port: u16) -> bool {
        self.0.iter().any(|r| (r.first..=r.last).contains(&port))
    }

    /// Parses entries like `443` or `8000-8999`; every bad entry is reported.
    pub fn parse(values: &[String]) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        if values.len() > MAX_PORT_RANGES {
            problems.push(format!("at most {MAX_PORT_RANGES} entries"));
        }
        let mut out = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            match parse_port_range(v) {
                Some(r) => out.push(r),
                None => problems.push(format!(
                    "[{i}]: `{v}` is not a port (1-65535) or a range `first-last`"
                )),
            }
        }
        if problems.is_empty() {
            Ok(Self::new(out))
        } else {
            Err(problems)
        }
    }

    /// The entries as they are written (`443`, `8000-8999`).
    pub fn to_strings(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|r| {
                if r.first == r.last {
                    r.first.to_string()
                } else {
                    format!("{}-{}", r.first, r.last)
                }
            })
            .collect()
    }
}

fn parse_port_range(text: &str) -> Option<PortRange> {
    let port = |s: &str| s.trim().parse::<u16>().ok().filter(|p| *p != 0);
    let (first, last) = match text.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let p = port(text)?;
            (p, p)
        }
    };
    (first <= last).then_some(PortRange { first, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn builtin_ranges_are_refused_by_default() {
        let p = EgressPolicy::default();
        assert_eq!(p.check_ip(ip("127.0.0.1")), Err(EgressDenied::Loopback));
        assert_eq!(p.check_ip(ip("127.3.4.5")), Err(EgressDenied::Loopback));
        assert_eq!(p.check_ip(ip("::1")), Err(EgressDenied::Loopback));
        assert_eq!(
            p.check_ip(ip("169.254.169.254")),
            Err(EgressDenied::LinkLocal)
        );
        assert_eq!(p.check_ip(ip("fe80::1")), Err(EgressDenied::LinkLocal));
        assert_eq!(p.check_ip(ip("0.0.0.0")), Err(EgressDenied::Reserved));
        assert_eq!(p.check_ip(ip("::")), Err(EgressDenied::Reserved));
        assert_eq!(p.check_ip(ip("239.1.1.1")), Err(EgressDenied::Reserved));
        assert_eq!(
            p.check_ip(ip("::ffff:127.0.0.1")),
            Err(EgressDenied::Loopback),
            "an IPv4-mapped address is the IPv4 address"
        );
        assert_eq!(
            p.check_ip(ip("::ffff:169.254.169.254")),
            Err(EgressDenied::LinkLocal)
        );
        assert_eq!(p.check_ip(ip("203.0.113.7")), Ok(()));
        assert_eq!(
            p.check_ip(ip("10.1.2.3")),
            Ok(()),
            "private is not built in"
        );
    }

    #[test]
    fn configured_ranges_deny_and_allow_opts_in() {
        let p = EgressPolicy::parse(
            &["10.96.0.0/12".into(), "10.244.0.0/16".into()],
            &["127.0.0.0/8".into(), "10.96.0.10".into()],
        )
        .expect("valid");
        assert_eq!(p.check_ip(ip("10.96.3.4")), Err(EgressDenied::Internal));
        assert_eq!(p.check_ip(ip("10.244.1.1")), Err(EgressDenied::Internal));
        assert_eq!(p.check_ip(ip("10.96.0.10")), Ok(()), "allow wins");
        assert_eq!(p.check_ip(ip("127.0.0.5")), Ok(()));
        assert_eq!(
            p.check_ip(ip("169.254.169.254")),
            Err(EgressDenied::LinkLocal),
            "allowing loopback does not allow the metadata endpoint"
        );
        let err = EgressPolicy::parse(&["nope".into()], &["1.2.3.4/99".into()]).unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(err[0].starts_with("deny[0]"), "{err:?}");
    }

    #[test]
    fn hosts_as_written() {
        let p = EgressPolicy::default();
        assert_eq!(p.check_host("localhost"), Err(EgressDenied::LocalName));
        assert_eq!(p.check_host("a.LocalHost."), Err(EgressDenied::LocalName));
        assert_eq!(p.check_host("[::1]"), Err(EgressDenied::Loopback));
        assert_eq!(
            p.check_host("169.254.169.254"),
            Err(EgressDenied::LinkLocal)
        );
        assert_eq!(p.check_host("example.com"), Ok(()));
        assert_eq!(
            EgressPolicy::allow_loopback().check_host("localhost"),
            Ok(())
        );
    }

    #[test]
    fn ports() {
        let d = PortRanges::default();
        assert!(d.allows(443) && d.allows(80) && !d.allows(22) && !d.allows(8080));
        let p = PortRanges::parse(&["22".into(), "8000-8010".into()]).expect("valid");
        assert!(p.allows(22) && p.allows(8005) && !p.allows(443));
        assert_eq!(p.to_strings(), vec!["22", "8000-8010"]);
        assert_eq!(
            PortRanges::parse(&[]).expect("empty"),
            PortRanges::default()
        );
        let err =
            PortRanges::parse(&["0".into(), "9-1".into(), "x".into(), "70000".into()]).unwrap_err();
        assert_eq!(err.len(), 4, "{err:?}");
        assert!(PortRanges::any().allows(1) && PortRanges::any().allows(65535));
    }
}
