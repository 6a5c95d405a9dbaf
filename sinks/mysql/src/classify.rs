//! What a failed insert means: which errors are worth retrying, and which
//! leave the connection usable.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::{connection_failure, is_timeout};

use crate::client::MysqlError;

/// An error the server reported leaves the connection itself fine, unless
/// it is one after which the server hangs up.
pub fn keeps(done: &Result<(), MysqlError>) -> bool {
    match done {
        Ok(()) => true,
        Err(MysqlError::Server { code, .. }) => !closes(*code),
        Err(_) => false,
    }
}

/// A kept connection the server dropped meanwhile (`wait_timeout`, a
/// restart): insert again on a fresh one (the row's id makes a repeat
/// harmless).
pub fn stale(error: &MysqlError) -> bool {
    match error {
        MysqlError::Io(error) => !is_timeout(error),
        // ER_CONNECTION_KILLED, ER_CLIENT_INTERACTION_TIMEOUT.
        MysqlError::Server { code, .. } => matches!(code, 1927 | 4031),
        _ => false,
    }
}

/// The server closes the connection after these.
fn closes(code: u16) -> bool {
    matches!(code, 1053 | 1153 | 1927 | 4031)
}

pub fn failure(err: MysqlError) -> Failure {
    match err {
        MysqlError::Io(error) => connection_failure("mysql", &error),
        MysqlError::Login(message) => Failure::permanent(format!("mysql login: {message}")),
        MysqlError::Protocol(message) => Failure::transient(format!("mysql: {message}")),
        MysqlError::Server { code, state, message } => {
            let reason = format!("mysql {code} ({state}): {message}");
            if retryable(code, &state) { Failure::transient(reason) } else { Failure::permanent(reason) }
        }
    }
}

/// Errors worth retrying: the server is busy, short of something or going
/// down (too many connections, lock wait, deadlock, shutdown, out of
/// memory or disk, read-only during a failover, an interrupted or timed-out
/// statement) or the connection broke (SQLSTATE class 08). Everything else
/// (access denied, an unknown database, table or column, data the column
/// cannot hold, a packet over `max_allowed_packet`) needs someone to change
/// something first.
fn retryable(code: u16, state: &str) -> bool {
    matches!(
        code,
        1021 | 1037
            | 1038
            | 1040
            | 1041
            | 1053
            | 1203
            | 1205
            | 1213
            | 1226
            | 1290
            | 1317
            | 1836
            | 1927
            | 1969
            | 3024
            | 4031
    ) || state.starts_with("08")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sdk::ErrorClass;

    fn server(code: u16, state: &str) -> MysqlError {
        MysqlError::Server { code, state: state.into(), message: "m".into() }
    }

    #[test]
    fn busy_servers_are_retried_and_bad_requests_are_not() {
        for code in [1040, 1205, 1213, 1290] {
            assert!(matches!(failure(server(code, "HY000")).class, ErrorClass::Transient), "{code}");
        }
        for (code, state) in [(1045, "28000"), (1146, "42S02"), (1406, "22001"), (1153, "08S01")] {
            let class = failure(server(code, state)).class;
            let expected = state.starts_with("08");
            assert_eq!(matches!(class, ErrorClass::Transient), expected, "{code} {state}");
        }
    }
}
