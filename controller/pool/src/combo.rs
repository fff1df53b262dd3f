//! Availability combinations (`docs/pool.md`, "Key space"): the labels every proxy in
//! one combination index shares, and the name both implementations give that index —
//! `<upstream>|<protocol>|<region>|<carrier>|<city>`, a label empty when the proxy has
//! none (the Redis key is `avail:` + the name). Label values are validated identifiers
//! (`[A-Za-z0-9._:-]`), so `|` cannot occur in them.
//!
//! A name of four parts (`<upstream>|<protocol>|<region>|<carrier>`) was written before
//! the city dimension existed: it still parses, as a combination without a city, so a
//! Redis pool written by an older version keeps serving while its records are
//! refreshed into five-part names (`docs/pool.md`, "Label dimensions and upgrades").

use crate::model::{Filters, Label, Labels, Protocol};

/// The labels of one combination, borrowed from its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Combo<'a> {
    /// Upstream ID.
    pub upstream: &'a str,
    /// Protocol wire name.
    pub protocol: &'a str,
    /// Label values (`None`: the proxies have none).
    pub labels: Labels<&'a str>,
}

/// The combination name of a proxy of `upstream` speaking `protocol` with `labels`.
pub(crate) fn name(upstream: &str, protocol: Protocol, labels: &Labels<&str>) -> String {
    format!(
        "{upstream}|{}|{}|{}|{}",
        protocol.as_str(),
        labels.region.unwrap_or(""),
        labels.carrier.unwrap_or(""),
        labels.city.unwrap_or("")
    )
}

/// The labels of a combination name (five parts, or four from before the city);
/// `None` for anything else.
pub(crate) fn parse(name: &str) -> Option<Combo<'_>> {
    fn label(s: &str) -> Option<&str> {
        (!s.is_empty()).then_some(s)
    }
    let mut parts = name.split('|');
    let upstream = parts.next()?;
    let protocol = parts.next()?;
    let region = label(parts.next()?);
    let carrier = label(parts.next()?);
    let city = match parts.next() {
        None => None,
        Some(c) => label(c),
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Combo {
        upstream,
        protocol,
        labels: Labels {
            region,
            carrier,
            city,
        },
    })
}

impl Filters {
    /// Whether no dimension is restricted (every proxy passes).
    pub fn is_empty(&self) -> bool {
        self.protocols.is_empty()
            && self.regions.is_empty()
            && self.carriers.is_empty()
            && self.cities.is_empty()
            && self.upstreams.is_empty()
    }

    /// Whether the proxies of a combination pass (OR within a dimension, AND across;
    /// an empty dimension passes everything).
    pub(crate) fn admits_combo(&self, c: &Combo<'_>) -> bool {
        self.admits_values(c.upstream, c.protocol, &c.labels)
    }

    /// The one filter predicate, over plain values.
    pub(crate) fn admits_values(
        &self,
        upstream: &str,
        protocol: &str,
        labels: &Labels<&str>,
    ) -> bool {
        let label = |want: &[Label], have: Option<&str>| {
            want.is_empty() || have.is_some_and(|h| want.iter().any(|w| w.as_str() == h))
        };
        (self.upstreams.is_empty() || self.upstreams.iter().any(|u| u.as_str() == upstream))
            && (self.protocols.is_empty() || self.protocols.iter().any(|p| p.as_str() == protocol))
            && label(&self.regions, labels.region)
            && label(&self.carriers, labels.carrier)
            && label(&self.cities, labels.city)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels<'a>(
        region: Option<&'a str>,
        carrier: Option<&'a str>,
        city: Option<&'a str>,
    ) -> Labels<&'a str> {
        Labels {
            region,
            carrier,
            city,
        }
    }

    #[test]
    fn names_round_trip_and_four_part_names_have_no_city() {
        let l = labels(Some("us"), None, Some("boston"));
        let n = name("vendor-a", Protocol::Socks5, &l);
        assert_eq!(n, "vendor-a|socks5|us||boston");
        let c = parse(&n).unwrap();
        assert_eq!(
            (c.upstream, c.protocol, &c.labels),
            ("vendor-a", "socks5", &l)
        );
        // Written by a version before the city dimension.
        let old = parse("vendor-a|http|eu|c1").unwrap();
        assert_eq!(old.labels, labels(Some("eu"), Some("c1"), None));
        assert_eq!(parse("vendor-a|http|||").unwrap().labels, Labels::default());
        for bad in [
            "",
            "vendor-a",
            "vendor-a|http",
            "vendor-a|http|eu",
            "a|b|c|d|e|f",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_city_filter_is_and_across_and_or_within() {
        let city = |v: &[&str]| Filters {
            cities: v.iter().map(|c| Label::new(*c).unwrap()).collect(),
            regions: vec![Label::new("us").unwrap()],
            ..Filters::default()
        };
        let boston = parse("u|http|us||boston").unwrap();
        let old = parse("u|http|us|").unwrap();
        let paris = parse("u|http|fr||paris").unwrap();
        assert!(city(&["boston", "denver"]).admits_combo(&boston));
        assert!(!city(&["denver"]).admits_combo(&boston));
        assert!(!city(&["boston"]).admits_combo(&old));
        assert!(city(&[]).admits_combo(&old));
        // AND with the region: a Paris proxy is no US one.
        assert!(!city(&["paris"]).admits_combo(&paris));
        assert!(!city(&[]).is_empty() && Filters::default().is_empty());
    }
}
