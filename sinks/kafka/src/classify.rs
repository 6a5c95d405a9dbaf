//! What a failed produce means. A producer is kept only while everything
//! succeeds: after any failure the next delivery starts from fresh
//! metadata and a new producer id, so a sequence number is never reused
//! for another hook.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::{connection_failure, is_timeout};

use crate::client::KafkaError;

pub fn keeps(done: &Result<i64, KafkaError>) -> bool {
    done.is_ok()
}

/// A kept connection the broker dropped meanwhile: produce again on a
/// fresh one.
pub fn stale(error: &KafkaError) -> bool {
    matches!(error, KafkaError::Io(error) if !is_timeout(error))
}

pub fn failure(err: KafkaError) -> Failure {
    match err {
        KafkaError::Io(error) => connection_failure("kafka", &error),
        KafkaError::Protocol(message) => Failure::transient(format!("kafka: {message}")),
        KafkaError::Broker { code, context } if context == "InitProducerId" => Failure::transient(format!(
            "kafka InitProducerId: {} ({code}): the broker cannot register an idempotent producer \
             (set `idempotent: false` for a broker without support for it)",
            name(code)
        )),
        KafkaError::Broker { code, context } => {
            let reason = format!("kafka {context}: {} ({code})", name(code));
            if permanent(code) { Failure::permanent(reason) } else { Failure::transient(reason) }
        }
    }
}

/// Codes no retry can get past: the record or the request is refused as
/// such, or the producer lacks a permission.
fn permanent(code: i16) -> bool {
    matches!(code, 10 | 17 | 18 | 21 | 29 | 31 | 32 | 35 | 43 | 87)
}

fn name(code: i16) -> &'static str {
    match code {
        -1 => "UNKNOWN_SERVER_ERROR",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        15 => "COORDINATOR_NOT_AVAILABLE",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        32 => "INVALID_TIMESTAMP",
        35 => "UNSUPPORTED_VERSION",
        43 => "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        59 => "UNKNOWN_PRODUCER_ID",
        87 => "INVALID_RECORD",
        _ => "broker error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sdk::ErrorClass;

    #[test]
    fn refused_records_are_permanent_and_leadership_changes_are_not() {
        let class = |code| failure(KafkaError::Broker { code, context: "produce".into() }).class;
        assert!(matches!(class(10), ErrorClass::Permanent));
        assert!(matches!(class(29), ErrorClass::Permanent));
        assert!(matches!(class(6), ErrorClass::Transient));
        assert!(matches!(class(19), ErrorClass::Transient));
        assert!(
            failure(KafkaError::Broker { code: 10, context: "produce to t/0".into() })
                .reason
                .contains("MESSAGE_TOO_LARGE")
        );
    }
}
