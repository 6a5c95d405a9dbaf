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

use ankusa_sdk::aws::{SignRequest, amz_date, error_failure, payload_sha256};
use ankusa_sdk::http::{Request, Response, now_unix_secs};
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
        let form = send_message(&self.0, hook)?;
        let response = signed_post(&self.0, form.into_bytes())?;
        classify(response)
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

/// POST `body` to the queue, signed for SQS.
fn signed_post(options: &Options, body: Vec<u8>) -> Result<Response, Failure> {
    let url = &options.queue_url;
    let date = amz_date(now_unix_secs());
    let payload = payload_sha256(&body);
    let path = url.path_and_query.split('?').next().unwrap_or("/");
    let token = options.signer.credentials().session_token.clone();
    let mut headers = vec![("host", url.authority.as_str()), ("content-type", FORM), ("x-amz-date", date.as_str())];
    if let Some(token) = &token {
        headers.push(("x-amz-security-token", token.as_str()));
    }
    let request = SignRequest { method: "POST", path, query: &[], headers: &headers, payload_sha256: &payload };
    let signed = options.signer.sign(&request).map_err(Failure::permanent)?;
    let mut request = Request::post(url.clone())
        .header("content-type", FORM)
        .header("x-amz-date", date.as_str())
        .header("authorization", signed.authorization)
        .first_byte_timeout(options.timeout)
        .body(body);
    if let Some(token) = token {
        request = request.header("x-amz-security-token", token);
    }
    Ok(request.send()?)
}

/// 2xx: stored.
fn classify(response: Response) -> Result<(), Failure> {
    if (200..300).contains(&response.status) {
        return Ok(());
    }
    let status = response.status;
    let body = response.body().map(|b| b.bytes).unwrap_or_default();
    Err(error_failure("sqs", status, &body, TRANSIENT_CODES))
}

/// The characters SQS accepts in a message body.
fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Form encoding: unreserved characters kept, every other byte `%XX`.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(byte as char),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
