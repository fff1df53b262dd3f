//! What every layer shares about a proxy: the protocol it speaks, how to dial it
//! ([`Dial`]), the labels it is selected by ([`Labels`]) and the strategy that picks
//! one. One type each, used by the config, the pool, the control-plane model and (with
//! the `schemars` feature) the operator's custom resources.
//!
//! Their wire names are the config's (`http`, `socks5`; `roundRobin`, …): serde and
//! [`Protocol::as_str`] / [`Strategy::as_str`] spell them the same way.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::controlplane::model::Credentials;
use crate::ids::Label;

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

/// How to dial an upstream (vendor) proxy: the protocol it speaks, its address and the
/// credentials it wants. Every encoding of it (Redis hash, protobuf, the Distribution
/// API's JSON) is written out field by field at its edge.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dial {
    /// Protocol the proxy speaks.
    pub protocol: Protocol,
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Vendor credentials, if the proxy needs them.
    pub credentials: Option<Credentials>,
}

/// The labels a proxy is selected by, one optional value per dimension: the one place
/// a label dimension is added. `L` is the value type: the validated [`Label`] in the
/// pool, the plain wire string in the control-plane model (whose edge checks IDs only).
///
/// The region label also serves as the country (a username's `country` parameter
/// selects by it); `city` is the finer place inside it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Labels<L = Label> {
    /// Region label (also the country).
    pub region: Option<L>,
    /// Carrier label.
    pub carrier: Option<L>,
    /// City label.
    pub city: Option<L>,
}

impl<L> Default for Labels<L> {
    fn default() -> Self {
        Self {
            region: None,
            carrier: None,
            city: None,
        }
    }
}

impl<L> Labels<L> {
    /// The same labels, each value mapped by `f` (e.g. to `&str` or `String`).
    pub fn map<'a, M>(&'a self, mut f: impl FnMut(&'a L) -> M) -> Labels<M> {
        Labels {
            region: self.region.as_ref().map(&mut f),
            carrier: self.carrier.as_ref().map(&mut f),
            city: self.city.as_ref().map(&mut f),
        }
    }
}

/// A proxy property a username parameter can select by (`country-us` selects the
/// region label `us` under the default selectors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub enum Dimension {
    /// The region label (a country, in the commercial gateways' terms).
    Region,
    /// The city label.
    City,
    /// The carrier label.
    Carrier,
    /// The upstream (vendor) the proxy comes from.
    Upstream,
    /// The protocol the proxy speaks (`http`, `socks5`).
    Protocol,
}

impl Dimension {
    /// Every dimension, in a fixed order (the order selection keys are built in).
    pub const ALL: [Dimension; 5] = [
        Dimension::Region,
        Dimension::City,
        Dimension::Carrier,
        Dimension::Upstream,
        Dimension::Protocol,
    ];

    /// The wire name: `region`, `city`, `carrier`, `upstream` or `protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Region => "region",
            Self::City => "city",
            Self::Carrier => "carrier",
            Self::Upstream => "upstream",
            Self::Protocol => "protocol",
        }
    }

    /// Inverse of [`Dimension::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A username parameter that narrows a routing's proxies to those whose `dimension`
/// equals its value (`city-new_york`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Selector {
    /// The username parameter (keys compare case-insensitively).
    pub param: String,
    /// What it selects by.
    pub dimension: Dimension,
}

impl Selector {
    /// A selector of `dimension` by `param`.
    pub fn new(param: impl Into<String>, dimension: Dimension) -> Self {
        Self {
            param: param.into(),
            dimension,
        }
    }

    /// The selectors of a routing that declares none: `country` and `region` select the
    /// region label, `city` the city, `carrier` the carrier.
    pub fn defaults() -> Vec<Selector> {
        vec![
            Self::new("country", Dimension::Region),
            Self::new("region", Dimension::Region),
            Self::new("city", Dimension::City),
            Self::new("carrier", Dimension::Carrier),
        ]
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
    /// The better of two random candidates (in a large set, from a window at a rotating
    /// offset), scored by active load × observed latency.
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
