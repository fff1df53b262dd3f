//! The JSON envelope every cache entry is stored in: a format version, the hard expiry
//! (checked on read, so an entry is never used past it even if Redis keeps the key) and
//! either a value or an explicit "absent".

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

const VERSION: u8 = 1;

#[derive(Serialize)]
struct Out<'a, V> {
    v: u8,
    exp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a V>,
}

#[derive(Deserialize)]
struct In<V> {
    v: u8,
    exp: u64,
    value: Option<V>,
}

/// A decoded, unexpired entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached<V> {
    /// The source had a value.
    Found(V),
    /// The source confirmed the key does not exist (negative entry).
    Absent,
}

/// Encodes `value` (`None` = negative entry) expiring at `exp_ms` (Unix ms).
pub fn encode<V: Serialize>(value: Option<&V>, exp_ms: u64) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&Out {
        v: VERSION,
        exp: exp_ms,
        value,
    })
}

/// Decodes an entry; `Ok(None)` when it is past its hard expiry.
pub fn decode<V: DeserializeOwned>(
    bytes: &[u8],
    now_ms: u64,
) -> Result<Option<Cached<V>>, DecodeError> {
    let e: In<V> = serde_json::from_slice(bytes).map_err(|_| DecodeError)?;
    if e.v != VERSION {
        return Err(DecodeError);
    }
    if e.exp <= now_ms {
        return Ok(None);
    }
    Ok(Some(match e.value {
        Some(v) => Cached::Found(v),
        None => Cached::Absent,
    }))
}

/// The stored bytes are not a valid envelope of this version.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("undecodable cache entry")]
pub struct DecodeError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_expiry() {
        let b = encode(Some(&"x".to_owned()), 1_000).unwrap();
        assert_eq!(
            decode::<String>(&b, 999).unwrap(),
            Some(Cached::Found("x".into()))
        );
        assert_eq!(decode::<String>(&b, 1_000).unwrap(), None);
        let n = encode::<String>(None, 1_000).unwrap();
        assert_eq!(decode::<String>(&n, 1).unwrap(), Some(Cached::Absent));
        assert!(decode::<String>(b"{\"v\":9,\"exp\":5}", 1).is_err());
        assert!(decode::<u32>(&b, 1).is_err());
    }
}
