//! Options of the `log` sink.

use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    /// `trace`, `debug`, `info` (default), `warn` or `error`.
    #[serde(default = "default_level")]
    pub level: String,
    /// How many bytes of the body to include, escaped (default 0: none).
    #[serde(default)]
    pub body_preview_bytes: usize,
}

fn default_level() -> String {
    "info".into()
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let options: Options = options::parse(if json.trim().is_empty() { "{}" } else { json })?;
        if !matches!(options.level.as_str(), "trace" | "debug" | "info" | "warn" | "error") {
            return Err(ConfigError::field("level", "must be one of trace, debug, info, warn, error"));
        }
        if options.body_preview_bytes > 4096 {
            return Err(ConfigError::field("body_preview_bytes", "at most 4096"));
        }
        Ok(options)
    }
}
