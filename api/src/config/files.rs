//! The one place the config reads files: client credentials referenced by path
//! (`clients[].apiKeys[].file`, `bearerTokens[].file`, `basic.usernameFile`,
//! `basic.passwordFile` — mounted Secret keys). Each is read once when the controller
//! loads its config, its trailing newline dropped, and kept only as its SHA-256 (API
//! keys, bearer tokens), salted SHA-256 (Basic passwords) or in clear (user names). A missing, unreadable, oversized or empty file is a
//! [`ConfigError`] naming the field and the path, never the content.

use std::io::Read as _;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::checks::check_basic_username;
use super::error::{ConfigError, ConfigErrors};
use super::load::parse_yaml;
use super::raw::RawConfig;
use super::types::{BasicCredentials, ClientSecretKind, Config, SaltedHash, SecretHash};
use super::validate::{duplicate_credentials, validate};

/// Largest credential file accepted.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Reads one credential file (a mounted Secret key): its content without trailing
/// `\n` / `\r`. The error names the path and what is wrong, never the content:
/// missing, unreadable, larger than [`MAX_SECRET_FILE_BYTES`], or empty.
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("file {shown} does not exist"),
        kind => format!("cannot read {shown}: {kind}"),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {}", e.kind()))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(format!(
            "file {shown} is larger than {MAX_SECRET_FILE_BYTES} bytes"
        ));
    }
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    bytes.truncate(end);
    if bytes.is_empty() {
        return Err(format!("file {shown} is empty"));
    }
    Ok(bytes)
}

fn hash(bytes: &[u8]) -> SecretHash {
    SecretHash(Sha256::digest(bytes).into())
}

/// Reads every client credential file of a validated config and stores what they
/// hold as hashes (user names in clear); afterwards no client has `secret_files`.
/// Collects every problem; on error the config is left partly resolved and must not
/// be used.
pub fn resolve_secret_files(config: &mut Config) -> Result<(), ConfigErrors> {
    let mut errors = Vec::new();
    for client in &mut config.clients {
        let mut username: Option<String> = None;
        let mut password: Option<SaltedHash> = None;
        let mut basic_failed = false;
        for f in std::mem::take(&mut client.secret_files) {
            let content = match read_secret_file(&f.path) {
                Ok(c) => c,
                Err(message) => {
                    errors.push(ConfigError {
                        path: f.field.as_str().into(),
                        message,
                    });
                    if matches!(
                        f.kind,
                        ClientSecretKind::BasicUsername { .. }
                            | ClientSecretKind::BasicPassword { .. }
                    ) {
                        basic_failed = true;
                    }
                    continue;
                }
            };
            match f.kind {
                ClientSecretKind::ApiKey => client.api_keys.push(hash(&content)),
                ClientSecretKind::BearerToken => client.bearer_tokens.push(hash(&content)),
                ClientSecretKind::BasicUsername { password: inline } => {
                    let text = String::from_utf8(content).ok();
                    match text.as_deref().map(check_basic_username) {
                        Some(Ok(())) => username = text,
                        Some(Err(e)) => {
                            basic_failed = true;
                            errors.push(ConfigError {
                                path: f.field.as_str().into(),
                                message: format!("content of {}: {e}", f.path.display()),
                            });
                        }
                        None => {
                            basic_failed = true;
                            errors.push(ConfigError {
                                path: f.field.as_str().into(),
                                message: format!("file {} is not UTF-8", f.path.display()),
                            });
                        }
                    }
                    password = password.or(inline);
                }
                ClientSecretKind::BasicPassword { username: inline } => {
                    // A password is guessable: kept only salted.
                    password = Some(SaltedHash::new(&content));
                    username = username.or(inline);
                }
            }
        }
        if !basic_failed && let (Some(username), Some(password)) = (username, password) {
            client.basic = Some(BasicCredentials { username, password });
        }
    }
    errors.extend(duplicate_credentials(&config.clients));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Reads the upstreams' proxy user names given as files
/// (`upstreams[].source.{static,vendorApi}.credentials.usernameFile`) into `username`.
/// A file that cannot be read, or whose content is not 1 to 255 bytes of UTF-8 without
/// control characters, is an error naming the field and the path, never the content.
pub fn resolve_username_files(raw: &mut RawConfig) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    for (i, u) in raw.upstreams.iter_mut().enumerate() {
        let sources = [
            (
                "static",
                u.source
                    .static_list
                    .as_mut()
                    .and_then(|s| s.credentials.as_mut()),
            ),
            (
                "vendorApi",
                u.source
                    .vendor_api
                    .as_mut()
                    .and_then(|v| v.credentials.as_mut()),
            ),
        ];
        for (kind, creds) in sources {
            let Some(c) = creds else { continue };
            if !c.username.is_empty() {
                continue; // both given: the validator reports it
            }
            let Some(file) = c.username_file.take() else {
                continue;
            };
            let path = format!("upstreams[{i}].source.{kind}.credentials.usernameFile");
            let shown = Path::new(&file).display().to_string();
            let text = read_secret_file(Path::new(&file)).and_then(|bytes| {
                String::from_utf8(bytes)
                    .ok()
                    .filter(|t| t.len() <= 255 && !t.chars().any(char::is_control))
                    .ok_or_else(|| {
                        format!(
                            "content of {shown} must be 1 to 255 bytes of UTF-8 without control characters"
                        )
                    })
            });
            match text {
                Ok(t) => c.username = t,
                Err(message) => {
                    // Keep the field so the validator does not also call it missing.
                    c.username_file = Some(file);
                    errors.push(ConfigError::new(path, message));
                }
            }
        }
    }
    errors
}

/// Parses, validates and resolves the credential files of a YAML config: what the
/// controller does when it starts.
pub fn load_yaml_with_files(text: &str) -> Result<Config, ConfigErrors> {
    let mut raw = parse_yaml(text)?;
    let mut errors = resolve_username_files(&mut raw);
    let mut config = match validate(&raw) {
        Ok(c) if errors.is_empty() => c,
        Ok(_) => return Err(ConfigErrors(errors)),
        Err(e) => {
            errors.extend(e.0);
            return Err(ConfigErrors(errors));
        }
    };
    resolve_secret_files(&mut config)?;
    Ok(config)
}
