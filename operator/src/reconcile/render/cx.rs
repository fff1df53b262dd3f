//! The rendering cursor: what one rendering has found so far (the Secret keys to
//! mount, their values' digest, the problems of each resource) and how it reads a
//! Secret key the controller will read from a mounted file, checked the way the
//! controller checks it.

use std::collections::{BTreeMap, BTreeSet};

use proxy_pool_api::config::raw::RawProxyCredentials;
use proxy_pool_api::config::{check_basic_username, check_proxy_credential};
use sha2::{Digest, Sha256};

use super::model::{Inputs, Kind, Problem};
use crate::crd::SecretKeyRef;

/// One rendering in progress.
pub(super) struct Cx<'a> {
    pub(super) inputs: &'a Inputs<'a>,
    pub(super) mounts: BTreeMap<String, BTreeSet<String>>,
    pub(super) problems: BTreeMap<(Kind, String), Vec<Problem>>,
    pub(super) secret_hasher: Sha256,
}

impl Cx<'_> {
    pub(super) fn problem(&mut self, kind: Kind, name: &str, p: Problem) {
        self.problems
            .entry((kind, name.to_owned()))
            .or_default()
            .push(p);
    }

    /// The Secret, or a `SecretNotFound` problem.
    pub(super) fn secret(&self, secret: &str) -> Result<&BTreeMap<String, Vec<u8>>, Problem> {
        self.inputs.secrets.get(secret).ok_or_else(|| {
            Problem::new(
                "SecretNotFound",
                format!("Secret {secret:?} does not exist in this namespace"),
            )
        })
    }

    /// A key the controller reads from a mounted file: returns its path.
    pub(super) fn file(&mut self, secret: &str, key: &str) -> String {
        let value = self
            .inputs
            .secrets
            .get(secret)
            .and_then(|s| s.get(key))
            .map(Vec::as_slice)
            .unwrap_or_default();
        self.digest(secret, key, value);
        self.mounts
            .entry(secret.to_owned())
            .or_default()
            .insert(key.to_owned());
        format!(
            "{}/{secret}/{key}",
            self.inputs.secret_dir.trim_end_matches('/')
        )
    }

    fn digest(&mut self, secret: &str, key: &str, value: &[u8]) {
        self.secret_hasher.update(secret.as_bytes());
        self.secret_hasher.update([0]);
        self.secret_hasher.update(key.as_bytes());
        self.secret_hasher.update([0]);
        self.secret_hasher.update(Sha256::digest(value));
    }

    /// A client credential key the controller reads (and hashes) from a mounted file:
    /// checked to exist and be non-empty (the controller would refuse the whole
    /// config otherwise), returns the file path.
    pub(super) fn credential_file(&mut self, r: &SecretKeyRef) -> Result<String, Problem> {
        let data = self.secret(&r.name)?;
        let value = data
            .get(&r.key)
            .ok_or_else(|| missing_key(&r.name, &r.key))?;
        if trim_newline(value).is_empty() {
            return Err(Problem::new(
                "InvalidSecret",
                format!("key {:?} of Secret {:?} is empty", r.key, r.name),
            ));
        }
        Ok(self.file(&r.name, &r.key))
    }

    /// A Basic user name file: also valid UTF-8 and a user name the controller accepts.
    pub(super) fn username_file(&mut self, secret: &str) -> Result<String, Problem> {
        let r = SecretKeyRef {
            name: secret.to_owned(),
            key: "username".into(),
        };
        let data = self.secret(secret)?;
        let value = data
            .get("username")
            .ok_or_else(|| missing_key(secret, "username"))?;
        let ok =
            std::str::from_utf8(trim_newline(value)).is_ok_and(|u| check_basic_username(u).is_ok());
        if !ok {
            return Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?} must be 1 to 128 bytes of UTF-8 without `:`"
                ),
            ));
        }
        self.credential_file(&r)
    }

    /// A gateway client's user name is what gateway clients present before their
    /// `-key-value` routing parameters: `A–Z a–z 0–9 _ . @`, at most 255 bytes.
    pub(super) fn gateway_username(&self, secret: &str) -> Result<(), Problem> {
        let value = self
            .secret(secret)?
            .get("username")
            .map(|v| trim_newline(v))
            .unwrap_or_default();
        let ok = !value.is_empty()
            && value.len() <= 255
            && value
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@'));
        if ok {
            Ok(())
        } else {
            Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?}: with gateway:connect the user name must be A-Z a-z 0-9 _ . @ only (`-` separates the gateway's username parameters)"
                ),
            ))
        }
    }

    /// `username` and `password` as mounted files (the user name checked here with the
    /// controller's own rule).
    pub(super) fn proxy_credentials(
        &mut self,
        secret: &str,
    ) -> Result<RawProxyCredentials, Problem> {
        let data = self.secret(secret)?;
        if !data.contains_key("password") {
            return Err(missing_key(secret, "password"));
        }
        let value = data
            .get("username")
            .ok_or_else(|| missing_key(secret, "username"))?;
        let ok = std::str::from_utf8(trim_newline(value))
            .is_ok_and(|u| check_proxy_credential(u).is_ok());
        if !ok {
            return Err(Problem::new(
                "InvalidSecret",
                format!(
                    "key \"username\" of Secret {secret:?} must be 1 to 255 bytes of UTF-8 without control characters"
                ),
            ));
        }
        Ok(RawProxyCredentials {
            username: String::new(),
            username_file: Some(self.file(secret, "username")),
            password: None,
            password_file: Some(self.file(secret, "password")),
        })
    }
}

fn missing_key(secret: &str, key: &str) -> Problem {
    Problem::new(
        "SecretKeyMissing",
        format!("Secret {secret:?} has no key {key:?}"),
    )
}

pub(super) fn trim_newline(value: &[u8]) -> &[u8] {
    let end = value
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    &value[..end]
}
