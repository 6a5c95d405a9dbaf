//! The nats sink's client against a scripted server: any bytes in answer
//! to the login and to publishes (INFO, PING, MSG/HMSG, -ERR, ...) give a
//! reply or a typed error, never a panic or an unbounded allocation.

use crate::shared::Scripted;
use ankusa_sink_nats::client::Connection;
use ankusa_sink_nats::options::Credentials;

pub fn run(data: &[u8]) {
    let Some((&login, server)) = data.split_first() else { return };
    let credentials = match login % 3 {
        0 => Credentials::None,
        1 => Credentials::Token("secret".into()),
        _ => Credentials::UserPassword("ankusa".into(), "secret".into()),
    };
    let Ok(mut connection) = Connection::start(Scripted::new(server), &credentials, 7) else { return };
    for _ in 0..4 {
        if connection.request("hooks.orders", &[("Nats-Msg-Id", "0193:0")], b"{}").is_err() {
            break;
        }
    }
}
