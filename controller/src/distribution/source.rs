//! The client's source address: the peer, or — only when the peer is a trusted proxy —
//! the right-most untrusted address of `X-Forwarded-For`.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

use super::problem::ApiError;

/// Most `X-Forwarded-For` entries looked at.
const MAX_HOPS: usize = 32;

/// Resolves the source address of a request.
pub fn source_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> Result<IpAddr, ApiError> {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return Ok(peer);
    }
    let mut hops = Vec::new();
    for v in headers.get_all("x-forwarded-for") {
        let text = v.to_str().map_err(|_| bad())?;
        for part in text.split(',') {
            let ip: IpAddr = part.trim().parse().map_err(|_| bad())?;
            hops.push(ip);
            if hops.len() > MAX_HOPS {
                return Err(bad());
            }
        }
    }
    Ok(hops
        .iter()
        .rev()
        .find(|ip| !is_trusted(ip))
        .or(hops.first())
        .copied()
        .unwrap_or(peer))
}

fn bad() -> ApiError {
    ApiError::InvalidHeader {
        header: "x-forwarded-for",
        reason: "must be a comma-separated list of IP addresses",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(xff: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert("x-forwarded-for", xff.parse().expect("value"));
        m
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_peers() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("net")];
        let peer_untrusted: IpAddr = "192.0.2.1".parse().expect("ip");
        let peer_trusted: IpAddr = "10.0.0.5".parse().expect("ip");
        assert_eq!(
            source_ip(peer_untrusted, &h("198.51.100.7"), &trusted),
            Ok(peer_untrusted)
        );
        assert_eq!(
            source_ip(
                peer_trusted,
                &h("203.0.113.9, 198.51.100.7, 10.0.0.9"),
                &trusted
            ),
            Ok("198.51.100.7".parse().expect("ip"))
        );
        assert_eq!(
            source_ip(peer_trusted, &HeaderMap::new(), &trusted),
            Ok(peer_trusted)
        );
        assert!(source_ip(peer_trusted, &h("junk"), &trusted).is_err());
    }
}
