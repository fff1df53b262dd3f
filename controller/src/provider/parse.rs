//! Parsers of vendor responses: JSON and plain-text lines. They face the network:
//! every length is bounded, a bad entry is counted and skipped, a bad document is an
//! error, and no input makes them panic. They never put a password into an error.

use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{Protocol, Secret};
use serde::Deserialize;
use serde_json::Value;

use super::error::FetchError;
use super::model::{ParseDrop, VendorBatch, VendorProxy};

/// Longest accepted line of the line format, in bytes.
pub const MAX_LINE_BYTES: usize = 2048;
/// Longest host name.
const MAX_HOST: usize = 253;
/// Longest user name or password.
const MAX_SECRETISH: usize = 255;
/// Longest vendor ID or label kept.
const MAX_TEXT: usize = 128;
/// Longest TTL a vendor may declare (the pool refuses longer ones anyway).
const MAX_TTL_SECS: u64 = 7 * 24 * 3600;

/// Parses `{"proxies": [...]}` (also `data`, `list`) or a top-level array.
///
/// Items: `id`, `protocol`, `host` (or `ip`), `port` (number or string), `username`
/// (or `user`), `password` (or `pass`), `region` (or `country`), `carrier` (or `isp`),
/// `city`, `ttlSeconds` (or `ttl`), or a `url` in the line format instead of
/// host/port/credentials.
pub fn parse_json(body: &[u8], max_entries: usize) -> Result<VendorBatch, FetchError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Doc {
        List(Vec<Value>),
        Wrapped {
            #[serde(alias = "data", alias = "list")]
            proxies: Vec<Value>,
        },
    }
    let doc: Doc = serde_json::from_slice(body).map_err(|_| FetchError::InvalidDocument)?;
    let items = match doc {
        Doc::List(items) | Doc::Wrapped { proxies: items } => items,
    };
    let mut batch = VendorBatch::default();
    for item in items {
        if batch.proxies.len() >= max_entries {
            batch.drop_entry(ParseDrop::OverBudget);
            continue;
        }
        match json_item(&item) {
            Ok(p) => batch.proxies.push(p),
            Err(reason) => batch.drop_entry(reason),
        }
    }
    Ok(batch)
}

fn json_item(item: &Value) -> Result<VendorProxy, ParseDrop> {
    let obj = item.as_object().ok_or(ParseDrop::Malformed)?;
    let field = |names: &[&str]| names.iter().find_map(|n| obj.get(*n));
    let text = |names: &[&str]| -> Result<Option<String>, ParseDrop> {
        match field(names) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() <= MAX_TEXT => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(ParseDrop::Malformed),
        }
    };
    let mut proxy = if let Some(url) = field(&["url", "proxy"]) {
        let url = url.as_str().ok_or(ParseDrop::Malformed)?;
        parse_line(url)?
    } else {
        let host = match field(&["host", "ip"]) {
            Some(Value::String(h)) => h.clone(),
            _ => return Err(ParseDrop::Malformed),
        };
        let port = match field(&["port"]) {
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or(ParseDrop::Malformed)?,
            Some(Value::String(s)) => s.parse::<u16>().map_err(|_| ParseDrop::Malformed)?,
            _ => return Err(ParseDrop::Malformed),
        };
        let username = secretish(field(&["username", "user"]))?;
        let password = secretish(field(&["password", "pass"]))?;
        VendorProxy {
            username,
            password: password.map(Secret::new),
            ..VendorProxy::at(check_host(host)?, check_port(port)?)
        }
    };
    if let Some(p) = text(&["protocol", "type", "scheme"])? {
        proxy.protocol = Some(protocol(&p)?);
    }
    proxy.vendor_id = text(&["id", "proxyId", "proxy_id"])?;
    proxy.region = text(&["region", "country"])?;
    proxy.carrier = text(&["carrier", "isp"])?;
    proxy.city = text(&["city"])?;
    proxy.ttl = match field(&["ttlSeconds", "ttl_seconds", "ttl"]) {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(ttl_secs(n.as_u64().ok_or(ParseDrop::Malformed)?)?),
        Some(Value::String(s)) => Some(ttl_secs(s.parse().map_err(|_| ParseDrop::Malformed)?)?),
        Some(_) => return Err(ParseDrop::Malformed),
    };
    proxy.expires_at = match field(&["expiresAt", "expires_at", "expireTime", "expire_time"]) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(parse_time(s).ok_or(ParseDrop::Malformed)?),
        Some(Value::Number(n)) => {
            let n = n.as_i64().filter(|n| *n > 0).ok_or(ParseDrop::Malformed)?;
            // Unix seconds, or milliseconds when it is that large.
            Some(Timestamp(if n < 100_000_000_000 {
                n.saturating_mul(1000)
            } else {
                n
            }))
        }
        Some(_) => return Err(ParseDrop::Malformed),
    };
    Ok(proxy)
}

