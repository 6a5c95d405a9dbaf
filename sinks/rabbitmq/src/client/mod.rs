//! An AMQP 0-9-1 client connection, as much as confirmed publishing needs:
//! the handshake (PLAIN login, no heartbeats, since nothing reads the
//! socket between deliveries), one channel in confirm mode, and
//! `basic.publish` with `mandatory`, reading the broker's answers until the
//! confirm of that publish arrives.

pub mod frames;

use std::io::{self, BufReader, Read, Write};

use ankusa_sdk::tcp;

use self::frames::{
    Args, BASIC_CLASS, Cursor, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, Field, Frame, Malformed,
    PROTOCOL_HEADER, method, put_frame, read_frame,
};
use crate::options::Options;

/// The one channel this sink publishes on.
const CHANNEL: u16 = 1;
/// The smallest frame the protocol allows either side to insist on.
const FRAME_MIN: u32 = 4096;
/// The largest frame this sink accepts; the broker may ask for less.
const FRAME_PREFERRED: u32 = 128 * 1024;

#[derive(Debug)]
pub enum AmqpError {
    /// The connection failed.
    Io(io::Error),
    /// No answer within the timeout; the broker may be blocking publishers
    /// (a memory or disk alarm), for the reason given.
    NoAnswer { blocked: Option<String> },
    /// The broker refused the login.
    Auth(String),
    /// The broker closed the channel (the connection lives on) or the
    /// connection, with this reply code and text.
    Closed { code: u16, text: String, connection: bool },
    /// The broker sent something this client does not expect.
    Protocol(String),
}

impl From<Malformed> for AmqpError {
    fn from(Malformed(message): Malformed) -> Self {
        AmqpError::Protocol(message)
    }
}

/// The broker's answer to one publish.
#[derive(Debug, PartialEq, Eq)]
pub enum Confirm {
    /// Routed to at least one queue, and confirmed.
    Routed,
    /// Returned as unroutable (`mandatory`), then confirmed.
    Unroutable { code: u16, text: String },
    /// Refused (`basic.nack`).
    Nacked,
}

/// The basic properties this sink sets on a message.
pub struct Properties<'a> {
    pub content_type: Option<&'a str>,
    pub headers: Vec<(&'a str, Field<'a>)>,
    pub persistent: bool,
    pub message_id: Option<&'a str>,
    /// Unix seconds.
    pub timestamp: u64,
}

impl Properties<'_> {
    /// The content header frame's payload for a body of `size` bytes.
    fn header(&self, size: u64) -> Args {
        const CONTENT_TYPE: u16 = 1 << 15;
        const HEADERS: u16 = 1 << 13;
        const DELIVERY_MODE: u16 = 1 << 12;
        const MESSAGE_ID: u16 = 1 << 7;
        const TIMESTAMP: u16 = 1 << 6;
        const APP_ID: u16 = 1 << 3;
        let mut flags = HEADERS | DELIVERY_MODE | TIMESTAMP | APP_ID;
        flags |= if self.content_type.is_some() { CONTENT_TYPE } else { 0 };
        flags |= if self.message_id.is_some() { MESSAGE_ID } else { 0 };
        // Properties follow in the order of their flag bits, highest first.
        let mut args = Args::default().u16(BASIC_CLASS).u16(0).u64(size).u16(flags);
        if let Some(content_type) = self.content_type {
            args = args.short(content_type);
        }
        args = args.table(&self.headers).u8(if self.persistent { 2 } else { 1 });
        if let Some(message_id) = self.message_id {
            args = args.short(message_id);
        }
        args.u64(self.timestamp).short("ankusa")
    }
}

/// A connection over any byte stream: a socket here, a scripted server in
/// the fuzz targets.
pub struct Connection<S = tcp::Stream> {
    stream: BufReader<S>,
    frame_max: u32,
    channel_open: bool,
    /// Delivery tag of the last publish on the open channel.
    published: u64,
    /// Why the broker blocks publishers, while it does.
    blocked: Option<String>,
}

