//! One hook, one JetStream publish: `ok` only on the stream's ack. A batch
//! is every publish in one write, then all the acks.

use ankusa_sdk::{Failure, Hook};
use serde::Deserialize;

use crate::client::{Connection, Message, NatsError, Reply};
use crate::options::Options;

/// Publish `hook` with its headers and wait for the stream's answer.
pub fn exchange(options: &Options, connection: &mut Connection, hook: &Hook) -> Result<Reply, NatsError> {
    let content_type = hook.content_type.as_deref().map(header_value);
    let message = message(options, hook, content_type.as_deref());
    connection.request(message.subject, &message.headers, message.payload)
}

/// Publish every hook, then wait for every ack. See
/// `Protocol::exchange_batch` for the shape.
pub fn exchange_batch(
    options: &Options,
    connection: &mut Connection,
    hooks: &[Hook],
) -> Result<Vec<Result<Reply, NatsError>>, NatsError> {
    let content_types: Vec<Option<String>> =
        hooks.iter().map(|hook| hook.content_type.as_deref().map(header_value)).collect();
    let messages: Vec<Message> = hooks
        .iter()
        .zip(&content_types)
        .map(|(hook, content_type)| message(options, hook, content_type.as_deref()))
        .collect();
    let mut replies = connection.request_many(&messages);
    // The connection failed before any ack: the batch as a whole failed.
    if matches!(replies.as_slice(), [Err(NatsError::Io(_))])
        && hooks.len() > 1
        && let Some(Err(error)) = replies.pop()
    {
        return Err(error);
    }
    Ok(replies)
}

/// The publish of `hook`.
fn message<'a>(options: &'a Options, hook: &'a Hook, content_type: Option<&'a str>) -> Message<'a> {
    // JetStream drops a second message with the same id inside the
    // stream's duplicate window: a retried attempt is stored once.
    let mut headers = vec![
        ("Nats-Msg-Id", hook.idempotency_key.as_str()),
        ("Ankusa-Id", hook.id.as_str()),
        ("Ankusa-Source", hook.source.as_str()),
        ("Ankusa-Tenant", hook.tenant.as_str()),
    ];
    if let Some(stream) = &options.expect_stream {
        headers.push(("Nats-Expected-Stream", stream));
    }
    if let Some(content_type) = content_type {
        headers.push(("Content-Type", content_type));
    }
    if let Some(replay) = &hook.replay_id {
        headers.push(("Ankusa-Replay-Id", replay));
    }
    Message { subject: &options.subject, headers, payload: &hook.body }
}

/// Header values cannot hold line breaks.
fn header_value(value: &str) -> String {
    value.chars().filter(|c| *c != '\r' && *c != '\n').collect()
}

/// JetStream's answer to a publish.
#[derive(Deserialize)]
struct PubAck {
    #[serde(default)]
    stream: Option<String>,
    #[serde(default)]
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    description: String,
}

pub fn acknowledged(subject: &str, reply: Reply) -> Result<(), Failure> {
    if reply.status == Some(503) {
        return Err(Failure::transient(format!("no JetStream stream captures subject `{subject}`")));
    }
    let ack: PubAck = serde_json::from_slice(&reply.payload).map_err(|_| {
        Failure::transient(format!(
            "the reply to a publish on `{subject}` is not a JetStream ack: {}",
            String::from_utf8_lossy(&reply.payload[..reply.payload.len().min(200)])
        ))
    })?;
    match (ack.error, ack.stream) {
        (None, Some(_)) => Ok(()),
        (Some(error), _) => {
            let reason = format!("jetstream {}: {}", error.code, error.description);
            // 4xx: the stream refuses this message as it is (wrong expected
            // stream, message too large); 5xx: it cannot take it right now.
            if (400..500).contains(&error.code) {
                Err(Failure::permanent(reason))
            } else {
                Err(Failure::transient(reason))
            }
        }
        (None, None) => Err(Failure::transient("a JetStream ack without a stream")),
    }
}
