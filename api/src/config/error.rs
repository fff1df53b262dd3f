//! What the config loader reports: every problem with the path of its field.
//!
//! The path is data ([`FieldPath`]: field names and list indexes), so a caller can
//! tell which entry of which list a problem belongs to without reading the text;
//! it prints as the YAML path (`routings[2].match.clients`).

use std::fmt;

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Field path, e.g. `distribution.auth.methods[1].type` (empty: the whole file).
    pub path: FieldPath,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// A problem at `path` (written as the YAML path, e.g. `upstreams[0].ttl`).
    pub fn new(path: impl Into<FieldPath>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a config file (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} problem(s) in the configuration", self.0.len())?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

/// One step of a [`FieldPath`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A mapping key: a field name, or a key of a map such as `usernameParams`.
    Field(String),
    /// An index into a list.
    Index(usize),
}

/// Where a problem is in the config: `routings[2].match.clients` is the field
/// `routings`, index 2, the fields `match` and `clients`. Empty: the whole file.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<PathSegment>);

impl FieldPath {
    /// The path of these steps.
    pub fn from_segments(segments: Vec<PathSegment>) -> Self {
        Self(segments)
    }

    /// Its steps, outermost first.
    pub fn segments(&self) -> &[PathSegment] {
        &self.0
    }

    /// Whether it names the whole file rather than a field.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The list entry the path lies in and the path inside that entry:
    /// `routings[2].upstreams[0]` gives `("routings", 2, upstreams[0])`; `None` when the
    /// path does not start with a list and an index.
    pub fn list_entry(&self) -> Option<(&str, usize, FieldPath)> {
        match self.0.as_slice() {
            [PathSegment::Field(list), PathSegment::Index(i), rest @ ..] => {
                Some((list, *i, FieldPath(rest.to_vec())))
            }
            _ => None,
        }
    }

    /// Reads the printed form back: `.` between fields, `[n]` for an index. A text
    /// that would not print the same way again is kept as one field, so a path always
    /// prints exactly as it was written.
    fn parse(text: &str) -> Self {
        let mut segments = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some((i, tail)) = rest.strip_prefix('[').and_then(|r| {
                let (digits, tail) = r.split_once(']')?;
                let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                all_digits.then(|| digits.parse().ok().map(|i| (i, tail)))?
            }) {
                segments.push(PathSegment::Index(i));
                rest = tail;
                continue;
            }
            let body = if segments.is_empty() {
                rest
            } else if let Some(body) = rest.strip_prefix('.') {
                body
            } else {
                break;
            };
            let end = body.find(['.', '[']).unwrap_or(body.len());
            segments.push(PathSegment::Field(body[..end].to_owned()));
            rest = &body[end..];
        }
        let path = Self(segments);
        if rest.is_empty() && path.prints_as(text) {
            path
        } else {
            Self(vec![PathSegment::Field(text.to_owned())])
        }
    }
}

impl FieldPath {
    /// Whether it prints as `text` (compared as it prints, without building a string).
    fn prints_as(&self, text: &str) -> bool {
        struct Rest<'a>(&'a str);
        impl fmt::Write for Rest<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
                Ok(())
            }
        }
        let mut rest = Rest(text);
        fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                PathSegment::Field(name) if i == 0 => f.write_str(name)?,
                PathSegment::Field(name) => write!(f, ".{name}")?,
                PathSegment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldPath({:?})", self.to_string())
    }
}

impl From<&str> for FieldPath {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for FieldPath {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl From<&String> for FieldPath {
    fn from(text: &String) -> Self {
        Self::parse(text)
    }
}

impl PartialEq<str> for FieldPath {
    fn eq(&self, other: &str) -> bool {
        self.prints_as(other)
    }
}

impl PartialEq<&str> for FieldPath {
    fn eq(&self, other: &&str) -> bool {
        self.prints_as(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_prints_as_written_and_splits_into_steps() {
        for text in [
            "",
            "store.redis.address",
            "routings[2].match.clients",
            "upstreams[0]",
            "clients[3].apiKeys[1].sha256",
            "routings[0].usernameParams.a.b[1]",
            "[0].x",
            ".",
            "a[x]",
            "a[0]b",
            "a..b",
        ] {
            assert_eq!(FieldPath::from(text).to_string(), text, "{text}");
        }
        let p = FieldPath::from("routings[2].match.clients");
        assert_eq!(
            p.segments(),
            [
                PathSegment::Field("routings".into()),
                PathSegment::Index(2),
                PathSegment::Field("match".into()),
                PathSegment::Field("clients".into()),
            ]
        );
        let (list, i, inner) = p.list_entry().expect("a list entry");
        assert_eq!((list, i), ("routings", 2));
        assert_eq!(inner, "match.clients");
        assert!(
            FieldPath::from("upstreams[4]")
                .list_entry()
                .expect("entry")
                .2
                .is_empty()
        );
        assert_eq!(FieldPath::from("store.redis").list_entry(), None);
        assert!(FieldPath::from("").is_empty());
    }
}