/// Parses `YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH:MM]` (no zone: UTC) to Unix ms.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 19 || b.len() > 40 || !s.is_ascii() {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let sep = |i: usize, c: &[u8]| c.contains(&b[i]);
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let ms: String = frac[..digits].chars().chain("00".chars()).take(3).collect();
        millis = ms.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hm = &rest[1..];
            if hm.len() != 5 || hm.as_bytes()[2] != b':' {
                return None;
            }
            let (oh, om) = (hm[..2].parse::<i64>().ok()?, hm[3..].parse::<i64>().ok()?);
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 60 + om)
        }
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    Some(Timestamp(secs.checked_mul(1000)?.checked_add(millis)?))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn secretish(v: Option<&Value>) -> Result<Option<String>, ParseDrop> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => check_secretish(s).map(|()| Some(s.clone())),
        Some(_) => Err(ParseDrop::Malformed),
    }
}

fn ttl_secs(secs: u64) -> Result<Duration, ParseDrop> {
    if secs == 0 || secs > MAX_TTL_SECS {
        return Err(ParseDrop::Malformed);
    }
    Ok(Duration::from_secs(secs))
}

/// Parses one proxy per line. Blank lines and lines starting with `#` are skipped.
///
/// Accepted forms: `scheme://[user:pass@]host:port`, `user:pass@host:port`,
/// `host:port`, `host:port:user:pass`; IPv6 hosts in brackets.
pub fn parse_lines(body: &[u8], max_entries: usize) -> Result<VendorBatch, FetchError> {
    let text = std::str::from_utf8(body).map_err(|_| FetchError::InvalidDocument)?;
    let mut batch = VendorBatch::default();
    for raw in text.split('\n') {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if batch.proxies.len() >= max_entries {
            batch.drop_entry(ParseDrop::OverBudget);
            continue;
        }
        if line.len() > MAX_LINE_BYTES {
            batch.drop_entry(ParseDrop::Malformed);
            continue;
        }
        match parse_line(line) {
            Ok(p) => batch.proxies.push(p),
            Err(reason) => batch.drop_entry(reason),
        }
    }
    Ok(batch)
}

/// Parses one entry of the line format.
pub fn parse_line(line: &str) -> Result<VendorProxy, ParseDrop> {
    let (scheme, rest) = match line.split_once("://") {
        Some((scheme, rest)) => (Some(protocol(scheme)?), rest),
        None => (None, line),
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port, tail) = split_host_port(hostport)?;
    let (username, password) = match (userinfo, tail) {
        (Some(_), Some(_)) => return Err(ParseDrop::Malformed),
        (Some(u), None) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let (user, pass) = if scheme.is_some() {
                (percent_decode(user)?, percent_decode(pass)?)
            } else {
                (user.to_owned(), pass.to_owned())
            };
            (Some(user), Some(pass))
        }
        (None, Some(t)) => {
            let (user, pass) = t.split_once(':').ok_or(ParseDrop::Malformed)?;
            (Some(user.to_owned()), Some(pass.to_owned()))
        }
        (None, None) => (None, None),
    };
    if let Some(u) = &username {
        if u.is_empty() {
            return Err(ParseDrop::InvalidCredentials);
        }
        check_secretish(u)?;
    }
    if let Some(p) = &password {
        check_secretish(p)?;
    }
    Ok(VendorProxy {
        protocol: scheme,
        username,
        password: password.map(Secret::new),
        ..VendorProxy::at(check_host(host.to_owned())?, check_port(port)?)
    })
}

/// Splits `host:port[:rest]` or `[v6]:port[:rest]`.
fn split_host_port(s: &str) -> Result<(&str, u16, Option<&str>), ParseDrop> {
    let (host, after) = if let Some(v6) = s.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or(ParseDrop::Malformed)?;
        (host, after.strip_prefix(':').ok_or(ParseDrop::Malformed)?)
    } else {
        s.split_once(':').ok_or(ParseDrop::Malformed)?
    };
    let (port, tail) = match after.split_once(':') {
        Some((p, t)) => (p, Some(t)),
        None => (after, None),
    };
    let port = port.parse::<u16>().map_err(|_| ParseDrop::Malformed)?;
    Ok((host, port, tail))
}

fn protocol(s: &str) -> Result<Protocol, ParseDrop> {
    match s.to_ascii_lowercase().as_str() {
        "http" => Ok(Protocol::Http),
        "socks5" | "socks5h" | "socks" => Ok(Protocol::Socks5),
        _ => Err(ParseDrop::UnsupportedProtocol),
    }
}

