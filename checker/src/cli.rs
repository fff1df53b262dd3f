//! Helpers of the command line: a proxy URL for one-shot probes.

use proxy_pool_api::controlplane::model::Secret;

use crate::model::{Credentials, Dial, Protocol};

/// Parses `http://[user:pass@]host:port` or `socks5://…` into how to dial that proxy.
/// Errors never echo the input (it may hold a password).
pub fn parse_proxy_url(s: &str) -> Result<Dial, &'static str> {
    let (scheme, rest) = s.split_once("://").ok_or("expected scheme://host:port")?;
    let protocol = match scheme {
        "http" => Protocol::Http,
        "socks5" | "socks5h" => Protocol::Socks5,
        _ => return Err("scheme must be http or socks5"),
    };
    let rest = rest.trim_end_matches('/');
    let (creds, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let c = Credentials {
                username: user.to_owned(),
                password: Secret::new(pass),
            };
            (Some(c), h)
        }
        None => (None, rest),
    };
    let (host, port) = match hostport.strip_prefix('[') {
        Some(v6) => {
            let (h, p) = v6.split_once("]:").ok_or("bad IPv6 host:port")?;
            (h, p)
        }
        None => hostport.rsplit_once(':').ok_or("expected host:port")?,
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or("bad port")?;
    if host.is_empty() {
        return Err("empty host");
    }
    Ok(Dial {
        protocol,
        host: host.to_owned(),
        port,
        credentials: creds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse_proxy_url("socks5://a:b@127.0.0.2:1080").unwrap();
        assert_eq!(u.protocol, Protocol::Socks5);
        assert_eq!(u.credentials.unwrap().password.expose(), "b");
        assert_eq!(parse_proxy_url("http://[::1]:3128").unwrap().host, "::1");
        for bad in [
            "ftp://h:1",
            "h:1",
            "http://h",
            "http://h:0",
            "http://:1",
            "http://u:secret@h:x",
        ] {
            let err = parse_proxy_url(bad).unwrap_err();
            assert!(!err.contains("secret"));
        }
    }
}