impl Connection {
    /// Connect, log in, open the virtual host and a channel in confirm mode.
    pub fn open(options: &Options) -> Result<Connection, AmqpError> {
        let stream = tcp::connect(&options.addr, options.timeout).map_err(AmqpError::Io)?;
        Connection::start(stream, options)
    }
}

impl<S: Read + Write> Connection<S> {
    /// Log in, open the virtual host and a channel on a connected stream.
    pub fn start(stream: S, options: &Options) -> Result<Connection<S>, AmqpError> {
        let mut connection = Connection {
            stream: BufReader::new(stream),
            frame_max: FRAME_PREFERRED,
            channel_open: false,
            published: 0,
            blocked: None,
        };
        connection.write(PROTOCOL_HEADER)?;
        connection.log_in(&options.user, &options.password)?;
        let open = Args::method(method::CONNECTION_OPEN).short(&options.vhost).short("").u8(0);
        connection.send(0, open)?;
        connection.expect(0, method::CONNECTION_OPEN_OK)?;
        connection.open_channel()?;
        Ok(connection)
    }

    fn log_in(&mut self, user: &str, password: &str) -> Result<(), AmqpError> {
        let start = self.expect(0, method::CONNECTION_START)?;
        let (_, mut args) = start.method()?;
        let (_major, _minor, _server_properties) = (args.u8()?, args.u8()?, args.long()?);
        let mechanisms = String::from_utf8_lossy(args.long()?).into_owned();
        if !mechanisms.split_ascii_whitespace().any(|m| m == "PLAIN") {
            return Err(AmqpError::Protocol(format!("the broker does not offer PLAIN login (it offers {mechanisms})")));
        }
        let capabilities = vec![
            ("publisher_confirms", Field::Bool(true)),
            ("basic.nack", Field::Bool(true)),
            ("connection.blocked", Field::Bool(true)),
            // A refused login is told with `connection.close`, not a bare
            // disconnect.
            ("authentication_failure_close", Field::Bool(true)),
        ];
        let client = [
            ("product", Field::Text("ankusa")),
            ("platform", Field::Text("wasm32-wasip2")),
            ("capabilities", Field::Table(capabilities)),
        ];
        let response = [b"\0", user.as_bytes(), b"\0", password.as_bytes()].concat();
        let start_ok =
            Args::method(method::CONNECTION_START_OK).table(&client).short("PLAIN").long(&response).short("en_US");
        self.send(0, start_ok)?;
        let tune = self.next().map_err(|e| match e {
            AmqpError::Closed { code: 403, text, .. } => AmqpError::Auth(text),
            other => other,
        })?;
        let (id, mut args) = tune.method()?;
        match id {
            method::CONNECTION_TUNE => {}
            method::CONNECTION_SECURE => {
                return Err(AmqpError::Protocol(
                    "the broker asked for a SASL challenge; only PLAIN is supported".into(),
                ));
            }
            other => return Err(unexpected(other)),
        }
        let (channel_max, frame_max) = (args.u16()?, args.u32()?);
        self.frame_max = match frame_max {
            0 => FRAME_PREFERRED,
            asked => asked.min(FRAME_PREFERRED),
        }
        .max(FRAME_MIN);
        // Heartbeats off: nothing would answer them between deliveries.
        self.send(0, Args::method(method::CONNECTION_TUNE_OK).u16(channel_max).u32(self.frame_max).u16(0))
    }

    fn open_channel(&mut self) -> Result<(), AmqpError> {
        self.send(CHANNEL, Args::method(method::CHANNEL_OPEN).short(""))?;
        self.expect(CHANNEL, method::CHANNEL_OPEN_OK)?;
        self.send(CHANNEL, Args::method(method::CONFIRM_SELECT).u8(0))?;
        self.expect(CHANNEL, method::CONFIRM_SELECT_OK)?;
        self.channel_open = true;
        self.published = 0;
        Ok(())
    }

    /// Publish `body` and wait for the broker's confirm. A channel the
    /// broker closed on an earlier publish is opened again first.
    pub fn publish(
        &mut self,
        exchange: &str,
        routing_key: &str,
        properties: &Properties<'_>,
        body: &[u8],
    ) -> Result<Confirm, AmqpError> {
        let mut confirms = self.publish_many(exchange, routing_key, &[(properties, body)]);
        confirms.pop().unwrap_or_else(|| Err(AmqpError::Protocol("no confirm".into())))
    }

