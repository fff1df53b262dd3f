//! Routing parameters in the proxy username, in the industry's usual style:
//! `user-country-us-city-new_york-session-abc123` is base user `user` with parameters
//! `country=us`, `city=new_york` and `session=abc123`. Pure, bounded, allocation-free.
//!
//! Grammar (docs/gateway.md, *For clients*):
//!
//! - username: `<base>(-<key>-<value>)*`; base, keys and values are made of
//!   `A–Z a–z 0–9 _ . @` and percent escapes `%XX` (two hex digits) — so a value can
//!   name a label holding `-` or `:` (`us%2Deast` is `us-east`); keys compare ASCII
//!   case-insensitively, values are compared decoded and ASCII case-insensitively
//!   ([`value_eq`]);
//! - password form (the username then carries no parameters):
//!   `<password>_<key>-<value>(_<key>-<value>)*`, split at the first `_` after which the
//!   rest parses whole as parameters ([`split_password_params`]); in this form a value
//!   spells `_` as `%5F`.

/// Most parameters a username may carry.
pub const MAX_PARAMS: usize = 16;
/// Longest username accepted (the SOCKS5 limit).
pub const MAX_USERNAME: usize = 255;
/// The sticky-session key.
pub const SESSION: &str = "session";
/// The client-chosen session lifetime, in minutes.
pub const SESSTIME: &str = "sesstime";

/// Why a username was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsernameError {
    /// Empty, too long, or characters outside `[A-Za-z0-9_.@]`, `%XX` escapes and the
    /// `-` separator.
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

/// A parsed username: the base user and its parameters, borrowed (values as written,
/// escapes not yet decoded: see [`value_eq`] and [`decoded`]).
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
        self.param(SESSION)
    }

    /// The client-chosen session lifetime in minutes (`sesstime-10`): `None` when absent,
    /// `Some(Err(value))` when it is not a whole number of minutes in `1..=1440`.
    pub fn sesstime_minutes(&self) -> Option<Result<u32, &'a str>> {
        let raw = self.param(SESSTIME)?;
        let ok = !raw.is_empty() && raw.len() <= 4 && raw.bytes().all(|b| b.is_ascii_digit());
        Some(
            ok.then(|| raw.parse::<u32>().ok())
                .flatten()
                .filter(|m| (1..=1440).contains(m))
                .ok_or(raw),
        )
    }

    /// Parses `raw` as the parameter list into this username: `key-value(-key-value)*`
    /// with `sep` `-`, `key-value(_key-value)*` with `sep` `_` (the password form).
    fn push_params(&mut self, raw: &'a str, sep: char) -> Result<(), UsernameError> {
        if sep == '-' {
            let mut parts = raw.split('-');
            while let Some(key) = parts.next() {
                let value = parts.next().ok_or(UsernameError::MissingValue)?;
                self.push(key, value)?;
            }
        } else {
            for pair in raw.split(sep) {
                let (key, value) = pair.split_once('-').ok_or(UsernameError::MissingValue)?;
                self.push(key, value)?;
            }
        }
        Ok(())
    }

    fn push(&mut self, key: &'a str, value: &'a str) -> Result<(), UsernameError> {
        if !is_word(key) || !is_word(value) {
            return Err(UsernameError::Malformed);
        }
        if self.param(key).is_some() {
            return Err(UsernameError::Duplicate);
        }
        let slot = self
            .params
            .get_mut(self.len)
            .ok_or(UsernameError::TooMany)?;
        *slot = (key, value);
        self.len += 1;
        Ok(())
    }
}

/// Whether `s` is a non-empty run of `[A-Za-z0-9_.@]` and well-formed `%XX` escapes.
fn is_word(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'@' => i += 1,
            b'%' if b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit) =>
            {
                i += 3;
            }
            _ => return false,
        }
    }
    !b.is_empty()
}

/// The bytes `raw` stands for, `%XX` escapes decoded (`raw` as [`Username`] holds it:
/// escapes already checked well-formed; a stray `%` passes through as itself).
pub fn decoded(raw: &str) -> impl Iterator<Item = u8> + '_ {
    let b = raw.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        let c = *b.get(i)?;
        let escape = (c == b'%')
            .then(|| Some(hex(*b.get(i + 1)?)? << 4 | hex(*b.get(i + 2)?)?))
            .flatten();
        match escape {
            Some(v) => {
                i += 3;
                Some(v)
            }
            None => {
                i += 1;
                Some(c)
            }
        }
    })
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Whether the username value `raw` names `label` (decoded, ASCII case-insensitive):
/// `US%2Deast` names `us-east`.
pub fn value_eq(raw: &str, label: &str) -> bool {
    eq_ignore_ascii_case(decoded(raw), label.bytes())
}

/// Whether two username values name the same label (both decoded).
pub fn values_eq(a: &str, b: &str) -> bool {
    eq_ignore_ascii_case(decoded(a), decoded(b))
}

fn eq_ignore_ascii_case(mut a: impl Iterator<Item = u8>, mut b: impl Iterator<Item = u8>) -> bool {
    a.all(|x| b.next().is_some_and(|y| x.eq_ignore_ascii_case(&y))) && b.next().is_none()
}

