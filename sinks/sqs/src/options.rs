//! Options of the `sqs` sink.

use std::time::Duration;

use ankusa_sdk::aws::{self, Signer};
use ankusa_sdk::http::Url;
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `https://sqs.<region>.amazonaws.com/<account>/<queue>`.
    queue_url: String,
    #[serde(default = "default_region")]
    region: String,
    access_key_id: String,
    secret_access_key: String,
    #[serde(default)]
    session_token: Option<String>,
    /// FIFO queues: the message group (default: the hook's source).
    #[serde(default)]
    message_group_id: Option<String>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_region() -> String {
    "us-east-1".into()
}

fn default_timeout_ms() -> u64 {
    10_000
}

pub struct Options {
    pub queue_url: Url,
    pub fifo: bool,
    pub signer: Signer,
    pub message_group_id: Option<String>,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let queue_url = Url::parse(&raw.queue_url).map_err(|m| ConfigError::field("queue_url", m))?;
        let path = queue_url.path_and_query.split('?').next().unwrap_or("");
        if path.trim_matches('/').split('/').count() != 2 || path.contains("//") {
            return Err(ConfigError::field("queue_url", "must end in /<account>/<queue name>"));
        }
        let fifo = path.ends_with(".fifo");
        if raw.message_group_id.is_some() && !fifo {
            return Err(ConfigError::field("message_group_id", "applies only to a FIFO queue (`.fifo`)"));
        }
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        let signer =
            aws::signer_from_options("sqs", raw.region, raw.access_key_id, raw.secret_access_key, raw.session_token)?;
        Ok(Options {
            queue_url,
            fifo,
            signer,
            message_group_id: raw.message_group_id,
            timeout: Duration::from_millis(raw.timeout_ms),
        })
    }
}
