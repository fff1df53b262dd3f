//! Turns vendor entries into pool candidates: stable IDs, defaults, labels.

use std::time::Duration;

use activity_pool::Timestamp;
use activity_pool::model::{
    Candidate, Credentials, Dial, Label, Labels, ProxyId, Secret, UpstreamId,
};
use sha2::{Digest, Sha256};

use super::model::{ParseDrop, VendorBatch, VendorProxy};
use super::options::CandidateDefaults;

/// A stable proxy ID: `<upstream>-<digest>` where the digest covers the vendor's own
/// ID when it gives one, else the endpoint (protocol, host, port, user name). The same
/// vendor proxy always maps to the same ID; nothing secret enters it.
pub fn stable_id(
    upstream: &UpstreamId,
    proxy: &VendorProxy,
    defaults: &CandidateDefaults,
) -> Result<ProxyId, ParseDrop> {
    let mut h = Sha256::new();
    h.update(b"pp-proxy-id-v1\0");
    h.update(upstream.as_str().as_bytes());
    h.update(b"\0");
    match &proxy.vendor_id {
        Some(id) => {
            h.update(b"vendor\0");
            h.update(id.as_bytes());
        }
        None => {
            h.update(b"endpoint\0");
            h.update(
                proxy
                    .protocol
                    .unwrap_or(defaults.protocol)
                    .as_str()
                    .as_bytes(),
            );
            h.update(b"\0");
            h.update(proxy.host.to_ascii_lowercase().as_bytes());
            h.update(b"\0");
            h.update(proxy.port.to_string().as_bytes());
            h.update(b"\0");
            h.update(proxy.username.as_deref().unwrap_or("").as_bytes());
        }
    }
    let digest = hex::encode(&h.finalize()[..12]);
    // An upstream ID is ≤ 63 bytes of the ID alphabet, so this never fails in practice.
    ProxyId::new(format!("{upstream}-{digest}")).map_err(|_| ParseDrop::Malformed)
}

/// Candidates of a vendor batch; entries whose labels are not valid pool labels are
/// counted in `batch.dropped` as [`ParseDrop::InvalidLabel`], entries on an address the
/// egress policy refuses as [`ParseDrop::EgressDenied`].
pub fn candidates(
    upstream: &UpstreamId,
    batch: &mut VendorBatch,
    defaults: &CandidateDefaults,
    now: Timestamp,
) -> Vec<Candidate> {
    let proxies = std::mem::take(&mut batch.proxies);
    let mut out = Vec::with_capacity(proxies.len());
    for p in proxies {
        match candidate(upstream, &p, defaults, batch.batch_ttl, now) {
            Ok(c) => out.push(c),
            Err(reason) => batch.drop_entry(reason),
        }
    }
    out
}

fn label(value: Option<&str>, default: Option<&Label>) -> Result<Option<Label>, ParseDrop> {
    match value {
        Some(v) => Label::new(v).map(Some).map_err(|_| ParseDrop::InvalidLabel),
        None => Ok(default.cloned()),
    }
}

