//! Parse a sink's JSON options into a typed struct, with errors that name the
//! offending field by its dotted path (`"tls.ca"`, `"secret[2]"`).

use serde::de::DeserializeOwned;

use crate::ConfigError;

/// Deserialize `json` into `T`. Use `#[serde(deny_unknown_fields)]` on `T` so
/// that a misspelt option is an error rather than silently ignored.
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        let parent = if path == "." { String::new() } else { format!("{path}.") };
        // serde reports a missing field at its parent; name the field itself.
        let named = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
            .map(|field| format!("{parent}{field}"));
        match named {
            Some(field) => ConfigError::field(field, message),
            None if path == "." || path.is_empty() => ConfigError::new(message),
            None => ConfigError::field(path, message),
        }
    })
}
