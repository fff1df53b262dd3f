//! SOCKS5 handshake messages (RFC 1928 greeting and request, RFC 1929
//! username/password), parsed from bytes and encoded into fixed buffers. Pure and
//! panic-free: every length comes from the message's own length bytes, at most 255.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::Credentials;
use super::authority::{Host, parse_host};

/// Protocol version byte.
pub const VERSION: u8 = 0x05;
/// RFC 1929 sub-negotiation version.
pub const AUTH_VERSION: u8 = 0x01;
/// Method: no authentication.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method: username/password.
pub const METHOD_USER_PASS: u8 = 0x02;
/// Method reply: none acceptable.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;

/// Reply codes (RFC 1928 §6).
pub mod reply {
    /// Succeeded.
    pub const SUCCEEDED: u8 = 0x00;
    /// General SOCKS server failure.
    pub const GENERAL_FAILURE: u8 = 0x01;
    /// Connection not allowed by ruleset.
    pub const NOT_ALLOWED: u8 = 0x02;
    /// Network unreachable.
    pub const NETWORK_UNREACHABLE: u8 = 0x03;
    /// Host unreachable.
    pub const HOST_UNREACHABLE: u8 = 0x04;
    /// Connection refused.
    pub const CONNECTION_REFUSED: u8 = 0x05;
    /// TTL expired.
    pub const TTL_EXPIRED: u8 = 0x06;
    /// Command not supported.
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    /// Address type not supported.
    pub const ADDRESS_NOT_SUPPORTED: u8 = 0x08;
}

/// Result of parsing a possibly incomplete message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<T> {
    /// Need more bytes.
    Incomplete,
    /// A message and the bytes it took.
    Done(T, usize),
}

/// Why a message was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Socks5Error {
    /// Wrong version byte.
    #[error("unsupported SOCKS version {0}")]
    Version(u8),
    /// A greeting that offers no method.
    #[error("greeting offers no method")]
    NoMethods,
    /// Empty username.
    #[error("empty username")]
    EmptyUsername,
    /// Unknown address type (reply 0x08).
    #[error("address type {0} not supported")]
    AddressType(u8),
    /// Non-zero reserved byte.
    #[error("reserved byte must be zero")]
    Reserved,
    /// A domain name that is no valid host.
    #[error("invalid domain name")]
    BadDomain,
    /// Port 0.
    #[error("invalid port")]
    BadPort,
}

impl Socks5Error {
    /// The reply code to send for a request that failed to parse.
    pub fn reply_code(&self) -> u8 {
        match self {
            Self::AddressType(_) => reply::ADDRESS_NOT_SUPPORTED,
            _ => reply::GENERAL_FAILURE,
        }
    }
}

/// The methods a client offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting {
    /// Offers username/password.
    pub user_pass: bool,
    /// Offers no authentication.
    pub no_auth: bool,
}

/// The request command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// CONNECT.
    Connect,
    /// BIND.
    Bind,
    /// UDP ASSOCIATE.
    UdpAssociate,
    /// Anything else.
    Other(u8),
}

/// A SOCKS5 request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Command.
    pub command: Command,
    /// Destination host.
    pub host: Host<'a>,
    /// Destination port.
    pub port: u16,
}

/// Parses the method-selection greeting: `VER NMETHODS METHODS…`.
pub fn parse_greeting(buf: &[u8]) -> Result<Parsed<Greeting>, Socks5Error> {
    let [ver, n, rest @ ..] = buf else {
        return version_of(buf).map(|()| Parsed::Incomplete);
    };
    if *ver != VERSION {
        return Err(Socks5Error::Version(*ver));
    }
    let n = usize::from(*n);
    if n == 0 {
        return Err(Socks5Error::NoMethods);
    }
    let Some(methods) = rest.get(..n) else {
        return Ok(Parsed::Incomplete);
    };
    let greeting = Greeting {
        user_pass: methods.contains(&METHOD_USER_PASS),
        no_auth: methods.contains(&METHOD_NO_AUTH),
    };
    Ok(Parsed::Done(greeting, 2 + n))
}

