//! What the HTTP side (CONNECT and plain forwarding) says back and decides per
//! request, shared by both: the verdict on the client connection ([`Next`],
//! [`Failure`]), the session-moved header, error responses, and the client's
//! `Proxy-Authorization` credentials read from a request head.

use base64::Engine as _;

use super::Shared;
use crate::error::GatewayError;
use crate::parse::http_head::Headers;
use crate::route::Credentials;
use crate::session::MoveReason;

/// Header naming why the gateway refused or failed a request.
const ERROR_HEADER: &str = "X-Proxy-Pool-Error";
/// Header announcing that a sticky session moved to another proxy.
const MOVED_HEADER: &str = "X-Proxy-Pool-Session-Moved";
const MAX_AUTH_HEADER: usize = 1024;

/// Whether the client connection stays open for another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    KeepAlive,
    Close,
}

/// A failed request, and whether the client can still be answered.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) err: GatewayError,
    pub(crate) respond: bool,
}

impl From<GatewayError> for Failure {
    fn from(err: GatewayError) -> Self {
        Self { err, respond: true }
    }
}

/// Appends the session-moved header when a session moved.
pub(crate) fn moved_header(out: &mut Vec<u8>, moved: Option<MoveReason>, shared: &Shared) {
    if let Some(reason) = moved {
        shared.metrics.sessions_moved.inc();
        out.extend_from_slice(MOVED_HEADER.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(reason.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// Decodes `Proxy-Authorization: Basic …` into `buf`; `None` when absent.
pub fn proxy_credentials<'a>(
    headers: &Headers<'_>,
    buf: &'a mut Vec<u8>,
) -> Result<Option<Credentials<'a>>, GatewayError> {
    let Some(value) = headers.get(b"proxy-authorization") else {
        return Ok(None);
    };
    if value.len() > MAX_AUTH_HEADER {
        return Err(GatewayError::AuthFailed);
    }
    let (scheme, encoded) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], crate::parse::http_head::trim(&value[i + 1..])),
        None => return Err(GatewayError::AuthFailed),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err(GatewayError::AuthFailed);
    }
    buf.clear();
    base64::engine::general_purpose::STANDARD
        .decode_vec(encoded, buf)
        .map_err(|_| GatewayError::AuthFailed)?;
    let colon = buf
        .iter()
        .position(|&b| b == b':')
        .ok_or(GatewayError::AuthFailed)?;
    let (username, password) = buf.split_at(colon);
    Ok(Some(Credentials {
        username,
        password: &password[1..],
    }))
}

/// Writes an error response and asks the client to close.
pub(crate) async fn respond_error(
    stream: &mut crate::io::ClientStream,
    err: &GatewayError,
    write_timeout: std::time::Duration,
) -> std::io::Result<()> {
    let status = err.http_status();
    let reason = err.reason();
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {text}\r\n{ERROR_HEADER}: {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason.len() + 1
    );
    if status == 407 {
        out.push_str("Proxy-Authenticate: Basic realm=\"proxy-pool\"\r\n");
    }
    if status == 503 {
        out.push_str("Retry-After: 1\r\n");
    }
    if status == 429 {
        out.push_str("Retry-After: 6\r\n");
    }
    out.push_str("\r\n");
    out.push_str(reason);
    out.push('\n');
    crate::io::write_all(stream, out.as_bytes(), write_timeout).await
}
