//! Options of the `nats` sink.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `nats://[user:password@|token@]ip[:port]`.
    url: String,
    /// The subject every hook is published on; a JetStream stream must
    /// capture it.
    subject: String,
    /// Refuse the publish unless this stream is the one that captures it.
    #[serde(default)]
    expect_stream: Option<String>,
    /// How long to wait for the stream's ack (and for any server answer).
    #[serde(default = "default_ack_timeout_ms")]
    ack_timeout_ms: u64,
}

fn default_ack_timeout_ms() -> u64 {
    5_000
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    None,
    Token(String),
    UserPassword(String, String),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: ServerAddr,
    pub credentials: Credentials,
    pub subject: String,
    pub expect_stream: Option<String>,
    pub ack_timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = ServerUrl::parse(&raw.url, "nats", 4222).map_err(|m| ConfigError::field("url", m))?;
        if !url.path.is_empty() {
            return Err(ConfigError::field("url", "takes no path"));
        }
        // `user:password@`, or a bare `token@`.
        let credentials = match (url.user, url.password) {
            (Some(user), Some(password)) => Credentials::UserPassword(user, password),
            (Some(token), None) | (None, Some(token)) => Credentials::Token(token),
            (None, None) => Credentials::None,
        };
        if !is_subject(&raw.subject) {
            return Err(ConfigError::field(
                "subject",
                "must be dot-separated tokens without spaces or wildcards (`*`, `>`)",
            ));
        }
        if let Some(stream) = &raw.expect_stream {
            let valid = !stream.is_empty() && !stream.contains(|c: char| c.is_whitespace() || ".*>".contains(c));
            if !valid {
                return Err(ConfigError::field("expect_stream", "not a valid stream name"));
            }
        }
        if raw.ack_timeout_ms == 0 {
            return Err(ConfigError::field("ack_timeout_ms", "must be positive"));
        }
        Ok(Options {
            addr: url.addr,
            credentials,
            subject: raw.subject,
            expect_stream: raw.expect_stream,
            ack_timeout: Duration::from_millis(raw.ack_timeout_ms),
        })
    }
}

/// A literal subject: one a publish may name.
fn is_subject(subject: &str) -> bool {
    subject.len() <= 1024
        && subject
            .split('.')
            .all(|token| !token.is_empty() && !token.contains(|c: char| c.is_whitespace() || c == '*' || c == '>'))
}
