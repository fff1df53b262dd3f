//! The controller's configuration: one schema, rendered by the operator and loaded by
//! the controller.
//!
//! Vector's model: raw serde structs ([`raw`], unknown fields denied, defaults) →
//! a pure [`validate`](validate::validate) that collects every problem with its field
//! path → the typed [`Config`]. Nothing here reads files or the environment except
//! [`resolve_secret_files`] (client credentials referenced by path, read once when the
//! controller loads its config); the controller reads other referenced files
//! (passwords, keys) when it builds the store.

mod checks;
mod duration;
mod error;
mod files;
mod load;
pub mod raw;
mod types;
mod validate;

/// The config's former name of [`crate::proxy::Protocol`] (other crates still use it).
pub use checks::{
    check_basic_username, check_identifier, check_proxy_credential, split_host_port, target_url,
};
pub use duration::{MAX_LEN as DURATION_MAX_LEN, parse_duration};
pub use error::{ConfigError, ConfigErrors, FieldPath, PathSegment};
pub use files::{
    MAX_SECRET_FILE_BYTES, load_yaml_with_files, read_secret_file, resolve_secret_files,
    resolve_username_files,
};
pub use load::{load_yaml, parse_yaml};
pub use raw::RawConfig;
pub use types::*;
pub use validate::{
    DEFAULT_LEASE_NAME, MAX_CACHE_BATCH, MAX_COUNT_PER_REQUEST, MAX_HEALTH_TARGETS, MAX_KEY_PREFIX,
    MAX_LIST_VALUES, MAX_REPLICAS, MAX_TARGET_HOSTS, MAX_USERNAME_PARAMS, TOKEN_REVIEW_MAX_TTL,
    validate,
};

#[cfg(test)]
mod tests;
