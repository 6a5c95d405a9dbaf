//! The client side of the NATS text protocol, as much as publishing with
//! a reply subject needs: the handshake, `HPUB`, and reading server
//! operations until the reply arrives.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::time::Duration;

use ankusa_sdk::tcp::{self, ServerAddr, read_line};
use serde::Deserialize;

use crate::options::Credentials;

/// The longest protocol line accepted; a longer one is not NATS talking.
const MAX_LINE: usize = 64 * 1024;
/// The largest reply payload read (acks are small JSON documents).
const MAX_REPLY: usize = 1 << 20;

#[derive(Debug)]
pub enum NatsError {
    /// The connection failed.
    Io(io::Error),
    /// The server did not answer within the ack timeout.
    NoAnswer,
    /// The server refused the login.
    Auth(String),
    /// The server cannot take what is asked of it (no headers, payload
    /// too large).
    Unsupported(String),
    /// The server sent something that is not the protocol, or `-ERR`.
    Protocol(String),
}

#[derive(Deserialize)]
struct ServerInfo {
    #[serde(default)]
    headers: bool,
    #[serde(default = "default_max_payload")]
    max_payload: usize,
}

fn default_max_payload() -> usize {
    1 << 20
}

/// A reply: its status (from a `NATS/1.0 503` header line, if any) and body.
pub struct Reply {
    pub status: Option<u16>,
    pub payload: Vec<u8>,
}

/// A connection over any byte stream: a socket here, a scripted server in
/// the fuzz targets.
pub struct Connection<S = tcp::Stream> {
    reader: BufReader<S>,
    max_payload: usize,
    /// Replies come to `<inbox>.<n>`; a reply for an older `n` (a publish
    /// abandoned earlier) is skipped.
    inbox: String,
    next: u64,
}

impl Connection {
    pub fn open(
        addr: &ServerAddr,
        credentials: &Credentials,
        inbox_token: u64,
        answer_timeout: Duration,
    ) -> Result<Connection, NatsError> {
        // A subject with a plain subscriber but no stream is never acked:
        // give up on the answer rather than hold the attempt to its deadline.
        let stream = tcp::connect_plain(addr, answer_timeout).map_err(NatsError::Io)?;
        let mut reader = BufReader::new(stream);
        let info = read_info(&mut reader)?;
        // The server sends INFO in the clear and then waits for the
        // client's handshake, so nothing is left in the buffer.
        if tcp::tls_enabled() {
            reader.get_mut().start_tls().map_err(NatsError::Io)?;
        }
        Connection::login(reader, info, credentials, inbox_token)
    }
}

/// The server's `INFO`, its first line.
fn read_info(reader: &mut impl BufRead) -> Result<ServerInfo, NatsError> {
    let line = read_line(reader, MAX_LINE).map_err(NatsError::Io)?;
    line.strip_prefix(b"INFO ")
        .and_then(|json| serde_json::from_slice::<ServerInfo>(json).ok())
        .ok_or_else(|| NatsError::Protocol("the server did not start with INFO".into()))
}

impl<S: Read + Write> Connection<S> {
    /// Log in on a connected stream and subscribe to the reply inbox.
    pub fn start(stream: S, credentials: &Credentials, inbox_token: u64) -> Result<Connection<S>, NatsError> {
        let mut reader = BufReader::new(stream);
        let info = read_info(&mut reader)?;
        Connection::login(reader, info, credentials, inbox_token)
    }

    fn login(
        mut reader: BufReader<S>,
        info: ServerInfo,
        credentials: &Credentials,
        inbox_token: u64,
    ) -> Result<Connection<S>, NatsError> {
        if !info.headers {
            return Err(NatsError::Unsupported("the server does not support message headers (NATS 2.2+)".into()));
        }
        let mut connect = serde_json::json!({
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true,
            "protocol": 1, "lang": "rust-wasm", "version": "0.1.0", "name": "ankusa",
        });
        match credentials {
            Credentials::None => {}
            Credentials::Token(token) => connect["auth_token"] = token.as_str().into(),
            Credentials::UserPassword(user, pass) => {
                connect["user"] = user.as_str().into();
                connect["pass"] = pass.as_str().into();
            }
        }
        let inbox = format!("_INBOX.ankusa.{inbox_token:016x}");
        let hello = format!("CONNECT {connect}\r\nPING\r\nSUB {inbox}.* 1\r\n");
        reader.get_mut().write_all(hello.as_bytes()).map_err(NatsError::Io)?;
        let mut connection = Connection { reader, max_payload: info.max_payload, inbox, next: 0 };
        // The PONG to our PING confirms the login; a refusal comes first.
        loop {
            match connection.next_op()? {
                Op::Pong => return Ok(connection),
                Op::Err(e) if e.contains("Authorization") || e.contains("Authentication") => {
                    return Err(NatsError::Auth(e));
                }
                Op::Err(e) => return Err(NatsError::Protocol(e)),
                Op::Msg { .. } | Op::Other => {}
            }
        }
    }

    /// Publish `payload` with `headers` on `subject` and wait for the reply.
    pub fn request(&mut self, subject: &str, headers: &[(&str, &str)], payload: &[u8]) -> Result<Reply, NatsError> {
        let mut replies = self.request_many(&[Message { subject, headers: headers.to_vec(), payload }]);
        replies.pop().unwrap_or_else(|| Err(NatsError::Protocol("no reply".into())))
    }

