//! The two words every layer shares about a proxy: the protocol it speaks and the
//! strategy that picks one. One type each, used by the config, the control-plane
//! model and (with the `schemars` feature) the operator's custom resources.
//!
//! Their wire names are the config's (`http`, `socks5`; `roundRobin`, …): serde and
//! [`Protocol::as_str`] / [`Strategy::as_str`] spell them the same way.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The protocol an upstream (vendor) proxy speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Protocol {
    /// HTTP proxy (CONNECT and absolute-URI requests).
    Http,
    /// SOCKS5 proxy.
    Socks5,
}

impl Protocol {
    /// Every protocol, in the order the docs list them.
    pub const ALL: [Protocol; 2] = [Protocol::Http, Protocol::Socks5];

    /// The wire name: `http` or `socks5`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Socks5 => "socks5",
        }
    }

    /// Inverse of [`Protocol::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a gateway picks one proxy among a routing's candidates.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// Each candidate in turn.
    #[default]
    RoundRobin,
    /// The candidate with the fewest active requests.
    LeastActive,
    /// The better of two random candidates, scored by active load × observed latency.
    PowerOfTwoChoices,
}

impl Strategy {
    /// Every strategy, in the order the docs list them.
    pub const ALL: [Strategy; 3] = [
        Strategy::RoundRobin,
        Strategy::LeastActive,
        Strategy::PowerOfTwoChoices,
    ];

    /// The wire name: `roundRobin`, `leastActive` or `powerOfTwoChoices`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "roundRobin",
            Self::LeastActive => "leastActive",
            Self::PowerOfTwoChoices => "powerOfTwoChoices",
        }
    }

    /// Inverse of [`Strategy::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The names of `values`, as a validator lists the accepted ones: `a, b, c`.
pub(crate) fn one_of<T: fmt::Display>(values: impl IntoIterator<Item = T>) -> String {
    values
        .into_iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_as_str_spell_the_same() {
        for p in Protocol::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
            assert_eq!(Protocol::parse(p.as_str()), Some(p));
        }
        for s in Strategy::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(Strategy::parse(s.as_str()), Some(s));
        }
        for f in crate::config::VendorFormat::ALL {
            assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
            assert_eq!(crate::config::VendorFormat::parse(f.as_str()), Some(f));
        }
        for p in crate::config::Permission::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(Protocol::parse("socks5h"), None);
        assert_eq!(
            one_of(Strategy::ALL),
            "roundRobin, leastActive, powerOfTwoChoices"
        );
    }
}
