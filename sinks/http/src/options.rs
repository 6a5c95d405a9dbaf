//! Options of the `http` sink.

use std::collections::BTreeMap;
use std::time::Duration;

use ankusa_sdk::http::Url;
use ankusa_sdk::signing::Signer;
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    url: String,
    /// One secret or a list (rotation, newest first, at most 8).
    #[serde(default)]
    secret: Option<OneOrMany>,
    /// Extra static headers sent with every delivery.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Forward the hook's own (already filtered) headers. Default true.
    #[serde(default = "yes")]
    forward_headers: bool,
    #[serde(default = "default_connect_timeout_ms")]
    connect_timeout_ms: u64,
    #[serde(default = "default_response_timeout_ms")]
    response_timeout_ms: u64,
    #[serde(default = "default_max_response_bytes")]
    max_response_bytes: u64,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn yes() -> bool {
    true
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_response_timeout_ms() -> u64 {
    10_000
}
/// How much of an error answer is read for the failure reason.
fn default_max_response_bytes() -> u64 {
    1024
}

#[derive(Debug)]
pub struct Options {
    pub url: Url,
    pub signer: Option<Signer>,
    pub headers: Vec<(String, String)>,
    pub forward_headers: bool,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    pub max_response_bytes: u64,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = Url::parse(&raw.url).map_err(|m| ConfigError::field("url", m))?;
        let signer = match raw.secret {
            None => None,
            Some(OneOrMany::One(s)) => Some(Signer::new("secret", &[s])?),
            Some(OneOrMany::Many(list)) => Some(Signer::new("secret", &list)?),
        };
        for name in raw.headers.keys() {
            let valid =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b));
            if !valid {
                return Err(ConfigError::field(format!("headers.{name}"), "not a valid header name"));
            }
        }
        if raw.connect_timeout_ms == 0 || raw.response_timeout_ms == 0 {
            return Err(ConfigError::field("response_timeout_ms", "timeouts must be positive"));
        }
        Ok(Options {
            url,
            signer,
            headers: raw.headers.into_iter().collect(),
            forward_headers: raw.forward_headers,
            connect_timeout: Duration::from_millis(raw.connect_timeout_ms),
            response_timeout: Duration::from_millis(raw.response_timeout_ms),
            max_response_bytes: raw.max_response_bytes,
        })
    }
}
