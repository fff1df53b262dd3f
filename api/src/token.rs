//! Bearer-token helpers shared by the controller (Distribution clients reviewed by
//! TokenReview) and the operator (worker identity issuance).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

/// The `exp` claim of a JWT, read without verifying it: the API server verified the
/// token, this only bounds how long its review may be reused. `None` for an opaque
/// token, an unreadable payload, or an expiry past what `SystemTime` can hold.
pub fn jwt_expiry(token: &str) -> Option<SystemTime> {
    #[derive(serde::Deserialize)]
    struct Claims {
        exp: u64,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: Claims = serde_json::from_slice(&bytes).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(claims.exp))
}

/// Longest bearer token looked at (Kubernetes ServiceAccount tokens are ~1 KiB).
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Why a token was refused without asking the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenShape {
    /// Empty or longer than [`MAX_TOKEN_BYTES`].
    #[error("token length")]
    Length,
    /// Not three base64url segments with a JSON header and payload.
    #[error("not a JWT")]
    NotJwt,
    /// Its `exp` claim is in the past.
    #[error("token expired")]
    Expired,
    /// Its `aud` claim does not name the audience.
    #[error("token is for another audience")]
    Audience,
}

/// Cheap checks before a token costs a `TokenReview`: a JWT shape (three base64url
/// segments, a JSON object header with `alg` and a JSON object payload), not expired by
/// its own `exp`, and, when it names audiences, naming `audience`. Nothing is verified
/// here — a token that passes is still reviewed; one that fails could never pass.
pub fn precheck(token: &str, audience: &str, now: SystemTime) -> Result<(), TokenShape> {
    #[derive(serde::Deserialize)]
    struct Header {
        alg: String,
    }
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    #[derive(serde::Deserialize)]
    struct Claims {
        #[serde(default)]
        exp: Option<u64>,
        #[serde(default)]
        aud: Option<Aud>,
    }
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(TokenShape::Length);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenShape::NotJwt);
    };
    let b64url = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'='))
    };
    if !(b64url(header) && b64url(payload) && b64url(signature)) {
        return Err(TokenShape::NotJwt);
    }
    let decode = |s: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim_end_matches('='))
            .ok()
    };
    let header: Header = decode(header)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(TokenShape::NotJwt)?;
    if header.alg.is_empty() || header.alg.eq_ignore_ascii_case("none") {
        return Err(TokenShape::NotJwt);
    }
    let claims: Claims = decode(payload)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(TokenShape::NotJwt)?;
    if let Some(exp) = claims.exp {
        let expired = UNIX_EPOCH
            .checked_add(Duration::from_secs(exp))
            .is_some_and(|at| at <= now);
        if expired {
            return Err(TokenShape::Expired);
        }
    }
    let named = match &claims.aud {
        None => true,
        Some(Aud::One(a)) => a == audience,
        Some(Aud::Many(all)) => all.iter().any(|a| a == audience),
    };
    if named {
        Ok(())
    } else {
        Err(TokenShape::Audience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn precheck_refuses_what_could_never_pass() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let h = b64(r#"{"alg":"RS256","kid":"k"}"#);
        let tok = |claims: &str| format!("{h}.{}.c2ln", b64(claims));
        assert_eq!(
            precheck(&tok(r#"{"exp":2000,"aud":["a","b"]}"#), "b", now),
            Ok(())
        );
        assert_eq!(precheck(&tok(r#"{"aud":"b"}"#), "b", now), Ok(()));
        assert_eq!(precheck(&tok(r#"{"sub":"x"}"#), "b", now), Ok(()));
        assert_eq!(
            precheck(&tok(r#"{"exp":999,"aud":"b"}"#), "b", now),
            Err(TokenShape::Expired)
        );
        assert_eq!(
            precheck(&tok(r#"{"exp":2000,"aud":["c"]}"#), "b", now),
            Err(TokenShape::Audience)
        );
        for bad in [
            "not-a-token",
            "a.b",
            "a.b.c.d",
            "e30.e30.",
            "!!.e30.sig",
            "e30.e30.sig",
        ] {
            assert_eq!(precheck(bad, "b", now), Err(TokenShape::NotJwt), "{bad}");
        }
        let none = format!("{}.{}.sig", b64(r#"{"alg":"none"}"#), b64("{}"));
        assert_eq!(precheck(&none, "b", now), Err(TokenShape::NotJwt));
        assert_eq!(precheck("", "b", now), Err(TokenShape::Length));
        let long = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(precheck(&long, "b", now), Err(TokenShape::Length));
    }

    fn jwt(exp: u64) -> String {
        let p = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!("{{\"exp\":{exp},\"sub\":\"x\"}}"));
        format!("e30.{p}.sig")
    }

    #[test]
    fn expiry_is_read_from_the_jwt_payload_only() {
        assert_eq!(
            jwt_expiry(&jwt(1_000)),
            Some(UNIX_EPOCH + Duration::from_secs(1_000))
        );
        assert_eq!(jwt_expiry("opaque-token"), None);
        assert_eq!(jwt_expiry("a.b.c"), None);
        assert_eq!(jwt_expiry(&jwt(u64::MAX)), None, "no overflow panic");
    }
}