/// Parses the RFC 1929 request: `VER ULEN UNAME PLEN PASSWD`.
pub fn parse_user_pass(buf: &[u8]) -> Result<Parsed<Credentials<'_>>, Socks5Error> {
    let [ver, ulen, rest @ ..] = buf else {
        return match buf.first() {
            Some(&v) if v != AUTH_VERSION => Err(Socks5Error::Version(v)),
            _ => Ok(Parsed::Incomplete),
        };
    };
    if *ver != AUTH_VERSION {
        return Err(Socks5Error::Version(*ver));
    }
    let ulen = usize::from(*ulen);
    if ulen == 0 {
        return Err(Socks5Error::EmptyUsername);
    }
    let (Some(username), Some(&plen)) = (rest.get(..ulen), rest.get(ulen)) else {
        return Ok(Parsed::Incomplete);
    };
    let plen = usize::from(plen);
    let Some(password) = rest.get(ulen + 1..ulen + 1 + plen) else {
        return Ok(Parsed::Incomplete);
    };
    Ok(Parsed::Done(
        Credentials { username, password },
        3 + ulen + plen,
    ))
}

/// Parses a request: `VER CMD RSV ATYP DST.ADDR DST.PORT`.
pub fn parse_request(buf: &[u8]) -> Result<Parsed<Request<'_>>, Socks5Error> {
    let [ver, cmd, rsv, atyp, rest @ ..] = buf else {
        return version_of(buf).map(|()| Parsed::Incomplete);
    };
    if *ver != VERSION {
        return Err(Socks5Error::Version(*ver));
    }
    if *rsv != 0 {
        return Err(Socks5Error::Reserved);
    }
    let command = match cmd {
        0x01 => Command::Connect,
        0x02 => Command::Bind,
        0x03 => Command::UdpAssociate,
        other => Command::Other(*other),
    };
    let (host, addr_len) = match atyp {
        0x01 => match rest.get(..4) {
            Some(&[a, b, c, d]) => (Host::V4(Ipv4Addr::new(a, b, c, d)), 4),
            _ => return Ok(Parsed::Incomplete),
        },
        0x04 => match rest.get(..16).and_then(|s| <[u8; 16]>::try_from(s).ok()) {
            Some(octets) => (Host::V6(Ipv6Addr::from(octets)), 16),
            None => return Ok(Parsed::Incomplete),
        },
        0x03 => {
            let Some(&len) = rest.first() else {
                return Ok(Parsed::Incomplete);
            };
            let len = usize::from(len);
            let Some(name) = rest.get(1..1 + len) else {
                return Ok(Parsed::Incomplete);
            };
            let host = parse_host(name).map_err(|_| Socks5Error::BadDomain)?;
            (host, 1 + len)
        }
        other => return Err(Socks5Error::AddressType(*other)),
    };
    let Some(&[hi, lo]) = rest.get(addr_len..addr_len + 2) else {
        return Ok(Parsed::Incomplete);
    };
    let port = u16::from_be_bytes([hi, lo]);
    if port == 0 && command == Command::Connect {
        return Err(Socks5Error::BadPort);
    }
    Ok(Parsed::Done(
        Request {
            command,
            host,
            port,
        },
        4 + addr_len + 2,
    ))
}

/// Encodes a reply; returns the buffer and its used length.
pub fn encode_reply(code: u8, bound: Option<SocketAddr>) -> ([u8; 22], usize) {
    let mut out = [0u8; 22];
    out[..3].copy_from_slice(&[VERSION, code, 0x00]);
    let bound = bound.unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
    let len = match bound.ip() {
        IpAddr::V4(ip) => {
            out[3] = 0x01;
            out[4..8].copy_from_slice(&ip.octets());
            8
        }
        IpAddr::V6(ip) => {
            out[3] = 0x04;
            out[4..20].copy_from_slice(&ip.octets());
            20
        }
    };
    out[len..len + 2].copy_from_slice(&bound.port().to_be_bytes());
    (out, len + 2)
}