    /// Publish every message in one write, each with its own reply subject,
    /// then wait for all the replies (in whatever order they come). One
    /// result per message, in order; a message too large for the server is
    /// refused alone without being sent. A broken connection or `-ERR` ends
    /// the list at the first message still unanswered, with that error.
    pub fn request_many(&mut self, messages: &[Message]) -> Vec<Result<Reply, NatsError>> {
        let mut out = Vec::new();
        let mut results: Vec<Option<Result<Reply, NatsError>>> = Vec::with_capacity(messages.len());
        let mut waiting: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (i, message) in messages.iter().enumerate() {
            match self.encode(message) {
                Ok((reply_to, bytes)) => {
                    out.extend_from_slice(&bytes);
                    waiting.insert(reply_to, i);
                    results.push(None);
                }
                Err(refused) => results.push(Some(Err(refused))),
            }
        }
        if let Err(e) = self.reader.get_mut().write_all(&out) {
            return finish(results, NatsError::Io(e));
        }
        while !waiting.is_empty() {
            match self.next_op() {
                Ok(Op::Msg { subject, status, payload }) => {
                    if let Some(i) = waiting.remove(&subject) {
                        results[i] = Some(Ok(Reply { status, payload }));
                    }
                }
                Ok(Op::Err(e)) => return finish(results, NatsError::Protocol(e)),
                Ok(Op::Pong | Op::Other) => {}
                Err(e) => return finish(results, e),
            }
        }
        results.into_iter().flatten().collect()
    }

    /// The `HPUB` of `message` and its reply subject, or why it cannot be sent.
    fn encode(&mut self, message: &Message) -> Result<(String, Vec<u8>), NatsError> {
        let mut head = String::from("NATS/1.0\r\n");
        for (name, value) in &message.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let total = head.len() + message.payload.len();
        if total > self.max_payload {
            return Err(NatsError::Unsupported(format!(
                "a message of {total} bytes is over the server's max_payload of {}",
                self.max_payload
            )));
        }
        self.next += 1;
        let reply_to = format!("{}.{}", self.inbox, self.next);
        let mut out = format!("HPUB {} {reply_to} {} {total}\r\n{head}", message.subject, head.len()).into_bytes();
        out.extend_from_slice(message.payload);
        out.extend_from_slice(b"\r\n");
        Ok((reply_to, out))
    }

    /// Read one server operation, answering `PING` on the way.
    fn next_op(&mut self) -> Result<Op, NatsError> {
        let line = read_line(&mut self.reader, MAX_LINE)
            .map_err(|e| if tcp::is_timeout(&e) { NatsError::NoAnswer } else { NatsError::Io(e) })?;
        let text = String::from_utf8_lossy(&line);
        let mut words = text.split_ascii_whitespace();
        let op = words.next().unwrap_or("").to_ascii_uppercase();
        let args: Vec<&str> = words.collect();
        match op.as_str() {
            "PING" => {
                self.reader.get_mut().write_all(b"PONG\r\n").map_err(NatsError::Io)?;
                Ok(Op::Other)
            }
            "PONG" => Ok(Op::Pong),
            "-ERR" => Ok(Op::Err(text.trim_start_matches("-ERR").trim().trim_matches('\'').to_string())),
            "MSG" | "HMSG" => self.read_msg(&op, &args),
            "+OK" | "INFO" => Ok(Op::Other),
            _ => Err(NatsError::Protocol(format!("unexpected line `{}`", truncated(&text)))),
        }
    }

    /// `MSG <subject> <sid> [reply] <bytes>` or
    /// `HMSG <subject> <sid> [reply] <header bytes> <total bytes>`.
    fn read_msg(&mut self, op: &str, args: &[&str]) -> Result<Op, NatsError> {
        let bad = || NatsError::Protocol(format!("malformed {op} `{}`", args.join(" ")));
        let number = |s: Option<&&str>| s.and_then(|s| s.parse::<usize>().ok()).ok_or_else(bad);
        let (header_len, total) = if op == "HMSG" {
            (number(args.iter().rev().nth(1))?, number(args.last())?)
        } else {
            (0, number(args.last())?)
        };
        if total > MAX_REPLY || header_len > total {
            return Err(bad());
        }
        let subject = args.first().ok_or_else(bad)?.to_string();
        let mut data = vec![0; total + 2];
        self.reader.read_exact(&mut data).map_err(NatsError::Io)?;
        if !data.ends_with(b"\r\n") {
            return Err(bad());
        }
        data.truncate(total);
        let payload = data.split_off(header_len);
        Ok(Op::Msg { subject, status: status_of(&data), payload })
    }
}

/// One message to publish.
pub struct Message<'a> {
    pub subject: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
    pub payload: &'a [u8],
}

/// The results answered before `error`, then `error` for the first message
/// still unanswered; nothing after it.
fn finish(results: Vec<Option<Result<Reply, NatsError>>>, error: NatsError) -> Vec<Result<Reply, NatsError>> {
    let mut done: Vec<_> = results.into_iter().map_while(|result| result).collect();
    done.push(Err(error));
    done
}

enum Op {
    Pong,
    Err(String),
    Msg { subject: String, status: Option<u16>, payload: Vec<u8> },
    Other,
}

/// The status code on a header block's first line (`NATS/1.0 503`).
fn status_of(headers: &[u8]) -> Option<u16> {
    let first = headers.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(first);
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

fn truncated(text: &str) -> &str {
    let mut end = text.len().min(120);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
