//! The PROXY protocol header (HAProxy's spec, versions 1 and 2) that a load balancer
//! sends before the client's bytes, carrying the client's own address. The listener
//! reads it only from configured trusted sources; this parser is pure, bounded and
//! panic-free (fuzzed by `gateway/fuzz`'s `proxy_protocol` target).
//!
//! - v1: `PROXY TCP4|TCP6|UNKNOWN <src> <dst> <sport> <dport>\r\n`, at most 107 bytes;
//! - v2: the 12-byte signature, version/command, family/transport, a 16-bit length and
//!   the addresses, then TLVs (ignored); at most [`MAX_V2_LEN`] bytes in total.
//!
//! `LOCAL` (v2) and `UNKNOWN` (v1) headers, and v2 families other than TCP/UDP over IPv4
//! or IPv6, carry no usable address: the connection's own peer address stays in force.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::socks5::Parsed;

/// Longest v1 header, CRLF included (the spec's bound).
pub const MAX_V1_LEN: usize = 107;
/// Longest v2 header accepted: the 16-byte fixed part and up to 2,032 bytes of
/// addresses and TLVs (a Unix-socket address block is 216 bytes; load balancers add a
/// few TLVs). Longer headers are refused rather than buffered.
pub const MAX_V2_LEN: usize = 2048;
/// The v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8] = b"PROXY ";

/// What a header says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The original client's address and port; `None` when the header carries none
    /// (v1 `UNKNOWN`, v2 `LOCAL`, or an address family without one).
    pub source: Option<SocketAddr>,
    /// The address the client connected to, when carried.
    pub destination: Option<SocketAddr>,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyProtocolError {
    /// The bytes start with neither the v1 prefix nor the v2 signature.
    #[error("not a PROXY protocol header")]
    Missing,
    /// A v1 line without CRLF within 107 bytes, or with bad fields.
    #[error("malformed PROXY protocol v1 header")]
    MalformedV1,
    /// A v2 header whose version nibble is not 2 or whose command is neither LOCAL nor
    /// PROXY.
    #[error("unsupported PROXY protocol v2 version or command")]
    UnsupportedV2,
    /// A v2 header whose length is too short for its address family, or longer than
    /// [`MAX_V2_LEN`].
    #[error("bad PROXY protocol v2 length")]
    BadV2Length,
}

/// Parses a header at the start of `buf`: [`Parsed::Incomplete`] while `buf` is a
/// proper prefix of one, else the header and the bytes it took (the client's own bytes
/// follow).
pub fn parse_proxy_header(buf: &[u8]) -> Result<Parsed<ProxyHeader>, ProxyProtocolError> {
    if starts_like(buf, &V2_SIGNATURE) {
        return if buf.len() < V2_SIGNATURE.len() {
            Ok(Parsed::Incomplete)
        } else {
            parse_v2(buf)
        };
    }
    if starts_like(buf, V1_PREFIX) {
        return if buf.len() < V1_PREFIX.len() {
            Ok(Parsed::Incomplete)
        } else {
            parse_v1(buf)
        };
    }
    Err(ProxyProtocolError::Missing)
}

/// Whether `buf` and `prefix` agree on their common length (an empty `buf` agrees).
fn starts_like(buf: &[u8], prefix: &[u8]) -> bool {
    let n = buf.len().min(prefix.len());
    buf[..n] == prefix[..n]
}

