//! Hand-written wire pieces: the deterministic encoding of one `SnapshotProxy` (what
//! the checksum hashes, and what the controller caches per proxy), and the
//! `SnapshotUpdate` message, which can also carry an update the controller encoded once
//! and shares between streams.
//!
//! `SnapshotUpdate` is wire-identical to the `.proto` definition (a `oneof update { full
//! = 1; delta = 2; }`); decoding always fills [`SnapshotUpdate::update`].

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{self, DecodeContext, WireType};

use super::model::SnapshotProxy;
use super::pb;

/// The `update` oneof of `SnapshotUpdate`.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A full snapshot.
    Full(pb::WorkerSnapshot),
    /// A delta.
    Delta(pb::SnapshotDelta),
}

/// `proxypool.controlplane.v1.SnapshotUpdate`. `Debug` never prints pre-encoded bytes
/// (they hold dial passwords).
#[derive(Clone, Default, PartialEq)]
pub struct SnapshotUpdate {
    /// The update (always set by decoding).
    pub update: Option<Update>,
    encoded: Option<Bytes>,
}

impl std::fmt::Debug for SnapshotUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotUpdate")
            .field("update", &self.update)
            .field("encoded_len", &self.encoded.as_ref().map(Bytes::len))
            .finish()
    }
}

impl SnapshotUpdate {
    /// An update from a message.
    pub fn new(update: Update) -> Self {
        Self {
            update: Some(update),
            encoded: None,
        }
    }

    /// An update whose complete encoding was made earlier (see [`encode_full`]); sending
    /// it copies nothing but the bytes.
    pub fn pre_encoded(encoded: Bytes) -> Self {
        Self {
            update: None,
            encoded: Some(encoded),
        }
    }
}

impl prost::Message for SnapshotUpdate {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if let Some(bytes) = &self.encoded {
            buf.put_slice(bytes);
            return;
        }
        match &self.update {
            Some(Update::Full(m)) => encoding::message::encode(1, m, buf),
            Some(Update::Delta(m)) => encoding::message::encode(2, m, buf),
            None => {}
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        self.encoded = None;
        if !matches!(tag, 1 | 2) {
            return encoding::skip_field(wire_type, tag, buf, ctx);
        }
        // A oneof member seen again merges into the one held; the other member is
        // replaced.
        let (full, delta) = match self.update.take() {
            Some(Update::Full(m)) => (Some(m), None),
            Some(Update::Delta(m)) => (None, Some(m)),
            None => (None, None),
        };
        self.update = Some(if tag == 1 {
            Update::Full(merged(full, wire_type, buf, ctx)?)
        } else {
            Update::Delta(merged(delta, wire_type, buf, ctx)?)
        });
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        if let Some(bytes) = &self.encoded {
            return bytes.len();
        }
        match &self.update {
            Some(Update::Full(m)) => encoding::message::encoded_len(1, m),
            Some(Update::Delta(m)) => encoding::message::encoded_len(2, m),
            None => 0,
        }
    }

    fn clear(&mut self) {
        self.update = None;
        self.encoded = None;
    }
}

/// `previous` (or a new message) with one more encoding of it merged in.
fn merged<M: prost::Message + Default>(
    previous: Option<M>,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
) -> Result<M, prost::DecodeError> {
    let mut m = previous.unwrap_or_default();
    encoding::message::merge(wire_type, &mut m, buf, ctx)?;
    Ok(m)
}

fn put_str(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        encoding::encode_key(tag, WireType::LengthDelimited, buf);
        encoding::encode_varint(s.len() as u64, buf);
        buf.extend_from_slice(s.as_bytes());
    }
}

fn str_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        encoding::key_len(tag) + encoding::encoded_len_varint(s.len() as u64) + s.len()
    }
}

fn put_opt(tag: u32, s: &Option<String>, buf: &mut Vec<u8>) {
    if let Some(s) = s {
        put_str(tag, s, buf);
    }
}

/// Appends the protobuf encoding of `pb::SnapshotProxy::from(p)` to `buf`, byte for
/// byte what prost writes (fields in number order, proto3 defaults omitted), without
/// building the message.
pub fn encode_proxy(p: &SnapshotProxy, buf: &mut Vec<u8>) {
    put_str(1, &p.id, buf);
    put_str(2, &p.upstream, buf);
    let protocol = pb::UpstreamProtocol::from(p.dial.protocol) as i32;
    encoding::int32::encode(3, &protocol, buf);
    put_str(4, &p.dial.host, buf);
    if p.dial.port != 0 {
        encoding::uint32::encode(5, &u32::from(p.dial.port), buf);
    }
    if let Some(c) = &p.dial.credentials {
        let password = c.password.expose();
        let len = str_len(1, &c.username) + str_len(2, password);
        encoding::encode_key(6, WireType::LengthDelimited, buf);
        encoding::encode_varint(len as u64, buf);
        put_str(1, &c.username, buf);
        put_str(2, password, buf);
    }
    put_opt(7, &p.labels.region, buf);
    put_opt(8, &p.labels.carrier, buf);
    if p.max_concurrency != 0 {
        encoding::uint32::encode(9, &p.max_concurrency, buf);
    }
    if p.expires_at_ms != 0 {
        encoding::int64::encode(10, &p.expires_at_ms, buf);
    }
    if p.usable_until_ms != 0 {
        encoding::int64::encode(11, &p.usable_until_ms, buf);
    }
    if p.assignment_epoch != 0 {
        encoding::uint64::encode(12, &p.assignment_epoch, buf);
    }
    if p.draining {
        encoding::bool::encode(13, &true, buf);
    }
    if p.lease_expires_at_ms != 0 {
        encoding::int64::encode(14, &p.lease_expires_at_ms, buf);
    }
    for r in &p.excluded_routings {
        encoding::encode_key(15, WireType::LengthDelimited, buf);
        encoding::encode_varint(r.len() as u64, buf);
        buf.extend_from_slice(r.as_bytes());
    }
    put_opt(16, &p.labels.city, buf);
}

