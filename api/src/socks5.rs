//! The SOCKS5 client messages (RFC 1928, RFC 1929) every client of a SOCKS5 proxy in
//! Proxy Pool sends: the username/password sub-negotiation and the `CONNECT` request.
//! Encoding only; the caller does the I/O.

use std::net::IpAddr;

/// The SOCKS protocol version byte.
pub const VERSION: u8 = 5;

/// The username/password sub-negotiation (RFC 1929, version 1); `None` when either
/// field is longer than 255 bytes.
pub fn password_request(username: &[u8], password: &[u8]) -> Option<Vec<u8>> {
    let ulen = u8::try_from(username.len()).ok()?;
    let plen = u8::try_from(password.len()).ok()?;
    let mut msg = Vec::with_capacity(3 + username.len() + password.len());
    msg.push(1);
    msg.push(ulen);
    msg.extend_from_slice(username);
    msg.push(plen);
    msg.extend_from_slice(password);
    Some(msg)
}

/// The `CONNECT` request for `host:port`: an IPv4 or IPv6 literal goes as an address,
/// anything else as a domain name; `None` when that name is longer than 255 bytes.
pub fn connect_request(host: &str, port: u16) -> Option<Vec<u8>> {
    let mut req = vec![VERSION, 1, 0];
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => {
            req.push(1);
            req.extend_from_slice(&v4.octets());
        }
        Ok(IpAddr::V6(v6)) => {
            req.push(4);
            req.extend_from_slice(&v6.octets());
        }
        Err(_) => {
            req.push(3);
            req.push(u8::try_from(host.len()).ok()?);
            req.extend_from_slice(host.as_bytes());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    Some(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_each_address_type() {
        assert_eq!(
            connect_request("10.0.0.1", 443),
            Some(vec![5, 1, 0, 1, 10, 0, 0, 1, 1, 187])
        );
        let v6 = connect_request("::1", 80).expect("v6");
        assert_eq!(&v6[..4], &[5, 1, 0, 4]);
        assert_eq!(v6.len(), 4 + 16 + 2);
        assert_eq!(
            connect_request("ab.c", 8080),
            Some(vec![5, 1, 0, 3, 4, b'a', b'b', b'.', b'c', 0x1f, 0x90])
        );
        assert_eq!(connect_request(&"a".repeat(256), 80), None);
    }

    #[test]
    fn encodes_the_password_sub_negotiation() {
        assert_eq!(
            password_request(b"u", b"pw"),
            Some(vec![1, 1, b'u', 2, b'p', b'w'])
        );
        assert_eq!(password_request(&[b'u'; 256], b"pw"), None);
        assert_eq!(password_request(b"u", &[b'p'; 256]), None);
    }
}
