//! One hook, one publish: its properties, and what the broker's confirm
//! means. A batch is every publish in one write, then all the confirms.

use ankusa_sdk::{Failure, Hook};

use crate::client::frames::Field;
use crate::client::{AmqpError, Confirm, Connection, Properties};
use crate::options::Options;

/// Publish `hook` and wait for the broker's confirm.
pub fn exchange(options: &Options, connection: &mut Connection, hook: &Hook) -> Result<Confirm, AmqpError> {
    let properties = properties(hook, options.persistent);
    connection.publish(&options.exchange, &options.routing_key, &properties, &hook.body)
}

/// Publish every hook, then wait for every confirm. See
/// `Protocol::exchange_batch` for the shape.
pub fn exchange_batch(
    options: &Options,
    connection: &mut Connection,
    hooks: &[Hook],
) -> Result<Vec<Result<Confirm, AmqpError>>, AmqpError> {
    let properties: Vec<Properties> = hooks.iter().map(|hook| properties(hook, options.persistent)).collect();
    let messages: Vec<(&Properties, &[u8])> =
        properties.iter().zip(hooks).map(|(properties, hook)| (properties, hook.body.as_slice())).collect();
    let mut confirms = connection.publish_many(&options.exchange, &options.routing_key, &messages);
    // The connection failed before any confirm: the batch as a whole failed.
    if matches!(confirms.as_slice(), [Err(AmqpError::Io(_))])
        && hooks.len() > 1
        && let Some(Err(error)) = confirms.pop()
    {
        return Err(error);
    }
    Ok(confirms)
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

pub fn confirmed(options: &Options, confirm: Confirm) -> Result<(), Failure> {
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
