//! Just enough of MQTT 3.1.1 for a publisher: CONNECT and its CONNACK,
//! PUBLISH at QoS 1 and its PUBACK. Generic over the byte stream, so tests
//! can play the broker.

use std::io::{self, Read, Write};

use ankusa_sdk::tcp;

use crate::options::Options;

#[derive(Debug)]
pub enum MqttError {
    Io(io::Error),
    /// CONNACK with a non-zero return code.
    Refused(u8),
    /// No CONNACK or PUBACK within the timeout.
    NoAnswer(&'static str),
    Protocol(String),
}

impl From<io::Error> for MqttError {
    fn from(error: io::Error) -> MqttError {
        if tcp::is_timeout(&error) { MqttError::NoAnswer("answer") } else { MqttError::Io(error) }
    }
}

/// The broker acknowledged a publish.
#[derive(Debug, PartialEq, Eq)]
pub struct PubAck;

pub struct Connection<S = tcp::Stream> {
    stream: S,
    next_id: u16,
}

impl Connection {
    pub fn open(options: &Options) -> Result<Connection, MqttError> {
        let stream = tcp::connect(&options.addr, options.timeout).map_err(MqttError::Io)?;
        Connection::start(stream, options)
    }
}

impl<S: Read + Write> Connection<S> {
    /// Send CONNECT on a connected stream and wait for CONNACK.
    pub fn start(mut stream: S, options: &Options) -> Result<Connection<S>, MqttError> {
        let mut flags = 0u8;
        if !options.persistent_session {
            flags |= 0x02;
        }
        let mut body = Vec::new();
        put_str(&mut body, b"MQTT");
        body.push(4); // protocol level: 3.1.1
        let flags_at = body.len();
        body.push(0);
        body.extend_from_slice(&0u16.to_be_bytes()); // keep alive off: the connection may sit idle
        put_str(&mut body, options.client_id.as_bytes());
        if let Some(user) = &options.user {
            flags |= 0x80;
            put_str(&mut body, user.as_bytes());
            if let Some(password) = &options.password {
                flags |= 0x40;
                put_str(&mut body, password.as_bytes());
            }
        }
        body[flags_at] = flags;
        write_packet(&mut stream, 0x10, &body)?;
        let (kind, answer) = read_packet(&mut stream).map_err(|e| match e {
            MqttError::NoAnswer(_) => MqttError::NoAnswer("CONNACK"),
            other => other,
        })?;
        if kind >> 4 != 2 || answer.len() != 2 {
            return Err(MqttError::Protocol(format!("expected CONNACK, got packet type {}", kind >> 4)));
        }
        if answer[1] != 0 {
            return Err(MqttError::Refused(answer[1]));
        }
        Ok(Connection { stream, next_id: 1 })
    }

    /// Publish `payload` on `topic` at QoS 1 and wait for its PUBACK.
    pub fn publish(&mut self, topic: &str, payload: &[u8], retain: bool) -> Result<PubAck, MqttError> {
        let id = self.next_id;
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        let mut body = Vec::with_capacity(topic.len() + payload.len() + 4);
        put_str(&mut body, topic.as_bytes());
        body.extend_from_slice(&id.to_be_bytes());
        body.extend_from_slice(payload);
        write_packet(&mut self.stream, 0x32 | u8::from(retain), &body)?;
        loop {
            let (kind, answer) = read_packet(&mut self.stream).map_err(|e| match e {
                MqttError::NoAnswer(_) => MqttError::NoAnswer("PUBACK"),
                other => other,
            })?;
            match kind >> 4 {
                4 if answer.len() >= 2 && answer[..2] == id.to_be_bytes() => return Ok(PubAck),
                // An acknowledgement of an older publish abandoned at its
                // timeout, or a ping answer: not this one's.
                4 | 13 => continue,
                other => return Err(MqttError::Protocol(format!("expected PUBACK, got packet type {other}"))),
            }
        }
    }
}

/// A length-prefixed string (or binary) field.
fn put_str(out: &mut Vec<u8>, text: &[u8]) {
    let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&text[..usize::from(len)]);
}

fn write_packet(stream: &mut impl Write, first: u8, body: &[u8]) -> Result<(), MqttError> {
    if body.len() > 268_435_455 {
        return Err(MqttError::Protocol("a hook larger than MQTT's 256 MiB packet limit".into()));
    }
    let mut packet = Vec::with_capacity(body.len() + 5);
    packet.push(first);
    let mut len = body.len();
    loop {
        let byte = (len % 128) as u8;
        len /= 128;
        packet.push(if len > 0 { byte | 0x80 } else { byte });
        if len == 0 {
            break;
        }
    }
    packet.extend_from_slice(body);
    stream.write_all(&packet).map_err(MqttError::Io)?;
    stream.flush().map_err(MqttError::Io)
}

/// One packet: its first byte and its body (at most 64 KiB: a publisher
/// is only ever sent acknowledgements).
fn read_packet(stream: &mut impl Read) -> Result<(u8, Vec<u8>), MqttError> {
    let mut first = [0u8; 1];
    stream.read_exact(&mut first)?;
    let mut len = 0usize;
    for shift in 0..4 {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte)?;
        len |= usize::from(byte[0] & 0x7f) << (7 * shift);
        if byte[0] & 0x80 == 0 {
            break;
        }
        if shift == 3 {
            return Err(MqttError::Protocol("a malformed remaining length".into()));
        }
    }
    if len > 65_536 {
        return Err(MqttError::Protocol(format!("an unexpected {len}-byte packet from the broker")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok((first[0], body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that answers with `input` and records what was written.
    struct Script {
        input: io::Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn options(json: &str) -> Options {
        Options::parse(json).unwrap_or_else(|e| panic!("{}", e.message))
    }

    #[test]
    fn connects_with_credentials_and_publishes_at_qos_1() {
        let answers = vec![0x20, 2, 0, 0, 0x40, 2, 0, 1];
        let script = Script { input: io::Cursor::new(answers), written: Vec::new() };
        let o = options(r#"{"url": "mqtt://u:p@127.0.0.1", "topic": "a/b", "client_id": "c"}"#);
        let mut connection = Connection::start(script, &o).expect("connected");
        connection.publish("a/b", b"hi", false).expect("acked");
        let w = &connection.stream.written;
        let connect = [0x10, 19, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xC2, 0, 0, 0, 1, b'c', 0, 1, b'u', 0, 1, b'p'];
        assert_eq!(&w[..connect.len()], &connect[..], "CONNECT");
        assert_eq!(&w[connect.len()..], &[0x32, 9, 0, 3, b'a', b'/', b'b', 0, 1, b'h', b'i'], "PUBLISH");
    }

    #[test]
    fn a_refused_login_and_a_wrong_answer_are_errors() {
        let o = options(r#"{"url": "mqtt://127.0.0.1", "topic": "t"}"#);
        let refused = Script { input: io::Cursor::new(vec![0x20, 2, 0, 5]), written: Vec::new() };
        assert!(matches!(Connection::start(refused, &o), Err(MqttError::Refused(5))));
        let other = Script { input: io::Cursor::new(vec![0x30, 0]), written: Vec::new() };
        assert!(matches!(Connection::start(other, &o), Err(MqttError::Protocol(_))));
    }
}
