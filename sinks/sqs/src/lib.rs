//! The `sqs` sink: sends each hook as one Amazon SQS message (`SendMessage`,
//! the Query API, signed with AWS Signature V4) and is ok once SQS has
//! stored it (durable: SQS keeps a message redundantly before it answers).
//! A FIFO queue (`.fifo`) gets the hook's idempotency key as the message's
//! deduplication id, so a retried delivery is stored once, and its source
//! (or `message_group_id`) as the group. A body that is not text SQS
//! accepts is sent base64-encoded with the attribute
//! `ankusa-body-encoding: base64`.
//!
//! The queue's origin must be in the sink's `allow` list.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

pub mod options;

use ankusa_sdk::aws::{self, payload_sha256};
use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};
use base64::Engine;

use options::Options;

/// SQS's largest message, body and attributes together.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;
const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";
/// Error codes worth retrying; any other refusal is permanent.
const TRANSIENT_CODES: &[&str] = &[
    "RequestThrottled",
    "ThrottlingException",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "KmsThrottled",
];

struct Sqs(Options);

impl Sink for Sqs {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(Sqs(Options::parse(json)?))
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let options = &self.0;
        let body = send_message(options, hook)?.into_bytes();
        let payload = payload_sha256(&body);
        let path = options.queue_url.path_and_query.split('?').next().unwrap_or("/");
        let request = options
            .signer
            .request("POST", &options.queue_url, path, &[("content-type", FORM)], body, &payload)
            .map_err(Failure::permanent)?;
        aws::accept("sqs", request.first_byte_timeout(options.timeout).send()?, TRANSIENT_CODES)
    }
}

export_sink!(Sqs);

/// The `SendMessage` form for `hook`.
pub fn send_message(options: &Options, hook: &Hook) -> Result<String, Failure> {
    let (body, encoded) = match std::str::from_utf8(&hook.body) {
        Ok(text) if text.chars().all(sqs_allows) => (text.to_string(), false),
        _ => (base64::engine::general_purpose::STANDARD.encode(&hook.body), true),
    };
    let mut fields: Vec<(String, String)> = vec![
        ("Action".into(), "SendMessage".into()),
        ("Version".into(), "2012-11-05".into()),
        ("MessageBody".into(), body),
    ];
    let mut attributes = vec![("ankusa-id", hook.id.as_str()), ("ankusa-source", hook.source.as_str())];
    if encoded {
        attributes.push(("ankusa-body-encoding", "base64"));
    }
    for (n, (name, value)) in attributes.iter().enumerate() {
        let at = format!("MessageAttribute.{}", n + 1);
        fields.push((format!("{at}.Name"), name.to_string()));
        fields.push((format!("{at}.Value.DataType"), "String".into()));
        fields.push((format!("{at}.Value.StringValue"), value.to_string()));
    }
    if options.fifo {
        let group = options.message_group_id.clone().unwrap_or_else(|| hook.source.clone());
        fields.push(("MessageGroupId".into(), group));
        fields.push(("MessageDeduplicationId".into(), hook.idempotency_key.chars().take(128).collect()));
    }
    let size: usize =
        fields.iter().filter(|(k, _)| k == "MessageBody" || k.ends_with("Value")).map(|(_, v)| v.len()).sum();
    if size > MAX_MESSAGE_BYTES {
        return Err(Failure::permanent(format!("{size} bytes is more than an SQS message holds (256 KiB)")));
    }
    Ok(fields.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&"))
}

/// The characters SQS accepts in a message body.
fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Form encoding: AWS's, with `/` escaped too.
fn encode(text: &str) -> String {
    ankusa_sdk::aws::uri_encode(text, true)
}
