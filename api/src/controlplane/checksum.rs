//! The snapshot checksum's pieces (see [`super::state`] for the rule): the 256-bit sum
//! of proxy digests, the canonical encoding, and the digest of the ordered routings.

use sha2::{Digest, Sha256};

use super::model::{Checksum, Routing, Sticky};

/// 256-bit accumulator of proxy digests (addition modulo 2²⁵⁶).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sum([u64; 4]);

impl Sum {
    fn limbs(d: &[u8; 32]) -> [u64; 4] {
        let mut l = [0u64; 4];
        for (i, chunk) in d.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            l[i] = u64::from_le_bytes(b);
        }
        l
    }

    pub(super) fn add(&mut self, d: &[u8; 32]) {
        self.ripple(d, u64::overflowing_add);
    }

    pub(super) fn sub(&mut self, d: &[u8; 32]) {
        self.ripple(d, u64::overflowing_sub);
    }

    /// `self op d` limb by limb, each limb's carry (or borrow) fed into the next.
    fn ripple(&mut self, d: &[u8; 32], op: fn(u64, u64) -> (u64, bool)) {
        let mut carry = false;
        for (a, b) in self.0.iter_mut().zip(Self::limbs(d)) {
            let (s1, c1) = op(*a, b);
            let (s2, c2) = op(s1, u64::from(carry));
            *a = s2;
            carry = c1 || c2;
        }
    }

    pub(super) fn bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, l) in self.0.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&l.to_le_bytes());
        }
        out
    }
}

/// Canonical encoding into a buffer, hashed once (one SHA-256 call per item).
struct Canon(Vec<u8>);

impl Canon {
    fn new() -> Self {
        Self(Vec::with_capacity(256))
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
        self.bytes(s.as_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    fn list(&mut self, v: &[String]) {
        self.u64(v.len() as u64);
        for s in v {
            self.str(s);
        }
    }
    fn finish(self) -> [u8; 32] {
        Sha256::digest(&self.0).into()
    }
}

/// SHA-256 of the canonical encoding of an ordered routing list.
pub fn routings_digest(routings: &[Routing]) -> [u8; 32] {
    let mut c = Canon::new();
    c.u64(routings.len() as u64);
    for r in routings {
        c.str(&r.name);
        c.u64(r.matcher.username_params.len() as u64);
        for p in &r.matcher.username_params {
            c.str(&p.key);
            c.list(&p.values);
        }
        c.list(&r.matcher.clients);
        c.list(&r.matcher.target_hosts);
        c.list(&r.upstreams);
        c.list(&r.regions);
        c.list(&r.carriers);
        c.u64(r.strategy as u64);
        match &r.sticky {
            Some(s) => {
                c.0.extend_from_slice(&[1]);
                c.str(&s.param);
                c.u64(u64::try_from(s.session_ttl.as_millis()).unwrap_or(u64::MAX));
                c.u64(u64::try_from(s.idle_timeout.as_millis()).unwrap_or(u64::MAX));
                // Fields added after the first release are covered only when they differ
                // from their default, so a worker of the previous release (which does
                // not know them) still verifies this release's snapshots.
                if s.max_ttl != Sticky::default_max_ttl(s.session_ttl) {
                    c.u64(u64::try_from(s.max_ttl.as_millis()).unwrap_or(u64::MAX));
                }
            }
            None => c.0.extend_from_slice(&[0]),
        }
        c.u64(u64::from(r.retry.max_attempts));
        c.u64(u64::try_from(r.retry.deadline.as_millis()).unwrap_or(u64::MAX));
        let ports = r.connect_ports.ranges();
        c.u64(ports.len() as u64);
        for p in ports {
            c.u64(u64::from(p.first));
            c.u64(u64::from(p.last));
        }
        // Added after v1 shipped: encoded only when set, so a routing without it keeps
        // the checksum an older worker computes.
        if !r.cities.is_empty() {
            c.list(&r.cities);
        }
        // Likewise: declared selectors (absent: the defaults), after a marker byte (the
        // proto field number).
        if let Some(selectors) = &r.selectors {
            c.0.extend_from_slice(&[11]);
            c.u64(selectors.len() as u64);
            for s in selectors {
                c.str(&s.param);
                c.str(s.dimension.as_str());
            }
        }
    }
    c.finish()
}

pub(super) fn checksum_of(
    version: u64,
    epoch: u64,
    routings: &[u8; 32],
    count: usize,
    sum: &Sum,
) -> Checksum {
    let mut h = Sha256::new();
    h.update(b"proxy-pool/snapshot/v1");
    h.update(version.to_le_bytes());
    h.update(epoch.to_le_bytes());
    h.update(routings);
    h.update((count as u64).to_le_bytes());
    h.update(sum.bytes());
    Checksum(h.finalize().into())
}
