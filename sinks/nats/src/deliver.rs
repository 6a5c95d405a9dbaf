//! One hook, one JetStream publish: `ok` only on the stream's ack.

use ankusa_sdk::bindings::wasi::random::random::get_random_u64;
use ankusa_sdk::tcp::{Kept, connection_failure};
use ankusa_sdk::{Failure, Hook};
use serde::Deserialize;

use crate::options::Options;
use crate::protocol::{Connection, NatsError, Reply};

pub struct Delivery {
    options: Options,
    connection: Kept<Connection>,
}

impl Delivery {
    pub fn new(options: Options) -> Delivery {
        Delivery { options, connection: Kept::default() }
    }

    pub fn deliver(&mut self, hook: &Hook) -> Result<(), Failure> {
        let content_type = hook.content_type.as_deref().map(header_value);
        let expect_stream = self.options.expect_stream.clone();
        // JetStream drops a second message with the same id inside the
        // stream's duplicate window: a retried attempt is stored once.
        let mut headers = vec![
            ("Nats-Msg-Id", hook.idempotency_key.as_str()),
            ("Ankusa-Id", hook.id.as_str()),
            ("Ankusa-Source", hook.source.as_str()),
            ("Ankusa-Tenant", hook.tenant.as_str()),
        ];
        if let Some(stream) = &expect_stream {
            headers.push(("Nats-Expected-Stream", stream));
        }
        if let Some(content_type) = &content_type {
            headers.push(("Content-Type", content_type));
        }
        if let Some(replay) = &hook.replay_id {
            headers.push(("Ankusa-Replay-Id", replay));
        }
        let options = &self.options;
        let reply = self.connection.exchange(
            || Connection::open(options.addr, &options.credentials, get_random_u64(), options.ack_timeout),
            |connection| connection.request(&options.subject, &headers, &hook.body),
            // Kept unless it broke or went quiet: a message refused before
            // it was sent (over `max_payload`) leaves it as it was.
            |reply| matches!(reply, Ok(_) | Err(NatsError::Unsupported(_))),
            // A kept connection the server dropped meanwhile: publish again
            // on a fresh one (the message id makes a repeat harmless).
            |error| matches!(error, NatsError::Io(_)),
        );
        acknowledged(&options.subject, reply.map_err(exchange_failure)?)
    }
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

fn acknowledged(subject: &str, reply: Reply) -> Result<(), Failure> {
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

fn exchange_failure(err: NatsError) -> Failure {
    match err {
        NatsError::Io(error) => connection_failure("nats", &error),
        NatsError::NoAnswer => Failure::transient(
            "no answer from the nats server within `ack_timeout_ms` (a subject no stream captures is never acked)",
        ),
        NatsError::Auth(message) => Failure::permanent(format!("nats login refused: {message}")),
        NatsError::Unsupported(message) => Failure::permanent(format!("nats: {message}")),
        NatsError::Protocol(message) => Failure::transient(format!("nats: {message}")),
    }
}
