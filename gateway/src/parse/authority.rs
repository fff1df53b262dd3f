//! Parser for request targets: the CONNECT authority (`host:port`, `[v6]:port`) and
//! absolute `http://` URIs. Pure, bounded and panic-free; hosts are borrowed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest domain name accepted (RFC 1035).
pub const MAX_DOMAIN: usize = 253;
/// Longest absolute URI accepted.
pub const MAX_URI: usize = 8 * 1024;

/// A target host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host<'a> {
    /// IPv4 literal.
    V4(Ipv4Addr),
    /// IPv6 literal (bracketed in an authority).
    V6(Ipv6Addr),
    /// A DNS name: letters, digits, `-`, `_`, dots.
    Domain(&'a str),
}

impl Host<'_> {
    /// The IP, when the host is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Self::V4(ip) => Some(IpAddr::V4(*ip)),
            Self::V6(ip) => Some(IpAddr::V6(*ip)),
            Self::Domain(_) => None,
        }
    }
}

impl fmt::Display for Host<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::V4(ip) => write!(f, "{ip}"),
            Self::V6(ip) => write!(f, "[{ip}]"),
            Self::Domain(d) => f.write_str(d),
        }
    }
}

/// `host:port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority<'a> {
    /// Host.
    pub host: Host<'a>,
    /// Port, never 0.
    pub port: u16,
}

impl fmt::Display for Authority<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// An absolute `http://` URI split for forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbsoluteUri<'a> {
    /// Target host and port (80 when absent).
    pub authority: Authority<'a>,
    /// The authority exactly as written (for a `Host` header).
    pub authority_raw: &'a [u8],
    /// Path and query, `/` when empty.
    pub path_and_query: &'a [u8],
}

/// Why a target was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    /// No `:port`.
    #[error("missing port")]
    MissingPort,
    /// Port not in 1..=65535.
    #[error("invalid port")]
    BadPort,
    /// Host is empty or has characters a host cannot have.
    #[error("invalid host")]
    BadHost,
    /// Not an absolute `http://` URI.
    #[error("not an absolute http URI")]
    NotAbsoluteHttp,
    /// User info (`user@host`) in a URI.
    #[error("user info in URI")]
    UserInfo,
    /// Longer than allowed.
    #[error("target too long")]
    TooLong,
}

/// Parses a CONNECT target: `host:port` or `[v6]:port`, port required.
pub fn parse_authority(bytes: &[u8]) -> Result<Authority<'_>, AuthorityError> {
    parse_host_port(bytes, None)
}

/// Parses `host[:port]`, using `default_port` when the port is absent.
pub fn parse_host_port(
    bytes: &[u8],
    default_port: Option<u16>,
) -> Result<Authority<'_>, AuthorityError> {
    if bytes.len() > MAX_DOMAIN + 8 {
        return Err(AuthorityError::TooLong);
    }
    let (host, port) = if let Some(rest) = bytes.strip_prefix(b"[") {
        let close = rest
            .iter()
            .position(|&b| b == b']')
            .ok_or(AuthorityError::BadHost)?;
        let ip = std::str::from_utf8(&rest[..close])
            .ok()
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .ok_or(AuthorityError::BadHost)?;
        let port = match &rest[close + 1..] {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return Err(AuthorityError::BadHost),
        };
        (Host::V6(ip), port)
    } else {
        let (host, port) = match bytes.iter().rposition(|&b| b == b':') {
            Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
            None => (bytes, None),
        };
        (parse_host(host)?, port)
    };
    let port = match (port, default_port) {
        (Some(p), _) => parse_port(p)?,
        (None, Some(d)) => d,
        (None, None) => return Err(AuthorityError::MissingPort),
    };
    Ok(Authority { host, port })
}

/// Parses a host without port: IPv4 literal or DNS name (IPv6 needs brackets).
pub fn parse_host(bytes: &[u8]) -> Result<Host<'_>, AuthorityError> {
    if bytes.is_empty() || bytes.len() > MAX_DOMAIN {
        return Err(AuthorityError::BadHost);
    }
    let ok = bytes
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !ok || bytes.starts_with(b".") || bytes.windows(2).any(|w| w == b"..") {
        return Err(AuthorityError::BadHost);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| AuthorityError::BadHost)?;
    if let Ok(ip) = text.parse::<Ipv4Addr>() {
        return Ok(Host::V4(ip));
    }
    if bytes.iter().all(|&b| b.is_ascii_digit() || b == b'.') {
        // Looks numeric but is no valid IPv4 address (e.g. 1.2.3.999, 01.2.3.4).
        return Err(AuthorityError::BadHost);
    }
    Ok(Host::Domain(text))
}

