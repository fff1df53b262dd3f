//! The key the operator seals its content hashes with before they leave it as
//! annotations (`proxypool.io/config-hash` on the controller's pods,
//! `proxypool.io/clients-hash` on gateway pods). The hashes cover credential values so
//! that a rotation rolls the pods; unkeyed, anyone allowed to read a Deployment could
//! test password guesses against them. Sealed with HMAC-SHA256 under a random key kept
//! in a Secret of the operator's namespace, they only tell "changed" from "unchanged".
//!
//! The key is made once (32 random bytes), kept across restarts and leader changes
//! (so pods do not roll when the operator restarts), and never logged.

use std::fmt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rand::RngCore as _;

/// Key of the Secret's data entry.
pub const DATA_KEY: &str = "key";
/// Default name of the Secret.
pub const DEFAULT_SECRET: &str = "proxy-pool-operator-hash-key";

/// The sealing key.
#[derive(Clone, PartialEq, Eq)]
pub struct HashKey([u8; 32]);

impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashKey(***)")
    }
}

impl HashKey {
    /// A key from its bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh random key.
    pub fn random() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        Self(k)
    }

    /// `digest` sealed for an annotation: hex HMAC-SHA256 under the key.
    pub fn seal(&self, digest: &str) -> String {
        hex::encode(proxy_pool_api::secret::hmac_sha256(
            &self.0,
            digest.as_bytes(),
        ))
    }
}

/// Why the key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum HashKeyError {
    /// The API failed.
    #[error("hash key Secret: {0}")]
    Kube(#[from] kube::Error),
    /// The Secret exists without a 32-byte `key`.
    #[error("hash key Secret {0:?} has no 32-byte `key` entry")]
    Invalid(String),
}

/// The key in Secret `name` of `api`'s namespace; made (random) when the Secret does
/// not exist yet. Replicas racing to make it all end up with the one that won.
pub async fn ensure(api: &Api<Secret>, name: &str) -> Result<HashKey, HashKeyError> {
    if let Some(s) = api.get_opt(name).await? {
        return from_secret(&s, name);
    }
    let key = HashKey::random();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "proxy-pool-operator".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        data: Some([(DATA_KEY.to_owned(), ByteString(key.0.to_vec()))].into()),
        immutable: Some(true),
        ..Secret::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(key),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api.get(name).await?;
            from_secret(&s, name)
        }
        Err(e) => Err(e.into()),
    }
}

fn from_secret(s: &Secret, name: &str) -> Result<HashKey, HashKeyError> {
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    <[u8; 32]>::try_from(bytes)
        .map(HashKey)
        .map_err(|_| HashKeyError::Invalid(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_hashes_depend_on_the_key_and_hide_the_digest() {
        let a = HashKey::new([1; 32]);
        let b = HashKey::new([2; 32]);
        let d = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert_eq!(a.seal(d), a.seal(d), "stable: pods roll only on a change");
        assert_ne!(a.seal(d), b.seal(d));
        assert_ne!(a.seal(d), a.seal("other"));
        assert_ne!(a.seal(d), d);
        assert_eq!(a.seal(d).len(), 64);
        assert_eq!(format!("{a:?}"), "HashKey(***)");
    }
}
