//! What a failed publish means: which errors are worth retrying, and which
//! leave the connection usable.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::{connection_failure, is_timeout};

use crate::client::{AmqpError, Confirm};

/// Kept unless it broke, went quiet or was closed by the broker (a channel
/// it closed is opened again on the next publish).
pub fn keeps(confirm: &Result<Confirm, AmqpError>) -> bool {
    matches!(confirm, Ok(_) | Err(AmqpError::Closed { connection: false, .. }))
}

/// A kept connection the broker dropped meanwhile: publish again on a
/// fresh one. Consumers can drop a repeat by its message id.
pub fn stale(error: &AmqpError) -> bool {
    matches!(error, AmqpError::Io(error) if !is_timeout(error))
}

pub fn failure(err: AmqpError) -> Failure {
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
