//! The redis sink's RESP client against a scripted server: any bytes in
//! answer to the login, a command and a pipeline give a reply or a typed
//! error (at most one per command), never a panic or an unbounded allocation.

use crate::shared::Scripted;
use ankusa_sink_redis::client;
use ankusa_sink_redis::options::Options;

pub fn run(data: &[u8]) {
    let Some((&login, server)) = data.split_first() else { return };
    let options = match login % 3 {
        0 => r#"{"url": "redis://127.0.0.1:6379", "stream": "hooks"}"#,
        1 => r#"{"url": "redis://:secret@127.0.0.1:6379/2", "stream": "hooks"}"#,
        _ => r#"{"url": "redis://user:secret@127.0.0.1:6379", "channel": "hooks"}"#,
    };
    let options = Options::parse(options).expect("the options parse");
    let Ok(mut connection) = client::start(Scripted::new(server), &options) else { return };
    for _ in 0..4 {
        if connection.call(&[b"XADD", b"hooks", b"*", b"body", b"{}"]).is_err() {
            break;
        }
    }
    let command: Vec<Vec<u8>> = [&b"XADD"[..], b"hooks", b"*", b"body", b"{}"].iter().map(|a| a.to_vec()).collect();
    let replies = connection.call_pipelined(&[command.clone(), command.clone(), command]);
    assert!(replies.len() <= 3, "at most one reply per command");
}
