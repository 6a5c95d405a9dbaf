//! The kafka sink's options.

use std::time::Duration;

use ankusa_sdk::tcp::ServerAddr;
use ankusa_sdk::tcp::ServerUrl;
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// Bootstrap servers, `host:port` each; the first that answers is used.
    brokers: Vec<String>,
    topic: String,
    /// What the record's key is, and so which partition it lands on.
    #[serde(default)]
    key: Key,
    /// How long to wait for any answer of a broker (metadata, the ack).
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    /// Register as an idempotent producer (`InitProducerId`), so the broker
    /// writes a batch once however often it is sent on one producer.
    #[serde(default = "yes")]
    idempotent: bool,
}

fn yes() -> bool {
    true
}

fn default_timeout_ms() -> u64 {
    10_000
}

/// The record key: a hook field, or none (partitions taken in turn).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    #[default]
    Id,
    IdempotencyKey,
    DedupeKey,
    Source,
    Tenant,
    None,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub brokers: Vec<ServerAddr>,
    pub topic: String,
    pub key: Key,
    pub timeout: Duration,
    pub idempotent: bool,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        if raw.brokers.is_empty() {
            return Err(ConfigError::field("brokers", "name at least one `host:port`"));
        }
        let brokers = raw
            .brokers
            .iter()
            .map(|b| ServerUrl::parse(&format!("kafka://{b}"), "kafka", 9092).map(|u| u.addr))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| ConfigError::field("brokers", m))?;
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if raw.topic.is_empty()
            || raw.topic.len() > 249
            || !raw.topic.chars().all(legal)
            || [".", ".."].contains(&raw.topic.as_str())
        {
            return Err(ConfigError::field("topic", "1 to 249 of letters, digits, `.`, `_` and `-`"));
        }
        if raw.timeout_ms == 0 || raw.timeout_ms > i32::MAX as u64 {
            return Err(ConfigError::field("timeout_ms", "must be positive and under 2^31"));
        }
        Ok(Options {
            brokers,
            topic: raw.topic,
            key: raw.key,
            timeout: Duration::from_millis(raw.timeout_ms),
            idempotent: raw.idempotent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_brokers_by_name_or_address() {
        let options = Options::parse(
            r#"{"brokers": ["kafka-1.internal:9093", "10.0.0.5"], "topic": "hooks.in", "key": "source"}"#,
        )
        .expect("valid");
        assert_eq!(options.brokers[0].to_string(), "kafka-1.internal:9093");
        assert_eq!(options.brokers[1].to_string(), "10.0.0.5:9092");
        assert_eq!(options.key, Key::Source);
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for (json, field) in [
            (r#"{"brokers": [], "topic": "t"}"#, "brokers"),
            (r#"{"brokers": ["a b"], "topic": "t"}"#, "brokers"),
            (r#"{"brokers": ["k:9092"], "topic": "no spaces"}"#, "topic"),
            (r#"{"brokers": ["k:9092"], "topic": "t", "timeout_ms": 0}"#, "timeout_ms"),
        ] {
            let error = Options::parse(json).expect_err(json);
            assert_eq!(error.field.as_deref(), Some(field), "{json}: {error:?}");
        }
    }
}
