//! A plain RESP client for checking what sinks wrote into the machine's
//! Redis (127.0.0.1:6379), independent of the sink's own protocol code.
//! Keys are unique per test and deleted when the [`Scratch`] drops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const ADDR: &str = "127.0.0.1:6379";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

impl Value {
    pub fn int(&self) -> i64 {
        match self {
            Value::Int(n) => *n,
            other => panic!("expected an integer, got {other:?}"),
        }
    }

    pub fn items(&self) -> &[Value] {
        match self {
            Value::Array(Some(items)) => items,
            other => panic!("expected an array, got {other:?}"),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Value::Bulk(Some(bytes)) => bytes,
            other => panic!("expected a bulk string, got {other:?}"),
        }
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect() -> Client {
        let stream = TcpStream::connect(ADDR).expect("Redis answers on 127.0.0.1:6379");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
        Client { reader: BufReader::new(stream) }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.reader.get_mut().write_all(&out).expect("write to Redis");
    }

    pub fn call(&mut self, args: &[&str]) -> Value {
        self.send(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
        self.read()
    }

    pub fn read(&mut self) -> Value {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).expect("read from Redis");
        let line = line.strip_suffix(b"\r\n").expect("a CRLF-terminated line");
        let text = String::from_utf8_lossy(&line[1..]).into_owned();
        match line[0] {
            b'+' => Value::Status(text),
            b'-' => Value::Error(text),
            b':' => Value::Int(text.parse().expect("integer")),
            b'$' => match text.parse::<i64>().expect("bulk length") {
                -1 => Value::Bulk(None),
                len => {
                    let mut data = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut data).expect("bulk data");
                    data.truncate(len as usize);
                    Value::Bulk(Some(data))
                }
            },
            b'*' => match text.parse::<i64>().expect("array length") {
                -1 => Value::Array(None),
                len => Value::Array(Some((0..len).map(|_| self.read()).collect())),
            },
            other => panic!("unexpected RESP type byte {other}"),
        }
    }
}

/// A key name no other test (or run) uses; deleted on drop.
pub struct Scratch {
    pub key: String,
}

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        Scratch { key: crate::unique_name("ankusa-test", ":", what) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(stream) = TcpStream::connect(ADDR) {
            let mut client = Client { reader: BufReader::new(stream) };
            client.call(&["DEL", &self.key]);
        }
    }
}
