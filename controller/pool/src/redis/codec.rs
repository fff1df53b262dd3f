//! The stored encodings shared with the Lua scripts, and their conversion to domain
//! values. Decimal strings carry u64 values (epochs, versions, sequences) that a Lua
//! double cannot hold exactly; Lua's cjson writes an empty array as `{}`, which
//! [`lua_vec`] accepts.

use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer, Serialize};

use crate::clock::Timestamp;
use crate::error::{PoolError, PoolResult};
use crate::model::{
    Assignment, Credentials, Dial, ExtractedProxy, Health, Label, Labels, Protocol, ProxyId,
    ProxyRecord, ProxyState, Secret, UpstreamId, WorkerId, WorkerSession,
};

/// Largest millisecond figure sent to a script (about 30 years): keeps every number a
/// Lua double and cjson's 14 significant digits hold exactly.
pub(crate) const MAX_MS: i64 = 1_000_000_000_000;

pub(crate) fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).min(MAX_MS)
}

pub(crate) fn corrupt(what: &str) -> PoolError {
    PoolError::Internal(format!("undecodable {what}"))
}

pub(crate) fn decode<T: DeserializeOwned>(value: serde_json::Value, what: &str) -> PoolResult<T> {
    serde_json::from_value(value).map_err(|_| corrupt(what))
}

/// A JSON array, or `{}` (how Lua's cjson writes an empty array).
pub(crate) fn lua_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either<T> {
        List(Vec<T>),
        Map(serde_json::Map<String, serde_json::Value>),
    }
    match Either::<T>::deserialize(d)? {
        Either::List(v) => Ok(v),
        Either::Map(m) if m.is_empty() => Ok(Vec::new()),
        Either::Map(_) => Err(de::Error::custom("expected an array")),
    }
}

pub(crate) fn u64_str<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(de::Error::custom)
}

fn opt_u64_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = Option::<String>::deserialize(d)?;
    s.map(|s| s.parse().map_err(de::Error::custom)).transpose()
}

fn state(s: &str) -> PoolResult<ProxyState> {
    ProxyState::parse(s).ok_or_else(|| corrupt("state"))
}

/// A record as the scripts store it: the fields an extraction result copies
/// ([`StoredProxy`]), then the rest.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredRecord {
    #[serde(flatten)]
    proxy: StoredProxy,
    st: String,
    lc: Option<i64>,
    ls: Option<i64>,
    lat: Option<u64>,
    fail: Option<Label>,
    fa: i64,
    uu: i64,
    cap: u32,
    xa: Option<i64>,
}

fn credentials(user: Option<String>, pass: Option<String>) -> Option<Credentials> {
    user.map(|username| Credentials {
        username,
        password: Secret::new(pass.unwrap_or_default()),
    })
}

impl StoredRecord {
    /// The domain record; EXPIRED when read at or past its hard expiry.
    pub(crate) fn into_record(
        self,
        owner: Option<Assignment>,
        now: i64,
    ) -> PoolResult<ProxyRecord> {
        let mut st = state(&self.st)?;
        if self.proxy.exp <= now {
            st = ProxyState::Expired;
        }
        let p = self.proxy.into_proxy()?;
        Ok(ProxyRecord {
            id: p.id,
            upstream: p.upstream,
            dial: p.dial,
            labels: p.labels,
            state: st,
            health: Health {
                last_check_at: self.lc.map(Timestamp),
                last_success_at: self.ls.map(Timestamp),
                latency_ms: self.lat,
                failure: self.fail,
            },
            fetched_at: Timestamp(self.fa),
            expires_at: p.expires_at,
            usable_until: Timestamp(self.uu),
            max_concurrency: self.cap,
            extracted_at: self.xa.map(Timestamp),
            owner,
        })
    }
}

/// An assignment as the scripts store it.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredAssignment {
    p: ProxyId,
    u: UpstreamId,
    w: WorkerId,
    #[serde(deserialize_with = "u64_str")]
    e: u64,
    l: i64,
    d: bool,
}

impl From<StoredAssignment> for Assignment {
    fn from(a: StoredAssignment) -> Self {
        Assignment {
            proxy_id: a.p,
            upstream: a.u,
            worker_id: a.w,
            epoch: a.e,
            lease_expires_at: Timestamp(a.l),
            draining: a.d,
        }
    }
}

/// A worker session as the scripts store it.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredSession {
    w: WorkerId,
    i: crate::model::InstanceId,
    s: crate::model::SessionId,
    #[serde(default, deserialize_with = "opt_u64_str")]
    av: Option<u64>,
    #[serde(default, deserialize_with = "opt_u64_str")]
    ae: Option<u64>,
    f: bool,
    x: i64,
}

impl From<StoredSession> for WorkerSession {
    fn from(s: StoredSession) -> Self {
        WorkerSession {
            worker_id: s.w,
            instance_id: s.i,
            session_id: s.s,
            acked_version: s.av,
            acked_epoch: s.ae,
            fence_open: s.f,
            expires_at: Timestamp(s.x),
        }
    }
}

/// One entry of a stored report body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct BodyEntry {
    pub p: ProxyId,
    pub e: String,
    pub a: u32,
    pub r: u32,
    pub d: bool,
}

/// A stored report body (written by Rust, stored verbatim by the script).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReportBody {
    pub s: crate::model::SessionId,
    pub q: String,
    pub v: String,
    pub e: String,
    #[serde(deserialize_with = "lua_vec")]
    pub ent: Vec<BodyEntry>,
}

/// A proxy inside a stored extraction result; the same fields lead every stored record.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredProxy {
    id: ProxyId,
    up: UpstreamId,
    proto: String,
    host: String,
    port: u16,
    user: Option<String>,
    pass: Option<String>,
    region: Option<Label>,
    carrier: Option<Label>,
    city: Option<Label>,
    exp: i64,
}

impl StoredProxy {
    pub(crate) fn into_proxy(self) -> PoolResult<ExtractedProxy> {
        Ok(ExtractedProxy {
            id: self.id,
            upstream: self.up,
            dial: Dial {
                protocol: Protocol::parse(&self.proto).ok_or_else(|| corrupt("protocol"))?,
                host: self.host,
                port: self.port,
                credentials: credentials(self.user, self.pass),
            },
            labels: Labels {
                region: self.region,
                carrier: self.carrier,
                city: self.city,
            },
            expires_at: Timestamp(self.exp),
        })
    }
}

/// A stored extraction result.
#[derive(Debug, Deserialize)]
pub(crate) struct StoredExtraction {
    pub at: i64,
    /// Nonce of the call that stored it.
    #[serde(default)]
    pub n: Option<String>,
    #[serde(default, deserialize_with = "lua_vec")]
    pub px: Vec<StoredProxy>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lua_empty_array_decodes() {
        #[derive(Deserialize)]
        struct T {
            #[serde(deserialize_with = "lua_vec")]
            v: Vec<u32>,
        }
        let t: T = serde_json::from_str(r#"{"v":{}}"#).unwrap();
        assert!(t.v.is_empty());
        let t: T = serde_json::from_str(r#"{"v":[1,2]}"#).unwrap();
        assert_eq!(t.v, vec![1, 2]);
    }
}