/// Parses `base(-key-value)*`.
pub fn parse_username(raw: &[u8]) -> Result<Username<'_>, UsernameError> {
    if raw.is_empty() || raw.len() > MAX_USERNAME {
        return Err(UsernameError::Malformed);
    }
    let text = std::str::from_utf8(raw).map_err(|_| UsernameError::Malformed)?;
    let (base, params) = match text.split_once('-') {
        Some((base, params)) => (base, Some(params)),
        None => (text, None),
    };
    // The base user is a plain name (no escapes): it must equal a client's user name.
    if !is_word(base) || base.contains('%') {
        return Err(UsernameError::Malformed);
    }
    let mut out = Username {
        base,
        params: [("", ""); MAX_PARAMS],
        len: 0,
    };
    if let Some(params) = params {
        out.push_params(params, '-')?;
    }
    Ok(out)
}

/// The password form: splits `raw` at the first `_` after which the rest parses whole as
/// `key-value(_key-value)*`, into the password and `user` with those parameters. `None`
/// when `user` already carries parameters or no such split exists (then the whole of
/// `raw` is the password).
pub fn split_password_params<'a>(
    user: &Username<'a>,
    raw: &'a [u8],
) -> Option<(&'a [u8], Username<'a>)> {
    if user.len != 0 || raw.len() > MAX_USERNAME {
        return None;
    }
    let text = std::str::from_utf8(raw).ok()?;
    text.match_indices('_').find_map(|(at, _)| {
        let mut with = *user;
        with.push_params(&text[at + 1..], '_').ok()?;
        Some((&raw[..at], with))
    })
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

    #[test]
    fn escapes_name_labels_with_dashes_and_colons() {
        let u =
            parse_username(b"alice-country-us%2Deast-city-new_york-carrier-T%3Amobile").unwrap();
        assert_eq!(u.param("country"), Some("us%2Deast"));
        assert!(value_eq(u.param("country").unwrap(), "us-east"));
        assert!(value_eq(u.param("country").unwrap(), "US-EAST"));
        assert!(!value_eq(u.param("country").unwrap(), "us-eas"));
        assert!(!value_eq(u.param("country").unwrap(), "us-east1"));
        assert!(value_eq(u.param("city").unwrap(), "new_york"));
        assert!(value_eq(u.param("carrier").unwrap(), "t:mobile"));
        assert_eq!(decoded("a%2d%3Ab").collect::<Vec<_>>(), b"a-:b");
        // Escapes must be two hex digits; the base user takes none.
        for bad in [
            b"u-k-a%2".as_slice(),
            b"u-k-a%zz",
            b"u-k-%",
            b"u%41-k-v",
            b"u-k%-v",
        ] {
            assert_eq!(
                parse_username(bad),
                Err(UsernameError::Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_username(b"u-"), Err(UsernameError::MissingValue));
    }

    #[test]
    fn sesstime_is_whole_minutes_within_a_day() {
        let minutes = |raw: &str| {
            parse_username(format!("u-sesstime-{raw}").as_bytes())
                .unwrap()
                .sesstime_minutes()
                .map(|r| r.map_err(str::to_owned))
        };
        assert_eq!(minutes("10"), Some(Ok(10)));
        assert_eq!(minutes("1440"), Some(Ok(1440)));
        for bad in ["0", "1441", "99999", "1.5", "ten", "%31"] {
            assert_eq!(minutes(bad), Some(Err(bad.to_owned())), "{bad}");
        }
        assert_eq!(
            parse_username(b"u-session-x").unwrap().sesstime_minutes(),
            None
        );
    }

    #[test]
    fn password_form() {
        let user = parse_username(b"alice").unwrap();
        let (pw, with) =
            split_password_params(&user, b"s3cret_country-us_session-x1_sesstime-5").unwrap();
        assert_eq!(pw, b"s3cret");
        assert_eq!(with.base, "alice");
        assert_eq!(
            with.params(),
            &[("country", "us"), ("session", "x1"), ("sesstime", "5")]
        );
        // A password holding `_` keeps it: the split is the first `_` after which the
        // rest parses whole as parameters.
        let (pw, with) = split_password_params(&user, b"my_pass_word_city-new%5Fyork").unwrap();
        assert_eq!(pw, b"my_pass_word");
        assert!(value_eq(with.param("city").unwrap(), "new_york"));
        // Nothing that parses as parameters: no split (the whole is the password).
        for raw in [
            b"plain".as_slice(),
            b"has_underscore",
            b"a_b-c-d",
            b"a_",
            b"a_k-v_",
        ] {
            assert_eq!(split_password_params(&user, raw), None, "{:?}", raw);
        }
        // A duplicate key after the first `_`: the split moves on to the next one.
        let (pw, with) = split_password_params(&user, b"a_k-v_k-w").unwrap();
        assert_eq!(
            (pw, with.params()),
            (b"a_k-v".as_slice(), &[("k", "w")][..])
        );
        // A username with parameters takes none from the password.
        let with_params = parse_username(b"alice-country-us").unwrap();
        assert_eq!(split_password_params(&with_params, b"pw_session-x"), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(u) = parse_username(&bytes) {
                let _ = u.sesstime_minutes();
                let _ = split_password_params(&u, &bytes);
                for (_, v) in u.params() {
                    prop_assert!(decoded(v).count() <= v.len());
                }
            }
        }
    }
}