fn parse_port(bytes: &[u8]) -> Result<u16, AuthorityError> {
    if bytes.is_empty() || bytes.len() > 5 || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(AuthorityError::BadPort);
    }
    let n = bytes
        .iter()
        .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    match u16::try_from(n) {
        Ok(0) | Err(_) => Err(AuthorityError::BadPort),
        Ok(port) => Ok(port),
    }
}

/// Parses an absolute `http://authority[/path][?query]` request target.
pub fn parse_absolute_uri(bytes: &[u8]) -> Result<AbsoluteUri<'_>, AuthorityError> {
    if bytes.len() > MAX_URI {
        return Err(AuthorityError::TooLong);
    }
    let scheme_len = b"http://".len();
    let prefix = bytes
        .get(..scheme_len)
        .ok_or(AuthorityError::NotAbsoluteHttp)?;
    if !prefix.eq_ignore_ascii_case(b"http://") {
        return Err(AuthorityError::NotAbsoluteHttp);
    }
    let rest = &bytes[scheme_len..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?' || b == b'#')
        .unwrap_or(rest.len());
    let authority_raw = &rest[..end];
    if authority_raw.contains(&b'@') {
        return Err(AuthorityError::UserInfo);
    }
    let authority = parse_host_port(authority_raw, Some(80))?;
    let tail = &rest[end..];
    let tail = match tail.iter().position(|&b| b == b'#') {
        Some(i) => &tail[..i],
        None => tail,
    };
    let path_and_query: &[u8] = match tail.first() {
        Some(b'/') => tail,
        _ => b"/",
    };
    Ok(AbsoluteUri {
        authority,
        authority_raw,
        path_and_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connect_authorities() {
        assert_eq!(
            parse_authority(b"example.com:443"),
            Ok(Authority {
                host: Host::Domain("example.com"),
                port: 443
            })
        );
        assert_eq!(
            parse_authority(b"127.0.0.1:8080").unwrap().host,
            Host::V4(Ipv4Addr::LOCALHOST)
        );
        assert_eq!(
            parse_authority(b"[::1]:22").unwrap().host,
            Host::V6(Ipv6Addr::LOCALHOST)
        );
        crate::parse::assert_refused_all(
            |bad| parse_authority(bad).map(drop),
            &[
                b"example.com",
                b"example.com:0",
                b"example.com:65536",
                b":80",
                b"exa mple.com:80",
                b"[::1:80",
                b"[zz]:80",
                b"1.2.3.999:80",
                b"a..b:80",
                b"user@host:80",
            ],
        );
    }

    #[test]
    fn absolute_uris() {
        let uri = parse_absolute_uri(b"http://Example.com:8080/a/b?c=d#frag").unwrap();
        assert_eq!(uri.authority.port, 8080);
        assert_eq!(uri.authority_raw, b"Example.com:8080");
        assert_eq!(uri.path_and_query, b"/a/b?c=d");
        let uri = parse_absolute_uri(b"http://h?x").unwrap();
        assert_eq!(uri.authority.port, 80);
        assert_eq!(uri.path_and_query, b"/");
        assert_eq!(
            parse_absolute_uri(b"https://h/"),
            Err(AuthorityError::NotAbsoluteHttp)
        );
        assert_eq!(
            parse_absolute_uri(b"/path"),
            Err(AuthorityError::NotAbsoluteHttp)
        );
        assert_eq!(
            parse_absolute_uri(b"http://u:p@h/"),
            Err(AuthorityError::UserInfo)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_authority(&bytes);
            let _ = parse_absolute_uri(&bytes);
        }

        #[test]
        fn valid_authorities_round_trip(host in "[a-z][a-z0-9-]{0,20}(\\.[a-z0-9]{1,10}){0,3}", port in 1u16..) {
            let text = format!("{host}:{port}");
            let parsed = parse_authority(text.as_bytes()).unwrap();
            prop_assert_eq!(parsed.to_string(), text);
        }
    }
}
