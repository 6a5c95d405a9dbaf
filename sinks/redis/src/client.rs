//! Just enough of RESP2 for one command at a time, or a pipeline of them:
//! encode a command as an array of bulk strings, read back scalar replies.

use std::io::{self, BufRead, BufReader, Read, Write};

use ankusa_sdk::tcp::{self, read_line};

use crate::options::Options;

/// The longest status or error line accepted from a server; a longer one
/// is not Redis talking.
const MAX_LINE: usize = 64 * 1024;
/// The largest bulk reply read (replies here are ids and `OK`s).
const MAX_BULK: usize = 1 << 20;

#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    /// `-KIND message`.
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

#[derive(Debug)]
pub enum RespError {
    /// The exchange failed; `answered` tells whether any reply byte arrived.
    Io { error: io::Error, answered: bool },
    /// The server refused a login step (`AUTH`, `SELECT`) with this error.
    Server(String),
    /// The server sent something that is not a RESP scalar.
    Protocol(String),
}

/// A connection over any byte stream: a socket here, a scripted server in
/// the fuzz targets.
pub struct Connection<S = tcp::Stream> {
    reader: BufReader<S>,
}

impl<S: Read + Write> Connection<S> {
    /// Send one command and read its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, RespError> {
        let unanswered = |error| RespError::Io { error, answered: false };
        self.reader.get_mut().write_all(&encode(args)).map_err(unanswered)?;
        match self.reader.fill_buf() {
            Ok([]) => Err(unanswered(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => read_reply(&mut self.reader),
            Err(error) => Err(unanswered(error)),
        }
    }
}

impl<S: Read + Write> Connection<S> {
    /// Send every command in one write, then read their replies in order:
    /// one result per command answered. A broken connection ends the list
    /// early with its error (`answered: false` if no reply byte came at all).
    pub fn call_pipelined(&mut self, commands: &[Vec<Vec<u8>>]) -> Vec<Result<Reply, RespError>> {
        let mut out = Vec::new();
        for command in commands {
            let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
            out.extend_from_slice(&encode(&args));
        }
        let unanswered = |error| RespError::Io { error, answered: false };
        if let Err(error) = self.reader.get_mut().write_all(&out) {
            return vec![Err(unanswered(error))];
        }
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            let reply = match (replies.is_empty(), self.reader.fill_buf()) {
                (true, Ok([])) => Err(unanswered(io::ErrorKind::UnexpectedEof.into())),
                (true, Err(error)) => Err(unanswered(error)),
                _ => read_reply(&mut self.reader),
            };
            let broken = reply.is_err();
            replies.push(reply);
            if broken {
                break;
            }
        }
        replies
    }
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let size: usize = args.iter().map(|a| a.len() + 16).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply(reader: &mut impl BufRead) -> Result<Reply, RespError> {
    let answered = |error| RespError::Io { error, answered: true };
    let line = read_line(reader, MAX_LINE).map_err(answered)?;
    let (kind, rest) = line.split_at_checked(1).ok_or_else(|| RespError::Protocol("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b"+" => Ok(Reply::Status(text())),
        b"-" => Ok(Reply::Error(text())),
        b":" => {
            text().parse().map(Reply::Integer).map_err(|_| RespError::Protocol(format!("bad integer `{}`", text())))
        }
        b"$" => {
            let len: i64 = text().parse().map_err(|_| RespError::Protocol(format!("bad bulk length `{}`", text())))?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_BULK {
                return Err(RespError::Protocol(format!("bulk reply of {len} bytes")));
            }
            let mut data = vec![0; len + 2];
            reader.read_exact(&mut data).map_err(answered)?;
            if !data.ends_with(b"\r\n") {
                return Err(RespError::Protocol("bulk reply not ended by CRLF".into()));
            }
            data.truncate(len);
            Ok(Reply::Bulk(Some(data)))
        }
        other => Err(RespError::Protocol(format!("unexpected reply type {:?}", String::from_utf8_lossy(other)))),
    }
}

/// Connect, authenticate and select the database.
pub fn open(options: &Options) -> Result<Connection, RespError> {
    let stream =
        tcp::connect(&options.addr, options.timeout).map_err(|error| RespError::Io { error, answered: false })?;
    start(stream, options)
}

/// Authenticate and select the database on a connected stream.
pub fn start<S: Read + Write>(stream: S, options: &Options) -> Result<Connection<S>, RespError> {
    let mut connection = Connection { reader: BufReader::new(stream) };
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

fn expect_ok(reply: Reply) -> Result<(), RespError> {
    match reply {
        Reply::Status(s) if s == "OK" => Ok(()),
        Reply::Error(message) => Err(RespError::Server(message)),
        other => Err(RespError::Protocol(format!("unexpected reply {other:?}"))),
    }
}
