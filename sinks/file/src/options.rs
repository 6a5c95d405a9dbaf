//! Options of the `file` sink.

use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// The file to append to, relative to the sink's directory.
    #[serde(default = "default_file")]
    file: String,
    /// Sync each line to disk before reporting it delivered.
    #[serde(default = "yes")]
    fsync: bool,
    /// Rotate the file before a line would take it past this size.
    #[serde(default)]
    max_bytes: Option<u64>,
}

fn default_file() -> String {
    "hooks.jsonl".into()
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone)]
pub struct Options {
    pub file: String,
    pub fsync: bool,
    pub max_bytes: Option<u64>,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let inside = !raw.file.starts_with('/')
            && raw.file.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
        if !inside {
            return Err(ConfigError::field(
                "file",
                "a relative path inside the sink's directory, without `.` or `..` parts",
            ));
        }
        if raw.max_bytes == Some(0) {
            return Err(ConfigError::field("max_bytes", "must be positive"));
        }
        Ok(Options { file: raw.file, fsync: raw.fsync, max_bytes: raw.max_bytes })
    }
}
