//! What a failed publish means for the host's classes.

use ankusa_sdk::Failure;
use ankusa_sdk::tcp::connection_failure;

use crate::client::MqttError;

pub fn failure(err: MqttError) -> Failure {
    match err {
        MqttError::Io(error) => connection_failure("mqtt", &error),
        MqttError::NoAnswer(what) => Failure::transient(format!("no {what} from the mqtt broker within `timeout_ms`")),
        // 3: the broker is up but cannot serve now; the others will not change by retrying.
        MqttError::Refused(3) => Failure::transient("mqtt broker unavailable (CONNACK 3)"),
        MqttError::Refused(code) => {
            Failure::permanent(format!("mqtt broker refused the connection: {}", refusal(code)))
        }
        MqttError::Protocol(message) => Failure::transient(format!("mqtt: {message}")),
    }
}

fn refusal(code: u8) -> String {
    match code {
        1 => "unacceptable protocol version (CONNACK 1)".into(),
        2 => "client identifier rejected (CONNACK 2)".into(),
        4 => "bad user name or password (CONNACK 4)".into(),
        5 => "not authorized (CONNACK 5)".into(),
        other => format!("CONNACK {other}"),
    }
}