fn check_host(host: String) -> Result<String, ParseDrop> {
    let ok = !host.is_empty()
        && host.len() <= MAX_HOST
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
    if ok {
        Ok(host)
    } else {
        Err(ParseDrop::Malformed)
    }
}

fn check_port(port: u16) -> Result<u16, ParseDrop> {
    if port == 0 {
        Err(ParseDrop::Malformed)
    } else {
        Ok(port)
    }
}

fn check_secretish(s: &str) -> Result<(), ParseDrop> {
    if s.len() > MAX_SECRETISH || s.chars().any(char::is_control) {
        return Err(ParseDrop::InvalidCredentials);
    }
    Ok(())
}

fn percent_decode(s: &str) -> Result<String, ParseDrop> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(ParseDrop::Malformed)?;
            let hex = std::str::from_utf8(hex).map_err(|_| ParseDrop::Malformed)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ParseDrop::Malformed)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ParseDrop::InvalidCredentials)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn line_forms() {
        let p = parse_line("socks5://u%40x:p%3Aw@127.0.0.5:1080").unwrap();
        assert_eq!(p.protocol, Some(Protocol::Socks5));
        assert_eq!(p.username.as_deref(), Some("u@x"));
        assert_eq!(p.password.as_ref().map(Secret::expose), Some("p:w"));
        assert_eq!((p.host.as_str(), p.port), ("127.0.0.5", 1080));

        let p = parse_line("host.example:8080:user:pa:ss").unwrap();
        assert_eq!(p.protocol, None);
        assert_eq!(p.username.as_deref(), Some("user"));
        assert_eq!(p.password.as_ref().map(Secret::expose), Some("pa:ss"));

        let p = parse_line("[::1]:3128").unwrap();
        assert_eq!((p.host.as_str(), p.port, p.username), ("::1", 3128, None));

        let p = parse_line("user:pass@10.0.0.1:80").unwrap();
        assert_eq!(p.username.as_deref(), Some("user"));
    }

    #[test]
    fn malformed_lines_are_refused_with_a_reason() {
        for (line, reason) in [
            ("", ParseDrop::Malformed),
            ("host", ParseDrop::Malformed),
            ("host:0", ParseDrop::Malformed),
            ("host:65536", ParseDrop::Malformed),
            ("host:-1", ParseDrop::Malformed),
            (":80", ParseDrop::Malformed),
            ("ho st:80", ParseDrop::Malformed),
            ("[::1:80", ParseDrop::Malformed),
            ("ftp://h:21", ParseDrop::UnsupportedProtocol),
            ("http://@h:80", ParseDrop::InvalidCredentials),
            ("http://u:p%zz@h:80", ParseDrop::Malformed),
            ("http://u:p%ff@h:80", ParseDrop::InvalidCredentials),
            ("u:p@h:80:x:y", ParseDrop::Malformed),
            ("h:80:nopass", ParseDrop::Malformed),
            ("http://u:p\u{7}@h:80", ParseDrop::InvalidCredentials),
        ] {
            assert_eq!(parse_line(line).unwrap_err(), reason, "{line:?}");
        }
    }

    #[test]
    fn lines_count_refusals_and_budget() {
        let body = b"# vendor list\nhttp://u:p@127.0.0.2:1\n\nnot a proxy\r\nsocks5://u:p@127.0.0.3:2\r\nhttp://u:p@127.0.0.4:3\n";
        let batch = parse_lines(body, 2).unwrap();
        assert_eq!(batch.proxies.len(), 2);
        assert_eq!(batch.dropped.get(&ParseDrop::Malformed), Some(&1));
        assert_eq!(batch.dropped.get(&ParseDrop::OverBudget), Some(&1));
        assert_eq!(batch.offered(), 4);
        let long = format!("http://u:{}@h:1", "x".repeat(MAX_LINE_BYTES));
        let batch = parse_lines(long.as_bytes(), 10).unwrap();
        assert_eq!(batch.dropped.get(&ParseDrop::Malformed), Some(&1));
        assert!(matches!(
            parse_lines(&[0xff, 0xfe], 10),
            Err(FetchError::InvalidDocument)
        ));
    }

    #[test]
    fn json_shapes() {
        let body = br#"{"proxies":[
            {"id":"a1","protocol":"socks5","host":"127.0.0.9","port":1081,"username":"u","password":"p",
             "region":"shanghai","carrier":"telecom","city":"pudong","expiresAt":"2026-11-30T04:19:05.196Z","ttlSeconds":60},
            {"ip":"10.0.0.1","port":"8080","ttl":"30","country":"cn","isp":"unicom"},
            {"url":"http://u:p@127.0.0.7:3128","id":7},
            {"host":"h","port":99999},
            {"host":5,"port":1},
            {"host":"h","port":1,"ttlSeconds":0},
            {"host":"h","port":1,"protocol":"gopher"},
            {"host":"h","port":1,"password":{"x":1}},
            "nope"
        ]}"#;
        let batch = parse_json(body, 100).unwrap();
        assert_eq!(batch.proxies.len(), 3);
        let a = &batch.proxies[0];
        assert_eq!(a.vendor_id.as_deref(), Some("a1"));
        assert_eq!(a.protocol, Some(Protocol::Socks5));
        assert_eq!(a.ttl, Some(Duration::from_secs(60)));
        assert_eq!(a.expires_at, Some(Timestamp(1_796_012_345_196)));
        assert_eq!(a.region.as_deref(), Some("shanghai"));
        assert_eq!(a.city.as_deref(), Some("pudong"));
        let b = &batch.proxies[1];
        assert_eq!(b.port, 8080);
        assert_eq!(
            (b.region.as_deref(), b.carrier.as_deref(), b.city.as_deref()),
            (Some("cn"), Some("unicom"), None)
        );
        assert_eq!(batch.proxies[2].vendor_id.as_deref(), Some("7"));
        assert_eq!(batch.dropped.get(&ParseDrop::Malformed), Some(&5));
        assert_eq!(batch.dropped.get(&ParseDrop::UnsupportedProtocol), Some(&1));
        let top = parse_json(br#"[{"host":"h","port":1}]"#, 10).unwrap();
        assert_eq!(top.proxies.len(), 1);
    }

    #[test]
    fn expiry_times() {
        let t = |s| parse_time(s).map(|t| t.0);
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("2026-11-30T04:19:05.000Z"), Some(1_796_012_345_000));
        assert_eq!(t("2026-11-30 04:19:05"), Some(1_796_012_345_000));
        assert_eq!(t("2026-11-30T12:19:05.5+08:00"), Some(1_796_012_345_500));
        assert_eq!(t("2000-02-29T00:00:00.123456Z"), Some(951_782_400_123));
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-11-30T04:19",
            "2026-11-30T04:19:05+0800",
            "2026-11-30T04:19:05.Z",
            "yyyy-mm-ddThh:mm:ssZ",
            "2026-11-30T04:19:05Zjunk",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
        let body = br#"[{"host":"h","port":1,"expiresAt":"2026-11-30T04:19:05Z"},
            {"host":"h","port":2,"expiresAt":1796012345},
            {"host":"h","port":3,"expiresAt":1796012345000},
            {"host":"h","port":4,"expiresAt":"tomorrow"}]"#;
        let batch = parse_json(body, 10).unwrap();
        let got: Vec<_> = batch
            .proxies
            .iter()
            .map(|p| p.expires_at.map(|t| t.0))
            .collect();
        assert_eq!(got, vec![Some(1_796_012_345_000); 3]);
        assert_eq!(batch.dropped.get(&ParseDrop::Malformed), Some(&1));
    }

    #[test]
    fn bad_json_documents_are_errors() {
        for body in [
            &b""[..],
            b"{",
            b"null",
            b"{\"proxies\":5}",
            b"{\"other\":[]}",
            b"\"text\"",
        ] {
            assert!(
                matches!(parse_json(body, 10), Err(FetchError::InvalidDocument)),
                "{body:?}"
            );
        }
        let deep = "[".repeat(100_000);
        assert!(parse_json(deep.as_bytes(), 10).is_err());
    }

    #[test]
    fn errors_never_carry_the_password() {
        let err = parse_json(
            br#"{"proxies":[{"host":"h","port":1,"password":"hunter2"}"#,
            10,
        )
        .unwrap_err();
        assert!(!format!("{err} {err:?}").contains("hunter2"));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_lines(&body, 50);
            let _ = parse_json(&body, 50);
        }

        #[test]
        fn arbitrary_lines_never_panic(line in "\\PC{0,200}") {
            let _ = parse_time(&line);
            let _ = parse_line(&line);
            let _ = parse_lines(line.as_bytes(), 5);
        }

        #[test]
        fn well_formed_urls_round_trip(
            user in "[a-z0-9]{1,20}", pass in "[A-Za-z0-9]{0,20}",
            a in 1u8..255, port in 1u16..,
        ) {
            let line = format!("socks5://{user}:{pass}@127.0.0.{a}:{port}");
            let p = parse_line(&line).unwrap();
            prop_assert_eq!(p.username, Some(user));
            prop_assert_eq!(p.password.map(|s| s.expose().to_owned()), Some(pass));
            prop_assert_eq!(p.port, port);
        }
    }
}
