//! The rabbitmq sink's AMQP 0-9-1 client against a scripted broker: any
//! frames in answer to the handshake, channel set-up and publishes give a
//! confirm or a typed error, never a panic or an unbounded allocation.

use crate::shared::Scripted;
use ankusa_sink_rabbitmq::client::frames::Field;
use ankusa_sink_rabbitmq::client::{Connection, Properties};
use ankusa_sink_rabbitmq::options::Options;

pub fn run(data: &[u8]) {
    let options = r#"{"url": "amqp://guest:guest@127.0.0.1:5672/%2f", "routing_key": "hooks"}"#;
    let options = Options::parse(options).expect("the options parse");
    let Ok(mut connection) = Connection::start(Scripted::new(data), &options) else { return };
    let properties = Properties {
        content_type: Some("application/json"),
        headers: vec![("x-ankusa-id", Field::Text("0193"))],
        persistent: true,
        message_id: Some("0193:0"),
        timestamp: 1_767_225_600,
    };
    for _ in 0..4 {
        if connection.publish("", "hooks", &properties, &[b'x'; 9000]).is_err() {
            break;
        }
    }
}
