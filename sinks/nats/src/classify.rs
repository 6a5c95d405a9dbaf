//! What a failed publish means: which errors are worth retrying, and
//! which leave the connection usable.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::connection_failure;

use crate::client::{NatsError, Reply};

/// Kept unless it broke or went quiet: a message refused before it was
/// sent (over `max_payload`) leaves it as it was.
pub fn keeps(reply: &Result<Reply, NatsError>) -> bool {
    matches!(reply, Ok(_) | Err(NatsError::Unsupported(_)))
}

/// A kept connection the server dropped meanwhile: publish again on a
/// fresh one (the message id makes a repeat harmless).
pub fn stale(error: &NatsError) -> bool {
    matches!(error, NatsError::Io(_))
}

pub fn failure(err: NatsError) -> Failure {
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