/// The complete encoding of a `SnapshotUpdate` carrying a full snapshot: `head` is the
/// snapshot without proxies (header, routings, checksum) and `proxies` the cached
/// encodings of its proxies in order.
pub fn encode_full<'a>(
    head: &pb::WorkerSnapshot,
    proxies: impl Iterator<Item = &'a [u8]> + Clone,
) -> Bytes {
    let head_len = prost::Message::encoded_len(head);
    let body_len = head_len
        + proxies
            .clone()
            .map(|w| 1 + encoding::encoded_len_varint(w.len() as u64) + w.len())
            .sum::<usize>();
    let mut buf = Vec::with_capacity(1 + encoding::encoded_len_varint(body_len as u64) + body_len);
    encoding::encode_key(1, WireType::LengthDelimited, &mut buf);
    encoding::encode_varint(body_len as u64, &mut buf);
    prost::Message::encode_raw(head, &mut buf);
    for w in proxies {
        encoding::encode_key(6, WireType::LengthDelimited, &mut buf);
        encoding::encode_varint(w.len() as u64, &mut buf);
        buf.extend_from_slice(w);
    }
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controlplane::model::{Credentials, Protocol, Secret};
    use prost::Message;

    /// The state tests' proxy as SOCKS5, draining, under a lease, excluded from a list
    /// of routings that holds an empty name.
    fn proxy() -> SnapshotProxy {
        let mut p = crate::controlplane::state::tests::proxy("p-1", 42);
        p.dial.protocol = Protocol::Socks5;
        p.draining = true;
        p.lease_expires_at_ms = 1_699_999_980_000;
        p.excluded_routings = vec!["r-a".into(), String::new(), "r-b".into()];
        p
    }

    #[test]
    fn hand_encoding_matches_prost_byte_for_byte() {
        let mut variants = vec![proxy()];
        let mut p = proxy();
        p.dial.credentials = None;
        p.labels.region = None;
        p.draining = false;
        p.assignment_epoch = 0;
        p.dial.protocol = Protocol::Http;
        p.lease_expires_at_ms = 0;
        p.excluded_routings.clear();
        variants.push(p);
        let mut p = proxy();
        p.dial.credentials = Some(Credentials {
            username: String::new(),
            password: Secret::new(""),
        });
        p.expires_at_ms = -5;
        variants.push(p);
        for p in variants {
            let mut mine = Vec::new();
            encode_proxy(&p, &mut mine);
            assert_eq!(mine, pb::SnapshotProxy::from(&p).encode_to_vec(), "{p:?}");
        }
    }

    #[test]
    fn a_oneof_member_seen_again_merges_and_the_other_is_replaced() {
        let enc = |u: Update| SnapshotUpdate::new(u).encode_to_vec();
        let full = |version, ownership_epoch| {
            Update::Full(pb::WorkerSnapshot {
                version,
                ownership_epoch,
                ..Default::default()
            })
        };
        let delta = Update::Delta(pb::SnapshotDelta {
            base_version: 1,
            version: 2,
            ..Default::default()
        });
        // Full then Full: the later fields merge onto the earlier message.
        let twice = [enc(full(3, 0)), enc(full(0, 9))].concat();
        let decoded = SnapshotUpdate::decode(twice.as_slice()).unwrap();
        assert_eq!(decoded.update, Some(full(3, 9)));
        // Delta then Full: the full snapshot replaces the delta.
        let both = [enc(delta.clone()), enc(full(5, 1))].concat();
        let decoded = SnapshotUpdate::decode(both.as_slice()).unwrap();
        assert_eq!(decoded.update, Some(full(5, 1)));
        // An unknown field is skipped and keeps the update.
        let unknown = [enc(delta.clone()), vec![0x18, 0x07]].concat();
        let decoded = SnapshotUpdate::decode(unknown.as_slice()).unwrap();
        assert_eq!(decoded.update, Some(delta));
    }

    #[test]
    fn pre_encoded_full_decodes_as_the_message() {
        let p = proxy();
        let mut w = Vec::new();
        encode_proxy(&p, &mut w);
        let head = pb::WorkerSnapshot {
            version: 3,
            ownership_epoch: 9,
            checksum: vec![1; 32],
            ..Default::default()
        };
        let bytes = encode_full(&head, [w.as_slice()].into_iter());
        let pre = SnapshotUpdate::pre_encoded(bytes.clone());
        assert!(
            !format!("{pre:?}").contains("112, 119"),
            "no raw bytes in Debug"
        );
        assert_eq!(pre.encode_to_vec(), bytes.to_vec());
        let decoded = SnapshotUpdate::decode(bytes).unwrap();
        let mut want = head.clone();
        want.proxies.push(pb::SnapshotProxy::from(&p));
        assert_eq!(decoded.update, Some(Update::Full(want.clone())));
        let normal = SnapshotUpdate::new(Update::Full(want));
        assert_eq!(
            SnapshotUpdate::decode(normal.encode_to_vec().as_slice()).unwrap(),
            decoded
        );
    }
}
