//! The success body of an extraction, exactly as the contract names its fields.

use activity_pool::Timestamp;
use activity_pool::model::{ExtractedProxy, Extraction};
use serde::Serialize;

/// `200 OK` body.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtractResponse {
    /// The request's ID.
    pub request_id: String,
    /// `count` as asked.
    pub requested: u32,
    /// `proxies.len()`.
    pub returned: u32,
    /// The extracted proxies.
    pub proxies: Vec<ProxyDto>,
}

/// One proxy, with its real address and credentials.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyDto {
    id: String,
    protocol: &'static str,
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    url: String,
    region: Option<String>,
    carrier: Option<String>,
    city: Option<String>,
    upstream: String,
    expires_at: String,
    remaining_ttl_seconds: u64,
    extracted_at: String,
}

impl ExtractResponse {
    /// Builds the body; `now` computes `remainingTtlSeconds`.
    pub fn new(
        request_id: String,
        requested: u32,
        extraction: &Extraction,
        now: Timestamp,
    ) -> Self {
        let proxies: Vec<ProxyDto> = extraction
            .proxies
            .iter()
            .map(|p| proxy(p, extraction.extracted_at, now))
            .collect();
        Self {
            request_id,
            requested,
            returned: u32::try_from(proxies.len()).unwrap_or(u32::MAX),
            proxies,
        }
    }
}

fn proxy(p: &ExtractedProxy, extracted_at: Timestamp, now: Timestamp) -> ProxyDto {
    let d = &p.dial;
    let (username, password) = match &d.credentials {
        Some(c) => (
            Some(c.username.clone()),
            Some(c.password.expose().to_owned()),
        ),
        None => (None, None),
    };
    ProxyDto {
        id: p.id.to_string(),
        protocol: d.protocol.as_str(),
        url: proxy_url(
            d.protocol.as_str(),
            &d.host,
            d.port,
            username.as_deref(),
            password.as_deref(),
        ),
        host: d.host.clone(),
        port: d.port,
        username,
        password,
        region: p.labels.region.as_ref().map(ToString::to_string),
        carrier: p.labels.carrier.as_ref().map(ToString::to_string),
        city: p.labels.city.as_ref().map(ToString::to_string),
        upstream: p.upstream.to_string(),
        expires_at: rfc3339(p.expires_at),
        remaining_ttl_seconds: p.expires_at.since(now).as_secs(),
        extracted_at: rfc3339(extracted_at),
    }
}

/// `scheme://user:pass@host:port` with the user info percent-encoded.
pub fn proxy_url(
    scheme: &str,
    host: &str,
    port: u16,
    user: Option<&str>,
    pass: Option<&str>,
) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    match (user, pass) {
        (Some(u), Some(p)) => format!("{scheme}://{}:{}@{host}:{port}", encode(u), encode(p)),
        (Some(u), None) => format!("{scheme}://{}@{host}:{port}", encode(u)),
        _ => format!("{scheme}://{host}:{port}"),
    }
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, whole seconds; an instant beyond the years jiff
/// represents, ±9999, is written as its bound). jiff's RFC 3339 `Display` of a
/// whole-second instant is exactly that form.
pub fn rfc3339(t: Timestamp) -> String {
    let (min, max) = (jiff::Timestamp::MIN, jiff::Timestamp::MAX);
    let secs = t.millis().div_euclid(1000);
    jiff::Timestamp::from_second(secs.clamp(min.as_second(), max.as_second()))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(Timestamp(0)), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(Timestamp(1_785_234_600_000)),
            "2026-07-28T10:30:00Z"
        );
        assert_eq!(rfc3339(Timestamp(951_782_400_000)), "2000-02-29T00:00:00Z");
        // Whole seconds, rounded down (before the epoch too).
        assert_eq!(rfc3339(Timestamp(1_999)), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(Timestamp(-1)), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn urls_carry_encoded_credentials() {
        assert_eq!(
            proxy_url("http", "192.0.2.10", 8080, Some("USER"), Some("PASS")),
            "http://USER:PASS@192.0.2.10:8080"
        );
        assert_eq!(
            proxy_url("socks5", "::1", 1080, Some("a b"), Some("p@ss:")),
            "socks5://a%20b:p%40ss%3A@[::1]:1080"
        );
        assert_eq!(proxy_url("http", "h", 1, None, None), "http://h:1");
    }
}
