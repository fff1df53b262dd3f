//! The gateway's one error type, classified pingora-style by source (downstream
//! client, upstream proxy/target, or the gateway itself) and by retryability on
//! another proxy. Mapped to an HTTP status / SOCKS5 reply here and nowhere else.
//! Messages never carry credentials, addresses of clients, or target paths.

use std::io;

use proxy_pool_api::egress::EgressDenied;

use crate::parse::authority::AuthorityError;
use crate::parse::http_head::HeadError;
use crate::parse::socks5::{Socks5Error, reply};
use crate::parse::username::UsernameError;

/// Which side an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// The client: malformed input, bad credentials, hang-ups, slowness.
    Downstream,
    /// The vendor proxy or the target behind it.
    Upstream,
    /// The gateway's own state: no snapshot, no capacity, shutting down.
    Internal,
}

/// Everything that can end a request early.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Malformed HTTP head.
    #[error("malformed request head: {0}")]
    Head(#[from] HeadError),
    /// Malformed request target.
    #[error("malformed request target: {0}")]
    Target(#[from] AuthorityError),
    /// Malformed SOCKS5 message.
    #[error("malformed SOCKS5 message: {0}")]
    Socks(#[from] Socks5Error),
    /// Request the gateway does not serve (e.g. origin-form to a proxy).
    #[error("unsupported request: {0}")]
    Unsupported(&'static str),
    /// No credentials presented.
    #[error("proxy authentication required")]
    AuthRequired,
    /// Unknown user, wrong password or malformed username.
    #[error("proxy authentication failed")]
    AuthFailed,
    /// Username parameters rejected.
    #[error("bad username parameters: {0}")]
    Username(#[from] UsernameError),
    /// A username parameter the routing cannot honour (e.g. `sesstime` outside
    /// 1 to the routing's `maxTtl` in minutes); names the parameter.
    #[error("bad username parameter `{0}`")]
    BadParameter(&'static str),
    /// The username's selection parameters narrow the routing's proxies to none.
    #[error("no proxy matches the selection")]
    NoMatchingProxy,
    /// Too many failed authentications from this source or for this user name.
    #[error("too many failed authentications")]
    AuthThrottled,
    /// The client is at one of its limits (`gatewayLimits`).
    #[error("client limit reached: {}", .0.reason())]
    ClientLimit(crate::limits::LimitKind),
    /// The target (or the vendor proxy) is on an address the egress policy refuses,
    /// or the CONNECT port is not allowed.
    #[error("refused by the egress policy: {0}")]
    EgressDenied(EgressDenied),
    /// Client I/O failed.
    #[error("client connection failed: {0}")]
    DownstreamIo(io::Error),
    /// The client was too slow.
    #[error("client timed out")]
    DownstreamTimeout,
    /// No snapshot installed yet.
    #[error("no snapshot yet")]
    NoSnapshot,
    /// Past `maxStaleAge` / `valid_until`.
    #[error("snapshot is stale")]
    Stale,
    /// No routing matches the request.
    #[error("no routing matches")]
    NoRouting,
    /// No candidate is usable and has room.
    #[error("no proxy has room")]
    NoCapacity,
    /// The gateway is draining.
    #[error("shutting down")]
    ShuttingDown,
    /// TCP connect to the vendor proxy failed.
    #[error("dial failed: {0}")]
    Dial(io::ErrorKind),
    /// Dial or handshake did not finish in time.
    #[error("upstream timed out")]
    UpstreamTimeout,
    /// The vendor proxy rejected our credentials or spoke nonsense.
    #[error("upstream proxy handshake failed: {0}")]
    ProxyHandshake(&'static str),
    /// The vendor proxy could not reach the target (HTTP status or SOCKS5 reply).
    #[error("target unreachable through the proxy ({0})")]
    TargetUnreachable(u16),
    /// Upstream I/O after the handshake.
    #[error("upstream connection failed: {0}")]
    UpstreamIo(io::Error),
    /// A malformed response from upstream.
    #[error("malformed upstream response: {0}")]
    BadResponse(HeadError),
}

impl GatewayError {
    /// Which side caused it.
    pub fn source_side(&self) -> ErrorSource {
        match self {
            Self::Head(_)
            | Self::Target(_)
            | Self::Socks(_)
            | Self::Unsupported(_)
            | Self::AuthRequired
            | Self::AuthFailed
            | Self::Username(_)
            | Self::BadParameter(_)
            | Self::NoMatchingProxy
            | Self::AuthThrottled
            | Self::ClientLimit(_)
            | Self::EgressDenied(_)
            | Self::DownstreamIo(_)
            | Self::DownstreamTimeout => ErrorSource::Downstream,
            Self::NoSnapshot
            | Self::Stale
            | Self::NoRouting
            | Self::NoCapacity
            | Self::ShuttingDown => ErrorSource::Internal,
            Self::Dial(_)
            | Self::UpstreamTimeout
            | Self::ProxyHandshake(_)
            | Self::TargetUnreachable(_)
            | Self::UpstreamIo(_)
            | Self::BadResponse(_) => ErrorSource::Upstream,
        }
    }

    /// Whether another proxy may succeed where this attempt failed (DIAL and
    /// PROXY_HANDSHAKE failures).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::Dial(_)
                | Self::UpstreamTimeout
                | Self::ProxyHandshake(_)
                | Self::TargetUnreachable(_)
        )
    }

    /// Short, bounded reason (header value and metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Head(HeadError::TooLarge | HeadError::TooManyHeaders) => "head-too-large",
            Self::Head(_) | Self::Target(_) | Self::Socks(_) => "bad-request",
            Self::Unsupported(_) => "unsupported",
            Self::AuthRequired => "auth-required",
            Self::AuthFailed | Self::Username(_) => "auth-failed",
            Self::BadParameter(_) => "bad-parameter",
            Self::NoMatchingProxy => "no-matching-proxy",
            Self::AuthThrottled => "auth-throttled",
            Self::ClientLimit(kind) => kind.reason(),
            Self::EgressDenied(_) => "egress-denied",
            Self::DownstreamIo(_) => "client-io",
            Self::DownstreamTimeout => "client-timeout",
            Self::NoSnapshot => "no-snapshot",
            Self::Stale => "snapshot-stale",
            Self::NoRouting => "no-routing",
            Self::NoCapacity => "no-capacity",
            Self::ShuttingDown => "shutting-down",
            Self::Dial(_) => "upstream-dial-failed",
            Self::UpstreamTimeout => "upstream-timeout",
            Self::ProxyHandshake(_) => "upstream-handshake-failed",
            Self::TargetUnreachable(_) => "target-unreachable",
            Self::UpstreamIo(_) => "upstream-io",
            Self::BadResponse(_) => "upstream-bad-response",
        }
    }

    /// Status for an HTTP client.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Head(HeadError::TooLarge | HeadError::TooManyHeaders) => 431,
            Self::Head(_)
            | Self::Target(_)
            | Self::Socks(_)
            | Self::Unsupported(_)
            | Self::BadParameter(_) => 400,
            Self::AuthRequired | Self::AuthFailed | Self::Username(_) => 407,
            Self::AuthThrottled | Self::ClientLimit(_) => 429,
            Self::EgressDenied(_) => 403,
            Self::DownstreamIo(_) | Self::DownstreamTimeout => 408,
            Self::NoRouting => 403,
            Self::NoSnapshot | Self::Stale | Self::NoCapacity | Self::ShuttingDown => 503,
            Self::UpstreamTimeout => 504,
            Self::NoMatchingProxy
            | Self::Dial(_)
            | Self::ProxyHandshake(_)
            | Self::TargetUnreachable(_)
            | Self::UpstreamIo(_)
            | Self::BadResponse(_) => 502,
        }
    }

    /// Reply code for a SOCKS5 client.
    pub fn socks_reply(&self) -> u8 {
        match self {
            Self::Socks(e) => e.reply_code(),
            Self::NoRouting | Self::EgressDenied(_) | Self::BadParameter(_) => reply::NOT_ALLOWED,
            Self::NoMatchingProxy => reply::HOST_UNREACHABLE,
            Self::ClientLimit(_) => reply::NOT_ALLOWED,
            Self::TargetUnreachable(code) if *code < 0x100 => *code as u8,
            Self::TargetUnreachable(_) => reply::HOST_UNREACHABLE,
            Self::UpstreamTimeout => reply::TTL_EXPIRED,
            _ => reply::GENERAL_FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let dial = GatewayError::Dial(io::ErrorKind::ConnectionRefused);
        assert!(dial.retryable());
        assert_eq!(dial.source_side(), ErrorSource::Upstream);
        assert_eq!(dial.http_status(), 502);
        let full = GatewayError::NoCapacity;
        assert!(!full.retryable());
        assert_eq!(full.source_side(), ErrorSource::Internal);
        assert_eq!((full.http_status(), full.reason()), (503, "no-capacity"));
        assert_eq!(full.socks_reply(), reply::GENERAL_FAILURE);
        assert_eq!(GatewayError::Head(HeadError::TooLarge).http_status(), 431);
        assert_eq!(
            GatewayError::TargetUnreachable(u16::from(reply::CONNECTION_REFUSED)).socks_reply(),
            reply::CONNECTION_REFUSED
        );
        let bad = GatewayError::BadParameter("sesstime");
        assert_eq!(
            (bad.http_status(), bad.reason(), bad.socks_reply()),
            (400, "bad-parameter", reply::NOT_ALLOWED)
        );
        assert_eq!(bad.source_side(), ErrorSource::Downstream);
        let none = GatewayError::NoMatchingProxy;
        assert_eq!(
            (none.http_status(), none.reason(), none.socks_reply()),
            (502, "no-matching-proxy", reply::HOST_UNREACHABLE)
        );
        assert!(!none.retryable());
    }
}
