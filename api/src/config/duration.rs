//! Go-style durations as the CRDs use them: whole units, e.g. `250ms`, `30s`, `1h30m`.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::error::ConfigError;

/// Longest accepted duration string.
pub const MAX_LEN: usize = 32;

/// Parses `([0-9]{1,9}(ms|s|m|h))+`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.is_empty() || s.len() > MAX_LEN {
        return Err(format!(
            "must be 1 to {MAX_LEN} characters like `30s`, `5m`, `1h30m` or `250ms`"
        ));
    }
    let bytes = s.as_bytes();
    let mut total = Duration::ZERO;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let digits = &s[start..i];
        if digits.is_empty() || digits.len() > 9 {
            return Err(format!(
                "`{s}` is not a duration like `30s`, `5m` or `250ms`"
            ));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("`{s}` is not a duration"))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let part = match &s[unit_start..i] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            _ => return Err(format!("`{s}`: unit must be one of ms, s, m, h")),
        };
        total += part;
    }
    Ok(total)
}

/// The duration at `path`: `raw` parsed (absent: `default`). A parse error is recorded
/// with its path and gives `None` (the caller's stand-in follows). The one parse of
/// every config duration.
pub(super) fn duration_at(
    errors: &mut Vec<ConfigError>,
    path: &str,
    raw: Option<&str>,
    default: Duration,
) -> Option<Duration> {
    match raw.map(parse_duration) {
        None => Some(default),
        Some(Ok(d)) => Some(d),
        Some(Err(message)) => {
            errors.push(ConfigError {
                path: path.into(),
                message,
            });
            None
        }
    }
}

/// The duration at `path`: `raw` parsed (absent: `default`) and within `min..=max`.
/// A problem is recorded with its path and `default` stands in, so later checks see a
/// sane value. The one bounds check of every config duration.
pub(super) fn duration_in(
    errors: &mut Vec<ConfigError>,
    path: &str,
    raw: Option<&str>,
    default: Duration,
    bounds: RangeInclusive<Duration>,
) -> Duration {
    let Some(d) = duration_at(errors, path, raw, default) else {
        return default;
    };
    if !bounds.contains(&d) {
        let (min, max) = bounds.into_inner();
        errors.push(ConfigError {
            path: path.into(),
            message: format!(
                "must be between {} and {}, got {}",
                show(min),
                show(max),
                show(d)
            ),
        });
        return default;
    }
    d
}

/// A duration as the config writes it (`500ms`, `30s`).
pub(super) fn show(d: Duration) -> String {
    if d.subsec_millis() != 0 || d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "s", "10", "10x", "1.5s", "-1s", "1 s", "1234567890s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
