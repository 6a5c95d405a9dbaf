//! One hook, one command: `XADD` to the stream or `PUBLISH` on the channel,
//! on a connection kept open between deliveries.

use ankusa_sdk::tcp::{Kept, connection_failure, is_timeout};
use ankusa_sdk::{Failure, Hook};

use crate::options::{Options, Target};
use crate::resp::{Connection, Reply, RespError};

pub struct Delivery {
    options: Options,
    connection: Kept<Connection>,
}

impl Delivery {
    pub fn new(options: Options) -> Delivery {
        Delivery { options, connection: Kept::default() }
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    pub fn deliver(&mut self, hook: &Hook) -> Result<(), Failure> {
        let options = &self.options;
        let args = command(&options.target, hook);
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let reply = self.connection.exchange(
            || open(options),
            |connection| connection.call(&args),
            // Kept only if the exchange went through.
            Result::is_ok,
            // A kept connection the server closed meanwhile (restart, idle
            // timeout) fails before any answer: the command never ran, so
            // it is sent once more on a fresh connection.
            |error| matches!(error, RespError::Io { answered: false, error } if !is_timeout(error)),
        );
        accept(&options.target, reply.map_err(exchange_failure)?)
    }
}

/// Connect, authenticate and select the database.
fn open(options: &Options) -> Result<Connection, RespError> {
    let unanswered = |error| RespError::Io { error, answered: false };
    let mut connection = Connection::open(options.addr, options.timeout).map_err(unanswered)?;
    if let Some((user, password)) = &options.auth {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        args.extend(user.as_deref().map(str::as_bytes));
        args.push(password.as_bytes());
        expect_ok(connection.call(&args)?)?;
    }
    if options.db != 0 {
        expect_ok(connection.call(&[b"SELECT", options.db.to_string().as_bytes()])?)?;
    }
    Ok(connection)
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
fn accept(target: &Target, reply: Reply) -> Result<(), Failure> {
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

fn expect_ok(reply: Reply) -> Result<(), RespError> {
    match reply {
        Reply::Status(s) if s == "OK" => Ok(()),
        Reply::Error(message) => Err(RespError::Server(message)),
        other => Err(RespError::Protocol(format!("unexpected reply {other:?}"))),
    }
}

/// Retrying cannot fix a refused login, a bad database index, a missing
/// permission, a key of another type or a command the server rejects;
/// anything else (loading, out of memory, a replica that is read-only
/// during failover) may pass.
fn server_error(message: &str) -> Failure {
    let reason = format!("redis: {message}");
    let kind = message.split_whitespace().next().unwrap_or("");
    let refused = ["syntax", "unknown command", "invalid password", "AUTH", "DB index"];
    match kind {
        "WRONGTYPE" | "NOAUTH" | "WRONGPASS" | "NOPERM" => Failure::permanent(reason),
        "ERR" if refused.iter().any(|r| message.contains(r)) => Failure::permanent(reason),
        _ => Failure::transient(reason),
    }
}

fn exchange_failure(err: RespError) -> Failure {
    match err {
        RespError::Io { error, .. } => connection_failure("redis", &error),
        RespError::Server(message) => server_error(&message),
        RespError::Protocol(message) => Failure::transient(format!("redis: {message}")),
    }
}
