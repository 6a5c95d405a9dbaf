//! What a failed insert means: which errors are worth retrying, and which
//! leave the connection usable.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::{connection_failure, is_timeout};

use crate::client::PgError;

/// An error the server reported leaves the connection itself fine.
pub fn keeps(done: &Result<(), PgError>) -> bool {
    matches!(done, Ok(_) | Err(PgError::Server { .. }))
}

/// A kept connection the server dropped meanwhile: insert again on a fresh
/// one (the row's id makes a repeat harmless).
pub fn stale(error: &PgError) -> bool {
    matches!(error, PgError::Io(error) if !is_timeout(error))
}

pub fn failure(err: PgError) -> Failure {
    match err {
        PgError::Io(error) => connection_failure("postgres", &error),
        PgError::Login(message) => Failure::permanent(format!("postgres login: {message}")),
        PgError::Protocol(message) => Failure::transient(format!("postgres: {message}")),
        PgError::Server { code, message } => {
            let reason = format!("postgres {code}: {message}");
            if retryable(&code) { Failure::transient(reason) } else { Failure::permanent(reason) }
        }
    }
}

/// SQLSTATE classes worth retrying: the connection, a rolled-back
/// transaction (serialization, deadlock), resources (disk full, too many
/// connections), operator intervention (shutdown, start-up), system errors.
/// Everything else (login, privileges, a missing table or column, bad data)
/// needs someone to change something first.
fn retryable(code: &str) -> bool {
    matches!(code.get(..2), Some("08" | "40" | "53" | "57" | "58" | "XX")) || code.is_empty()
}
