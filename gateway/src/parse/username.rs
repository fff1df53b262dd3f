//! Routing parameters in the proxy username, in the industry's usual style:
//! `user-region-shanghai-session-abc123` is base user `user` with parameters
//! `region=shanghai` and `session=abc123`. Pure, bounded, allocation-free.

/// Most parameters a username may carry.
pub const MAX_PARAMS: usize = 16;
/// Longest username accepted (the SOCKS5 limit).
pub const MAX_USERNAME: usize = 255;

/// Why a username was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsernameError {
    /// Empty, too long, or characters outside `[A-Za-z0-9_.]` and the `-` separator.
    #[error("malformed username")]
    Malformed,
    /// A key without a value.
    #[error("username parameter without a value")]
    MissingValue,
    /// More than [`MAX_PARAMS`] parameters.
    #[error("too many username parameters")]
    TooMany,
    /// The same key twice.
    #[error("duplicate username parameter")]
    Duplicate,
}

/// A parsed username: the base user and its parameters, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Username<'a> {
    /// The client's base user name (its identity).
    pub base: &'a str,
    params: [(&'a str, &'a str); MAX_PARAMS],
    len: usize,
}

impl<'a> Username<'a> {
    /// Parameters in order.
    pub fn params(&self) -> &[(&'a str, &'a str)] {
        &self.params[..self.len]
    }

    /// The value of `key` (keys compare ASCII case-insensitively).
    pub fn param(&self, key: &str) -> Option<&'a str> {
        self.params()
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| *v)
    }

    /// The sticky-session key, if any (`session-…`).
    pub fn session(&self) -> Option<&'a str> {
        self.param("session")
    }
}

/// Parses `base(-key-value)*`.
pub fn parse_username(raw: &[u8]) -> Result<Username<'_>, UsernameError> {
    if raw.is_empty() || raw.len() > MAX_USERNAME {
        return Err(UsernameError::Malformed);
    }
    let ok = raw
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-' || b == b'@');
    let text = std::str::from_utf8(raw).map_err(|_| UsernameError::Malformed)?;
    if !ok {
        return Err(UsernameError::Malformed);
    }
    let mut parts = text.split('-');
    let base = parts.next().unwrap_or_default();
    if base.is_empty() {
        return Err(UsernameError::Malformed);
    }
    let mut out = Username {
        base,
        params: [("", ""); MAX_PARAMS],
        len: 0,
    };
    while let Some(key) = parts.next() {
        let value = parts.next().ok_or(UsernameError::MissingValue)?;
        if key.is_empty() || value.is_empty() {
            return Err(UsernameError::Malformed);
        }
        if out.param(key).is_some() {
            return Err(UsernameError::Duplicate);
        }
        let slot = out.params.get_mut(out.len).ok_or(UsernameError::TooMany)?;
        *slot = (key, value);
        out.len += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn industry_style() {
        let u = parse_username(b"user-region-shanghai-session-abc123").unwrap();
        assert_eq!(u.base, "user");
        assert_eq!(u.params(), &[("region", "shanghai"), ("session", "abc123")]);
        assert_eq!(u.session(), Some("abc123"));
        assert_eq!(u.param("REGION"), Some("shanghai"));
        assert_eq!(parse_username(b"plain").unwrap().params(), &[]);
    }

    #[test]
    fn rejects_bad_names() {
        assert_eq!(parse_username(b""), Err(UsernameError::Malformed));
        assert_eq!(parse_username(b"-a-b"), Err(UsernameError::Malformed));
        assert_eq!(
            parse_username(b"u-region"),
            Err(UsernameError::MissingValue)
        );
        assert_eq!(parse_username(b"u-a--b"), Err(UsernameError::Malformed));
        assert_eq!(parse_username(b"u-a-1-a-2"), Err(UsernameError::Duplicate));
        assert_eq!(parse_username(b"u v"), Err(UsernameError::Malformed));
        let many: String = (0..17).map(|i| format!("-k{i}-v")).collect();
        assert_eq!(
            parse_username(format!("u{many}").as_bytes()),
            Err(UsernameError::TooMany)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_username(&bytes);
        }
    }
}
