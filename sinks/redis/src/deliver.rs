//! One hook, one command: `XADD` to the stream or `PUBLISH` on the channel.
//! A batch is one pipeline: every command in one write, the replies read
//! back in order, each hook judged by its own.

use ankusa_sdk::{Failure, Hook};

use crate::classify::server_error;
use crate::client::{Connection, Reply, RespError};
use crate::options::{Options, Target};

/// Send `hook`'s command and read the server's reply.
pub fn exchange(options: &Options, connection: &mut Connection, hook: &Hook) -> Result<Reply, RespError> {
    let args = command(&options.target, hook);
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    connection.call(&args)
}

/// Send every hook's command in one pipeline. See
/// `Protocol::exchange_batch` for the shape.
pub fn exchange_batch(
    options: &Options,
    connection: &mut Connection,
    hooks: &[Hook],
) -> Result<Vec<Result<Reply, RespError>>, RespError> {
    let commands: Vec<Vec<Vec<u8>>> = hooks.iter().map(|hook| command(&options.target, hook)).collect();
    let mut replies = connection.call_pipelined(&commands);
    // Not a byte came back: the batch as a whole failed.
    if matches!(replies.as_slice(), [Err(RespError::Io { answered: false, .. })])
        && let Some(Err(error)) = replies.pop()
    {
        return Err(error);
    }
    Ok(replies)
}

/// The command for `hook`, as its arguments.
fn command(target: &Target, hook: &Hook) -> Vec<Vec<u8>> {
    let arg = |s: &str| s.as_bytes().to_vec();
    match target {
        Target::Channel(channel) => vec![arg("PUBLISH"), arg(channel), hook.body.clone()],
        Target::Stream { key, maxlen } => {
            let mut args = vec![arg("XADD"), arg(key)];
            if let Some(maxlen) = maxlen {
                args.extend([arg("MAXLEN"), arg("~"), arg(&maxlen.to_string())]);
            }
            args.push(arg("*"));
            let mut field = |name: &str, value: Vec<u8>| args.extend([arg(name), value]);
            field("id", arg(&hook.id));
            field("seq", arg(&hook.seq.to_string()));
            field("source", arg(&hook.source));
            field("tenant", arg(&hook.tenant));
            field("received_at", arg(&hook.received_at.to_string()));
            field("sha256", arg(&hook.sha256));
            field("idempotency_key", arg(&hook.idempotency_key));
            if let Some(content_type) = &hook.content_type {
                field("content_type", arg(content_type));
            }
            if let Some(key) = &hook.dedupe_key {
                field("dedupe_key", arg(key));
            }
            if let Some(replay) = &hook.replay_id {
                field("replay_id", arg(replay));
            }
            field("body", hook.body.clone());
            args
        }
    }
}

/// What the server's answer means for the delivery.
pub fn accept(target: &Target, reply: Reply) -> Result<(), Failure> {
    match (target, reply) {
        (_, Reply::Error(message)) => Err(server_error(&message)),
        (Target::Stream { .. }, Reply::Bulk(Some(_))) => Ok(()),
        (Target::Channel(_), Reply::Integer(n)) if n > 0 => Ok(()),
        (Target::Channel(channel), Reply::Integer(_)) => {
            Err(Failure::transient(format!("no subscriber on channel `{channel}`")))
        }
        (_, other) => Err(Failure::transient(format!("unexpected reply {other:?}"))),
    }
}
