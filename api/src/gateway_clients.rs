//! The gateway's clients file (`--clients-file`): one [`ClientEntry`] per credential,
//! as a JSON array. The operator renders it ([`render`]) with the credentials as
//! mounted Secret files; the gateway reads it (serde) and resolves the files.
//!
//! ```json
//! [
//!   {"client": "team-crawler",
//!    "passwordFile": "/etc/proxy-pool-gateway/secrets/team-crawler/password",
//!    "usernameFile": "/etc/proxy-pool-gateway/secrets/team-crawler/username"},
//!   {"client": "dev", "password": "pw", "username": "alice"}
//! ]
//! ```

use serde::{Deserialize, Serialize};

use crate::client_limits::GatewayLimits;
use crate::controlplane::model::Secret;

/// One entry of the clients file: a client name and where its Basic credentials come
/// from, each inline or from a file (exactly one of the two is meant to be given; the
/// gateway checks that).
///
/// The fields are declared in the order the file has always written its keys
/// (alphabetical), so a rendered file stays byte-for-byte what it was (its content hash
/// rolls the gateway's pods). The inline password is a [`Secret`]: `Debug` never shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientEntry {
    /// Client name (what routings' `clients` list).
    pub client: String,
    /// The client's fleet-wide gateway limits (its DistributionClient's
    /// `gatewayLimits`); absent: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<GatewayLimits>,
    /// Password, inline (local runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// File holding the password (a relative path is taken from the clients file's
    /// directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// Base user name, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// File holding the base user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_file: Option<String>,
}

impl ClientEntry {
    /// A client whose user name and password are the files `username` and `password`
    /// in `dir` (a mounted Secret's keys).
    pub fn from_secret_dir(client: impl Into<String>, dir: &str) -> Self {
        Self {
            client: client.into(),
            password_file: Some(format!("{dir}/password")),
            username_file: Some(format!("{dir}/username")),
            ..Self::default()
        }
    }

    /// A client with inline credentials (local runs).
    pub fn inline(
        client: impl Into<String>,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        Self {
            client: client.into(),
            password: Some(Secret::new(password)),
            username: Some(username.into()),
            ..Self::default()
        }
    }
}

/// The clients file's text: the entries as one compact JSON array.
pub fn render(entries: &[ClientEntry]) -> String {
    // Every field is a string or a number, so serialising cannot fail (serde_json fails
    // only on non-string map keys or a failing `Serialize` impl); were it ever to, the
    // empty text is refused by the gateway rather than misread.
    serde_json::to_string(entries).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_alphabetical_keys_and_skips_absent_fields() {
        let text = render(&[
            ClientEntry::from_secret_dir("team", "/s/team"),
            ClientEntry::inline("dev", "alice", "pw"),
        ]);
        assert_eq!(
            text,
            r#"[{"client":"team","passwordFile":"/s/team/password","usernameFile":"/s/team/username"},{"client":"dev","password":"pw","username":"alice"}]"#
        );
        let back: Vec<ClientEntry> = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back[1], ClientEntry::inline("dev", "alice", "pw"));
    }

    #[test]
    fn unknown_fields_are_refused_and_debug_hides_the_password() {
        let err = serde_json::from_str::<ClientEntry>(r#"{"client": "a", "extra": 1}"#);
        assert!(err.is_err());
        let shown = format!("{:?}", ClientEntry::inline("dev", "alice", "LEAKME"));
        assert!(
            !shown.contains("LEAKME") && shown.contains("***"),
            "{shown}"
        );
    }
}
