//! The gateway's client list (`--clients-file`): who may send traffic through it.
//!
//! A JSON array of [`ClientEntry`] (the contract the operator renders), one per
//! credential:
//!
//! ```json
//! [
//!   {"client": "team-crawler",
//!    "usernameFile": "/etc/proxy-pool-gateway/secrets/team-crawler/username",
//!    "passwordFile": "/etc/proxy-pool-gateway/secrets/team-crawler/password"},
//!   {"client": "dev", "username": "alice", "password": "pw",
//!    "limits": {"maxConnections": 20, "requestsPerSecond": 10, "burst": 20}}
//! ]
//! ```
//!
//! `limits` (optional) are the client's fleet-wide gateway limits
//! ([`GatewayLimits`], validated here; see [`crate::limits`]); entries of one client must
//! carry the same limits.
//!
//! The file forms (`usernameFile`, `passwordFile`: mounted Secret keys, what the
//! operator renders) are read once when the file is loaded, their trailing newline
//! dropped, the password kept only salted and hashed. The inline forms are for local
//! runs.
//! A relative path is taken from the clients file's directory. Every problem is
//! reported with the entry and field it belongs to and the path involved — never a
//! password or a file's content.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use proxy_pool_api::client_limits::GatewayLimits;
use proxy_pool_api::config::read_secret_file;
use proxy_pool_api::gateway_clients::ClientEntry;
use proxy_pool_api::secret::SaltedHash;

use crate::parse::username::MAX_USERNAME;
use crate::snapshot::ClientCredential;

/// Largest clients file accepted.
pub const MAX_CLIENTS_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Why a clients file was not loaded: every problem found, each naming its place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ClientsError {
    /// The clients file.
    pub file: PathBuf,
    /// `clients[i].field: what is wrong` (or a whole-file problem).
    pub problems: Vec<String>,
}

impl fmt::Display for ClientsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "clients file {}:", self.file.display())?;
        for (i, p) in self.problems.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}{p}")?;
        }
        Ok(())
    }
}