    /// Publish every message in one write, then read the broker's answers
    /// until each is confirmed: one result per message, in order. A message
    /// returned as unroutable is known by its message id (the broker sends
    /// the return before the confirm). A failure on the way (the channel or
    /// connection closed, the socket broke) ends the list at the first
    /// message still unconfirmed, with that error.
    pub fn publish_many(
        &mut self,
        exchange: &str,
        routing_key: &str,
        messages: &[(&Properties<'_>, &[u8])],
    ) -> Vec<Result<Confirm, AmqpError>> {
        if !self.channel_open
            && let Err(e) = self.open_channel()
        {
            return vec![Err(e)];
        }
        const MANDATORY: u8 = 1;
        let mut out = Vec::with_capacity(messages.iter().map(|(_, body)| body.len() + 1024).sum());
        for (properties, body) in messages {
            let publish = Args::method(method::BASIC_PUBLISH).u16(0).short(exchange).short(routing_key).u8(MANDATORY);
            put_frame(&mut out, FRAME_METHOD, CHANNEL, &publish.0);
            put_frame(&mut out, FRAME_HEADER, CHANNEL, &properties.header(body.len() as u64).0);
            // A frame's 8 bytes of framing count against the agreed maximum.
            for chunk in body.chunks(self.frame_max as usize - 8) {
                put_frame(&mut out, FRAME_BODY, CHANNEL, chunk);
            }
        }
        if let Err(e) = self.write(&out) {
            return vec![Err(e)];
        }
        let first = self.published + 1;
        self.published += messages.len() as u64;
        let mut confirms: Vec<Option<Confirm>> = messages.iter().map(|_| None).collect();
        // Returns by message id: (reply code, text).
        let mut returned: Vec<(Option<String>, u16, String)> = Vec::new();
        while confirms.iter().any(Option::is_none) {
            if let Err(e) = self.read_answer(first, messages, &mut confirms, &mut returned) {
                let mut done: Vec<_> = confirms.into_iter().map_while(|c| c.map(Ok)).collect();
                done.push(Err(e));
                return done;
            }
        }
        confirms.into_iter().flatten().map(Ok).collect()
    }

    /// Read one answer to a run of publishes whose first tag is `first`: a
    /// return (noted) or a confirm of one or several of them.
    fn read_answer(
        &mut self,
        first: u64,
        messages: &[(&Properties<'_>, &[u8])],
        confirms: &mut [Option<Confirm>],
        returned: &mut Vec<(Option<String>, u16, String)>,
    ) -> Result<(), AmqpError> {
        let frame = self.next()?;
        let (id, mut args) = frame.method()?;
        match id {
            method::BASIC_RETURN => {
                let (code, text) = (args.u16()?, args.short()?);
                let message_id = self.skip_content()?;
                returned.push((message_id, code, text));
            }
            method::BASIC_ACK | method::BASIC_NACK => {
                let (tag, multiple) = (args.u64()?, args.u8()? & 1 == 1);
                for (i, confirm) in confirms.iter_mut().enumerate() {
                    let this = first + i as u64;
                    if confirm.is_some() || !(this == tag || (multiple && this < tag)) {
                        continue;
                    }
                    *confirm = Some(if id == method::BASIC_NACK {
                        Confirm::Nacked
                    } else {
                        let message_id = messages[i].0.message_id;
                        // A return without a message id is the oldest
                        // unconfirmed publish's (returns come in order).
                        let at = returned
                            .iter()
                            .position(|(returned, ..)| returned.as_deref() == message_id)
                            .or_else(|| returned.iter().position(|(returned, ..)| returned.is_none()));
                        match at.map(|at| returned.remove(at)) {
                            Some((_, code, text)) => Confirm::Unroutable { code, text },
                            None => Confirm::Routed,
                        }
                    });
                }
            }
            other => return Err(unexpected(other)),
        }
        Ok(())
    }

    /// The content header and body frames that follow a `basic.return`;
    /// the returned message's id, if it has one.
    fn skip_content(&mut self) -> Result<Option<String>, AmqpError> {
        let header = self.next_frame()?;
        if header.kind != FRAME_HEADER {
            return Err(AmqpError::Protocol("a returned message without its content header".into()));
        }
        let mut args = Cursor::new(&header.payload);
        let (_class, _weight, size) = (args.u16()?, args.u16()?, args.u64()?);
        let message_id = message_id(&mut args)?;
        let mut read = 0;
        while read < size {
            let body = self.next_frame()?;
            if body.kind != FRAME_BODY {
                return Err(AmqpError::Protocol("a returned message cut short".into()));
            }
            read += body.payload.len() as u64;
        }
        Ok(message_id)
    }

    /// The next method on `channel`, which must be `expected`.
    fn expect(&mut self, channel: u16, expected: (u16, u16)) -> Result<Frame, AmqpError> {
        let frame = self.next()?;
        let id = frame.method()?.0;
        if id == expected && frame.channel == channel { Ok(frame) } else { Err(unexpected(id)) }
    }

    /// The next method frame that is not about the connection as a whole:
    /// heartbeats are skipped, `connection.blocked` noted, and a close (of
    /// the connection or the channel) answered and returned as an error.
    fn next(&mut self) -> Result<Frame, AmqpError> {
        loop {
            let frame = self.next_frame()?;
            if frame.kind != FRAME_METHOD {
                return Err(AmqpError::Protocol(format!("an unexpected frame of type {}", frame.kind)));
            }
            let (id, mut args) = frame.method()?;
            match id {
                method::CONNECTION_BLOCKED => self.blocked = Some(args.short()?),
                method::CONNECTION_UNBLOCKED => self.blocked = None,
                method::CONNECTION_CLOSE | method::CHANNEL_CLOSE => {
                    let (code, text) = (args.u16()?, args.short()?);
                    let connection = id == method::CONNECTION_CLOSE;
                    if connection {
                        // Best effort: the broker drops the socket anyway.
                        let _ = self.send(0, Args::method(method::CONNECTION_CLOSE_OK));
                    } else {
                        self.channel_open = false;
                        self.send(frame.channel, Args::method(method::CHANNEL_CLOSE_OK))?;
                    }
                    return Err(AmqpError::Closed { code, text, connection });
                }
                _ => return Ok(frame),
            }
        }
    }

    /// The next frame other than a heartbeat.
    fn next_frame(&mut self) -> Result<Frame, AmqpError> {
        loop {
            let frame = read_frame(&mut self.stream, self.frame_max).map_err(|error| {
                if tcp::is_timeout(&error) {
                    AmqpError::NoAnswer { blocked: self.blocked.clone() }
                } else {
                    AmqpError::Io(error)
                }
            })??;
            if frame.kind != FRAME_HEARTBEAT {
                return Ok(frame);
            }
        }
    }

    fn send(&mut self, channel: u16, args: Args) -> Result<(), AmqpError> {
        let mut out = Vec::with_capacity(args.0.len() + 8);
        put_frame(&mut out, FRAME_METHOD, channel, &args.0);
        self.write(&out)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), AmqpError> {
        self.stream.get_mut().write_all(bytes).map_err(AmqpError::Io)
    }
}

/// The message id among a content header's properties (after the flags),
/// skipping the properties before it in flag order.
fn message_id(args: &mut Cursor<'_>) -> Result<Option<String>, Malformed> {
    let flags = args.u16()?;
    let has = |bit: u16| flags & (1 << bit) != 0;
    for bit in (8..=15).rev() {
        if !has(bit) {
            continue;
        }
        match bit {
            13 => {
                args.long()?; // headers: a table, length-prefixed
            }
            12 | 11 => {
                args.u8()?; // delivery mode, priority
            }
            _ => {
                args.short()?; // content type and encoding, correlation id, reply-to, expiration
            }
        }
    }
    if has(7) { args.short().map(Some) } else { Ok(None) }
}

fn unexpected((class, method): (u16, u16)) -> AmqpError {
    AmqpError::Protocol(format!("an unexpected method {class}.{method}"))
}