fn candidate(
    upstream: &UpstreamId,
    p: &VendorProxy,
    defaults: &CandidateDefaults,
    batch_ttl: Option<Duration>,
    now: Timestamp,
) -> Result<Candidate, ParseDrop> {
    // The shorter of a stated TTL and a stated expiry: never promise more life than
    // the vendor does. A past expiry gives zero, which the pool drops as too short.
    let stated = match (p.ttl.or(batch_ttl), p.expires_at) {
        (Some(ttl), Some(at)) => Some(ttl.min(at.since(now))),
        (None, Some(at)) => Some(at.since(now)),
        (ttl, None) => ttl,
    };
    // Vendors choose these addresses: never one the egress policy refuses.
    if defaults.egress.check_host(&p.host).is_err() {
        return Err(ParseDrop::EgressDenied);
    }
    let credentials = match &p.username {
        Some(u) => Some(Credentials {
            username: u.clone(),
            password: p.password.clone().unwrap_or_else(|| Secret::new("")),
        }),
        None => defaults.credentials.clone(),
    };
    Ok(Candidate {
        id: stable_id(upstream, p, defaults)?,
        dial: Dial {
            protocol: p.protocol.unwrap_or(defaults.protocol),
            host: p.host.clone(),
            port: p.port,
            credentials,
        },
        labels: Labels {
            region: label(p.region.as_deref(), defaults.region.as_ref())?,
            carrier: label(p.carrier.as_deref(), defaults.carrier.as_ref())?,
            city: label(p.city.as_deref(), defaults.city.as_ref())?,
        },
        ttl: stated.unwrap_or(defaults.ttl),
        max_concurrency: defaults.max_concurrency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use activity_pool::model::Protocol;

    fn defaults() -> CandidateDefaults {
        CandidateDefaults {
            protocol: Protocol::Http,
            region: Some(Label::new("default-region").unwrap()),
            carrier: None,
            city: None,
            ttl: Duration::from_secs(60),
            max_concurrency: 8,
            credentials: None,
            // The fixtures sit on loopback: opted in explicitly.
            egress: proxy_pool_api::egress::EgressPolicy::allow_loopback(),
        }
    }

    fn proxy() -> VendorProxy {
        VendorProxy {
            username: Some("u".into()),
            password: Some(Secret::new("p")),
            carrier: Some("telecom".into()),
            ..VendorProxy::at("127.0.0.2", 8080)
        }
    }

    #[test]
    fn ids_are_stable_and_distinguish_upstreams_and_endpoints() {
        let (a, b) = (UpstreamId::new("a").unwrap(), UpstreamId::new("b").unwrap());
        let d = defaults();
        let p = proxy();
        assert_eq!(
            stable_id(&a, &p, &d).unwrap(),
            stable_id(&a, &p.clone(), &d).unwrap()
        );
        assert_ne!(
            stable_id(&a, &p, &d).unwrap(),
            stable_id(&b, &p, &d).unwrap()
        );
        let mut other_port = p.clone();
        other_port.port = 8081;
        assert_ne!(
            stable_id(&a, &p, &d).unwrap(),
            stable_id(&a, &other_port, &d).unwrap()
        );
        let mut other_password = p.clone();
        other_password.password = Some(Secret::new("rotated"));
        assert_eq!(
            stable_id(&a, &p, &d).unwrap(),
            stable_id(&a, &other_password, &d).unwrap()
        );
        let mut vendor = p.clone();
        vendor.vendor_id = Some("v-1".into());
        let mut moved = vendor.clone();
        moved.port = 1;
        assert_eq!(
            stable_id(&a, &vendor, &d).unwrap(),
            stable_id(&a, &moved, &d).unwrap()
        );
        assert!(stable_id(&a, &p, &d).unwrap().as_str().starts_with("a-"));
    }

    #[test]
    fn defaults_fill_gaps_and_bad_labels_drop() {
        let u = UpstreamId::new("u").unwrap();
        let mut bad = proxy();
        bad.region = Some("not a label".into());
        let mut batch = VendorBatch {
            proxies: vec![proxy(), bad],
            batch_ttl: Some(Duration::from_secs(30)),
            ..VendorBatch::default()
        };
        let out = candidates(&u, &mut batch, &defaults(), Timestamp(0));
        assert_eq!(out.len(), 1);
        let c = &out[0];
        assert_eq!(c.ttl, Duration::from_secs(30));
        assert_eq!(
            c.labels.region.as_ref().map(Label::as_str),
            Some("default-region")
        );
        assert_eq!(
            c.labels.carrier.as_ref().map(Label::as_str),
            Some("telecom")
        );
        assert_eq!(c.max_concurrency, 8);
        assert_eq!(c.dial.credentials.as_ref().unwrap().password.expose(), "p");
        assert_eq!(batch.dropped.get(&ParseDrop::InvalidLabel), Some(&1));
    }

    #[test]
    fn the_shorter_of_ttl_and_expiry_wins() {
        let u = UpstreamId::new("u").unwrap();
        let now = Timestamp(1_000_000);
        let with = |ttl: Option<u64>, at: Option<i64>| {
            let mut p = proxy();
            p.ttl = ttl.map(Duration::from_secs);
            p.expires_at = at.map(|s| Timestamp(now.0 + s * 1000));
            let mut batch = VendorBatch {
                proxies: vec![p],
                ..VendorBatch::default()
            };
            candidates(&u, &mut batch, &defaults(), now)[0]
                .ttl
                .as_secs()
        };
        assert_eq!(with(Some(40), Some(30)), 30);
        assert_eq!(with(Some(20), Some(30)), 20);
        assert_eq!(with(None, Some(30)), 30);
        assert_eq!(with(None, Some(-5)), 0);
        assert_eq!(with(None, None), 60);
    }

    #[test]
    fn vendor_addresses_the_egress_policy_refuses_are_dropped() {
        let u = UpstreamId::new("u").unwrap();
        let at = |host: &str| VendorProxy {
            host: host.into(),
            ..proxy()
        };
        let mut d = defaults();
        d.egress = proxy_pool_api::egress::EgressPolicy::parse(&["10.96.0.0/12".into()], &[])
            .expect("policy");
        let mut batch = VendorBatch {
            proxies: vec![
                at("169.254.169.254"),
                at("127.0.0.1"),
                at("localhost"),
                at("[::1]"),
                at("::ffff:127.0.0.1"),
                at("10.96.0.1"),
                at("203.0.113.5"),
                at("proxy.vendor.example"),
            ],
            ..VendorBatch::default()
        };
        let out = candidates(&u, &mut batch, &d, Timestamp(0));
        let hosts: Vec<&str> = out.iter().map(|c| c.dial.host.as_str()).collect();
        assert_eq!(hosts, ["203.0.113.5", "proxy.vendor.example"]);
        assert_eq!(batch.dropped.get(&ParseDrop::EgressDenied), Some(&6));
        assert_eq!(ParseDrop::EgressDenied.as_str(), "egress_denied");
    }
}
