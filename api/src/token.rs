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

#[cfg(test)]
mod tests {
    use super::*;

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
