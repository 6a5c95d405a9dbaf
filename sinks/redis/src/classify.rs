//! What a failed exchange means: which errors are worth retrying, and
//! which leave the connection usable.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::{connection_failure, is_timeout};

use crate::client::{Reply, RespError};

/// Kept only if the exchange went through.
pub fn keeps(reply: &Result<Reply, RespError>) -> bool {
    reply.is_ok()
}

/// A kept connection the server closed meanwhile (restart, idle timeout)
/// fails before any answer: the command never ran, so it is sent once more
/// on a fresh connection.
pub fn stale(error: &RespError) -> bool {
    matches!(error, RespError::Io { answered: false, error } if !is_timeout(error))
}

/// Retrying cannot fix a refused login, a bad database index, a missing
/// permission, a key of another type or a command the server rejects;
/// anything else (loading, out of memory, a replica that is read-only
/// during failover) may pass.
pub fn server_error(message: &str) -> Failure {
    let reason = format!("redis: {message}");
    let kind = message.split_whitespace().next().unwrap_or("");
    let refused = ["syntax", "unknown command", "invalid password", "AUTH", "DB index"];
    match kind {
        "WRONGTYPE" | "NOAUTH" | "WRONGPASS" | "NOPERM" => Failure::permanent(reason),
        "ERR" if refused.iter().any(|r| message.contains(r)) => Failure::permanent(reason),
        _ => Failure::transient(reason),
    }
}

pub fn failure(err: RespError) -> Failure {
    match err {
        RespError::Io { error, .. } => connection_failure("redis", &error),
        RespError::Server(message) => server_error(&message),
        RespError::Protocol(message) => Failure::transient(format!("redis: {message}")),
    }
}
