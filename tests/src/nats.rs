//! A plain NATS client for the tests of the nats sink: JetStream streams
//! made for one test (and deleted after it), and the messages they stored,
//! read back through the JetStream API of the machine's server
//! (127.0.0.1:4222), independent of the sink's own protocol code.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

pub const ADDR: &str = "127.0.0.1:4222";

pub struct Client {
    reader: BufReader<TcpStream>,
    /// This client's own reply subjects: the server delivers a reply to
    /// every client subscribed to its subject, so clients of tests running
    /// side by side must not share them.
    inbox: String,
    next: u32,
}

impl Client {
    pub fn connect() -> Client {
        let stream = TcpStream::connect(ADDR).expect("NATS answers on 127.0.0.1:4222");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
        let inbox = crate::unique_name("_INBOX", ".", "test");
        let mut client = Client { reader: BufReader::new(stream), inbox, next: 0 };
        assert!(client.line().starts_with("INFO "), "NATS greets with INFO");
        let hello = format!(
            "CONNECT {{\"verbose\":false,\"headers\":true,\"no_responders\":true}}\r\nPING\r\nSUB {}.* 1\r\n",
            client.inbox
        );
        client.write(hello.as_bytes());
        loop {
            match client.line().as_str() {
                "PONG" => return client,
                line if line.starts_with("-ERR") => panic!("NATS refused the test client: {line}"),
                _ => {}
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write to NATS");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read from NATS");
        line.trim_end().to_string()
    }

    /// Listen on `subject` (and never answer), until this client drops.
    pub fn subscribe(&mut self, subject: &str) {
        self.write(format!("SUB {subject} 2\r\nPING\r\n").as_bytes());
        while self.line() != "PONG" {}
    }

    /// Send `payload` to `subject` and return the reply's payload.
    pub fn request(&mut self, subject: &str, payload: &[u8]) -> Vec<u8> {
        self.next += 1;
        let inbox = format!("{}.{}", self.inbox, self.next);
        let mut out = format!("PUB {subject} {inbox} {}\r\n", payload.len()).into_bytes();
        out.extend_from_slice(payload);
        out.extend_from_slice(b"\r\n");
        self.write(&out);
        loop {
            let line = self.line();
            let words: Vec<&str> = line.split(' ').collect();
            match words[0] {
                "PING" => self.write(b"PONG\r\n"),
                "MSG" | "HMSG" => {
                    let total: usize = words.last().and_then(|n| n.parse().ok()).expect("message length");
                    let headers: usize =
                        if words[0] == "HMSG" { words[words.len() - 2].parse().expect("hdr") } else { 0 };
                    let mut data = vec![0; total + 2];
                    self.reader.read_exact(&mut data).expect("message body");
                    if words[1] == inbox {
                        data.truncate(total);
                        return data.split_off(headers);
                    }
                }
                _ => {}
            }
        }
    }

    /// A JetStream API call.
    pub fn api(&mut self, call: &str, body: Value) -> Value {
        let reply = self.request(&format!("$JS.API.{call}"), body.to_string().as_bytes());
        serde_json::from_slice(&reply).expect("a JSON API answer")
    }
}

/// A message as the stream stored it.
pub struct Stored {
    pub headers: String,
    pub data: Vec<u8>,
}

/// A memory-backed stream with one subject of its own, deleted on drop.
pub struct Stream {
    pub name: String,
    pub subject: String,
}

impl Stream {
    pub fn create(what: &str, config: Value) -> Stream {
        let subject = crate::unique_name("ankusa.test", ".", what);
        // Stream names cannot hold dots.
        let name = subject.replace('.', "_").to_uppercase();
        let mut body = json!({"name": name, "subjects": [subject], "storage": "memory"});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), config.as_object()) {
            body.extend(extra.clone());
        }
        let created = Client::connect().api(&format!("STREAM.CREATE.{name}"), body);
        assert!(created.get("error").is_none(), "stream created: {created}");
        Stream { name, subject }
    }

    pub fn messages(&self) -> u64 {
        let info = Client::connect().api(&format!("STREAM.INFO.{}", self.name), json!({}));
        info["state"]["messages"].as_u64().expect("a message count")
    }

    pub fn get(&self, seq: u64) -> Stored {
        let got = Client::connect().api(&format!("STREAM.MSG.GET.{}", self.name), json!({"seq": seq}));
        let decode = |field: &str| {
            let text = got["message"][field].as_str().unwrap_or("");
            base64::engine::general_purpose::STANDARD.decode(text).expect("base64 from JetStream")
        };
        Stored { headers: String::from_utf8_lossy(&decode("hdrs")).into_owned(), data: decode("data") }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if TcpStream::connect(ADDR).is_ok() {
            Client::connect().api(&format!("STREAM.DELETE.{}", self.name), json!({}));
        }
    }
}
