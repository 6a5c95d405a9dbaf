//! AMQP 0-9-1 on the wire: frames, and the argument types of the methods
//! this sink sends and reads (integers in network order, short strings with
//! a length octet, long strings and field tables with a 32-bit length).

use std::io::{self, Read};

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;

/// The protocol header a client opens with.
pub const PROTOCOL_HEADER: &[u8] = b"AMQP\x00\x00\x09\x01";

/// `(class, method)` ids of the methods this sink uses.
pub mod method {
    pub const CONNECTION_START: (u16, u16) = (10, 10);
    pub const CONNECTION_START_OK: (u16, u16) = (10, 11);
    pub const CONNECTION_SECURE: (u16, u16) = (10, 20);
    pub const CONNECTION_TUNE: (u16, u16) = (10, 30);
    pub const CONNECTION_TUNE_OK: (u16, u16) = (10, 31);
    pub const CONNECTION_OPEN: (u16, u16) = (10, 40);
    pub const CONNECTION_OPEN_OK: (u16, u16) = (10, 41);
    pub const CONNECTION_CLOSE: (u16, u16) = (10, 50);
    pub const CONNECTION_CLOSE_OK: (u16, u16) = (10, 51);
    pub const CONNECTION_BLOCKED: (u16, u16) = (10, 60);
    pub const CONNECTION_UNBLOCKED: (u16, u16) = (10, 61);
    pub const CHANNEL_OPEN: (u16, u16) = (20, 10);
    pub const CHANNEL_OPEN_OK: (u16, u16) = (20, 11);
    pub const CHANNEL_CLOSE: (u16, u16) = (20, 40);
    pub const CHANNEL_CLOSE_OK: (u16, u16) = (20, 41);
    pub const BASIC_PUBLISH: (u16, u16) = (60, 40);
    pub const BASIC_RETURN: (u16, u16) = (60, 50);
    pub const BASIC_ACK: (u16, u16) = (60, 80);
    pub const BASIC_NACK: (u16, u16) = (60, 120);
    pub const CONFIRM_SELECT: (u16, u16) = (85, 10);
    pub const CONFIRM_SELECT_OK: (u16, u16) = (85, 11);
}

/// The class of `basic.*` methods, whose content headers carry properties.
pub const BASIC_CLASS: u16 = 60;

/// What arrived from the broker that is not the protocol.
#[derive(Debug)]
pub struct Malformed(pub String);

pub struct Frame {
    pub kind: u8,
    pub channel: u16,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The `(class, method)` of a method frame, and a cursor on its
    /// arguments.
    pub fn method(&self) -> Result<((u16, u16), Cursor<'_>), Malformed> {
        let mut cursor = Cursor::new(&self.payload);
        let id = (cursor.u16()?, cursor.u16()?);
        Ok((id, cursor))
    }
}

/// Read one frame of at most `frame_max` bytes. A broker that answers the
/// protocol header with its own (another protocol version) is `Malformed`.
pub fn read_frame(reader: &mut impl Read, frame_max: u32) -> io::Result<Result<Frame, Malformed>> {
    let mut head = [0u8; 7];
    reader.read_exact(&mut head)?;
    if head.starts_with(b"AMQP") {
        return Ok(Err(Malformed("the broker does not speak AMQP 0-9-1".into())));
    }
    let kind = head[0];
    if ![FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT].contains(&kind) {
        let start = String::from_utf8_lossy(&head).escape_debug().to_string();
        return Ok(Err(Malformed(format!("the server does not speak AMQP 0-9-1 (it sent \"{start}\")"))));
    }
    let channel = u16::from_be_bytes([head[1], head[2]]);
    let size = u32::from_be_bytes([head[3], head[4], head[5], head[6]]);
    if size > frame_max {
        return Ok(Err(Malformed(format!("a frame of {size} bytes, over the agreed {frame_max}"))));
    }
    let mut payload = vec![0; size as usize + 1];
    reader.read_exact(&mut payload)?;
    if payload.pop() != Some(FRAME_END) {
        return Ok(Err(Malformed("a frame without its end octet".into())));
    }
    Ok(Ok(Frame { kind, channel, payload }))
}

/// Append one frame to `out`.
pub fn put_frame(out: &mut Vec<u8>, kind: u8, channel: u16, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(FRAME_END);
}

/// A value in a field table.
pub enum Field<'a> {
    Bool(bool),
    Long(i64),
    Text(&'a str),
    Table(Vec<(&'a str, Field<'a>)>),
}

/// Builds a method's arguments (or a content header).
#[derive(Default)]
pub struct Args(pub Vec<u8>);

impl Args {
    pub fn method((class, method): (u16, u16)) -> Args {
        Args::default().u16(class).u16(method)
    }

    pub fn u8(mut self, value: u8) -> Args {
        self.0.push(value);
        self
    }

    pub fn u16(mut self, value: u16) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn u32(mut self, value: u32) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    pub fn u64(mut self, value: u64) -> Args {
        self.0.extend_from_slice(&value.to_be_bytes());
        self
    }

    /// A short string: the caller keeps it within 255 bytes (longer ones
    /// are cut, never sent with a wrong length).
    pub fn short(mut self, value: &str) -> Args {
        let bytes = &value.as_bytes()[..value.len().min(255)];
        self.0.push(bytes.len() as u8);
        self.0.extend_from_slice(bytes);
        self
    }

    pub fn long(mut self, value: &[u8]) -> Args {
        self.0.extend_from_slice(&(value.len() as u32).to_be_bytes());
        self.0.extend_from_slice(value);
        self
    }

    pub fn table(self, fields: &[(&str, Field<'_>)]) -> Args {
        let mut table = Args::default();
        for (name, value) in fields {
            table = table.short(name);
            table = match value {
                Field::Bool(b) => table.u8(b't').u8(u8::from(*b)),
                Field::Long(n) => table.u8(b'l').u64(*n as u64),
                Field::Text(text) => table.u8(b'S').long(text.as_bytes()),
                Field::Table(inner) => {
                    table.0.push(b'F');
                    Args(table.0).table(inner)
                }
            };
        }
        self.long(&table.0)
    }
}

/// Reads a method's arguments.
pub struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed("a method's arguments end early".into()));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        let b = self.take(8)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(b);
        Ok(u64::from_be_bytes(raw))
    }

    pub fn short(&mut self) -> Result<String, Malformed> {
        let len = self.u8()? as usize;
        Ok(String::from_utf8_lossy(self.take(len)?).into_owned())
    }

    /// A long string, or a field table taken whole.
    pub fn long(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}
