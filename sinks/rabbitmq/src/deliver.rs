//! One hook, one confirmed publish, on a connection kept open between
//! deliveries.

use ankusa_sdk::tcp::{Kept, connection_failure, is_timeout};
use ankusa_sdk::{Failure, Hook};

use crate::connection::{AmqpError, Confirm, Connection, Properties};
use crate::options::Options;
use crate::wire::Field;

pub struct Delivery {
    options: Options,
    connection: Kept<Connection>,
}

impl Delivery {
    pub fn new(options: Options) -> Delivery {
        Delivery { options, connection: Kept::default() }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    pub fn deliver(&mut self, hook: &Hook) -> Result<(), Failure> {
        let properties = properties(hook, self.options.persistent);
        let options = &self.options;
        let confirm = self.connection.exchange(
            || Connection::open(options),
            |connection| connection.publish(&options.exchange, &options.routing_key, &properties, &hook.body),
            // Kept unless it broke, went quiet or was closed by the broker
            // (a channel it closed is opened again on the next publish).
            |confirm| matches!(confirm, Ok(_) | Err(AmqpError::Closed { connection: false, .. })),
            // A kept connection the broker dropped meanwhile: publish again
            // on a fresh one. Consumers can drop a repeat by its message id.
            |error| matches!(error, AmqpError::Io(error) if !is_timeout(error)),
        );
        confirmed(options, confirm.map_err(exchange_failure)?)
    }
}

/// The message's properties: the hook's identity in headers, the
/// idempotency key as the message id (stable across retries, for consumers
/// that drop repeats).
fn properties(hook: &Hook, persistent: bool) -> Properties<'_> {
    let mut headers = vec![
        ("ankusa-id", Field::Text(&hook.id)),
        ("ankusa-seq", Field::Long(hook.seq as i64)),
        ("ankusa-source", Field::Text(&hook.source)),
        ("ankusa-tenant", Field::Text(&hook.tenant)),
        ("ankusa-received-at", Field::Long(hook.received_at as i64)),
        ("ankusa-sha256", Field::Text(&hook.sha256)),
        ("ankusa-idempotency-key", Field::Text(&hook.idempotency_key)),
    ];
    if let Some(dedupe_key) = &hook.dedupe_key {
        headers.push(("ankusa-dedupe-key", Field::Text(dedupe_key)));
    }
    if let Some(replay_id) = &hook.replay_id {
        headers.push(("ankusa-replay-id", Field::Text(replay_id)));
    }
    // Short-string properties hold 255 bytes; a longer value stays in the
    // headers alone rather than be cut.
    let short = |value: &str| value.len() <= 255;
    let content_type = hook.content_type.as_deref().filter(|v| short(v));
    if let Some(content_type) = hook.content_type.as_deref().filter(|v| !short(v)) {
        headers.push(("content-type", Field::Text(content_type)));
    }
    Properties {
        content_type,
        headers,
        persistent,
        message_id: Some(hook.idempotency_key.as_str()).filter(|v| short(v)),
        timestamp: hook.received_at / 1000,
    }
}

fn confirmed(options: &Options, confirm: Confirm) -> Result<(), Failure> {
    match confirm {
        Confirm::Routed => Ok(()),
        // Transient: binding a queue later makes the retry succeed.
        Confirm::Unroutable { code, text } => Err(Failure::transient(format!(
            "unroutable: no queue is bound to exchange `{}` for routing key `{}` ({code} {text})",
            options.exchange, options.routing_key
        ))),
        Confirm::Nacked => Err(Failure::transient(
            "the broker refused the message (basic.nack): a queue over its length limit rejects publishes, \
             or the broker could not store it",
        )),
    }
}

fn exchange_failure(err: AmqpError) -> Failure {
    match err {
        AmqpError::Io(error) => connection_failure("rabbitmq", &error),
        AmqpError::NoAnswer { blocked: Some(reason) } => Failure::transient(format!(
            "the broker blocks publishers ({reason}) and did not answer within `timeout_ms`"
        )),
        AmqpError::NoAnswer { blocked: None } => {
            Failure::transient("rabbitmq did not answer within `timeout_ms` (no publisher confirm)")
        }
        AmqpError::Auth(text) => Failure::permanent(format!("rabbitmq login refused: {text}")),
        AmqpError::Closed { code, text, connection } => {
            let what = if connection { "connection" } else { "channel" };
            let reason = format!("rabbitmq closed the {what}: {code} {text}");
            // The broker's verdict on this publish as configured: a missing
            // exchange or vhost, no access, a message too large.
            const REFUSALS: [u16; 6] = [311, 403, 404, 406, 530, 540];
            if REFUSALS.contains(&code) { Failure::permanent(reason) } else { Failure::transient(reason) }
        }
        AmqpError::Protocol(message) => Failure::transient(format!("rabbitmq: {message}")),
    }
}