fn parse_v1(buf: &[u8]) -> Result<Parsed<ProxyHeader>, ProxyProtocolError> {
    let window = &buf[..buf.len().min(MAX_V1_LEN)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= MAX_V1_LEN {
            Err(ProxyProtocolError::MalformedV1)
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    let line = std::str::from_utf8(&buf[V1_PREFIX.len()..end])
        .map_err(|_| ProxyProtocolError::MalformedV1)?;
    let mut fields = line.split(' ');
    let header = match fields.next() {
        // Whatever follows UNKNOWN is ignored (the spec's rule).
        Some("UNKNOWN") => ProxyHeader {
            source: None,
            destination: None,
        },
        Some(family @ ("TCP4" | "TCP6")) => {
            let mut next = || fields.next().ok_or(ProxyProtocolError::MalformedV1);
            let (src, dst, sport, dport) = (next()?, next()?, next()?, next()?);
            if fields.next().is_some() {
                return Err(ProxyProtocolError::MalformedV1);
            }
            let ip = |s: &str| -> Result<IpAddr, ProxyProtocolError> {
                let ip = match family {
                    "TCP4" => s.parse::<Ipv4Addr>().map(IpAddr::V4),
                    _ => s.parse::<Ipv6Addr>().map(IpAddr::V6),
                };
                ip.map_err(|_| ProxyProtocolError::MalformedV1)
            };
            ProxyHeader {
                source: Some(SocketAddr::new(ip(src)?, v1_port(sport)?)),
                destination: Some(SocketAddr::new(ip(dst)?, v1_port(dport)?)),
            }
        }
        _ => return Err(ProxyProtocolError::MalformedV1),
    };
    Ok(Parsed::Done(header, end + 2))
}

/// A v1 port: decimal digits only, no sign or leading zero (the spec's form).
fn v1_port(s: &str) -> Result<u16, ProxyProtocolError> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return Err(ProxyProtocolError::MalformedV1);
    }
    s.parse().map_err(|_| ProxyProtocolError::MalformedV1)
}

fn parse_v2(buf: &[u8]) -> Result<Parsed<ProxyHeader>, ProxyProtocolError> {
    const FIXED: usize = 16;
    let Some(fixed) = buf.get(..FIXED) else {
        // The version/command byte can be judged before the rest arrives.
        if let Some(&vc) = buf.get(12) {
            check_version_command(vc)?;
        }
        return Ok(Parsed::Incomplete);
    };
    let command = check_version_command(fixed[12])?;
    let family = fixed[13];
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let total = FIXED + len;
    if total > MAX_V2_LEN {
        return Err(ProxyProtocolError::BadV2Length);
    }
    let Some(body) = buf.get(FIXED..total) else {
        return Ok(Parsed::Incomplete);
    };
    let none = ProxyHeader {
        source: None,
        destination: None,
    };
    let header = match (command, family >> 4) {
        // LOCAL: a health check from the balancer itself; the body is skipped.
        (Command::Local, _) => none,
        // AF_INET over any transport byte: 4 + 4 + 2 + 2 bytes.
        (Command::Proxy, 0x1) => {
            let a = body.get(..12).ok_or(ProxyProtocolError::BadV2Length)?;
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            addresses(ip(0), ip(4), &a[8..12])
        }
        // AF_INET6: 16 + 16 + 2 + 2 bytes.
        (Command::Proxy, 0x2) => {
            let a = body.get(..36).ok_or(ProxyProtocolError::BadV2Length)?;
            let ip = |i: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&a[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            addresses(ip(0), ip(16), &a[32..36])
        }
        // AF_UNSPEC, AF_UNIX or a future family: no usable address.
        (Command::Proxy, _) => none,
    };
    Ok(Parsed::Done(header, total))
}

#[derive(Clone, Copy)]
enum Command {
    Local,
    Proxy,
}

fn check_version_command(byte: u8) -> Result<Command, ProxyProtocolError> {
    match byte {
        0x20 => Ok(Command::Local),
        0x21 => Ok(Command::Proxy),
        _ => Err(ProxyProtocolError::UnsupportedV2),
    }
}

fn addresses(src: IpAddr, dst: IpAddr, ports: &[u8]) -> ProxyHeader {
    ProxyHeader {
        source: Some(SocketAddr::new(
            src,
            u16::from_be_bytes([ports[0], ports[1]]),
        )),
        destination: Some(SocketAddr::new(
            dst,
            u16::from_be_bytes([ports[2], ports[3]]),
        )),
    }
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
