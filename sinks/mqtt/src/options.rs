//! Options of the `mqtt` sink.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `mqtt://[user[:password]@]host[:port]`.
    url: String,
    /// The topic every hook is published on (no wildcards).
    topic: String,
    /// The client identifier; required with `persistent_session`.
    #[serde(default)]
    client_id: Option<String>,
    /// Ask the broker to keep the session (clean session off).
    #[serde(default)]
    persistent_session: bool,
    /// Publish with the retain flag.
    #[serde(default)]
    retain: bool,
    /// How long to wait for CONNACK and each PUBACK.
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    5_000
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: ServerAddr,
    pub user: Option<String>,
    pub password: Option<String>,
    pub topic: String,
    /// Empty: the broker assigns one (clean sessions only).
    pub client_id: String,
    pub persistent_session: bool,
    pub retain: bool,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = ServerUrl::parse(&raw.url, "mqtt", 1883).map_err(|m| ConfigError::field("url", m))?;
        if !url.path.is_empty() {
            return Err(ConfigError::field("url", "takes no path"));
        }
        if raw.topic.is_empty() || raw.topic.len() > 65_535 || raw.topic.contains(['#', '+', '\0']) {
            return Err(ConfigError::field("topic", "must be a non-empty topic name without wildcards (`#`, `+`)"));
        }
        let client_id = raw.client_id.unwrap_or_default();
        if client_id.len() > 65_535 {
            return Err(ConfigError::field("client_id", "is too long"));
        }
        if raw.persistent_session && client_id.is_empty() {
            return Err(ConfigError::field("client_id", "is required with `persistent_session`"));
        }
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        Ok(Options {
            addr: url.addr,
            user: url.user,
            password: url.password,
            topic: raw.topic,
            client_id,
            persistent_session: raw.persistent_session,
            retain: raw.retain,
            timeout: Duration::from_millis(raw.timeout_ms),
        })
    }
}