/// Reads and resolves a clients file (including the files it names).
pub fn load(path: &Path) -> Result<Vec<ClientCredential>, ClientsError> {
    let fail = |problem: String| ClientsError {
        file: path.to_owned(),
        problems: vec![problem],
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(io_problem(path, &e)))?;
    if meta.len() > MAX_CLIENTS_FILE_BYTES {
        return Err(fail(format!("larger than {MAX_CLIENTS_FILE_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(io_problem(path, &e)))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&text, base).map_err(|problems| ClientsError {
        file: path.to_owned(),
        problems,
    })
}

fn io_problem(path: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("file {} does not exist", path.display()),
        kind => format!("cannot read {}: {kind}", path.display()),
    }
}

/// Parses a clients file's text; relative file paths are taken from `base`.
/// Returns every problem found.
pub fn parse(text: &str, base: &Path) -> Result<Vec<ClientCredential>, Vec<String>> {
    // serde_json's messages can quote the offending value (an inline password):
    // only the category and position are reported.
    let entries: Vec<ClientEntry> = serde_json::from_str(text).map_err(|e| {
        vec![format!(
            "not a JSON array of client entries ({:?} error at line {}, column {}; \
             fields: client, username | usernameFile, password | passwordFile, limits)",
            e.classify(),
            e.line(),
            e.column()
        )]
    })?;
    let mut problems = Vec::new();
    let mut out = Vec::with_capacity(entries.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    // Each client's limits, from its first entry: several credentials of one client share
    // one budget, so their limits must agree.
    let mut limits_of: BTreeMap<String, (usize, Option<GatewayLimits>)> = BTreeMap::new();
    for (i, e) in entries.into_iter().enumerate() {
        let at = |field: &str| format!("clients[{i}].{field}");
        let before = problems.len();
        if e.client.trim().is_empty() {
            problems.push(format!("{}: must not be empty", at("client")));
        }
        let username = match given(
            i,
            "username",
            e.username,
            e.username_file,
            base,
            &mut problems,
        ) {
            Some(Given::Inline(u)) if check_username(u.as_bytes()) => Some(u),
            Some(Given::Inline(_)) => {
                problems.push(format!("{}: {USERNAME_RULE}", at("username")));
                None
            }
            Some(Given::File(bytes, file)) => match String::from_utf8(bytes) {
                Ok(u) if check_username(u.as_bytes()) => Some(u),
                _ => {
                    problems.push(format!(
                        "{}: content of {}: {USERNAME_RULE}",
                        at("usernameFile"),
                        file.display()
                    ));
                    None
                }
            },
            None => None,
        };
        let password = match given(
            i,
            "password",
            e.password.map(|p| p.expose().to_owned()),
            e.password_file,
            base,
            &mut problems,
        ) {
            Some(Given::Inline(p)) if p.is_empty() => {
                problems.push(format!("{}: must not be empty", at("password")));
                None
            }
            Some(Given::Inline(p)) => Some(SaltedHash::new(p.as_bytes())),
            Some(Given::File(bytes, _)) => Some(SaltedHash::new(&bytes)),
            None => None,
        };
        let limits = e.limits.filter(|l| !l.is_empty());
        if let Some(l) = &limits
            && let Err(err) = l.validate()
        {
            problems.push(format!("{}: {err}", at("limits")));
        }
        match limits_of.get(&e.client) {
            Some((first, theirs)) if *theirs != limits => problems.push(format!(
                "clients[{i}].limits: differ from clients[{first}]'s, the same client \
                 (a client's credentials share its limits)"
            )),
            Some(_) => {}
            None => {
                limits_of.insert(e.client.clone(), (i, limits));
            }
        }
        if problems.len() > before {
            continue;
        }
        let (Some(username), Some(password)) = (username, password) else {
            continue;
        };
        if let Some(first) = seen.insert(username.clone(), i) {
            // The gateway looks clients up by base user name: two entries with one name
            // would leave one of them unusable without anyone noticing.
            problems.push(format!(
                "clients[{i}]: the same user name as clients[{first}] (user names must be unique)"
            ));
            continue;
        }
        out.push(ClientCredential {
            client: e.client,
            username,
            password,
            limits,
        });
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

const USERNAME_RULE: &str = "a user name must be 1 to 255 characters of A-Z a-z 0-9 _ . @ \
     (`-` separates the routing parameters clients append)";

/// A base user name clients can present: what `parse_username` accepts as the part
/// before the first `-`.
fn check_username(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw.len() <= MAX_USERNAME
        && raw
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@'))
}

/// Where one credential of an entry comes from.
enum Given {
    /// Given inline.
    Inline(String),
    /// Read from a file: its content (trailing newline dropped) and its path.
    File(Vec<u8>, PathBuf),
}

/// Entry `i`'s credential `field`, inline (`field`) or from a file (`{field}File`,
/// read here): exactly one of the two must be given. Each problem is pushed.
fn given(
    i: usize,
    field: &str,
    inline: Option<String>,
    file: Option<String>,
    base: &Path,
    problems: &mut Vec<String>,
) -> Option<Given> {
    match (inline, file) {
        (Some(_), Some(_)) => {
            problems.push(format!(
                "clients[{i}].{field}: give {field} or {field}File, not both"
            ));
            None
        }
        (None, None) => {
            problems.push(format!("clients[{i}]: {field} or {field}File is required"));
            None
        }
        (Some(value), None) => Some(Given::Inline(value)),
        (None, Some(file)) => {
            let file = resolve(base, Path::new(&file));
            match read_secret_file(&file) {
                Ok(bytes) => Some(Given::File(bytes, file)),
                Err(message) => {
                    problems.push(format!("clients[{i}].{field}File: {message}"));
                    None
                }
            }
        }
    }
}

fn resolve(base: &Path, file: &Path) -> PathBuf {
    if file.is_absolute() {
        file.to_owned()
    } else {
        base.join(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proxy_pool_e2e::procs::fresh_test_dir;
    use std::path::Path;

    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            Self(fresh_test_dir(&format!("gw-clients-{tag}")))
        }
        fn write(&self, name: &str, content: &[u8]) -> PathBuf {
            let p = self.0.join(name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, content).expect("write");
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn file_forms_are_read_trimmed_and_hashed() {
        let d = Dir::new("files");
        d.write("secrets/a/username", b"alice\n");
        d.write("secrets/a/password", b"s3cret\r\n");
        let abs = d.write("abs-password", b"other");
        let text = format!(
            r#"[{{"client": "team-a", "usernameFile": "secrets/a/username", "passwordFile": "secrets/a/password"}},
               {{"client": "team-b", "username": "bob", "passwordFile": {:?}}},
               {{"client": "dev", "username": "carol", "password": "pw"}}]"#,
            abs.display().to_string()
        );
        let path = d.write("clients.json", text.as_bytes());
        let got = load(&path).expect("loads");
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[0].client.as_str(), got[0].username.as_str()),
            ("team-a", "alice")
        );
        assert!(got[0].password.matches(b"s3cret"));
        assert_eq!(got[1].username, "bob");
        assert!(got[1].password.matches(b"other"));
        assert!(got[2].password.matches(b"pw") && !got[2].password.matches(b"pw2"));
        assert_ne!(
            got[2],
            ClientCredential::from_password("dev", "carol", "pw"),
            "every load salts afresh"
        );
    }

    #[test]
    fn missing_empty_and_invalid_files_name_field_and_path_not_content() {
        let d = Dir::new("bad");
        d.write("empty", b"\n");
        d.write("bad-user", b"hunter-2");
        d.write("pw", b"TOPSECRETVALUE");
        let text = r#"[
            {"client": "a", "usernameFile": "nope/username", "passwordFile": "pw"},
            {"client": "b", "username": "bee", "passwordFile": "empty"},
            {"client": "c", "usernameFile": "bad-user", "passwordFile": "pw"}
        ]"#;
        let path = d.write("clients.json", text.as_bytes());
        let err = load(&path).expect_err("refused");
        let shown = err.to_string();
        assert_eq!(err.problems.len(), 3, "{shown}");
        assert!(
            err.problems[0].starts_with("clients[0].usernameFile: file ")
                && err.problems[0].contains("nope/username")
                && err.problems[0].ends_with("does not exist"),
            "{shown}"
        );
        assert!(
            err.problems[1].starts_with("clients[1].passwordFile: file ")
                && err.problems[1].ends_with("is empty"),
            "{shown}"
        );
        assert!(
            err.problems[2].starts_with("clients[2].usernameFile: content of "),
            "{shown}"
        );
        assert!(shown.contains(&path.display().to_string()), "{shown}");
        assert!(
            !shown.contains("TOPSECRETVALUE") && !shown.contains("hunter"),
            "{shown}"
        );
    }

    #[test]
    fn inline_forms_and_shape_errors() {
        let base = Path::new("/nonexistent");
        let cases: &[(&str, &str)] = &[
            (
                r#"[{"client": "a", "username": "u"}]"#,
                "password or passwordFile is required",
            ),
            (
                r#"[{"client": "a", "password": "p"}]"#,
                "username or usernameFile is required",
            ),
            (
                r#"[{"client": "a", "username": "u", "usernameFile": "f", "password": "p"}]"#,
                "clients[0].username: give username or usernameFile, not both",
            ),
            (
                r#"[{"client": "a", "username": "u", "password": "p", "passwordFile": "f"}]"#,
                "clients[0].password: give password or passwordFile, not both",
            ),
            (
                r#"[{"client": "", "username": "u", "password": "p"}]"#,
                "clients[0].client: must not be empty",
            ),
            (
                r#"[{"client": "a", "username": "u-x", "password": "p"}]"#,
                "clients[0].username: a user name",
            ),
            (
                r#"[{"client": "a", "username": "u", "password": ""}]"#,
                "clients[0].password: must not be empty",
            ),
            (
                r#"[{"client": "a", "username": "u", "password": "p"}, {"client": "b", "username": "u", "password": "q"}]"#,
                "clients[1]: the same user name as clients[0]",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text, base).expect_err(text);
            assert!(err.iter().any(|p| p.contains(want)), "{text}: {err:?}");
        }
        assert_eq!(parse("[]", base), Ok(Vec::new()));
    }

    #[test]
    fn a_json_error_does_not_echo_the_password() {
        let text =
            r#"[{"client": "a", "username": "u", "password": "LEAKME", "extra": "LEAKME2"}]"#;
        let err = parse(text, Path::new(".")).expect_err("unknown field");
        assert!(!format!("{err:?}").contains("LEAKME"), "{err:?}");
        let err = parse(
            r#"[{"client": "a", "username": "u", "password": 12345678}]"#,
            Path::new("."),
        )
        .expect_err("wrong type");
        assert!(!format!("{err:?}").contains("12345678"), "{err:?}");
        assert!(err[0].contains("line 1"), "{err:?}");
    }

    #[test]
    fn limits_are_read_validated_and_agree_per_client() {
        let base = Path::new("/nonexistent");
        let got = parse(
            r#"[{"client": "a", "username": "u", "password": "p",
                 "limits": {"maxConnections": 4, "requestsPerSecond": 10, "burst": 20}},
                {"client": "b", "username": "v", "password": "p", "limits": {}}]"#,
            base,
        )
        .expect("loads");
        let l = got[0].limits.expect("limits");
        assert_eq!(l.max_connections.map(|v| v.get()), Some(4));
        assert_eq!(l.burst.map(|v| v.get()), Some(20));
        assert_eq!(got[1].limits, None, "empty limits limit nothing");
        let err = parse(
            r#"[{"client": "a", "username": "u", "password": "p", "limits": {"burst": 5}}]"#,
            base,
        )
        .expect_err("burst without rate");
        assert_eq!(
            err,
            vec!["clients[0].limits: burst needs requestsPerSecond"]
        );
        let err = parse(
            r#"[{"client": "a", "username": "u", "password": "p", "limits": {"maxConnections": 1}},
                {"client": "a", "username": "w", "password": "p", "limits": {"maxConnections": 2}}]"#,
            base,
        )
        .expect_err("differing limits");
        assert!(
            err[0].starts_with("clients[1].limits: differ from clients[0]'s"),
            "{err:?}"
        );
    }

    #[test]
    fn a_missing_clients_file_is_named() {
        let err = load(Path::new("/nonexistent/clients.json")).expect_err("missing");
        assert_eq!(
            err.to_string(),
            "clients file /nonexistent/clients.json: file /nonexistent/clients.json does not exist"
        );
    }
}
