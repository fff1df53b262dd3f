//! What a vendor source yields before it becomes a pool [`Candidate`]: one
//! [`VendorProxy`] per offered proxy, plus counts of entries the parser refused.
//!
//! [`Candidate`]: activity_pool::model::Candidate

use std::collections::BTreeMap;
use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{Protocol, Secret};

/// One proxy as a vendor offered it. Fields the vendor left out fall back to the
/// upstream's defaults when the candidate is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorProxy {
    /// The vendor's own identifier, if it gives one.
    pub vendor_id: Option<String>,
    /// Protocol, if the vendor says.
    pub protocol: Option<Protocol>,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Proxy user name.
    pub username: Option<String>,
    /// Proxy password.
    pub password: Option<Secret>,
    /// Region label.
    pub region: Option<String>,
    /// Carrier label.
    pub carrier: Option<String>,
    /// City label.
    pub city: Option<String>,
    /// Remaining life the vendor promises.
    pub ttl: Option<Duration>,
    /// Hard expiry the vendor states (the shorter of this and `ttl` wins).
    pub expires_at: Option<Timestamp>,
}

impl VendorProxy {
    /// An entry that says only where the proxy is: everything else falls back to the
    /// upstream's defaults.
    pub fn at(host: impl Into<String>, port: u16) -> Self {
        Self {
            vendor_id: None,
            protocol: None,
            host: host.into(),
            port,
            username: None,
            password: None,
            region: None,
            carrier: None,
            city: None,
            ttl: None,
            expires_at: None,
        }
    }
}

/// Why a vendor entry was refused before it became a candidate (bounded label set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParseDrop {
    /// The entry could not be parsed (bad URL, missing host, bad port, bad JSON item).
    Malformed,
    /// The entry is past the fetch budget's `max_candidates`.
    OverBudget,
    /// A label (region, carrier, city) is not a valid pool label.
    InvalidLabel,
    /// The credentials contain what the pool would refuse (control characters, too long).
    InvalidCredentials,
    /// Protocol not supported.
    UnsupportedProtocol,
    /// The address is refused by the egress policy (loopback, link-local, metadata,
    /// an internal range).
    EgressDenied,
}

impl ParseDrop {
    /// Stable snake_case code (metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::OverBudget => "over_budget",
            Self::InvalidLabel => "invalid_label",
            Self::InvalidCredentials => "invalid_credentials",
            Self::UnsupportedProtocol => "unsupported_protocol",
            Self::EgressDenied => "egress_denied",
        }
    }
}

/// The result of one fetch from a vendor source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VendorBatch {
    /// Parsed proxies, in vendor order, at most the budget's `max_candidates`.
    pub proxies: Vec<VendorProxy>,
    /// Entries refused while parsing, by reason.
    pub dropped: BTreeMap<ParseDrop, u32>,
    /// TTL the response declared for the whole batch (e.g. a header), if any.
    pub batch_ttl: Option<Duration>,
}

impl VendorBatch {
    /// Counts one refused entry.
    pub fn drop_entry(&mut self, reason: ParseDrop) {
        *self.dropped.entry(reason).or_default() += 1;
    }

    /// Entries the vendor offered (parsed plus refused).
    pub fn offered(&self) -> u32 {
        let parsed = u32::try_from(self.proxies.len()).unwrap_or(u32::MAX);
        parsed.saturating_add(self.dropped.values().sum::<u32>())
    }
}
