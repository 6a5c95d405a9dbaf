//! Options of the `redis` sink.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `redis://[[user]:password@]ip[:port][/db]` (a password needs its `:`).
    url: String,
    /// `XADD` every hook to this stream (durable).
    #[serde(default)]
    stream: Option<String>,
    /// ... or `PUBLISH` its body on this channel (not durable).
    #[serde(default)]
    channel: Option<String>,
    /// Trim the stream to about this many entries (`MAXLEN ~`).
    #[serde(default)]
    maxlen: Option<u64>,
    /// How long to wait for the server's answer.
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    5_000
}

/// Where each hook goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stream { key: String, maxlen: Option<u64> },
    Channel(String),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: ServerAddr,
    /// `(user, password)`; the user is `None` for a bare `AUTH password`.
    pub auth: Option<(Option<String>, String)>,
    pub db: u32,
    pub target: Target,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = ServerUrl::parse(&raw.url, "redis", 6379).map_err(|m| ConfigError::field("url", m))?;
        let db = match url.path.as_str() {
            "" => 0,
            db => db.parse().map_err(|_| ConfigError::field("url", format!("database `{db}` is not a number")))?,
        };
        let auth = url.password.map(|password| (url.user, password));
        let target = match (raw.stream, raw.channel) {
            (Some(key), None) => {
                if raw.maxlen == Some(0) {
                    return Err(ConfigError::field("maxlen", "must be at least 1"));
                }
                Target::Stream { key: named("stream", key)?, maxlen: raw.maxlen }
            }
            (None, Some(channel)) => {
                if raw.maxlen.is_some() {
                    return Err(ConfigError::field("maxlen", "applies to a stream only"));
                }
                Target::Channel(named("channel", channel)?)
            }
            _ => return Err(ConfigError::new("set exactly one of `stream` and `channel`")),
        };
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        Ok(Options { addr: url.addr, auth, db, target, timeout: Duration::from_millis(raw.timeout_ms) })
    }

    /// `ok` means Redis appended the hook to a stream; a published message
    /// is gone once delivered to whoever listens at that moment.
    pub fn durable(&self) -> bool {
        matches!(self.target, Target::Stream { .. })
    }
}

fn named(field: &str, name: String) -> Result<String, ConfigError> {
    if name.is_empty() || name.len() > 512 {
        return Err(ConfigError::field(field, "must be 1 to 512 bytes"));
    }
    Ok(name)
}
