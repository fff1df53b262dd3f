//! Checks of single values that several config sections share (names, addresses,
//! URLs): pure functions of the text, with no field path and no error list, so every
//! validator (and other crates) can call them.

use super::types::StaticProxy;

/// `1..=max` bytes of `[A-Za-z0-9._:-]`: safe in a Redis key and a log line.
pub fn check_identifier(value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > max {
        return Err(format!("must be at most {max} bytes"));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        return Err(format!(
            "character {bad:?} not allowed (use A-Z a-z 0-9 . _ : -)"
        ));
    }
    Ok(())
}

/// Whether `s` is a DNS-1123 name of at most `max` bytes: a label, or with `dots` a
/// subdomain (Kubernetes object names).
pub(super) fn dns_name(s: &str, max: usize, dots: bool) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    !s.is_empty()
        && s.len() <= max
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(ok_char)
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
        && (dots || !s.contains('.'))
}

/// Whether `namespace/name` names a ServiceAccount: a DNS-1123 label, `/`, a DNS-1123
/// subdomain.
pub(super) fn check_service_account(value: &str) -> Result<(), String> {
    match value.split_once('/') {
        Some((ns, name)) if dns_name(ns, 63, false) && dns_name(name, 253, true) => Ok(()),
        _ => Err(format!(
            "`{value}` is not `namespace/name` (a DNS label, `/`, a DNS subdomain)"
        )),
    }
}

/// Whether an HTTP Basic user name is acceptable.
pub(super) fn check_basic_username(username: &str) -> Result<(), &'static str> {
    if username.is_empty() || username.contains(':') || username.len() > 128 {
        return Err("must be 1 to 128 bytes without `:`");
    }
    Ok(())
}

/// A username parameter key or value: what `user-key-value` can carry.
pub(super) fn username_token(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 64 {
        return Err("must be 1 to 64 bytes".into());
    }
    match value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_')))
    {
        Some(bad) => Err(format!(
            "character {bad:?} not allowed (use A-Z a-z 0-9 . _)"
        )),
        None => Ok(()),
    }
}

/// Host and port of an `http(s)://host[:port][/…]` URL (default port by scheme).
pub fn target_url(url: &str) -> Option<(String, u16)> {
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (rest, default_port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        return None;
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    if let Some(sp) = split_host_port(authority) {
        return Some((sp.host, sp.port));
    }
    let host = authority
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(authority);
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        && (!host.contains(':') || host.parse::<std::net::Ipv6Addr>().is_ok());
    (valid && !host.is_empty()).then(|| (host.to_owned(), default_port))
}

/// Splits `host:port` or `[v6]:port`.
pub fn split_host_port(s: &str) -> Option<StaticProxy> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:")?;
        h.parse::<std::net::Ipv6Addr>().ok()?;
        (h, p)
    } else {
        let (h, p) = s.rsplit_once(':')?;
        if h.contains(':') {
            return None;
        }
        (h, p)
    };
    let valid_host = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    valid_host.then(|| StaticProxy {
        host: host.to_owned(),
        port,
    })
}
