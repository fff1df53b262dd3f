//! Config text → typed config: parse the YAML into the raw structs, then validate.

use super::error::{ConfigError, ConfigErrors};
use super::raw::RawConfig;
use super::types::Config;
use super::validate::validate;

/// Parses YAML into the raw config; a syntax or shape error names its field path.
pub fn parse_yaml(text: &str) -> Result<RawConfig, ConfigErrors> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        ConfigErrors(vec![ConfigError::new(path, e.into_inner().to_string())])
    })
}

/// Parses and validates a YAML config.
pub fn load_yaml(text: &str) -> Result<Config, ConfigErrors> {
    validate(&parse_yaml(text)?)
}