fn version_of(buf: &[u8]) -> Result<(), Socks5Error> {
    match buf.first() {
        Some(&v) if v != VERSION => Err(Socks5Error::Version(v)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn greeting() {
        assert_eq!(parse_greeting(&[5]), Ok(Parsed::Incomplete));
        assert_eq!(parse_greeting(&[5, 2, 0]), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_greeting(&[5, 2, 0, 2, 9]),
            Ok(Parsed::Done(
                Greeting {
                    user_pass: true,
                    no_auth: true
                },
                4
            ))
        );
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(Socks5Error::Version(4)));
        assert_eq!(parse_greeting(&[5, 0]), Err(Socks5Error::NoMethods));
    }

    #[test]
    fn user_pass() {
        let msg = [1, 3, b'a', b'-', b'b', 2, b'p', b'w'];
        let Ok(Parsed::Done(up, n)) = parse_user_pass(&msg) else {
            panic!("expected credentials")
        };
        assert_eq!((up.username, up.password, n), (&b"a-b"[..], &b"pw"[..], 8));
        assert_eq!(parse_user_pass(&msg[..7]), Ok(Parsed::Incomplete));
        assert_eq!(parse_user_pass(&[1, 0, 0]), Err(Socks5Error::EmptyUsername));
        assert!(!format!("{up:?}").contains("pw"));
    }

    #[test]
    fn requests() {
        let v4 = [5, 1, 0, 1, 127, 0, 0, 1, 0, 80];
        assert_eq!(
            parse_request(&v4),
            Ok(Parsed::Done(
                Request {
                    command: Command::Connect,
                    host: Host::V4(Ipv4Addr::LOCALHOST),
                    port: 80
                },
                10
            ))
        );
        let mut name = vec![5, 3, 0, 3, 9];
        name.extend_from_slice(b"localhost");
        name.extend_from_slice(&443u16.to_be_bytes());
        let Ok(Parsed::Done(req, _)) = parse_request(&name) else {
            panic!("expected request")
        };
        assert_eq!(
            (req.command, req.host, req.port),
            (Command::UdpAssociate, Host::Domain("localhost"), 443)
        );
        assert_eq!(
            parse_request(&[5, 1, 0, 9, 0, 0]),
            Err(Socks5Error::AddressType(9))
        );
        assert_eq!(
            Socks5Error::AddressType(9).reply_code(),
            reply::ADDRESS_NOT_SUPPORTED
        );
        assert_eq!(parse_request(&v4[..9]), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_request(&[5, 1, 1, 1, 0, 0, 0, 0, 0, 1]),
            Err(Socks5Error::Reserved)
        );
    }

    #[test]
    fn replies() {
        let (buf, n) = encode_reply(reply::SUCCEEDED, Some("127.0.0.2:1080".parse().unwrap()));
        assert_eq!(&buf[..n], &[5, 0, 0, 1, 127, 0, 0, 2, 0x04, 0x38]);
        let (_, n) = encode_reply(reply::GENERAL_FAILURE, Some("[::1]:1".parse().unwrap()));
        assert_eq!(n, 22);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(Parsed::Done(_, n)) = parse_greeting(&bytes) {
                prop_assert!(n <= bytes.len());
            }
            if let Ok(Parsed::Done(_, n)) = parse_user_pass(&bytes) {
                prop_assert!(n <= bytes.len());
            }
            if let Ok(Parsed::Done(_, n)) = parse_request(&bytes) {
                prop_assert!(n <= bytes.len());
            }
        }

        #[test]
        fn prefixes_of_valid_requests_are_incomplete(port in 1u16.., cut in 0usize..10) {
            let mut msg = vec![5, 1, 0, 1, 10, 0, 0, 1];
            msg.extend_from_slice(&port.to_be_bytes());
            prop_assert_eq!(parse_request(&msg[..cut]), Ok(Parsed::Incomplete));
        }
    }
}
