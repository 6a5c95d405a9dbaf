//! Options of the `rabbitmq` sink.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl, percent_decode};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `amqp://[user:password@]ip[:port][/vhost]`, the vhost %-escaped
    /// (`%2f` for `/`, the default).
    url: String,
    /// The exchange to publish to; `""` (the default exchange) routes by
    /// queue name.
    #[serde(default)]
    exchange: String,
    /// The routing key (with the default exchange: the queue's name).
    routing_key: String,
    /// Publish with delivery mode 2, so durable queues keep the message on
    /// disk before the broker confirms it.
    #[serde(default = "yes")]
    persistent: bool,
    /// How long to wait for the broker's confirm (and any other answer).
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn yes() -> bool {
    true
}

fn default_timeout_ms() -> u64 {
    5_000
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: ServerAddr,
    pub user: String,
    pub password: String,
    pub vhost: String,
    pub exchange: String,
    pub routing_key: String,
    pub persistent: bool,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = ServerUrl::parse(&raw.url, "amqp", 5672).map_err(|m| ConfigError::field("url", m))?;
        // The AMQP URI scheme's defaults: user and password `guest`, vhost `/`.
        let vhost = match url.path.as_str() {
            "" => "/".to_string(),
            path => percent_decode(path).map_err(|m| ConfigError::field("url", format!("the vhost: {m}")))?,
        };
        if vhost.len() > 255 {
            return Err(ConfigError::field("url", "the vhost is longer than 255 bytes"));
        }
        let valid_exchange =
            raw.exchange.len() <= 255 && raw.exchange.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if !valid_exchange {
            return Err(ConfigError::field("exchange", "at most 255 of the characters a-z A-Z 0-9 - _ . :"));
        }
        if raw.routing_key.len() > 255 {
            return Err(ConfigError::field("routing_key", "longer than 255 bytes"));
        }
        if raw.exchange.is_empty() && raw.routing_key.is_empty() {
            return Err(ConfigError::field("routing_key", "the default exchange routes by queue name: name the queue"));
        }
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        Ok(Options {
            addr: url.addr,
            user: url.user.unwrap_or_else(|| "guest".into()),
            password: url.password.unwrap_or_else(|| "guest".into()),
            vhost,
            exchange: raw.exchange,
            routing_key: raw.routing_key,
            persistent: raw.persistent,
            timeout: Duration::from_millis(raw.timeout_ms),
        })
    }
}
