//! Options of the `s3` sink.

use std::time::Duration;

use ankusa_sdk::aws::{self, Signer};
use ankusa_sdk::http::Url;
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// The bucket, path-style (`https://s3.eu-west-1.amazonaws.com/my-bucket`)
    /// or virtual-hosted (`https://my-bucket.s3.eu-west-1.amazonaws.com`).
    bucket_url: String,
    #[serde(default = "default_key")]
    key: String,
    #[serde(default = "default_region")]
    region: String,
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    session_token: Option<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_key() -> String {
    "{source}/{date}/{id}".into()
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// The placeholders a key template may use.
pub const PLACEHOLDERS: [&str; 5] = ["id", "source", "tenant", "seq", "date"];

pub struct Options {
    pub bucket_url: Url,
    pub key: String,
    pub signer: Signer,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let bucket_url = Url::parse(&raw.bucket_url).map_err(|m| ConfigError::field("bucket_url", m))?;
        if bucket_url.path_and_query.contains('?') {
            return Err(ConfigError::field("bucket_url", "takes no query"));
        }
        check_template(&raw.key).map_err(|m| ConfigError::field("key", m))?;
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        let signer =
            aws::signer_from_options("s3", raw.region, raw.access_key_id, raw.secret_access_key, raw.session_token)?;
        Ok(Options { bucket_url, key: raw.key, signer, timeout: Duration::from_millis(raw.timeout_ms) })
    }
}

/// A key template names only known placeholders, and at least `{id}`, so
/// each hook has its own object (a retry rewrites the same one).
fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    let mut has_id = false;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').ok_or("has a `{` without its `}`")? + open;
        let name = &rest[open + 1..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!("unknown placeholder `{{{name}}}` (known: {{{}}})", PLACEHOLDERS.join("}, {")));
        }
        has_id |= name == "id";
        rest = &rest[close + 1..];
    }
    if !has_id {
        return Err("must contain `{id}`, so that every hook is its own object".into());
    }
    if template.starts_with('/') || template.len() > 900 {
        return Err("must not start with `/` and must stay under 900 bytes".into());
    }
    Ok(())
}
